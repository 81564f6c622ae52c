// Package conntrack models Linux connection tracking (nf_conntrack) and the
// NAT core (nf_nat) for IPv4: a table of connections keyed by 5-tuple in
// both directions, TCP/UDP/ICMP protocol trackers with the kernel's default
// timeouts evaluated lazily against virtual time, the ctstate a packet is
// given (NEW, ESTABLISHED, RELATED, INVALID), NAT bindings that rewrite the
// reply tuple, and the packet rewrites (with incremental checksum updates)
// that apply a binding in both directions.
//
// The netfilter package runs the nat table and calls into this package the
// way iptable_nat calls nf_nat_setup_info and nf_nat_packet.
package conntrack

import (
	"net/netip"
	"strconv"

	"github.com/kubewalk/kubewalk/datapath"
)

// Tuple is the kernel's nf_conntrack_tuple for IPv4, as a fixed-size
// comparable value usable as a map key without allocation.
//
// For TCP and UDP, Sport and Dport are the ports. For ICMP, as the kernel
// does, Sport holds the echo identifier (src.u.icmp.id) and Dport holds
// type<<8|code (dst.u.icmp.type and code). Other protocols have zero ports
// (the generic tracker).
type Tuple struct {
	Src, Dst     [4]byte
	Sport, Dport uint16
	Proto        uint8
}

// ICMPType returns the ICMP type of an ICMP tuple.
func (t Tuple) ICMPType() uint8 { return uint8(t.Dport >> 8) }

// ICMPCode returns the ICMP code of an ICMP tuple.
func (t Tuple) ICMPCode() uint8 { return uint8(t.Dport) }

// icmpInverse maps an ICMP query type to its answer type and back
// (invmap in nf_conntrack_proto_icmp.c). Zero entries mean "no inverse",
// except echo reply (0) whose inverse is echo (8).
var icmpInverse = [256]uint8{8: 0, 0: 8, 13: 14, 14: 13, 15: 16, 16: 15, 17: 18, 18: 17}

var icmpHasInverse = [256]bool{0: true, 8: true, 13: true, 14: true, 15: true, 16: true, 17: true, 18: true}

// Invert returns the tuple of a packet travelling the other way
// (nf_ct_invert_tuple): addresses and ports swapped; for ICMP the
// identifier is kept and the type is replaced by its answer type.
func (t Tuple) Invert() Tuple {
	r := Tuple{Src: t.Dst, Dst: t.Src, Proto: t.Proto}
	switch t.Proto {
	case datapath.ProtoICMP:
		r.Sport = t.Sport
		r.Dport = uint16(icmpInverse[t.ICMPType()])<<8 | uint16(t.ICMPCode())
	default:
		r.Sport, r.Dport = t.Dport, t.Sport
	}
	return r
}

// String prints the tuple the way `conntrack -L` prints one direction:
// "src=A dst=B sport=P dport=Q" (TCP, UDP), "src=A dst=B type=T code=C
// id=I" (ICMP) or "src=A dst=B" (other protocols).
func (t Tuple) String() string {
	b := make([]byte, 0, 64)
	return string(t.appendTo(b))
}

func (t Tuple) appendTo(b []byte) []byte {
	b = append(b, "src="...)
	b = netip.AddrFrom4(t.Src).AppendTo(b)
	b = append(b, " dst="...)
	b = netip.AddrFrom4(t.Dst).AppendTo(b)
	switch t.Proto {
	case datapath.ProtoTCP, datapath.ProtoUDP, datapath.ProtoSCTP:
		b = append(b, " sport="...)
		b = strconv.AppendUint(b, uint64(t.Sport), 10)
		b = append(b, " dport="...)
		b = strconv.AppendUint(b, uint64(t.Dport), 10)
	case datapath.ProtoICMP:
		b = append(b, " type="...)
		b = strconv.AppendUint(b, uint64(t.ICMPType()), 10)
		b = append(b, " code="...)
		b = strconv.AppendUint(b, uint64(t.ICMPCode()), 10)
		b = append(b, " id="...)
		b = strconv.AppendUint(b, uint64(t.Sport), 10)
	}
	return b
}

