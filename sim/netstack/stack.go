package netstack

import (
	"hash/fnv"
	"math/rand"
	randv2 "math/rand/v2"
	"net/netip"
	"runtime"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/route"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/dns"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// Stack is a gVisor TCP/IP stack that owns the sockets of one network
// namespace (a pod's, a node's or an outside host's). The namespace keeps
// doing what the kernel below the socket layer does (devices, netfilter,
// routing, ARP, VXLAN); the stack gets what local delivery hands up and
// sends what it writes into the namespace's output path, as the kernel's
// TCP and UDP do. Its addresses, routes and MTUs are the namespace's: one
// gVisor NIC per device (MTU read from the device), the device's addresses,
// and the namespace's routing table, copied again at every Dial and Listen.
type Stack struct {
	d     *driver
	ns    *datapath.Netns
	st    *stack.Stack
	tcp   stack.TransportProtocol
	nics  map[*datapath.Device]*link
	byDev []*link // in NIC creation order
	// byAddr maps each local address to the NIC of the device holding it,
	// for delivery (the weak host model: a packet to any local address is
	// accepted whichever device it came in on).
	byAddr map[[4]byte]*link

	// Trace, when set, is given to every packet the stack sends, so its
	// walks (retransmissions included) are recorded, with frames when
	// Trace.Capture is set.
	Trace *trace.Trace

	// resolv is the namespace's resolv.conf (SetResolvConf); rng draws
	// the resolver's query IDs.
	resolv *dns.ResolvConf
	rng    *randv2.Rand

	// ipv4 is the stack's IPv4 protocol (its Parse, for directTCP);
	// bcast holds the subnet broadcast addresses of the stack's addresses.
	ipv4  stack.NetworkProtocol
	bcast map[[4]byte]bool

	// acks is the delayed-ACK state of the stack's TCP connections
	// (delack.go).
	acks map[connKey]*ackState

	dirty  bool
	closed bool
}

// Attach returns the stack owning ns's sockets, creating it. A new stack's
// random source (ISNs, ephemeral ports, TCP secrets) is seeded from the
// world's seed and the namespace's name, so it does not depend on the order
// stacks are attached in. The namespace's minimal sockets stop receiving:
// a port nobody listens on in the stack is answered by the stack (RST, ICMP
// port unreachable).
func Attach(w *sim.World, ns *datapath.Netns) (*Stack, error) {
	if ns.Engine() != w.Engine {
		return nil, &Error{Op: "attach", Netns: ns.Name, Msg: "namespace belongs to another world"}
	}
	if s, ok := ns.SocketOwner().(*owner); ok {
		return s.s, nil
	}
	if ns.SocketOwner() != nil {
		return nil, &Error{Op: "attach", Netns: ns.Name, Msg: "namespace's sockets are owned by " + ns.SocketOwner().Name()}
	}
	d := driverFor(w.Engine)
	w.SetRunner(d)
	d.lock()
	defer d.unlock()
	h := fnv.New64a()
	h.Write([]byte(ns.Node + "/" + ns.Name))
	seed := w.Seed ^ h.Sum64()
	rng := randv2.NewChaCha8(seedBytes(seed))
	s := &Stack{d: d, ns: ns, nics: map[*datapath.Device]*link{}, byAddr: map[[4]byte]*link{},
		rng: randv2.New(randv2.NewPCG(seed, 0x646e73))}
	s.st = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{s.newIPv4},
		TransportProtocols: []stack.TransportProtocolFactory{newTCP, udp.NewProtocol},
		Clock:              &clock{d: d},
		RandSource:         rand.NewSource(int64(seed)),
		SecureRNG:          rng,
	})
	// Linux defaults the stack would otherwise differ from.
	sack := tcpip.TCPSACKEnabled(true)
	s.st.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	s.st.SetPortRange(32768, 60999) // net.ipv4.ip_local_port_range
	s.tcp = s.st.TransportProtocolInstance(tcp.ProtocolNumber)
	s.ipv4 = s.st.NetworkProtocolInstance(ipv4.ProtocolNumber)
	// The processors stay paused except inside a barrier.
	s.tcp.Pause()
	if err := s.syncLocked(); err != nil {
		s.tcp.Resume()
		s.st.Close()
		return nil, err
	}
	d.stacks = append(d.stacks, s)
	ns.SetSocketOwner(&owner{s: s})
	return s, nil
}

