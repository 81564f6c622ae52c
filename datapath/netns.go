package datapath

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/kubewalk/kubewalk/datapath/route"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"go4.org/netipx"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Sysctls are the per-namespace knobs that change the walk.
type Sysctls struct {
	// IPForward is net.ipv4.ip_forward (and conf.all.forwarding).
	IPForward bool
	// BridgeNFCallIPTables is net.bridge.bridge-nf-call-iptables: bridged
	// IPv4 frames traverse the iptables hooks (br_netfilter).
	BridgeNFCallIPTables bool
	// DefaultTTL is net.ipv4.ip_default_ttl (64).
	DefaultTTL uint8
	// EchoIgnoreBroadcasts is net.ipv4.icmp_echo_ignore_broadcasts (1).
	EchoIgnoreBroadcasts bool
}

// Addr is an IPv4 address assigned to a device (`ip addr add A/N dev D`).
type Addr struct {
	Prefix netip.Prefix
	Dev    *Device
	// Secondary is set, as the kernel sets IFA_F_SECONDARY, when the
	// device already had a primary address with the same prefix length
	// whose subnet holds this one. Secondary addresses are never picked
	// as a source (inet_select_addr skips them).
	Secondary bool
}

// Netns is a network namespace: devices, addresses, a routing table, a
// neighbour table, netfilter hook points and the minimal sockets of the
// local stack. Node names the node it belongs to, for traces.
type Netns struct {
	Name, Node string
	Sysctl     Sysctls

	e    *Engine
	devs []*Device
	// byName holds the devices by name once the namespace has more than
	// byNameMin of them (a node's host namespace, with a veth per pod);
	// until then Device scans devs, and a pod's namespace makes no map.
	byName map[string]*Device
	// byIndex holds the devices by ifindex (nil where one was deleted);
	// vxlans the VXLAN devices, in creation order: the walk looks both up
	// per packet, and a node's host namespace has a veth per pod.
	byIndex []*Device
	vxlans  []*VXLAN
	addrs   []Addr
	// local and bcast are the namespace's addresses and its subnets'
	// broadcast addresses (the local table's local and broadcast routes).
	local, bcast addrSet
	Routes       route.Table
	neigh        neighTable
	arp          *ARPTable
	hooks        [numHooks]hookList
	sockets      sockets
	owner        SocketOwner
	lo           *Device
	ipID         uint16
	// addrGen changes with every change of local and bcast; dsts caches
	// what destination addresses are to the namespace (dstcache.go), made
	// when the namespace first looks a destination up: most of a large
	// cluster's pod namespaces never send a packet, and the cache is 512
	// bytes of every namespace otherwise.
	addrGen uint64
	dsts    *[dstSlots]dstSlot
	// fast is the namespace fast path's table (fastpath.go), made when
	// the first event is recorded.
	fast *fastTable
	// nextIfindex allocates ifindexes per namespace, as dev_new_index does.
	nextIfindex int
	// fixed is room for what every pod's namespace holds, allocated with
	// the namespace instead of as objects of their own.
	fixed netnsFixed
}

// netnsFixed is the fixed parts of a pod's namespace: its loopback
// device, room for two devices (lo and eth0, ifindexes 1 and 2) and their
// two addresses, and the first TCP listener bound in it.
type netnsFixed struct {
	lo    Device
	devs  [6]*Device
	addrs [2]Addr
	// tcp is the first listener ListenTCP makes; tcpUsed is set once it
	// is handed out (a later listener is an object of its own, even after
	// this one is closed: the caller may still hold it).
	tcp     TCPListener
	tcpUsed bool
}

// byNameMin is the most devices a namespace finds by scanning devs; with
// more it keeps them in the byName map.
const byNameMin = 8

// NewNetns creates a namespace with a loopback device lo (127.0.0.1/8, up),
// as `ip netns add` plus `ip link set lo up` does.
func (e *Engine) NewNetns(node, name string) *Netns {
	ns := &Netns{
		Name: name, Node: node, e: e,
		Sysctl: Sysctls{DefaultTTL: 64, EchoIgnoreBroadcasts: true},
	}
	// A pod's namespace holds lo and eth0 (ifindexes 1 and 2) and their
	// two addresses: room for them in the namespace itself. The name, socket
	// and neighbour maps are made by their first entry beyond that.
	f := &ns.fixed
	ns.devs, ns.byIndex, ns.addrs = f.devs[:0:2], f.devs[2:2:6], f.addrs[:0:2]
	// A route change changes the configuration generation: the replays
	// (fastpath.go) need not check each namespace's table.
	ns.Routes.SetNotify(&e.cfgGen)
	ns.arp = e.arpTable(node)
	lo, _ := ns.addDevice(&f.lo, "lo", KindLoopback, MAC{}, 65536)
	lo.up = true
	ns.lo = lo
	_ = ns.AddAddr("lo", netip.MustParsePrefix("127.0.0.1/8"))
	return ns
}