// endpoint prints "A:P" for TCP/UDP and "A" otherwise, for trace details.
func appendEndpoint(b []byte, a [4]byte, port uint16, proto uint8) []byte {
	b = netip.AddrFrom4(a).AppendTo(b)
	if proto == datapath.ProtoTCP || proto == datapath.ProtoUDP || proto == datapath.ProtoSCTP {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(port), 10)
	}
	return b
}

// Flow prints the tuple as "A:P > B:Q" (TCP, UDP) or "A > B", as trace
// Before/After fields show it.
func (t Tuple) Flow() string {
	b := make([]byte, 0, 48)
	b = appendEndpoint(b, t.Src, t.Sport, t.Proto)
	b = append(b, " > "...)
	b = appendEndpoint(b, t.Dst, t.Dport, t.Proto)
	return string(b)
}

// ICMP types that carry an embedded datagram and make a packet RELATED to
// the connection of that datagram (icmp_error_message).
func isICMPError(typ uint8) bool {
	switch typ {
	case 3, 4, 5, 11, 12: // dest unreachable, source quench, redirect, time exceeded, parameter problem
		return true
	}
	return false
}

// isICMPQueryRequest reports ICMP types that may start a connection
// (valid_new in nf_conntrack_proto_icmp.c).
func isICMPQueryRequest(typ uint8) bool {
	switch typ {
	case 8, 13, 15, 17:
		return true
	}
	return false
}

// parsed is what the trackers need from an IPv4 packet.
type parsed struct {
	t        Tuple
	ihl      int
	l4       []byte // from the L4 header to the end of the IP total length
	frag     bool   // a non-first fragment: no L4 header
	ok       bool   // L4 header present enough to build the tuple
	tcpFlags uint8
}

// parseIP extracts the tuple from an IPv4 packet (ip starts at the IPv4
// header) into p, which must be zero. It never panics on short input; ok is
// false when the L4 header needed for the tuple is missing. It fills p in
// place: the walk calls it for every tracked packet, and returning the
// struct by value copied it twice.
func parseIP(ip []byte, p *parsed) {
	if len(ip) < 20 {
		return
	}
	ihl := int(ip[0]&0xf) * 4
	tot := int(ip[2])<<8 | int(ip[3])
	if ihl < 20 || tot < ihl || ihl > len(ip) {
		return
	}
	if tot > len(ip) {
		tot = len(ip)
	}
	p.ihl = ihl
	p.t.Src = [4]byte(ip[12:16])
	p.t.Dst = [4]byte(ip[16:20])
	p.t.Proto = ip[9]
	p.l4 = ip[ihl:tot]
	if (uint16(ip[6])<<8|uint16(ip[7]))&0x1fff != 0 {
		p.frag = true
		return
	}
	parseL4(p)
}

func parseL4(p *parsed) {
	l4 := p.l4
	switch p.t.Proto {
	case datapath.ProtoTCP:
		if len(l4) < 14 {
			return
		}
		p.t.Sport = uint16(l4[0])<<8 | uint16(l4[1])
		p.t.Dport = uint16(l4[2])<<8 | uint16(l4[3])
		p.tcpFlags = l4[13]
	case datapath.ProtoUDP, datapath.ProtoSCTP:
		if len(l4) < 4 {
			return
		}
		p.t.Sport = uint16(l4[0])<<8 | uint16(l4[1])
		p.t.Dport = uint16(l4[2])<<8 | uint16(l4[3])
	case datapath.ProtoICMP:
		if len(l4) < 8 {
			// too short to build a tuple (or, for an error type, to
			// quote a header)
			return
		}
		p.t.Dport = uint16(l4[0])<<8 | uint16(l4[1])
		if icmpHasInverse[l4[0]] {
			p.t.Sport = uint16(l4[4])<<8 | uint16(l4[5])
		}
	}
	p.ok = true
}

// TupleOf returns the original-direction tuple of p's IPv4 packet as
// conntrack would compute it, and whether it could be computed.
func TupleOf(p *datapath.Packet) (Tuple, bool) {
	if p.Len() < datapath.EthHdrLen+20 || p.EtherType() != 0x0800 {
		return Tuple{}, false
	}
	var r parsed
	parseIP(p.IPv4(), &r)
	return r.t, r.ok
}