// newTCP is tcp.NewProtocol with one segment processor. gVisor starts one
// processor goroutine per GOMAXPROCS at creation and spreads endpoints
// over them by a hash of their addresses; with one, a stack handles its
// segments in the order they were delivered whatever GOMAXPROCS is, and a
// barrier has one goroutine to resume and park. GOMAXPROCS is set to one
// for the call (two stops of the world, at Attach only) and put back; as
// with any call to runtime.GOMAXPROCS, the runtime stops adjusting it to
// the container's CPU limit afterwards.
func newTCP(s *stack.Stack) stack.TransportProtocol {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	return tcp.NewProtocol(s)
}

// AttachPod is Attach for a pod's namespace.
func AttachPod(w *sim.World, p *sim.Pod) (*Stack, error) { return Attach(w, p.Netns) }

func seedBytes(seed uint64) [32]byte {
	var b [32]byte
	for i := range 4 {
		x := seed + uint64(i)*0x9e3779b97f4a7c15
		for j := range 8 {
			b[i*8+j] = byte(x >> (8 * j))
		}
	}
	return b
}

// Netns returns the namespace the stack owns the sockets of.
func (s *Stack) Netns() *datapath.Netns { return s.ns }

// barrier lets the TCP processors drain what was queued to them and parks
// them again. Called with d.mu held.
func (s *Stack) barrier() {
	s.tcp.Resume()
	s.tcp.Pause()
}

// syncLocked copies the namespace's devices, addresses and routes into the
// gVisor stack.
func (s *Stack) syncLocked() error {
	for _, dev := range s.ns.Devices() {
		if s.nics[dev] != nil {
			continue
		}
		l := &link{s: s, dev: dev, id: tcpip.NICID(len(s.byDev) + 1)}
		if err := s.st.CreateNICWithOptions(l.id, l, stack.NICOptions{Name: dev.Name, QDisc: (*qdisc)(l)}); err != nil {
			return &Error{Op: "attach", Netns: s.ns.Name, Msg: "create NIC " + dev.Name + ": " + err.String()}
		}
		s.nics[dev] = l
		s.byDev = append(s.byDev, l)
	}
	want := map[[4]byte]*link{}
	for _, a := range s.ns.Addrs() {
		if l := s.nics[a.Dev]; l != nil {
			want[a.Prefix.Addr().As4()] = l
		}
	}
	// The subnet broadcast addresses, as gVisor's IPv4 sees them: none
	// for a /31 or /32.
	if s.bcast == nil {
		s.bcast = map[[4]byte]bool{}
	}
	clear(s.bcast)
	for _, a := range s.ns.Addrs() {
		if s.nics[a.Dev] != nil && a.Prefix.Bits() < 31 {
			b := a.Prefix.Addr().As4()
			for i := a.Prefix.Bits(); i < 32; i++ {
				b[i/8] |= 0x80 >> (i % 8)
			}
			s.bcast[b] = true
		}
	}
	for a, l := range s.byAddr {
		if want[a] != l {
			s.st.RemoveAddress(l.id, tcpip.AddrFrom4(a))
			delete(s.byAddr, a)
		}
	}
	for _, a := range s.ns.Addrs() {
		l := s.nics[a.Dev]
		a4 := a.Prefix.Addr().As4()
		if l == nil || s.byAddr[a4] == l {
			continue
		}
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{
			Address: tcpip.AddrFrom4(a4), PrefixLen: a.Prefix.Bits()}}
		if err := s.st.AddProtocolAddress(l.id, pa, stack.AddressProperties{}); err != nil {
			return &Error{Op: "attach", Netns: s.ns.Name, Msg: "add address " + a.Prefix.String() + ": " + err.String()}
		}
		s.byAddr[a4] = l
	}
	// Routes: the namespace's table, most specific first, plus the local
	// addresses (the kernel's local table) so the stack sends traffic to
	// itself into the namespace, which loops it back through lo.
	var table []tcpip.Route
	host := tcpip.MaskFromBytes([]byte{255, 255, 255, 255})
	for _, a := range s.ns.Addrs() {
		if l := s.byAddr[a.Prefix.Addr().As4()]; l != nil {
			sn, _ := tcpip.NewSubnet(tcpip.AddrFrom4(a.Prefix.Addr().As4()), host)
			table = append(table, tcpip.Route{Destination: sn, NIC: l.id})
		}
	}
	if lo := s.nics[s.ns.Device("lo")]; lo != nil {
		sn, _ := tcpip.NewSubnet(tcpip.AddrFrom4([4]byte{127, 0, 0, 0}), tcpip.MaskFromBytes([]byte{255, 0, 0, 0}))
		table = append(table, tcpip.Route{Destination: sn, NIC: lo.id})
	}
	for _, r := range s.ns.Routes.List() {
		if r.Type != route.Unicast {
			continue
		}
		var l *link
		for dev, x := range s.nics {
			if dev.Index == r.Dev {
				l = x
			}
		}
		if l == nil {
			continue
		}
		sn, err := tcpip.NewSubnet(tcpip.AddrFrom4(r.Dst.Masked().Addr().As4()), prefixMask(r.Dst))
		if err != nil {
			continue
		}
		rt := tcpip.Route{Destination: sn, NIC: l.id, MTU: 0}
		if r.Gw.IsValid() {
			rt.Gateway = tcpip.AddrFrom4(r.Gw.As4())
		}
		table = append(table, rt)
	}
	s.st.SetRouteTable(table)
	return nil
}