// Engine returns the engine the namespace runs on.
func (ns *Netns) Engine() *Engine { return ns.e }

// Devices returns the namespace's devices in ifindex order.
func (ns *Netns) Devices() []*Device { return ns.devs }

// Device returns the device named name, or nil.
func (ns *Netns) Device(name string) *Device {
	if ns.byName != nil {
		return ns.byName[name]
	}
	for _, d := range ns.devs {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Addrs returns the namespace's addresses in the order they were added.
func (ns *Netns) Addrs() []Addr { return ns.addrs }

// addDevice adds a device, kept in d when d is not nil (room allocated
// with something else), in an object of its own otherwise.
func (ns *Netns) addDevice(d *Device, name string, kind DeviceKind, mac MAC, mtu int) (*Device, error) {
	if name == "" || len(name) > 15 {
		return nil, &ConfigError{Op: "add device", Object: name, Reason: "name must be 1 to 15 characters (IFNAMSIZ)"}
	}
	if ns.Device(name) != nil {
		return nil, &ConfigError{Op: "add device", Object: name, Reason: "RTNETLINK answers: File exists"}
	}
	ns.nextIfindex++
	ns.e.cfgGen++
	if d == nil {
		d = new(Device)
	}
	*d = Device{Name: name, Index: ns.nextIfindex, Kind: kind, mac: mac, mtu: mtu, ns: ns}
	ns.devs = append(ns.devs, d)
	if ns.byName != nil {
		ns.byName[name] = d
	} else if len(ns.devs) > byNameMin {
		ns.byName = make(map[string]*Device, 2*len(ns.devs))
		for _, x := range ns.devs {
			ns.byName[x.Name] = x
		}
	}
	for len(ns.byIndex) <= d.Index {
		ns.byIndex = append(ns.byIndex, nil)
	}
	ns.byIndex[d.Index] = d
	return d, nil
}

// AddVeth creates a veth pair: name in ns, peerName in peerNS (which may be
// ns), each with a random MAC from the engine's random source, MTU 1500, down.
func (ns *Netns) AddVeth(name string, peerNS *Netns, peerName string) (*Device, *Device, error) {
	if peerNS == ns && name == peerName {
		return nil, nil, &ConfigError{Op: "add veth", Object: name, Reason: "both ends have the same name"}
	}
	if peerNS.Device(peerName) != nil {
		return nil, nil, &ConfigError{Op: "add device", Object: peerName, Reason: "RTNETLINK answers: File exists"}
	}
	// The two ends are made and deleted together: one allocation.
	pair := new([2]Device)
	a, err := ns.addDevice(&pair[0], name, KindVeth, RandomMAC(ns.e.rng), 1500)
	if err != nil {
		return nil, nil, err
	}
	b, err := peerNS.addDevice(&pair[1], peerName, KindVeth, RandomMAC(ns.e.rng), 1500)
	if err != nil {
		return nil, nil, err
	}
	a.peer, b.peer = b, a
	return a, b, nil
}

// AddBridge creates a Linux bridge device with a random MAC, as the CNI
// bridge plugin does (it then pins that MAC so ports do not change it).
func (ns *Netns) AddBridge(name string) (*Device, error) {
	d, err := ns.addDevice(nil, name, KindBridge, RandomMAC(ns.e.rng), 1500)
	if err != nil {
		return nil, err
	}
	d.br = &bridge{dev: d, fdb: map[uint64]*fdbEntry{}, AgeingTime: DefaultAgeingTime}
	d.br.fdb[d.mac.key()] = &fdbEntry{port: d, local: true}
	return d, nil
}

// AddNIC creates an Ethernet NIC with the given MAC and MTU.
func (ns *Netns) AddNIC(name string, mac MAC, mtu int) (*Device, error) {
	if mac.IsMulticast() || mac.IsZero() {
		return nil, &ConfigError{Op: "add device", Object: name, Reason: "MAC " + mac.String() + " is not a unicast address"}
	}
	return ns.addDevice(nil, name, KindNIC, mac, mtu)
}

// AddDummy creates a dummy device (`ip link add NAME type dummy`) with a
// random MAC, MTU 1500, down. Addresses on it are local addresses of the
// namespace even while it is down (fib_add_ifaddr adds the local route
// before checking IFF_UP), which is how kube-ipvs0 makes ClusterIPs local.
func (ns *Netns) AddDummy(name string) (*Device, error) {
	return ns.addDevice(nil, name, KindDummy, RandomMAC(ns.e.rng), 1500)
}

// DeleteAddr removes an address from a device (`ip addr del A/N dev D`),
// with its local entry.
func (ns *Netns) DeleteAddr(dev string, p netip.Prefix) error {
	d := ns.Device(dev)
	if d == nil {
		return &ConfigError{Op: "delete address", Object: dev, Reason: "Cannot find device"}
	}
	for i, a := range ns.addrs {
		if a.Dev == d && a.Prefix == p {
			ns.addrs = append(ns.addrs[:i], ns.addrs[i+1:]...)
			ns.addrGen++
			ns.e.cfgGen++
			a4 := p.Addr().As4()
			ns.local.del(a4)
			if p.Bits() < 31 {
				ns.bcast.del(netipx.PrefixLastIP(p).As4())
			}
			for _, o := range ns.addrs {
				if o.Prefix.Addr().As4() == a4 {
					ns.local.add(a4)
				}
			}
			return nil
		}
	}
	return &ConfigError{Op: "delete address", Object: p.String(), Reason: "RTNETLINK answers: Cannot assign requested address"}
}

// SetMaster enslaves port to bridge (`ip link set dev P master B`). The
// port's own MAC becomes a permanent local FDB entry.
func (ns *Netns) SetMaster(port, bridgeName string) error {
	p, b := ns.Device(port), ns.Device(bridgeName)
	switch {
	case p == nil:
		return &ConfigError{Op: "set master", Object: port, Reason: "Cannot find device"}
	case b == nil:
		return &ConfigError{Op: "set master", Object: bridgeName, Reason: "Cannot find device"}
	case b.Kind != KindBridge:
		return &ConfigError{Op: "set master", Object: bridgeName, Reason: "not a bridge"}
	case p == b || p.Kind == KindBridge || p.Kind == KindLoopback:
		return &ConfigError{Op: "set master", Object: port, Reason: "cannot be a bridge port"}
	case p.master != nil:
		return &ConfigError{Op: "set master", Object: port, Reason: "already a port of " + p.master.Name}
	}
	p.master = b
	b.br.ports = append(b.br.ports, p)
	b.br.fdb[p.mac.key()] = &fdbEntry{port: p, local: true}
	ns.e.cfgGen++
	return nil
}

// SetMTU sets a device's MTU.
func (ns *Netns) SetMTU(dev string, mtu int) error {
	d := ns.Device(dev)
	if d == nil {
		return &ConfigError{Op: "set mtu", Object: dev, Reason: "Cannot find device"}
	}
	if mtu < 68 || mtu > MaxFrame-EthHdrLen {
		return &ConfigError{Op: "set mtu", Object: dev, Reason: "MTU " + itoa(mtu) + " out of range 68.." + itoa(MaxFrame-EthHdrLen)}
	}
	d.mtu = mtu
	ns.e.cfgGen++
	return nil
}

// SetUp brings a device up or down by name.
func (ns *Netns) SetUp(dev string, up bool) error {
	d := ns.Device(dev)
	if d == nil {
		return &ConfigError{Op: "set link", Object: dev, Reason: "Cannot find device"}
	}
	d.up = up
	ns.e.cfgGen++
	return nil
}

// AddAddr assigns an IPv4 address with prefix length to a device, adding the
// local entry and, for prefixes shorter than /32, the connected route
// (proto kernel scope link src A), as the kernel does.
func (ns *Netns) AddAddr(dev string, p netip.Prefix) error {
	d := ns.Device(dev)
	if d == nil {
		return &ConfigError{Op: "add address", Object: dev, Reason: "Cannot find device"}
	}
	if !p.IsValid() || !p.Addr().Is4() {
		return &ConfigError{Op: "add address", Object: p.String(), Reason: "not an IPv4 prefix"}
	}
	a4 := p.Addr().As4()
	for _, a := range ns.addrs {
		if a.Prefix.Addr() == p.Addr() && a.Dev == d {
			return &ConfigError{Op: "add address", Object: p.String(), Reason: "RTNETLINK answers: File exists"}
		}
	}
	secondary := false
	for _, a := range ns.addrs {
		if a.Dev == d && !a.Secondary && a.Prefix.Bits() == p.Bits() && a.Prefix.Masked().Contains(p.Addr()) {
			secondary = true
		}
	}
	ns.addrs = append(ns.addrs, Addr{Prefix: p, Dev: d, Secondary: secondary})
	ns.addrGen++
	ns.e.cfgGen++
	ns.local.add(a4)
	if d.Kind == KindLoopback {
		return nil
	}
	if p.Bits() < 31 {
		ns.bcast.add(netipx.PrefixLastIP(p).As4())
	}
	if p.Bits() < 32 {
		r := route.Route{Dst: p.Masked(), Dev: d.Index, DevName: d.Name, Proto: route.ProtoKernel,
			Scope: route.ScopeLink, Src: p.Addr()}
		if _, ok := ns.Routes.Get(r.Dst, 0); !ok {
			return ns.Routes.Add(r)
		}
	}
	return nil
}

// IsBroadcast reports whether a is the broadcast address of one of the
// namespace's subnets (the local table's broadcast routes).
func (ns *Netns) IsBroadcast(a [4]byte) bool { return ns.bcast.has(a) }

// AddrGen is the namespace's address generation: it changes with every
// change to what IsLocal and IsBroadcast answer (a cache of an answer
// that depends on them holds while it is the same).
func (ns *Netns) AddrGen() uint64 { return ns.addrGen }

// IsLocal reports whether a is one of the namespace's addresses.
func (ns *Netns) IsLocal(a [4]byte) bool { return ns.local.has(a) }

// RouteSpec describes a route as `ip route add` takes it.
type RouteSpec struct {
	Dst    netip.Prefix
	Via    netip.Addr // optional gateway
	Dev    string     // output device; may be empty when Via is on a connected network
	OnLink bool
	Metric int
	Src    netip.Addr
	Proto  route.Proto // 0 means boot, as `ip route add` sets
	Type   route.Type
}

// AddRoute adds a route, checking what the kernel checks: the device exists,
// and without onlink the gateway is reachable through a connected route.
func (ns *Netns) AddRoute(s RouteSpec) error { return ns.addRoute(s, false) }

// ReplaceRoute is AddRoute with `ip route replace` semantics.
func (ns *Netns) ReplaceRoute(s RouteSpec) error { return ns.addRoute(s, true) }

func (ns *Netns) addRoute(s RouteSpec, replace bool) error {
	if s.Type != route.Unicast {
		r := route.Route{Dst: s.Dst, Metric: s.Metric, Type: s.Type, Proto: cmp.Or(s.Proto, route.ProtoBoot)}
		if replace {
			return ns.Routes.Replace(r)
		}
		return ns.Routes.Add(r)
	}
	var d *Device
	if s.Dev != "" {
		if d = ns.Device(s.Dev); d == nil {
			return &ConfigError{Op: "add route", Object: s.Dst.String(), Reason: "Cannot find device \"" + s.Dev + "\""}
		}
	}
	if s.Via.IsValid() && !s.OnLink {
		gw := s.Via.As4()
		r, ok := ns.Routes.Lookup(gw)
		if !ok || r.Gw.IsValid() || (d != nil && r.Dev != d.Index) {
			return &ConfigError{Op: "add route", Object: s.Dst.String(), Reason: "Error: Nexthop has invalid gateway."}
		}
		if d == nil {
			d = ns.devByIndex(r.Dev)
		}
	}
	if d == nil {
		return &ConfigError{Op: "add route", Object: s.Dst.String(), Reason: "no device and no gateway"}
	}
	r := route.Route{Dst: s.Dst, Gw: s.Via, Dev: d.Index, DevName: d.Name, OnLink: s.OnLink,
		Metric: s.Metric, Proto: cmp.Or(s.Proto, route.ProtoBoot), Src: s.Src}
	if !s.Via.IsValid() {
		r.Scope = route.ScopeLink
	}
	if replace {
		return ns.Routes.Replace(r)
	}
	return ns.Routes.Add(r)
}

func (ns *Netns) devByIndex(i int) *Device {
	if i < 0 || i >= len(ns.byIndex) {
		return nil
	}
	return ns.byIndex[i]
}

// AddHookStage registers s on a netfilter hook at a priority; stages run in
// ascending priority (see the Priority constants), equal priorities in
// registration order.
func (ns *Netns) AddHookStage(h Hook, name string, priority int, s Stage) {
	ns.e.cfgGen++
	ns.hooks[h].add(HookEntry{Name: name, Priority: priority, Stage: s})
}

// SetHookPassive tells the hook that, until further notice, all the stage
// registered as name would do with a packet is count it: add one to
// *packets and the packet's length from its IPv4 header on (the frame
// less its Ethernet header) to *bytes, then pass it on. The hook then does
// that itself instead of calling the stage, as the kernel runs no hook
// function for an nf_tables base chain without rules. This is how an
// iptables table whose built-in chain is empty with policy ACCEPT keeps
// its policy counter exact at no cost. packets == nil makes the stage
// active again. It reports whether a stage of that name is registered.
// The stage must behave the same when it is called directly.
func (ns *Netns) SetHookPassive(h Hook, name string, packets, bytes *uint64) bool {
	if (packets == nil) != (bytes == nil) {
		return false
	}
	for i := range ns.hooks[h] {
		if e := &ns.hooks[h][i]; e.Name == name {
			ns.e.cfgGen++
			e.passPackets, e.passBytes = packets, bytes
			return true
		}
	}
	return false
}

// RemoveHookStage removes a stage registered with AddHookStage.
func (ns *Netns) RemoveHookStage(h Hook, name string) bool {
	ns.e.cfgGen++
	return ns.hooks[h].remove(name)
}

// HookStages lists the stages on a hook, in the order they run.
func (ns *Netns) HookStages(h Hook) []HookEntry { return slices.Clone(ns.hooks[h]) }

func (ns *Netns) observe(w *Walk, p *Packet, dev *Device, stage string, a trace.Action, detail string) {
	o := trace.Observation{Node: ns.Node, Netns: ns.Name, Stage: stage, Action: a, Summary: p.Summary(), Detail: detail}
	if dev != nil {
		o.Device = dev.Name
	}
	w.Observe(p, o)
}

// drop records a drop and releases p.
func (ns *Netns) drop(w *Walk, p *Packet, dev *Device, stage string, r DropReason, detail string) {
	if p.Trace != nil {
		o := trace.Observation{Node: ns.Node, Netns: ns.Name, Stage: stage, Action: trace.Dropped,
			Summary: p.Summary(), Detail: detail, Reason: r.String()}
		if dev != nil {
			o.Device = dev.Name
		}
		w.Observe(p, o)
	}
	p.Release()
}

func (ns *Netns) runHook(w *Walk, h Hook, p *Packet, dev *Device) bool {
	l := ns.hooks[h]
	if len(l) == 0 {
		return true
	}
	switch v := l.run(w, p); v.Code {
	case Drop:
		ns.drop(w, p, dev, h.String(), v.Reason, "")
		return false
	case Stolen:
		return false
	}
	return true
}

// l2Receive is netif_receive_skb for a device that is not a bridge port.
func (ns *Netns) l2Receive(w *Walk, dev *Device, p *Packet) {
	dst := p.DstMAC()
	if dev.Kind != KindLoopback && !dst.IsMulticast() && dst != dev.mac {
		ns.drop(w, p, dev, "rx", ReasonNotForUs, "destination "+dst.String()+" is not "+dev.mac.String())
		return
	}
	switch p.EtherType() {
	case 0x0806:
		ns.arpReceive(w, dev, p)
	case 0x0800:
		ns.ipReceive(w, dev, p)
	default:
		ns.drop(w, p, dev, "rx", ReasonUnknownProtocol, "ethertype 0x"+hex16(p.EtherType()))
	}
}

// ValidateIPv4 checks an IPv4 packet (starting at the IP header) the way
// ip_rcv_core does: version, header length, total length, checksum. It
// returns the total length on success.
func ValidateIPv4(b []byte) (int, error) {
	if len(b) < header.IPv4MinimumSize {
		return 0, &FrameError{Layer: "ipv4", Reason: "shorter than 20 bytes"}
	}
	if b[0]>>4 != 4 {
		return 0, &FrameError{Layer: "ipv4", Reason: "version " + itoa(int(b[0]>>4)) + " is not 4"}
	}
	ihl := int(b[0]&0xf) * 4
	if ihl < header.IPv4MinimumSize {
		return 0, &FrameError{Layer: "ipv4", Reason: "header length " + itoa(ihl) + " below 20"}
	}
	tot := int(b[2])<<8 | int(b[3])
	if tot < ihl || tot > len(b) {
		return 0, &FrameError{Layer: "ipv4", Reason: "total length " + itoa(tot) + " inconsistent with header " + itoa(ihl) + " and frame " + itoa(len(b))}
	}
	if ihl > len(b) {
		return 0, &FrameError{Layer: "ipv4", Reason: "header longer than packet"}
	}
	if csum(b[:ihl], 0) != 0xffff {
		return 0, &FrameError{Layer: "ipv4", Reason: "bad header checksum"}
	}
	return tot, nil
}

// ipReceive is ip_rcv: validate, PREROUTING, route input.
func (ns *Netns) ipReceive(w *Walk, dev *Device, p *Packet) {
	tot, err := ValidateIPv4(p.Frame()[EthHdrLen:])
	if err != nil {
		ns.drop(w, p, dev, "ip", ReasonMalformed, err.Error())
		return
	}
	if r := w.recording(); r != nil {
		r.validatedIP(p, tot)
	}
	p.Truncate(EthHdrLen + tot) // strip Ethernet padding
	p.Local = false
	if p.brPrerouted {
		// ip_sabotage_in: br_netfilter already ran PREROUTING in the bridge.
		p.brPrerouted = false
	} else if p.PhysIn = nil; !ns.runHook(w, Prerouting, p, dev) {
		return
	}
	ns.routeInput(w, dev, p)
}

// routeInput decides local delivery or forwarding (ip_route_input).
func (ns *Netns) routeInput(w *Walk, dev *Device, p *Packet) {
	ip := p.IPv4()
	dst := [4]byte(ip[16:20])
	if local, bcast := ns.addrClass(dst); local || bcast || dst == [4]byte{255, 255, 255, 255} {
		if !ns.runHook(w, Input, p, dev) {
			return
		}
		if r := w.recording(); r != nil {
			o := r.op(ftDeliver)
			o.ns, o.dev = ns, dev
			if ip[9] == ProtoUDP && len(ip) >= 20+8 && ip[0] == 0x45 {
				// A VXLAN packet: the replay tries fastDecap first.
				o.vx = ns.vxlanFor(uint16(ip[22])<<8 | uint16(ip[23]))
			}
			w.fastEnd(p, true)
		} else {
			w.fastEnd(p, false)
		}
		ns.deliver(w, dev, p)
		return
	}
	if dst[0] == 127 {
		ns.drop(w, p, dev, "route", ReasonNoRoute, "martian destination "+addrString(dst))
		return
	}
	if r := w.recording(); r != nil {
		r.netns(ns)
	}
	if !ns.Sysctl.IPForward {
		ns.icmpError(w, p, header.ICMPv4DstUnreachable, header.ICMPv4HostUnreachable, 0)
		ns.drop(w, p, dev, "route", ReasonForwardingOff, "not a local address and forwarding is off (ICMP host unreachable sent)")
		return
	}
	r, ok := ns.lookupRoute(dst)
	if !ok || r.Type != route.Unicast {
		ns.icmpError(w, p, header.ICMPv4DstUnreachable, header.ICMPv4NetUnreachable, 0)
		ns.drop(w, p, dev, "route", ReasonNoRoute, "no route to "+addrString(dst)+" (ICMP net unreachable sent)")
		return
	}
	ns.forward(w, dev, p, r)
}

// forward is ip_forward: TTL, MTU, FORWARD hook, POSTROUTING, neighbour.
func (ns *Netns) forward(w *Walk, in *Device, p *Packet, r *route.Route) {
	out := ns.devByIndex(r.Dev)
	if p.Trace != nil {
		ns.observe(w, p, out, "route", trace.Routed, r.String())
	}
	ip := p.IPv4()
	if ip.TTL() <= 1 {
		ns.icmpError(w, p, header.ICMPv4TimeExceeded, header.ICMPv4TTLExceeded, 0)
		ns.drop(w, p, in, "forward", ReasonTTLExceeded, "TTL "+itoa(int(ip.TTL()))+" (ICMP time exceeded sent)")
		return
	}
	if int(ip.TotalLength()) > out.mtu && ip.Flags()&header.IPv4FlagDontFragment != 0 {
		ns.icmpError(w, p, header.ICMPv4DstUnreachable, header.ICMPv4FragmentationNeeded, uint32(out.mtu))
		ns.drop(w, p, in, "forward", ReasonFragNeeded, "length "+itoa(int(ip.TotalLength()))+" > mtu "+itoa(out.mtu)+" of "+out.Name+" (ICMP frag needed sent)")
		return
	}
	decTTL(ip)
	if rec := w.recording(); rec != nil {
		rec.op(feDecTTL)
	}
	p.OutDev = out
	p.NextHop = nextHop(r, ip)
	if !ns.runHook(w, Forward, p, in) {
		return
	}
	ns.postrouting(w, p)
}

func nextHop(r *route.Route, ip header.IPv4) [4]byte {
	if r.Gw.IsValid() {
		return r.Gw.As4()
	}
	return [4]byte(ip[16:20])
}

// decTTL decrements the TTL and patches the checksum (ip_decrease_ttl).
func decTTL(ip header.IPv4) {
	ip[8]--
	// RFC 1624: the TTL is the high byte of the 16-bit word at offset 8.
	sum := uint32(ip[10])<<8 | uint32(ip[11])
	sum += 0x0100
	sum = (sum & 0xffff) + (sum >> 16)
	ip[10], ip[11] = byte(sum>>8), byte(sum)
}

// output is ip_local_out for a packet generated by this namespace: route,
// OUTPUT hook (rerouting if NAT changed the destination), POSTROUTING.
// The packet must be a valid IPv4 packet: the stack builds its own that
// way, and sendLocal checks those that come from outside.
func (ns *Netns) output(w *Walk, p *Packet) {
	p.Local = true
	p.InDev = nil
	p.PhysIn = nil
	if !ns.routeOutput(w, p) {
		return
	}
	dst := [4]byte(p.IPv4()[16:20])
	if !ns.runHook(w, Output, p, nil) {
		return
	}
	if [4]byte(p.IPv4()[16:20]) != dst && !ns.routeOutput(w, p) {
		return
	}
	ns.postrouting(w, p)
}

// LocalOut sends on a packet a hook stage rewrote and took over, the way
// IPVS transmits a scheduled packet (ip_vs_nat_send_or_cont:
// NF_HOOK(LOCAL_OUT) then dst_output): route its destination, run the
// OUTPUT hook from the start, then POSTROUTING and the neighbour layer.
// The stage that calls it must return Stolen. It reports false, having
// dropped p, when there is no route.
func (ns *Netns) LocalOut(w *Walk, p *Packet) bool {
	local := p.Local
	if !ns.routeOutput(w, p) {
		return false
	}
	p.Local = local
	dst := [4]byte(p.IPv4()[16:20])
	if !ns.runHook(w, Output, p, nil) {
		return true
	}
	if [4]byte(p.IPv4()[16:20]) != dst && !ns.routeOutput(w, p) {
		return true
	}
	ns.postrouting(w, p)
	return true
}

// sendLocal is the output event: a packet handed to the namespace from
// outside the stack (Send, SendPacket, a TCPConn) is checked, then sent.
func (ns *Netns) sendLocal(w *Walk, p *Packet) {
	if p.Trace == nil && !w.e.fastOff {
		if ns.fastPath(w, nil, p) {
			return
		}
	}
	tot, err := ValidateIPv4(p.Frame()[EthHdrLen:])
	if err != nil {
		p.Local = true
		ns.drop(w, p, nil, "output", ReasonMalformed, err.Error())
		return
	}
	if r := w.recording(); r != nil {
		r.validatedIP(p, tot)
	}
	ns.output(w, p)
}

// routeOutput sets OutDev and NextHop for a locally generated packet.
func (ns *Netns) routeOutput(w *Walk, p *Packet) bool {
	ip := p.IPv4()
	dst := [4]byte(ip[16:20])
	if local, _ := ns.addrClass(dst); local || dst[0] == 127 {
		p.OutDev, p.NextHop = ns.lo, dst
		return true
	}
	r, ok := ns.lookupRoute(dst)
	if !ok || r.Type != route.Unicast {
		ns.drop(w, p, nil, "route", ReasonNoRoute, "no route to "+addrString(dst)+" (connect: Network is unreachable)")
		return false
	}
	p.OutDev = ns.devByIndex(r.Dev)
	p.NextHop = nextHop(r, ip)
	if p.Trace != nil {
		ns.observe(w, p, p.OutDev, "route", trace.Routed, r.String())
	}
	return true
}

// postrouting runs POSTROUTING, checks the MTU and hands the packet to the
// neighbour layer (ip_output, ip_finish_output).
func (ns *Netns) postrouting(w *Walk, p *Packet) {
	if !ns.runHook(w, Postrouting, p, p.OutDev) {
		return
	}
	out := p.OutDev
	ip := p.IPv4()
	if int(ip.TotalLength()) > out.mtu {
		if ip.Flags()&header.IPv4FlagDontFragment != 0 {
			if p.Local {
				ns.drop(w, p, out, "output", ReasonFragNeeded, "length "+itoa(int(ip.TotalLength()))+" > mtu "+itoa(out.mtu)+" (sendmsg: Message too long)")
			} else {
				ns.icmpError(w, p, header.ICMPv4DstUnreachable, header.ICMPv4FragmentationNeeded, uint32(out.mtu))
				ns.drop(w, p, out, "output", ReasonFragNeeded, "length "+itoa(int(ip.TotalLength()))+" > mtu "+itoa(out.mtu)+" (ICMP frag needed sent)")
			}
			return
		}
		ns.drop(w, p, out, "output", ReasonMTU, "length "+itoa(int(ip.TotalLength()))+" > mtu "+itoa(out.mtu))
		return
	}
	ns.neighOutput(w, out, p.NextHop, p)
}

// bridgePrerouting runs PREROUTING for a bridged IPv4 frame
// (br_nf_pre_routing), with the bridge as the in device iptables sees. If
// NAT moved the destination, br_nf_pre_routing_finish routes the new
// destination. Onto the bridge's own network the frame stays bridged,
// keeping its source MAC and TTL (br_nf_pre_routing_finish_bridge): with the
// neighbour already resolved it is re-addressed and forwarded in place,
// otherwise ARP runs on the bridge and the frame leaves through the bridge
// device. Anywhere else, it is sent up to the host by rewriting its
// destination MAC to the bridge's. It returns false if the packet was
// consumed.
func (ns *Netns) bridgePrerouting(w *Walk, b *bridge, p *Packet) bool {
	tot, err := ValidateIPv4(p.Frame()[EthHdrLen:])
	if err != nil {
		ns.drop(w, p, b.dev, "br_netfilter", ReasonMalformed, err.Error())
		return false
	}
	rec := w.recording()
	if rec != nil {
		rec.validatedIP(p, tot)
		rec.netns(ns)
	}
	port := p.InDev
	p.InDev = b.dev
	p.PhysIn = port
	before := [4]byte(p.IPv4()[16:20])
	if !ns.runHook(w, Prerouting, p, b.dev) {
		return false
	}
	p.InDev = port
	p.brPrerouted = true
	after := [4]byte(p.IPv4()[16:20])
	if before == after {
		return true
	}
	if r, ok := ns.lookupRoute(after); ok && r.Dev == b.dev.Index && !ns.IsLocal(after) {
		nh := nextHop(r, p.IPv4())
		if e := ns.neigh.get(b.dev.Index, nh); e != nil && e.usable() {
			// The neighbour's header is cached (neigh->hh): rewrite the
			// destination MAC, keep the source, and carry on bridging
			// in place (br_handle_frame_finish), without a cni0 transmit.
			p.SetMACs(p.SrcMAC(), e.mac)
			if rec := w.recording(); rec != nil {
				rec.neigh(e, false)
				rec.macs(p)
			}
			return true
		}
		w.noFast()
		// Not resolved yet: neigh->output resolves it with ARP on the
		// bridge and transmits the frame on the bridge device.
		p.bridgedDNAT = true
		p.keepSrcMAC = true
		if p.Trace != nil {
			ns.observe(w, p, b.dev, "br_netfilter", trace.Routed, "DNAT onto the bridge's network: bridged to "+addrString(nh)+" ("+r.String()+")")
		}
		ns.neighOutput(w, b.dev, nh, p)
		return false
	}
	p.SetMACs(p.SrcMAC(), b.dev.mac)
	if rec := w.recording(); rec != nil {
		rec.macs(p)
	}
	return true
}

// bridgeForward runs FORWARD and POSTROUTING for a bridged IPv4 frame
// (br_nf_forward_ip, br_nf_post_routing), with the bridge as in and out
// device as iptables sees them.
func (ns *Netns) bridgeForward(w *Walk, b *bridge, port *Device, p *Packet) bool {
	in := p.InDev
	p.InDev, p.OutDev = b.dev, b.dev
	if !ns.runHook(w, Forward, p, b.dev) {
		return false
	}
	if !ns.runHook(w, Postrouting, p, b.dev) {
		return false
	}
	p.InDev = in
	return true
}

func addrString(a [4]byte) string { return netip.AddrFrom4(a).String() }

func hex16(v uint16) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>12], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf]})
}

