package datapath

import (
	"hash/crc32"
	"net/netip"
	"syscall"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// IP protocol numbers.
const (
	ProtoICMP = 1
	ProtoTCP  = 6
	ProtoUDP  = 17
	ProtoSCTP = 132
)

// UDPSocket is a bound UDP port in a namespace: it counts what it receives
// and, in echo mode, sends each datagram back to its sender.
type UDPSocket struct {
	Port     uint16
	Echo     bool
	Received int
	Bytes    int
	// LastPayload holds a copy of the last datagram when KeepPayload is set.
	KeepPayload bool
	LastPayload []byte
}

// TCPListener is a minimal listening TCP socket: it answers SYN with SYN-ACK
// and data or FIN with ACK, enough to show handshakes. It keeps no
// connection state: its sequence numbers follow the peer's acknowledgements.
type TCPListener struct {
	Port     uint16
	SYNs     int
	Segments int
	Bytes    int
	FINs     int
	RSTs     int
}

// SCTPListener is a listening SCTP endpoint: it counts the packets and
// INIT chunks it receives. Associations are not modelled: it sends no
// INIT ACK.
type SCTPListener struct {
	Port           uint16
	Packets, Inits int
}

type sockets struct {
	udp map[uint16]*UDPSocket
	// tcp holds the TCP listeners once a namespace has two or more; the
	// only one is tcpOne until then (a pod listens on its one port).
	tcp    map[uint16]*TCPListener
	tcpOne *TCPListener
	sctp   map[uint16]*SCTPListener
	conns  map[connKey]*TCPConn
	// udpHit and tcpHit remember the last socket a lookup found, under
	// its port (the same flow's packets find the same socket), so most
	// lookups need no map access; binding or closing a port clears them.
	udpHit     *UDPSocket
	udpHitPort uint16
	tcpHitPort uint16
	tcpHit     *TCPListener
}

// udpSocket returns the UDP socket bound to port, or nil.
func (s *sockets) udpSocket(port uint16) *UDPSocket {
	if s.udpHit != nil && s.udpHitPort == port {
		return s.udpHit
	}
	u := s.udp[port]
	if u != nil {
		s.udpHit, s.udpHitPort = u, port
	}
	return u
}

// tcpListener returns the TCP listener on port, or nil.
func (s *sockets) tcpListener(port uint16) *TCPListener {
	if s.tcpHit != nil && s.tcpHitPort == port {
		return s.tcpHit
	}
	l := s.tcpBound(port)
	if l != nil {
		s.tcpHit, s.tcpHitPort = l, port
	}
	return l
}

// tcpBound is the TCP listener on port, or nil, without the last hit.
func (s *sockets) tcpBound(port uint16) *TCPListener {
	if l := s.tcpOne; l != nil {
		if l.Port == port {
			return l
		}
		return nil
	}
	return s.tcp[port]
}

// addTCP binds l (its port is free).
func (s *sockets) addTCP(l *TCPListener) {
	switch {
	case s.tcp != nil:
		s.tcp[l.Port] = l
	case s.tcpOne == nil:
		s.tcpOne = l
	default:
		s.tcp = map[uint16]*TCPListener{s.tcpOne.Port: s.tcpOne, l.Port: l}
		s.tcpOne = nil
	}
	s.tcpHit = nil
}

// delTCP unbinds port.
func (s *sockets) delTCP(port uint16) {
	if s.tcpOne != nil && s.tcpOne.Port == port {
		s.tcpOne = nil
	}
	delete(s.tcp, port)
	s.tcpHit = nil
}

// ErrAddrInUse is returned when a port is already bound in the namespace:
// containers of one pod share a namespace and cannot both bind a port.
type ErrAddrInUse struct {
	Netns string
	Proto string
	Port  uint16
}

// Error implements the error interface.
func (e *ErrAddrInUse) Error() string {
	return "bind " + e.Proto + " port " + itoa(int(e.Port)) + " in " + e.Netns + ": address already in use"
}

// ListenUDP binds a UDP port (all addresses).
func (ns *Netns) ListenUDP(port uint16, echo bool) (*UDPSocket, error) {
	if _, ok := ns.sockets.udp[port]; ok {
		return nil, &ErrAddrInUse{Netns: ns.Name, Proto: "udp", Port: port}
	}
	s := &UDPSocket{Port: port, Echo: echo}
	if ns.sockets.udp == nil {
		ns.sockets.udp = map[uint16]*UDPSocket{}
	}
	ns.sockets.udp[port] = s
	ns.sockets.udpHit = nil
	return s, nil
}

// ListenTCP binds and listens on a TCP port (all addresses).
func (ns *Netns) ListenTCP(port uint16) (*TCPListener, error) {
	if ns.sockets.tcpBound(port) != nil {
		return nil, &ErrAddrInUse{Netns: ns.Name, Proto: "tcp", Port: port}
	}
	var l *TCPListener
	if f := &ns.fixed; !f.tcpUsed {
		// A pod's one listener: room made with the namespace.
		f.tcpUsed = true
		l = &f.tcp
		*l = TCPListener{Port: port}
	} else {
		l = &TCPListener{Port: port}
	}
	ns.sockets.addTCP(l)
	return l, nil
}

// ListenSCTP binds and listens on an SCTP port (all addresses).
func (ns *Netns) ListenSCTP(port uint16) (*SCTPListener, error) {
	if ns.sockets.sctp == nil {
		ns.sockets.sctp = map[uint16]*SCTPListener{}
	}
	if _, ok := ns.sockets.sctp[port]; ok {
		return nil, &ErrAddrInUse{Netns: ns.Name, Proto: "sctp", Port: port}
	}
	l := &SCTPListener{Port: port}
	ns.sockets.sctp[port] = l
	return l, nil
}

// CloseSCTP unbinds an SCTP port.
func (ns *Netns) CloseSCTP(port uint16) { delete(ns.sockets.sctp, port) }

// SCTPListener returns the SCTP listener bound to port, or nil.
func (ns *Netns) SCTPListener(port uint16) *SCTPListener { return ns.sockets.sctp[port] }

// CloseUDP and CloseTCP unbind a port.
func (ns *Netns) CloseUDP(port uint16) {
	delete(ns.sockets.udp, port)
	ns.sockets.udpHit = nil
}

// CloseTCP unbinds a TCP port.
func (ns *Netns) CloseTCP(port uint16) {
	ns.sockets.delTCP(port)
}

// Send queues a locally generated IPv4 packet (ip without Ethernet header)
// for output from this namespace at the current virtual time. It returns
// the packet so the caller can set Trace before the engine runs.
func (ns *Netns) Send(ip []byte) (*Packet, error) {
	p := ns.e.Pool.Get()
	if !p.SetIPPacket(ip) {
		p.Release()
		return nil, &FrameError{Layer: "ipv4", Reason: "packet of " + itoa(len(ip)) + " bytes exceeds the buffer"}
	}
	if _, err := ValidateIPv4(ip); err != nil {
		p.Release()
		return nil, err
	}
	if err := checkL4(ip); err != nil {
		p.Release()
		return nil, err
	}
	p.CsumValid = true
	ns.e.ScheduleOutput(0, ns, p)
	return p, nil
}

// checkL4 verifies the transport checksum of a packet handed to Send: a
// socket cannot send a wrong one (the kernel computes it), so one that is
// wrong is a caller error. Use Device.Inject to put such bytes on a wire.
func checkL4(ip header.IPv4) error {
	l4 := ip[ip.HeaderLength():ip.TotalLength()]
	switch ip.Protocol() {
	case ProtoTCP:
		if len(l4) >= header.TCPMinimumSize && l4Checksum(ip, l4, header.TCPProtocolNumber) != 0xffff {
			return &FrameError{Layer: "tcp", Reason: "bad checksum (a socket cannot send this; inject the frame on a device instead)"}
		}
	case ProtoUDP:
		if len(l4) >= header.UDPMinimumSize && header.UDP(l4).Checksum() != 0 && l4Checksum(ip, l4, header.UDPProtocolNumber) != 0xffff {
			return &FrameError{Layer: "udp", Reason: "bad checksum (a socket cannot send this; inject the frame on a device instead)"}
		}
	case ProtoSCTP:
		if len(l4) >= 12 && sctpCRC(l4) != uint32(l4[8])|uint32(l4[9])<<8|uint32(l4[10])<<16|uint32(l4[11])<<24 {
			return &FrameError{Layer: "sctp", Reason: "bad checksum (a socket cannot send this; inject the frame on a device instead)"}
		}
	case ProtoICMP:
		if len(l4) >= header.ICMPv4MinimumSize && checksum.Checksum(l4, 0) != 0xffff {
			return &FrameError{Layer: "icmp", Reason: "bad checksum (a socket cannot send this; inject the frame on a device instead)"}
		}
	}
	return nil
}

// SendPacket queues p, whose frame holds a zeroed Ethernet header and an
// IPv4 packet with correct checksums, for output from this namespace. It
// is the allocation-free form of Send for benchmarks: only the IPv4 header
// is checked (when the packet leaves), and the transport checksum is
// trusted as a socket's would be.
func (ns *Netns) SendPacket(p *Packet) {
	p.CsumValid = true
	ns.e.ScheduleOutput(0, ns, p)
}

// SocketOwner is a transport stack that owns a namespace's sockets in place
// of the minimal ones here (a full TCP/IP stack such as gVisor's). The
// datapath still does everything up to local delivery (devices, netfilter,
// routing, VXLAN decapsulation); Deliver then gets every TCP and UDP packet
// and every ICMP message except echo requests, which the datapath answers.
// Deliver returns true when it took ownership of p (it must release it);
// false lets the minimal sockets handle it.
type SocketOwner interface {
	Deliver(w *Walk, dev *Device, p *Packet) bool
	// Name names the owner in traces ("netstack").
	Name() string
}

// SetSocketOwner hands the namespace's sockets to o (nil: back to the
// minimal sockets).
func (ns *Netns) SetSocketOwner(o SocketOwner) { ns.owner = o }

// SocketOwner returns the namespace's socket owner, or nil.
func (ns *Netns) SocketOwner() SocketOwner { return ns.owner }

// deliver is ip_local_deliver: hand the packet to ICMP, UDP or TCP.
func (ns *Netns) deliver(w *Walk, dev *Device, p *Packet) {
	ip := p.IPv4()
	if ip.FragmentOffset() != 0 || ip.Flags()&header.IPv4FlagMoreFragments != 0 {
		ns.drop(w, p, dev, "ip", ReasonMTU, "fragment reassembly is not modelled")
		return
	}
	if ns.owner != nil && ns.ownerTakes(ip) {
		if p.Trace != nil {
			ns.observe(w, p, dev, "socket", trace.Delivered, ns.owner.Name())
		}
		if ns.owner.Deliver(w, dev, p) {
			return
		}
		ip = p.IPv4()
	}
	switch ip.Protocol() {
	case ProtoICMP:
		ns.icmpReceive(w, dev, p)
	case ProtoUDP:
		ns.udpReceive(w, dev, p, ip)
	case ProtoTCP:
		ns.tcpReceive(w, dev, p, ip)
	case ProtoSCTP:
		ns.sctpReceive(w, dev, p)
	default:
		ns.icmpError(w, p, header.ICMPv4DstUnreachable, header.ICMPv4ProtoUnreachable, 0)
		ns.drop(w, p, dev, "ip", ReasonUnknownProtocol, "protocol "+itoa(int(ip.Protocol()))+" (ICMP protocol unreachable sent)")
	}
}

// ownerTakes reports whether the socket owner gets ip: TCP, UDP except to
// a VXLAN port, ICMP except echo requests.
func (ns *Netns) ownerTakes(ip header.IPv4) bool {
	l4 := ip[ip.HeaderLength():]
	switch ip.Protocol() {
	case ProtoTCP:
		return true
	case ProtoUDP:
		return len(l4) < header.UDPMinimumSize || ns.vxlanFor(header.UDP(l4).DestinationPort()) == nil
	case ProtoICMP:
		return len(l4) > 0 && header.ICMPv4Type(l4[0]) != header.ICMPv4Echo
	}
	return false
}

func (ns *Netns) nextID() uint16 {
	ns.ipID++
	return ns.ipID
}

// writeIPv4 writes a 20-byte IPv4 header with its checksum.
func writeIPv4(b []byte, tos uint8, totalLen int, id uint16, df bool, ttl, proto uint8, src, dst [4]byte) {
	b[0], b[1] = 0x45, tos
	b[2], b[3] = byte(totalLen>>8), byte(totalLen)
	b[4], b[5] = byte(id>>8), byte(id)
	b[6], b[7] = 0, 0
	if df {
		b[6] = 0x40
	}
	b[8], b[9] = ttl, proto
	b[10], b[11] = 0, 0
	copy(b[12:16], src[:])
	copy(b[16:20], dst[:])
	c := ^csum(b[:20], 0)
	b[10], b[11] = byte(c>>8), byte(c)
}

// newLocalPacket returns a pooled packet with room for an IPv4 packet of n
// bytes (after a zeroed Ethernet header), traced as a child of parent.
func (ns *Netns) newLocalPacket(n int, parent *Packet) *Packet {
	r := ns.e.Pool.Get()
	r.head = Headroom
	r.tail = Headroom + EthHdrLen + n
	clear(r.buf[r.head : r.head+EthHdrLen])
	r.buf[r.head+12], r.buf[r.head+13] = 0x08, 0x00
	if parent != nil && parent.Trace != nil {
		r.Trace, r.ID, r.Parent = parent.Trace, parent.Trace.NewPacketID(), parent.ID
	}
	r.CsumValid = true
	return r
}

// icmpSourceFor picks the source of an ICMP error about orig: the original
// destination when it is ours, else the preferred source toward the
// original sender (icmp_send with icmp_errors_use_inbound_ifaddr=0).
func (ns *Netns) icmpSourceFor(orig header.IPv4) [4]byte {
	dst := [4]byte(orig[16:20])
	if ns.IsLocal(dst) {
		return dst
	}
	return ns.sourceFor([4]byte(orig[12:16]))
}

// sourceFor is the source address the namespace uses to reach dst
// (RouteGet's choice), or 0.0.0.0 when there is none.
func (ns *Netns) sourceFor(dst [4]byte) [4]byte {
	r, err := ns.RouteGet(netip.AddrFrom4(dst))
	if err != nil || !r.Src.IsValid() {
		return [4]byte{}
	}
	return r.Src.As4()
}

// icmpError sends an ICMP error about orig (icmp_send): never about an ICMP
// error, a broadcast, or a non-first fragment; quoting as much of the
// original as fits in 576 bytes.
func (ns *Netns) icmpError(w *Walk, orig *Packet, typ header.ICMPv4Type, code header.ICMPv4Code, mtu uint32) {
	ip := orig.IPv4()
	src, dst := [4]byte(ip[12:16]), [4]byte(ip[16:20])
	if ip.FragmentOffset() != 0 || src == ([4]byte{}) || src[0] >= 224 || dst[0] >= 224 || ns.bcast.has(dst) || ns.bcast.has(src) {
		return
	}
	if ip.Protocol() == ProtoICMP {
		l4 := orig.L4()
		if len(l4) < 1 || !isICMPQuery(header.ICMPv4Type(l4[0])) {
			return
		}
	}
	saddr := ns.icmpSourceFor(ip)
	quote := len(ip)
	if max := 576 - header.IPv4MinimumSize - header.ICMPv4MinimumSize; quote > max {
		quote = max
	}
	n := header.IPv4MinimumSize + header.ICMPv4MinimumSize + quote
	r := ns.newLocalPacket(n, orig)
	b := r.buf[r.head+EthHdrLen : r.tail]
	writeIPv4(b, ip[1]&0x1e|0xc0, n, ns.nextID(), false, ns.Sysctl.DefaultTTL, ProtoICMP, saddr, src)
	ic := header.ICMPv4(b[20:])
	copy(ic[header.ICMPv4MinimumSize:], ip[:quote])
	ic.SetType(typ)
	ic.SetCode(code)
	ic[4], ic[5], ic[6], ic[7] = 0, 0, 0, 0
	if mtu != 0 {
		ic.SetMTU(uint16(mtu))
	}
	ic.SetChecksum(0)
	ic.SetChecksum(^checksum.Checksum(ic, 0))
	if r.Trace != nil {
		ns.observe(w, r, orig.InDev, "icmp", trace.Replied, icmpName(typ, code)+" to "+addrString(src))
	}
	ns.output(w, r)
}

func isICMPQuery(t header.ICMPv4Type) bool {
	switch t {
	case header.ICMPv4Echo, header.ICMPv4EchoReply, header.ICMPv4Timestamp, header.ICMPv4TimestampReply,
		header.ICMPv4InfoRequest, header.ICMPv4InfoReply:
		return true
	}
	return false
}

func (ns *Netns) icmpReceive(w *Walk, dev *Device, p *Packet) {
	ip := p.IPv4()
	ic := header.ICMPv4(p.L4())
	if len(ic) < header.ICMPv4MinimumSize {
		ns.drop(w, p, dev, "icmp", ReasonMalformed, (&FrameError{Layer: "icmp", Reason: "shorter than 8 bytes"}).Error())
		return
	}
	if !p.CsumValid && checksum.Checksum(ic, 0) != 0xffff {
		ns.drop(w, p, dev, "icmp", ReasonMalformed, (&FrameError{Layer: "icmp", Reason: "bad checksum"}).Error())
		return
	}
	dst := [4]byte(ip[16:20])
	if ic.Type() != header.ICMPv4Echo {
		if p.Trace != nil {
			ns.observe(w, p, dev, "icmp", trace.Delivered, icmpName(ic.Type(), ic.Code()))
		}
		p.Release()
		return
	}
	if (ns.bcast.has(dst) || dst == [4]byte{255, 255, 255, 255}) && ns.Sysctl.EchoIgnoreBroadcasts {
		if p.Trace != nil {
			ns.observe(w, p, dev, "icmp", trace.Delivered, "echo request to broadcast ignored (icmp_echo_ignore_broadcasts=1)")
		}
		p.Release()
		return
	}
	// icmp_reply: same payload, addresses swapped, type 0, our TTL, the
	// request's TOS, DF clear.
	n := len(ip)
	r := ns.newLocalPacket(n, p)
	b := r.buf[r.head+EthHdrLen : r.tail]
	copy(b[20:], ic)
	writeIPv4(b, ip[1], n, ns.nextID(), false, ns.Sysctl.DefaultTTL, ProtoICMP, dst, [4]byte(ip[12:16]))
	ric := header.ICMPv4(b[20:])
	ric.SetType(header.ICMPv4EchoReply)
	ric.SetChecksum(0)
	ric.SetChecksum(^checksum.Checksum(ric, 0))
	if p.Trace != nil {
		ns.observe(w, p, dev, "icmp", trace.Delivered, "echo request")
		ns.observe(w, r, dev, "icmp", trace.Replied, "echo reply")
	}
	p.Release()
	ns.output(w, r)
}

// l4Checksum verifies a TCP or UDP checksum with the IPv4 pseudo-header.
func l4Checksum(ip header.IPv4, l4 []byte, proto tcpip.TransportProtocolNumber) uint16 {
	x := pseudoSum([4]byte(ip[12:16]), [4]byte(ip[16:20]), uint8(proto), uint16(len(l4)))
	if len(l4) <= 128 {
		return csum(l4, x) // a bare segment: cheaper than the general routine
	}
	return checksum.Checksum(l4, x)
}

func (ns *Netns) udpReceive(w *Walk, dev *Device, p *Packet, ip header.IPv4) {
	l4 := ip[ip.HeaderLength():]
	if len(l4) < header.UDPMinimumSize || int(header.UDP(l4).Length()) != len(l4) {
		ns.drop(w, p, dev, "udp", ReasonMalformed, (&FrameError{Layer: "udp", Reason: "length field does not match the IP payload"}).Error())
		return
	}
	u := header.UDP(l4)
	if !p.CsumValid && u.Checksum() != 0 && l4Checksum(ip, l4, header.UDPProtocolNumber) != 0xffff {
		ns.drop(w, p, dev, "udp", ReasonMalformed, (&FrameError{Layer: "udp", Reason: "bad checksum"}).Error())
		return
	}
	if v := ns.vxlanFor(u.DestinationPort()); v != nil {
		v.decap(w, dev, p)
		return
	}
	s := ns.sockets.udpSocket(u.DestinationPort())
	if s == nil {
		ns.icmpError(w, p, header.ICMPv4DstUnreachable, header.ICMPv4PortUnreachable, 0)
		ns.drop(w, p, dev, "udp", ReasonPortUnreachable, "nothing listens on udp port "+itoa(int(u.DestinationPort()))+" (ICMP port unreachable sent)")
		return
	}
	s.Received++
	payload := l4[header.UDPMinimumSize:]
	s.Bytes += len(payload)
	if s.KeepPayload {
		s.LastPayload = append(s.LastPayload[:0], payload...)
	}
	if p.Trace != nil {
		ns.observe(w, p, dev, "udp", trace.Delivered, "socket udp:"+itoa(int(s.Port)))
	}
	if !s.Echo {
		p.Release()
		return
	}
	n := len(ip)
	r := ns.newLocalPacket(n, p)
	b := r.buf[r.head+EthHdrLen : r.tail]
	copy(b[20:], l4)
	writeIPv4(b, 0, n, ns.nextID(), true, ns.Sysctl.DefaultTTL, ProtoUDP, [4]byte(ip[16:20]), [4]byte(ip[12:16]))
	ru := header.UDP(b[20:])
	ru.SetSourcePort(u.DestinationPort())
	ru.SetDestinationPort(u.SourcePort())
	ru.SetChecksum(0)
	ru.SetChecksum(^l4Checksum(header.IPv4(b), b[20:], header.UDPProtocolNumber))
	if r.Trace != nil {
		ns.observe(w, r, dev, "udp", trace.Replied, "echo")
	}
	p.Release()
	ns.output(w, r)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpCRC is the CRC32c of an SCTP packet with its checksum field taken as
// zero.
func sctpCRC(l4 []byte) uint32 {
	c := crc32.Update(0, castagnoli, l4[:8])
	c = crc32.Update(c, castagnoli, []byte{0, 0, 0, 0})
	return crc32.Update(c, castagnoli, l4[12:])
}

// sctpReceive is sctp_rcv, reduced to what a walk shows: the CRC32c is
// checked, a listener counts the packet; with none, the packet is dropped
// (Linux answers an out-of-the-blue INIT with ABORT, which is not
// modelled).
func (ns *Netns) sctpReceive(w *Walk, dev *Device, p *Packet) {
	l4 := p.L4()
	if len(l4) < 12 {
		ns.drop(w, p, dev, "sctp", ReasonMalformed, (&FrameError{Layer: "sctp", Reason: "shorter than the 12-byte common header"}).Error())
		return
	}
	if !p.CsumValid && sctpCRC(l4) != uint32(l4[8])|uint32(l4[9])<<8|uint32(l4[10])<<16|uint32(l4[11])<<24 {
		ns.drop(w, p, dev, "sctp", ReasonMalformed, (&FrameError{Layer: "sctp", Reason: "bad CRC32c checksum"}).Error())
		return
	}
	port := uint16(l4[2])<<8 | uint16(l4[3])
	l := ns.sockets.sctp[port]
	if l == nil {
		ns.drop(w, p, dev, "sctp", ReasonPortUnreachable, "nothing listens on sctp port "+itoa(int(port))+" (the ABORT Linux sends is not modelled)")
		return
	}
	l.Packets++
	what := "packet"
	if len(l4) >= 16 && l4[12] == 1 {
		l.Inits++
		what = "INIT"
	}
	if p.Trace != nil {
		ns.observe(w, p, dev, "sctp", trace.Delivered, "SCTP "+what+" to listener sctp:"+itoa(int(port)))
	}
	p.Release()
}

func (ns *Netns) tcpReceive(w *Walk, dev *Device, p *Packet, ip header.IPv4) {
	l4 := ip[ip.HeaderLength():]
	if len(l4) < header.TCPMinimumSize || int(header.TCP(l4).DataOffset()) < header.TCPMinimumSize || int(header.TCP(l4).DataOffset()) > len(l4) {
		ns.drop(w, p, dev, "tcp", ReasonMalformed, (&FrameError{Layer: "tcp", Reason: "header shorter than its data offset"}).Error())
		return
	}
	if !p.CsumValid && l4Checksum(ip, l4, header.TCPProtocolNumber) != 0xffff {
		ns.drop(w, p, dev, "tcp", ReasonMalformed, (&FrameError{Layer: "tcp", Reason: "bad checksum"}).Error())
		return
	}
	t := header.TCP(l4)
	flags := t.Flags()
	dlen := uint32(len(l4) - int(t.DataOffset()))
	if ns.conn(w, dev, p, t, dlen) {
		return
	}
	l := ns.sockets.tcpListener(t.DestinationPort())
	if l == nil {
		if !ns.sendReset(w, p, dev, "RST: nothing listens on tcp port "+itoa(int(t.DestinationPort()))) {
			ns.drop(w, p, dev, "tcp", ReasonTCPReset, "RST to a closed port")
			return
		}
		ns.drop(w, p, dev, "tcp", ReasonTCPReset, "nothing listens on tcp port "+itoa(int(t.DestinationPort()))+" (RST sent)")
		return
	}
	switch {
	case flags&header.TCPFlagRst != 0:
		l.RSTs++
		if p.Trace != nil {
			ns.observe(w, p, dev, "tcp", trace.Delivered, "RST")
		}
		p.Release()
	case flags&header.TCPFlagSyn != 0 && flags&header.TCPFlagAck == 0:
		l.SYNs++
		if p.Trace != nil {
			ns.observe(w, p, dev, "tcp", trace.Delivered, "SYN to listener tcp:"+itoa(int(l.Port)))
		}
		isn := ns.e.rng.Uint32()
		mss := ns.advMSS([4]byte(p.IPv4()[12:16]))
		ns.tcpSend(w, p, dev, isn, t.SequenceNumber()+1, header.TCPFlagSyn|header.TCPFlagAck, 64240, mss, "SYN-ACK")
		p.Release()
	default:
		l.Segments++
		l.Bytes += int(dlen)
		ack := t.SequenceNumber() + dlen
		rf := header.TCPFlagAck
		if flags&header.TCPFlagFin != 0 {
			l.FINs++
			ack++
			rf |= header.TCPFlagFin
		}
		if p.Trace != nil {
			ns.observe(w, p, dev, "tcp", trace.Delivered, "segment to tcp:"+itoa(int(l.Port))+", "+itoa(int(dlen))+" bytes")
		}
		if dlen > 0 || flags&header.TCPFlagFin != 0 {
			ns.tcpSend(w, p, dev, t.AckNumber(), ack, rf, 64240, 0, "ACK")
		}
		p.Release()
	}
}

// advMSS is the MSS the namespace advertises to peer in a SYN or SYN-ACK:
// the MTU of the device the route to peer leaves by, minus 40 bytes of
// IPv4 and TCP header (dst_metric_advmss), at most 65495.
func (ns *Netns) advMSS(peer [4]byte) uint16 {
	mtu := 1500
	if ns.IsLocal(peer) {
		mtu = ns.lo.mtu
	} else if r, ok := ns.Routes.Lookup(peer); ok {
		if d := ns.devByIndex(r.Dev); d != nil {
			mtu = d.mtu
		}
	}
	return uint16(min(mtu-40, 65495))
}

// tcpSend answers the TCP segment in orig with a segment carrying no data:
// addresses and ports swapped, DF set, TTL from the sysctl. mss > 0 adds an
// MSS option (SYN-ACK).
func (ns *Netns) tcpSend(w *Walk, orig *Packet, dev *Device, seq, ack uint32, flags header.TCPFlags, win uint16, mss uint16, what string) {
	ip := orig.IPv4()
	t := header.TCP(orig.L4())
	hl := header.TCPMinimumSize
	if mss > 0 {
		hl += 4
	}
	n := header.IPv4MinimumSize + hl
	r := ns.newLocalPacket(n, orig)
	b := r.buf[r.head+EthHdrLen : r.tail]
	var id uint16
	writeIPv4(b, 0, n, id, true, ns.Sysctl.DefaultTTL, ProtoTCP, [4]byte(ip[16:20]), [4]byte(ip[12:16]))
	rt := header.TCP(b[20:])
	rt.Encode(&header.TCPFields{
		SrcPort: t.DestinationPort(), DstPort: t.SourcePort(), SeqNum: seq, AckNum: ack,
		DataOffset: uint8(hl), Flags: flags, WindowSize: win,
	})
	if mss > 0 {
		o := rt[header.TCPMinimumSize:]
		o[0], o[1], o[2], o[3] = 2, 4, byte(mss>>8), byte(mss)
	}
	rt.SetChecksum(0)
	rt.SetChecksum(^l4Checksum(header.IPv4(b), b[20:], header.TCPProtocolNumber))
	if r.Trace != nil {
		ns.observe(w, r, dev, "tcp", trace.Replied, what)
	}
	ns.output(w, r)
}

func icmpName(t header.ICMPv4Type, c header.ICMPv4Code) string {
	switch t {
	case header.ICMPv4EchoReply:
		return "echo reply"
	case header.ICMPv4Echo:
		return "echo request"
	case header.ICMPv4TimeExceeded:
		return "time exceeded in-transit"
	case header.ICMPv4DstUnreachable:
		switch c {
		case header.ICMPv4NetUnreachable:
			return "net unreachable"
		case header.ICMPv4HostUnreachable:
			return "host unreachable"
		case header.ICMPv4ProtoUnreachable:
			return "protocol unreachable"
		case header.ICMPv4PortUnreachable:
			return "port unreachable"
		case header.ICMPv4FragmentationNeeded:
			return "need to frag"
		case header.ICMPv4HostProhibited:
			return "host prohibited"
		case header.ICMPv4AdminProhibited:
			return "admin prohibited"
		}
		return "unreachable code " + itoa(int(c))
	}
	return "type " + itoa(int(t)) + " code " + itoa(int(c))
}

// TCPConn is a minimal active-open TCP socket: Dial sends a SYN, a SYN-ACK
// is answered with an ACK and the connection counts as established; data
// segments sent with Write are acknowledged by the peer's listener.
type TCPConn struct {
	ns                     *Netns
	Src, Dst               [4]byte
	Sport, Dport           uint16
	sndNxt, rcvNxt         uint32
	Established, Reset     bool
	Received, AcksReceived int
}

type connKey struct {
	local, remote [4]byte
	lport, rport  uint16
}

// DialTCP opens a connection from src:sport to dst:dport by sending a SYN
// with initial sequence number isn (the caller picks it, so walks are
// reproducible). The SYN is traced into tr when tr is not nil.
//
// src binds the socket to a local address; 0.0.0.0 (or the zero Addr)
// leaves it unbound, and connect picks the source as the kernel does for
// the route to dst (RouteGet: the route's src, else the out device's
// primary address). As tcp_v4_connect does, a connection to 0.0.0.0 goes
// to the bound address, or to 127.0.0.1 from 127.0.0.1; a connection to
// a broadcast or multicast address fails with ENETUNREACH, and a failed
// route lookup with its errno (ENETUNREACH, EHOSTUNREACH, EACCES,
// EINVAL), all as a *SocketError, with nothing sent.
func (ns *Netns) DialTCP(src, dst netip.Addr, sport, dport uint16, isn uint32, tr *Trace) (*TCPConn, error) {
	if !src.IsValid() {
		src = netip.IPv4Unspecified()
	}
	if !src.Is4() || !dst.Is4() {
		return nil, &ConfigError{Op: "connect", Object: dst.String(), Reason: "IPv4 addresses required"}
	}
	bound := !src.IsUnspecified()
	if bound && !ns.IsLocal(src.As4()) {
		return nil, &SocketError{Op: "bind", Addr: netip.AddrPortFrom(src, sport), Errno: syscall.EADDRNOTAVAIL}
	}
	peer := netip.AddrPortFrom(dst, dport)
	if dst.IsUnspecified() {
		// ip_route_connect: no destination means this host, the bound
		// address or else loopback on both ends.
		dst = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		if bound {
			dst = src
		}
	}
	r, err := ns.RouteGet(dst)
	if err != nil {
		return nil, &SocketError{Op: "connect", Addr: peer, Errno: err.(*RouteError).Errno}
	}
	if r.Type == RouteBroadcast || r.Type == RouteMulticast {
		// tcp_v4_connect: RTCF_BROADCAST or RTCF_MULTICAST.
		return nil, &SocketError{Op: "connect", Addr: peer, Errno: syscall.ENETUNREACH}
	}
	if !bound {
		if !r.Src.IsValid() {
			return nil, &SocketError{Op: "connect", Addr: peer, Errno: syscall.EADDRNOTAVAIL}
		}
		src = r.Src
	}
	k := connKey{src.As4(), dst.As4(), sport, dport}
	if ns.sockets.conns == nil {
		ns.sockets.conns = map[connKey]*TCPConn{}
	}
	if _, ok := ns.sockets.conns[k]; ok {
		return nil, &ErrAddrInUse{Netns: ns.Name, Proto: "tcp", Port: sport}
	}
	c := &TCPConn{ns: ns, Src: k.local, Dst: k.remote, Sport: sport, Dport: dport, sndNxt: isn}
	ns.sockets.conns[k] = c
	c.send(header.TCPFlagSyn, nil, tr)
	c.sndNxt++
	return c, nil
}

// Write sends payload in one segment (PSH|ACK).
func (c *TCPConn) Write(payload []byte, tr *Trace) {
	c.send(header.TCPFlagPsh|header.TCPFlagAck, payload, tr)
	c.sndNxt += uint32(len(payload))
}

// Close sends FIN|ACK.
func (c *TCPConn) Close(tr *Trace) {
	c.send(header.TCPFlagFin|header.TCPFlagAck, nil, tr)
	c.sndNxt++
}

func (c *TCPConn) send(flags header.TCPFlags, payload []byte, tr *Trace) {
	ns := c.ns
	hl := header.TCPMinimumSize
	if flags&header.TCPFlagSyn != 0 {
		hl += 4
	}
	n := header.IPv4MinimumSize + hl + len(payload)
	r := ns.newLocalPacket(n, nil)
	b := r.buf[r.head+EthHdrLen : r.tail]
	writeIPv4(b, 0, n, ns.nextID(), true, ns.Sysctl.DefaultTTL, ProtoTCP, c.Src, c.Dst)
	t := header.TCP(b[20:])
	var ack uint32
	if flags&header.TCPFlagAck != 0 {
		ack = c.rcvNxt
	}
	t.Encode(&header.TCPFields{SrcPort: c.Sport, DstPort: c.Dport, SeqNum: c.sndNxt, AckNum: ack,
		DataOffset: uint8(hl), Flags: flags, WindowSize: 64240})
	if flags&header.TCPFlagSyn != 0 {
		o := t[header.TCPMinimumSize:]
		mss := ns.advMSS(c.Dst)
		o[0], o[1], o[2], o[3] = 2, 4, byte(mss>>8), byte(mss)
	}
	copy(b[20+hl:], payload)
	t.SetChecksum(0)
	t.SetChecksum(^l4Checksum(header.IPv4(b), b[20:], header.TCPProtocolNumber))
	r.Trace = tr
	ns.e.ScheduleOutput(0, ns, r)
}

// conn handles a segment for an active-open connection; it reports whether
// one matched.
func (ns *Netns) conn(w *Walk, dev *Device, p *Packet, t header.TCP, dlen uint32) bool {
	if ns.sockets.conns == nil {
		return false
	}
	ip := p.IPv4()
	c := ns.sockets.conns[connKey{[4]byte(ip[16:20]), [4]byte(ip[12:16]), t.DestinationPort(), t.SourcePort()}]
	if c == nil {
		return false
	}
	flags := t.Flags()
	switch {
	case flags&header.TCPFlagRst != 0:
		c.Reset = true
		if p.Trace != nil {
			ns.observe(w, p, dev, "tcp", trace.Delivered, "RST: connection refused")
		}
		p.Release()
	case flags&(header.TCPFlagSyn|header.TCPFlagAck) == header.TCPFlagSyn|header.TCPFlagAck:
		c.rcvNxt = t.SequenceNumber() + 1
		c.Established = true
		if p.Trace != nil {
			ns.observe(w, p, dev, "tcp", trace.Delivered, "SYN-ACK: connection established")
		}
		ns.tcpSend(w, p, dev, c.sndNxt, c.rcvNxt, header.TCPFlagAck, 64240, 0, "ACK")
		p.Release()
	default:
		c.AcksReceived++
		c.Received += int(dlen)
		c.rcvNxt = t.SequenceNumber() + dlen
		if flags&header.TCPFlagFin != 0 {
			c.rcvNxt++
		}
		if p.Trace != nil {
			ns.observe(w, p, dev, "tcp", trace.Delivered, "segment for connection :"+itoa(int(c.Sport)))
		}
		if dlen > 0 {
			ns.tcpSend(w, p, dev, c.sndNxt, c.rcvNxt, header.TCPFlagAck, 64240, 0, "ACK")
		}
		p.Release()
	}
	return true
}

// TCPListener returns the listener bound to port, or nil.
func (ns *Netns) TCPListener(port uint16) *TCPListener { return ns.sockets.tcpListener(port) }

// UDPSocket returns the socket bound to port, or nil.
func (ns *Netns) UDPSocket(port uint16) *UDPSocket { return ns.sockets.udpSocket(port) }