func prefixMask(p netip.Prefix) tcpip.AddressMask {
	var m [4]byte
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return tcpip.MaskFromBytes(m[:])
}

// owner is the namespace's datapath.SocketOwner: local delivery hands it
// the stack's packets.
type owner struct{ s *Stack }

// Name implements datapath.SocketOwner.
func (o *owner) Name() string { return "netstack" }

// Deliver implements datapath.SocketOwner: the packet is copied into a
// gVisor packet buffer and handed to the NIC of the device that holds its
// destination address (or that it came in on), on the event loop (most TCP
// segments straight to gVisor's TCP: directTCP).
func (o *owner) Deliver(w *datapath.Walk, dev *datapath.Device, p *datapath.Packet) bool {
	s := o.s
	if s.closed {
		return false
	}
	ip := p.IPv4()
	l := s.byAddr[[4]byte(ip[16:20])]
	local := l != nil
	if l == nil {
		l = s.nics[dev]
	}
	if l == nil || l.disp == nil {
		return false
	}
	s.ackInput(ip)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ip)})
	// Checksums the simulation computed and nothing corrupted since are
	// not verified again, as Linux trusts them across a veth
	// (CHECKSUM_UNNECESSARY) and a NIC with receive offload does across a
	// wire; gVisor verifies the rest (a Corrupt probe's bytes, a frame
	// injected on a device).
	pkt.RXChecksumValidated = p.CsumValid
	if local && l.tdisp != nil && s.directTCP(ip) {
		s.deliverTCP(l, pkt)
	} else {
		l.disp.DeliverNetworkPacket(header.IPv4ProtocolNumber, pkt)
	}
	pkt.DecRef()
	p.Release()
	s.dirty = true
	return true
}

// directTCP reports whether ip is a TCP segment the stack's IP layer would
// only pass up to TCP: a valid IPv4 header without options and with a
// correct checksum, not a fragment, to an address of the stack's (not a
// broadcast one), from an address that is not a broadcast, multicast or
// loopback one. The namespace already did what the kernel's IP input does
// before local delivery (routing, netfilter, the local-address check); the
// gVisor stack's IP layer would only repeat it (its own iptables and
// nftables are empty, it forwards nothing, no raw socket is open), so such
// a segment goes straight to gVisor's TCP demultiplexer (deliverTCP).
// Everything else takes gVisor's IP input.
func (s *Stack) directTCP(ip header.IPv4) bool {
	if len(ip) < header.IPv4MinimumSize || ip[0] != 0x45 || !ip.IsValid(len(ip)) ||
		ip.Protocol() != uint8(header.TCPProtocolNumber) || ip.More() || ip.FragmentOffset() != 0 {
		return false
	}
	src := [4]byte(ip[12:16])
	if src[0] == 127 || src[0]&0xf0 == 0xe0 || src == [4]byte{255, 255, 255, 255} || s.bcast[src] {
		return false
	}
	if s.bcast[[4]byte(ip[16:20])] {
		return false
	}
	return ip.IsChecksumValid()
}

// deliverTCP hands a segment directTCP accepted to gVisor's transport
// layer, parsed as its IP input would have it (network and TCP headers
// consumed, the data capped to the IP total length, the NIC it arrived on).
// A segment no endpoint wants is answered by gVisor's TCP (a RST), as from
// its IP input.
func (s *Stack) deliverTCP(l *link, pkt *stack.PacketBuffer) {
	if _, _, ok := s.ipv4.Parse(pkt); !ok {
		return
	}
	pkt.NICID, pkt.InputNICID = l.id, l.id
	s.st.ParsePacketBufferTransport(header.TCPProtocolNumber, pkt)
	l.tdisp.DeliverTransportPacket(header.TCPProtocolNumber, pkt)
}

