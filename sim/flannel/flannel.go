// Package flannel models flanneld with the vxlan backend: on every node a
// VTEP device flannel.1 (VNI 1, UDP 8472, nolearning, MTU 50 below the
// underlay) holding 10.244.N.0/32, and for every other node the route,
// PERMANENT neighbour entry and FDB entry flanneld writes when it sees
// that node's lease. Adding a node updates every other node, as flannel's
// watch does.
package flannel

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"github.com/kubewalk/kubewalk/datapath"
)

// Config is flannel's net-conf.json for the vxlan backend.
type Config struct {
	Network netip.Prefix // "Network": "10.244.0.0/16"
	VNI     uint32       // "VNI": 1
	Port    uint16       // "Port": 8472 (flannel's default, not IANA's 4789)
	Device  string       // "flannel.1" (flannel.<VNI>)
}

// DefaultConfig is what kube-flannel.yml ships.
func DefaultConfig() Config {
	return Config{Network: netip.MustParsePrefix("10.244.0.0/16"), VNI: 1, Port: 8472, Device: "flannel.1"}
}

// Node is one node's flannel state: its lease (subnet, public IP, VTEP MAC).
type Node struct {
	Name     string
	Host     *datapath.Netns
	Subnet   netip.Prefix
	PublicIP netip.Addr
	Iface    string
	VTEP     *datapath.Device
	idx      int
	inMesh   bool
}

// Annotations are the node annotations flanneld writes, which other nodes
// read to program their routes.
func (n *Node) Annotations() map[string]string {
	bd, _ := json.Marshal(struct {
		VNI     uint32 `json:"VNI"`
		VtepMAC string `json:"VtepMAC"`
	}{1, n.VTEP.MAC().String()})
	return map[string]string{
		"flannel.alpha.coreos.com/backend-data":        string(bd),
		"flannel.alpha.coreos.com/backend-type":        "vxlan",
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		"flannel.alpha.coreos.com/public-ip":           n.PublicIP.String(),
	}
}

// SubnetEnv is /run/flannel/subnet.env, which the flannel CNI plugin reads
// to configure the bridge plugin (FLANNEL_MTU becomes cni0's MTU).
func (n *Node) SubnetEnv(cfg Config) string {
	return fmt.Sprintf("FLANNEL_NETWORK=%s\nFLANNEL_SUBNET=%s/%d\nFLANNEL_MTU=%d\nFLANNEL_IPMASQ=true\n",
		cfg.Network, n.Subnet.Addr().Next(), n.Subnet.Bits(), n.VTEP.MTU())
}

// Network is the set of nodes running flanneld in one cluster.
//
// What every flanneld programs for the other nodes' leases is held once,
// in a datapath.Mesh every node's flannel.1 consults, rather than as a
// route, neighbour and FDB entry per node pair: the nodes show and do
// exactly what the per-pair entries would make them show and do. A node
// whose entries are edited by hand leaves the mesh with its own copies
// (copy on write), and from then on the Network programs it lease by lease,
// as flanneld does; so does every node once two leases conflict (one
// subnet, gateway or VTEP MAC for two nodes), since then what each node
// holds depends on the order it saw them in.
type Network struct {
	Config Config
	nodes  []*Node
	mesh   *datapath.Mesh
	// meshOff: the mesh is given up (a conflict); subnets counts the
	// members' own subnets; perPair are the joined nodes outside the mesh,
	// in join order.
	meshOff bool
	subnets map[netip.Prefix]int
	byName  map[string]*Node
	perPair []*Node
	// started holds the names of the nodes started, for Start's check.
	started map[string]bool
}

// NewNetwork returns an empty flannel network.
func NewNetwork(cfg Config) *Network {
	return &Network{Config: cfg, subnets: map[netip.Prefix]int{}, byName: map[string]*Node{}}
}

// DisableMesh makes the Network program every joined node entry by entry,
// as flanneld does, with no shared table: the reference the shared mesh is
// tested against. Call it before the first node starts.
func (n *Network) DisableMesh() { n.meshOff = true }

// Mesh is the shared table the joined nodes' flannel.1 consult (nil
// before the first node joins).
func (n *Network) Mesh() *datapath.Mesh { return n.mesh }

// InMesh reports whether at's remote leases are held in the shared mesh
// (rather than as entries of its own).
func (at *Node) InMesh() bool { return at.inMesh }

// Join is at's flanneld starting: its informer lists the leases list
// returns (every current lease, in name order) and it programs every
// other one. exact tells that they are the leases the Network last
// programmed (AddLease, RemoveLease), one per node: then at can join the
// mesh without listing them.
func (n *Network) Join(at *Node, list func() []Lease, exact bool) error {
	if exact && !n.meshOff && n.mesh.Fits(at.VTEP) {
		if o, ok := n.mesh.SubnetNode(at.Subnet); !ok || o == at.Name {
			n.mesh.Join(at.VTEP, at.Name)
			at.inMesh = true
			n.subnets[at.Subnet]++
			n.byName[at.Name] = at
			return nil
		}
	}
	n.byName[at.Name] = at
	n.perPair = append(n.perPair, at)
	for _, l := range list() {
		if err := at.AddLease(l); err != nil {
			return err
		}
	}
	return nil
}

