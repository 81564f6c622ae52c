package datapath

import (
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/kubewalk/kubewalk/datapath/route"
)

// MeshPeer is one node of a VXLAN mesh as every other node programs it
// (flannel's vxlan backend, one lease):
//
//	ip route replace SUBNET via SUBNET.0 dev VTEP onlink
//	ip neigh replace SUBNET.0 dev VTEP lladdr MAC nud permanent
//	bridge fdb replace MAC dev VTEP dst PUBLICIP self permanent
type MeshPeer struct {
	Node     string
	Subnet   netip.Prefix
	MAC      MAC
	PublicIP netip.Addr
}

type meshNeigh struct {
	mac  MAC
	node string
}

type meshFDB struct {
	dst  [4]byte
	node string
}

// Mesh holds a VXLAN mesh's peers once for every member VTEP: each member
// shows and uses every peer's route, neighbour and FDB entry but its own
// node's, exactly as if it held copies (`ip route`, `ip neigh`, `bridge
// fdb`, lookups, the ARP table's entry count), without a copy per node
// pair. A change a member's owner makes that touches a shared entry (a
// route, neighbour or FDB entry of a peer edited or deleted by hand, a
// route of its own where a peer's appears, the VTEP deleted) first gives
// that member its own copies and takes it out of the mesh (Detach): from
// then on its owner programs it entry by entry. Members must have the same
// VTEP ifindex and name (Fits).
type Mesh struct {
	dev     int
	devName string
	routes  route.Shared
	peers   map[string]MeshPeer
	neigh   map[[4]byte]meshNeigh
	fdb     map[uint64]meshFDB
	gen     uint64
	members []*VXLAN
	byNode  map[string]*VXLAN
	// nclaims and fclaims are the members with a neighbour or FDB entry
	// of their own at a gateway address or MAC: a peer appearing there
	// detaches them first.
	nclaims map[[4]byte][]*VXLAN
	fclaims map[uint64][]*VXLAN
	// lowNext is no later than any member's ARP table's next periodic
	// collector run.
	lowNext time.Duration
	// OnDetach, when set, is told the node of a member that left the mesh.
	OnDetach func(node string)
}

// NewMesh returns an empty mesh for VTEPs with vtep's ifindex and name.
func NewMesh(vtep *Device) *Mesh {
	m := &Mesh{dev: vtep.Index, devName: vtep.Name, peers: map[string]MeshPeer{},
		neigh: map[[4]byte]meshNeigh{}, fdb: map[uint64]meshFDB{}, byNode: map[string]*VXLAN{},
		nclaims: map[[4]byte][]*VXLAN{}, fclaims: map[uint64][]*VXLAN{}}
	m.routes.Dev = vtep.Index
	return m
}

// Fits reports whether vtep can join: a VXLAN device with the mesh's
// ifindex and name, without learning, in a namespace (and ARP table) with
// no member, not a member yet.
//
// A namespace with a route of its own for a peer's subnet does not fit
// either: flanneld's `ip route replace` would have replaced it.
func (m *Mesh) Fits(vtep *Device) bool {
	if vtep.vx == nil || vtep.ns == nil || vtep.Index != m.dev || vtep.Name != m.devName ||
		vtep.vx.mesh != nil || vtep.ns.arp.mesh != nil || vtep.vx.Learning || vtep.ns.Routes.Shared() {
		return false
	}
	for _, r := range vtep.ns.Routes.List() {
		if _, ok := m.routes.Get(r.Dst); ok && r.Metric == 0 {
			return false
		}
	}
	return true
}

// Peer returns the peer of node.
func (m *Mesh) Peer(node string) (MeshPeer, bool) { p, ok := m.peers[node]; return p, ok }

// Conflicts reports whether p shares a subnet, gateway address or VTEP MAC
// with another node's peer: then what each node programs depends on the
// order it saw them in, which one shared table cannot show.
func (m *Mesh) Conflicts(p MeshPeer) bool {
	if e, ok := m.neigh[p.Subnet.Addr().As4()]; ok && e.node != p.Node {
		return true
	}
	if e, ok := m.fdb[p.MAC.key()]; ok && e.node != p.Node {
		return true
	}
	r, ok := m.routes.Get(p.Subnet)
	return ok && r.Gw != p.Subnet.Addr()
}