// DeleteDevice removes a device (`ip link del`): its addresses, routes,
// neighbour entries and bridge FDB entries go with it, and deleting one end
// of a veth pair deletes the other.
func (ns *Netns) DeleteDevice(name string) error {
	d := ns.Device(name)
	if d == nil {
		return &ConfigError{Op: "delete device", Object: name, Reason: "Cannot find device"}
	}
	if d.Kind == KindLoopback {
		return &ConfigError{Op: "delete device", Object: name, Reason: "Operation not supported"}
	}
	ns.removeDevice(d)
	if d.peer != nil {
		d.peer.ns.removeDevice(d.peer)
		d.peer.peer = nil
		d.peer = nil
	}
	return nil
}

func (ns *Netns) removeDevice(d *Device) {
	ns.e.cfgGen++
	d.up = false
	ns.devs = slices.DeleteFunc(ns.devs, func(x *Device) bool { return x == d })
	ns.byIndex[d.Index] = nil
	if d.vx != nil {
		ns.vxlans = slices.DeleteFunc(ns.vxlans, func(x *VXLAN) bool { return x == d.vx })
	}
	if ns.byName != nil {
		delete(ns.byName, d.Name)
	}
	var kept []Addr
	ns.addrGen++
	for _, a := range ns.addrs {
		if a.Dev == d {
			ns.local.del(a.Prefix.Addr().As4())
			if a.Prefix.Bits() < 31 {
				ns.bcast.del(netipx.PrefixLastIP(a.Prefix).As4())
			}
			continue
		}
		kept = append(kept, a)
	}
	ns.addrs = kept
	if d.vx != nil && d.vx.mesh != nil {
		d.vx.mesh.Detach(d)
	}
	ns.Routes.DeleteDev(d.Index)
	for k, e := range ns.neigh.m {
		if k.dev() == d.Index {
			ns.removeNeigh(e)
		}
	}
	if b := d.master; b != nil {
		b.br.ports = slices.DeleteFunc(b.br.ports, func(x *Device) bool { return x == d })
		for m, e := range b.br.fdb {
			if e.port == d {
				delete(b.br.fdb, m)
			}
		}
		d.master = nil
	}
	if d.br != nil {
		for _, p := range d.br.ports {
			p.master = nil
		}
	}
	if d.seg != nil {
		d.seg.ports = slices.DeleteFunc(d.seg.ports, func(x *Device) bool { return x == d })
		for m, x := range d.seg.fdb {
			if x == d {
				delete(d.seg.fdb, m)
			}
		}
		d.seg = nil
	}
	d.ns = nil
}