// detached is the mesh telling that node's VTEP left it.
func (n *Network) detached(node string) {
	at := n.byName[node]
	at.inMesh = false
	n.subnets[at.Subnet]--
	if n.subnets[at.Subnet] == 0 {
		delete(n.subnets, at.Subnet)
	}
	i, _ := slices.BinarySearchFunc(n.perPair, at.idx, func(x *Node, idx int) int { return cmp.Compare(x.idx, idx) })
	n.perPair = slices.Insert(n.perPair, i, at)
}

// conflicts reports whether l cannot be held in the mesh.
func (n *Network) conflicts(l Lease) bool {
	if !l.Subnet.IsValid() || !l.Subnet.Addr().Is4() || !l.PublicIP.Is4() {
		return true
	}
	c := n.subnets[l.Subnet]
	if at := n.byName[l.Node]; at != nil && at.inMesh && at.Subnet == l.Subnet {
		c--
	}
	return c > 0 || n.mesh.Conflicts(peer(l))
}

func peer(l Lease) datapath.MeshPeer {
	return datapath.MeshPeer{Node: l.Node, Subnet: l.Subnet, MAC: l.VtepMAC, PublicIP: l.PublicIP}
}

// AddLease programs l on every joined node (AddLease on each), returning
// the first node's error.
func (n *Network) AddLease(l Lease) error {
	if n.mesh != nil && !n.meshOff {
		if n.conflicts(l) {
			n.meshOff = true
			n.mesh.DetachAll()
		} else if err := n.mesh.Put(peer(l)); err != nil {
			return &Error{Node: l.Node, Msg: err.Error()}
		}
	}
	var first error
	for _, at := range n.perPair {
		if err := at.AddLease(l); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// RemoveLease undoes AddLease on every joined node (l's Node is deleted).
func (n *Network) RemoveLease(l Lease) {
	if n.mesh != nil && !n.meshOff {
		if p, ok := n.mesh.Peer(l.Node); ok && p == peer(l) {
			n.mesh.Remove(l.Node)
		} else if ok || n.mesh.Conflicts(peer(l)) {
			n.meshOff = true
			n.mesh.DetachAll()
		}
	}
	for _, at := range n.perPair {
		at.RemoveLease(l)
	}
}

// Nodes returns the nodes in join order.
func (n *Network) Nodes() []*Node { return n.nodes }

// Error reports a flanneld failure.
type Error struct {
	Node string
	Msg  string
}

// Error implements the error interface.
func (e *Error) Error() string { return "flanneld on " + e.Node + ": " + e.Msg }

// Start starts flanneld on a node (--kube-subnet-mgr): creates the VTEP
// on iface with publicIP as the local address and assigns the subnet's
// .0/32 to it. The node's lease is then published as its Node's
// annotations (Annotations), and the other nodes' leases are programmed as
// flanneld's Node watch delivers them (AddLease, RemoveLease).
func (n *Network) Start(name string, host *datapath.Netns, subnet netip.Prefix, publicIP netip.Addr, iface string) (*Node, error) {
	if !n.Config.Network.Contains(subnet.Addr()) || subnet.Bits() < n.Config.Network.Bits() {
		return nil, &Error{Node: name, Msg: fmt.Sprintf("subnet %s is not inside the flannel network %s", subnet, n.Config.Network)}
	}
	if n.started[name] {
		return nil, &Error{Node: name, Msg: "already joined"}
	}
	vtep, err := host.AddVXLAN(n.Config.Device, datapath.VXLANConfig{VNI: n.Config.VNI, Port: n.Config.Port, Local: publicIP, Dev: iface})
	if err != nil {
		return nil, &Error{Node: name, Msg: err.Error()}
	}
	vtep.SetUp(true)
	if err := host.AddAddr(n.Config.Device, netip.PrefixFrom(subnet.Addr(), 32)); err != nil {
		return nil, &Error{Node: name, Msg: err.Error()}
	}
	me := &Node{Name: name, Host: host, Subnet: subnet, PublicIP: publicIP, Iface: iface, VTEP: vtep, idx: len(n.nodes)}
	n.nodes = append(n.nodes, me)
	if n.started == nil {
		n.started = map[string]bool{}
	}
	n.started[name] = true
	if n.mesh == nil && !n.meshOff {
		n.mesh = datapath.NewMesh(vtep)
		n.mesh.OnDetach = n.detached
	}
	return me, nil
}

// Lease is another node's subnet lease as flanneld reads it off that
// Node: spec.podCIDR and the flannel.alpha.coreos.com annotations.
type Lease struct {
	Node     string
	Subnet   netip.Prefix
	PublicIP netip.Addr
	VtepMAC  datapath.MAC
}

// LeaseFromNode reads a lease from a Node's podCIDR and annotations; ok is
// false while the node has no podCIDR or flanneld has not annotated it.
func LeaseFromNode(name, podCIDR string, annotations map[string]string) (l Lease, ok bool) {
	sub, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return Lease{}, false
	}
	pub, err := netip.ParseAddr(annotations["flannel.alpha.coreos.com/public-ip"])
	if err != nil {
		return Lease{}, false
	}
	var bd struct {
		VtepMAC string `json:"VtepMAC"`
	}
	if err := json.Unmarshal([]byte(annotations["flannel.alpha.coreos.com/backend-data"]), &bd); err != nil {
		return Lease{}, false
	}
	mac, err := datapath.ParseMAC(bd.VtepMAC)
	if err != nil {
		return Lease{}, false
	}
	return Lease{Node: name, Subnet: sub, PublicIP: pub, VtepMAC: mac}, true
}

// AddLease writes on this node what flanneld's vxlan backend writes for a
// remote lease:
//
//	ip route replace 10.244.M.0/24 via 10.244.M.0 dev flannel.1 onlink
//	ip neigh replace 10.244.M.0 dev flannel.1 lladdr <VTEP MAC> nud permanent
//	bridge fdb replace <VTEP MAC> dev flannel.1 dst <public IP> self permanent
//
// A lease for this node's own subnet cannot be routed to another node:
// flanneld skips it, so two nodes with one podCIDR never learn of each
// other while every third node routes the subnet to whichever lease it
// saw last.
func (at *Node) AddLease(l Lease) error {
	if l.Node == at.Name || l.Subnet == at.Subnet {
		return nil
	}
	gw := l.Subnet.Addr()
	dev := at.VTEP.Name
	if err := at.Host.ReplaceRoute(datapath.RouteSpec{Dst: l.Subnet, Via: gw, Dev: dev, OnLink: true}); err != nil {
		return &Error{Node: at.Name, Msg: err.Error()}
	}
	if err := at.Host.SetNeigh(dev, gw, l.VtepMAC, datapath.NeighPermanent); err != nil {
		return &Error{Node: at.Name, Msg: err.Error()}
	}
	if err := at.VTEP.VXLAN().AddFDB(l.VtepMAC, l.PublicIP); err != nil {
		return &Error{Node: at.Name, Msg: err.Error()}
	}
	return nil
}

// RemoveLease undoes AddLease when the lease's Node is deleted.
func (at *Node) RemoveLease(l Lease) {
	if l.Node == at.Name || l.Subnet == at.Subnet {
		return
	}
	at.Host.Routes.Delete(l.Subnet, 0)
	at.Host.DeleteNeigh(at.VTEP.Name, l.Subnet.Addr())
	at.VTEP.VXLAN().DeleteFDB(l.VtepMAC)
}

// IPTablesRules are the iptables commands flanneld (with --ip-masq, as
// kube-flannel.yml runs it) issues on this node, each as table followed by
// iptables arguments: the FLANNEL-POSTRTG masquerade chain, which leaves
// pod-to-pod traffic alone, masquerades pods talking to the outside and
// traffic from outside the pod network to pods elsewhere, and steps aside
// for packets kube-proxy marked (0x4000); and the FLANNEL-FWD accept chain.
func (n *Node) IPTablesRules(cfg Config) [][]string {
	network := cfg.Network.String()
	subnet := n.Subnet.String()
	c := []string{"-m", "comment", "--comment", "flanneld masq"}
	fw := []string{"-m", "comment", "--comment", "flanneld forward"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	return [][]string{
		{"nat", "-N", "FLANNEL-POSTRTG"},
		{"nat", "-A", "FLANNEL-POSTRTG", "-m", "mark", "--mark", "0x4000/0x4000", "-m", "comment", "--comment", "flanneld masq", "-j", "RETURN"},
		cat([]string{"nat", "-A", "FLANNEL-POSTRTG", "-s", subnet, "-d", network}, c, []string{"-j", "RETURN"}),
		cat([]string{"nat", "-A", "FLANNEL-POSTRTG", "-s", network, "-d", subnet}, c, []string{"-j", "RETURN"}),
		cat([]string{"nat", "-A", "FLANNEL-POSTRTG", "!", "-s", network, "-d", subnet}, c, []string{"-j", "RETURN"}),
		cat([]string{"nat", "-A", "FLANNEL-POSTRTG", "-s", network, "!", "-d", "224.0.0.0/4"}, c, []string{"-j", "MASQUERADE", "--random-fully"}),
		cat([]string{"nat", "-A", "FLANNEL-POSTRTG", "!", "-s", network, "-d", network}, c, []string{"-j", "MASQUERADE", "--random-fully"}),
		cat([]string{"nat", "-A", "POSTROUTING"}, c, []string{"-j", "FLANNEL-POSTRTG"}),
		{"filter", "-N", "FLANNEL-FWD"},
		cat([]string{"filter", "-A", "FLANNEL-FWD", "-s", network}, fw, []string{"-j", "ACCEPT"}),
		cat([]string{"filter", "-A", "FLANNEL-FWD", "-d", network}, fw, []string{"-j", "ACCEPT"}),
		cat([]string{"filter", "-A", "FORWARD"}, fw, []string{"-j", "FLANNEL-FWD"}),
	}
}