// SubnetNode is the node whose peer has exactly subnet.
func (m *Mesh) SubnetNode(subnet netip.Prefix) (string, bool) {
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return "", false
	}
	e, ok := m.neigh[subnet.Addr().As4()]
	if !ok || m.peers[e.node].Subnet != subnet {
		return "", false
	}
	return e.node, true
}

// Join makes vtep, the VTEP of node, a member (see Fits).
func (m *Mesh) Join(vtep *Device, node string) {
	v := vtep.vx
	v.mesh, v.meshNode, v.meshGen = m, node, 0
	ns := vtep.ns
	ns.e.cfgGen++
	ns.arp.catchUp(ns.e.now)
	ns.arp.mesh = v
	m.lowNext = min(m.lowNext, ns.arp.nextPeriodic)
	var skip netip.Prefix
	if p, ok := m.peers[node]; ok {
		skip = p.Subnet
	}
	ns.Routes.Share(&m.routes, skip, func() { m.Detach(vtep) })
	m.members = append(m.members, v)
	m.byNode[node] = v
	for k := range ns.neigh.m {
		if k.dev() == vtep.Index {
			m.claimNeigh(v, k.ip())
		}
	}
	for k := range v.fdb {
		m.claimFDB(v, k)
	}
}

func (m *Mesh) claimNeigh(v *VXLAN, ip [4]byte) {
	if !slices.Contains(m.nclaims[ip], v) {
		m.nclaims[ip] = append(m.nclaims[ip], v)
	}
}

func (m *Mesh) unclaimNeigh(v *VXLAN, ip [4]byte) {
	if c := slices.DeleteFunc(m.nclaims[ip], func(x *VXLAN) bool { return x == v }); len(c) > 0 {
		m.nclaims[ip] = c
	} else {
		delete(m.nclaims, ip)
	}
}

func (m *Mesh) claimFDB(v *VXLAN, k uint64) {
	if !slices.Contains(m.fclaims[k], v) {
		m.fclaims[k] = append(m.fclaims[k], v)
	}
}

func (m *Mesh) unclaimFDB(v *VXLAN, k uint64) {
	if c := slices.DeleteFunc(m.fclaims[k], func(x *VXLAN) bool { return x == v }); len(c) > 0 {
		m.fclaims[k] = c
	} else {
		delete(m.fclaims, k)
	}
}

// Put adds or replaces node p.Node's peer on every member but its own.
func (m *Mesh) Put(p MeshPeer) error {
	if !p.Subnet.IsValid() || !p.Subnet.Addr().Is4() || !p.PublicIP.Is4() {
		return &ConfigError{Op: "mesh put", Object: p.Node, Reason: "subnet and public IP must be IPv4"}
	}
	m.Remove(p.Node)
	if v := m.byNode[p.Node]; v != nil {
		v.dev.ns.Routes.SetSkip(p.Subnet)
	}
	m.catchUp()
	gw := p.Subnet.Addr()
	for _, v := range slices.Clone(m.nclaims[gw.As4()]) {
		if v.meshNode != p.Node {
			m.Detach(v.dev)
		}
	}
	for _, v := range slices.Clone(m.fclaims[p.MAC.key()]) {
		if v.meshNode != p.Node {
			m.Detach(v.dev)
		}
	}
	if err := m.routes.Put(route.Route{Dst: p.Subnet, Gw: gw, Dev: m.dev, DevName: m.devName, OnLink: true, Proto: route.ProtoBoot}); err != nil {
		return err
	}
	m.neigh[gw.As4()] = meshNeigh{mac: p.MAC, node: p.Node}
	m.fdb[p.MAC.key()] = meshFDB{dst: p.PublicIP.As4(), node: p.Node}
	m.peers[p.Node] = p
	m.changed()
	return nil
}

// Remove deletes node's peer from every member.
func (m *Mesh) Remove(node string) {
	p, ok := m.peers[node]
	if !ok {
		return
	}
	m.catchUp()
	m.routes.Remove(p.Subnet)
	delete(m.neigh, p.Subnet.Addr().As4())
	delete(m.fdb, p.MAC.key())
	delete(m.peers, node)
	m.changed()
}