// send hands p to the namespace's output path, traced when the stack is.
func (s *Stack) send(p *datapath.Packet) {
	if s.Trace != nil {
		p.Trace, p.ID = s.Trace, s.Trace.NewPacketID()
	}
	s.ns.SendPacket(p)
}

// link is the gVisor link endpoint of one device: IP packets without a link
// header (the namespace's neighbour layer adds Ethernet), no offloads (the
// stack computes and verifies every checksum), the device's MTU.
type link struct {
	s    *Stack
	dev  *datapath.Device
	id   tcpip.NICID
	disp stack.NetworkDispatcher
	// tdisp is the NIC's transport dispatcher (the NIC gVisor attaches
	// is both), for the segments that skip the IP layer (directTCP).
	tdisp stack.TransportDispatcher
}

var _ stack.LinkEndpoint = (*link)(nil)

// MTU implements stack.LinkEndpoint: the device's current MTU.
func (l *link) MTU() uint32 { return uint32(l.dev.MTU()) }

// SetMTU implements stack.LinkEndpoint; the MTU belongs to the device.
func (l *link) SetMTU(uint32) {}

// MaxHeaderLength implements stack.LinkEndpoint.
func (l *link) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint.
func (l *link) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint.
func (l *link) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint.
func (l *link) Capabilities() stack.LinkEndpointCapabilities { return 0 }

// Attach implements stack.LinkEndpoint.
func (l *link) Attach(d stack.NetworkDispatcher) {
	l.disp = d
	l.tdisp, _ = d.(stack.TransportDispatcher)
}

// IsAttached implements stack.LinkEndpoint.
func (l *link) IsAttached() bool { return l.disp != nil }

// Wait implements stack.LinkEndpoint.
func (l *link) Wait() {}

// ARPHardwareType implements stack.LinkEndpoint.
func (l *link) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint.
func (l *link) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint.
func (l *link) ParseHeader(*stack.PacketBuffer) bool { return true }

// Close implements stack.LinkEndpoint.
func (l *link) Close() {}

// SetOnCloseAction implements stack.LinkEndpoint.
func (l *link) SetOnCloseAction(func()) {}

// WritePackets implements stack.LinkEndpoint: each packet enters the
// namespace's output path (OUTPUT, routing, POSTROUTING, neighbour) as a
// locally generated packet, queued at the current virtual time in the order
// the stack wrote them.
func (l *link) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if err := l.write(pkt); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// write copies one packet the stack wrote into a frame and hands it to
// the delayed-ACK model and the namespace's output path.
func (l *link) write(pkt *stack.PacketBuffer) tcpip.Error {
	s := l.s
	p := s.ns.Engine().Pool.Get()
	if !copyPacket(p, pkt) {
		p.Release()
		return &tcpip.ErrMessageTooLong{}
	}
	if s.ackOutput(p) {
		s.send(p)
	}
	return nil
}

// qdisc is a link's queueing discipline: none, as gVisor's default, but
// each packet goes to the link as it is, where the default wraps it in a
// list of one (an allocation per packet sent).
type qdisc link

var _ stack.QueueingDiscipline = (*qdisc)(nil)

// WritePacket implements stack.QueueingDiscipline.
func (q *qdisc) WritePacket(pkt *stack.PacketBuffer) tcpip.Error { return (*link)(q).write(pkt) }

// Close implements stack.QueueingDiscipline.
func (q *qdisc) Close() {}

// copyPacket copies the IP packet pkt holds into p's frame, behind a
// zeroed Ethernet header, straight from gVisor's views; false when it does
// not fit.
func copyPacket(p *datapath.Packet, pkt *stack.PacketBuffer) bool {
	size := pkt.Size()
	if size+datapath.EthHdrLen > datapath.MaxFrame || !p.SetIPPacket(nil) {
		return false
	}
	// The frame's buffer runs on behind its (empty) IP packet: fill it,
	// then set the packet to those bytes in place.
	dst := p.IPv4()[:size]
	vl, off := pkt.AsViewList()
	n := 0
	for v := vl.Front(); v != nil && n < size; v = v.Next() {
		b := v.AsSlice()
		if off >= len(b) {
			off -= len(b)
			continue
		}
		n += copy(dst[n:], b[off:])
		off = 0
	}
	return n == size && p.SetIPPacket(dst)
}