// catchUp brings every member's ARP table's periodic collector up to now
// before the entry count its runs depend on changes.
//
// A member's next periodic run only moves forward, so none is due while
// now is before the earliest of them seen at the last scan (lowNext).
func (m *Mesh) catchUp() {
	if len(m.members) == 0 || m.members[0].dev.ns.e.now < m.lowNext {
		return
	}
	low := time.Duration(math.MaxInt64)
	for _, v := range m.members {
		ns := v.dev.ns
		ns.arp.catchUp(ns.e.now)
		low = min(low, ns.arp.nextPeriodic)
	}
	m.lowNext = low
}

// Members is the number of members.
func (m *Mesh) Members() int { return len(m.members) }

// DetachAll takes every member out of the mesh (see Detach), in join order.
func (m *Mesh) DetachAll() {
	for len(m.members) > 0 {
		m.Detach(m.members[0].dev)
	}
}

// Detach gives member vtep its own copy of every entry it shows and takes
// it out of the mesh; nothing it shows or does changes.
func (m *Mesh) Detach(vtep *Device) {
	v := vtep.vx
	if v == nil || v.mesh != m {
		return
	}
	ns := vtep.ns
	ns.e.cfgGen++
	ns.arp.catchUp(ns.e.now)
	for k := range ns.neigh.m {
		if k.dev() == vtep.Index {
			m.unclaimNeigh(v, k.ip())
		}
	}
	for k := range v.fdb {
		m.unclaimFDB(v, k)
	}
	ns.Routes.Unshare()
	ns.arp.mesh = nil
	v.mesh = nil
	gws := make([][4]byte, 0, len(m.neigh))
	for gw, e := range m.neigh {
		if e.node != v.meshNode {
			gws = append(gws, gw)
		}
	}
	slices.SortFunc(gws, func(a, b [4]byte) int { return slices.Compare(a[:], b[:]) })
	for _, gw := range gws {
		e := ns.newNeigh(mkNeighKey(vtep.Index, gw), vtep, NeighPermanent)
		e.mac = m.neigh[gw].mac
	}
	for k, e := range m.fdb {
		if e.node != v.meshNode {
			v.fdb[k] = e.dst
		}
	}
	m.members = slices.DeleteFunc(m.members, func(x *VXLAN) bool { return x == v })
	delete(m.byNode, v.meshNode)
	if m.OnDetach != nil {
		m.OnDetach(v.meshNode)
	}
}

// visible is the number of peers member v shows.
func (v *VXLAN) meshVisible() int {
	n := len(v.mesh.peers)
	if _, ok := v.mesh.peers[v.meshNode]; ok {
		n--
	}
	return n
}

// meshNeigh is the MAC of the mesh's neighbour ip as member v shows it.
func (v *VXLAN) meshNeigh(ip [4]byte) (MAC, bool) {
	if v.meshGen == v.mesh.gen+1 && v.meshIP == ip {
		return v.meshMAC, v.meshOK
	}
	e, ok := v.mesh.neigh[ip]
	ok = ok && e.node != v.meshNode
	v.meshGen, v.meshIP, v.meshMAC, v.meshOK = v.mesh.gen+1, ip, e.mac, ok
	return e.mac, ok
}

// meshDst is the remote VTEP address of mac in the mesh as v shows it.
func (v *VXLAN) meshDst(k uint64) ([4]byte, bool) {
	if v.meshFGen == v.mesh.gen+1 && v.meshFKey == k {
		return v.meshFDst, v.meshFOK
	}
	e, ok := v.mesh.fdb[k]
	ok = ok && e.node != v.meshNode
	v.meshFGen, v.meshFKey, v.meshFDst, v.meshFOK = v.mesh.gen+1, k, e.dst, ok
	return e.dst, ok
}

// changed is called on every change of the mesh's peers: it changes the
// generation the members' lookup caches and the engine's fast path check.
func (m *Mesh) changed() {
	m.gen++
	if len(m.members) > 0 {
		m.members[0].dev.ns.e.cfgGen++
	}
}
