package datapath

import (
	"net/netip"
	"strconv"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Summarize describes a frame in one line, the way tcpdump would: ARP
// requests and replies, ICMP, UDP and TCP with flags, and VXLAN with its
// inner frame. It allocates; call it only for traced packets.
func Summarize(f []byte) string {
	var buf [160]byte
	return string(appendSummary(buf[:0], f, 0))
}

// Summary is Summarize(p.Frame()). A traced packet's trace remembers the
// last summary it made, so the observations of one hop, which mostly see
// the same bytes, share one string. The Ethernet addresses (the first 12
// bytes) are not part of a summary: a frame the neighbour layer only
// re-addressed keeps its summary.
func (p *Packet) Summary() string {
	if p.Trace == nil {
		return Summarize(p.Frame())
	}
	return p.Trace.Summary(p.Frame(), 12, Summarize)
}

func appendAddr(b []byte, a []byte) []byte { return netip.AddrFrom4([4]byte(a)).AppendTo(b) }

func appendUint(b []byte, v uint64) []byte { return strconv.AppendUint(b, v, 10) }

// appendEndpoints appends "SRC.SPORT > DST.DPORT: " (tcpdump's form).
func appendEndpoints(b []byte, ip, l4 []byte) []byte {
	b = appendAddr(b, ip[12:16])
	b = append(b, '.')
	b = appendUint(b, uint64(uint16(l4[0])<<8|uint16(l4[1])))
	b = append(b, " > "...)
	b = appendAddr(b, ip[16:20])
	b = append(b, '.')
	b = appendUint(b, uint64(uint16(l4[2])<<8|uint16(l4[3])))
	return append(b, ": "...)
}

// appendHosts appends "SRC > DST: ".
func appendHosts(b []byte, ip []byte) []byte {
	b = appendAddr(b, ip[12:16])
	b = append(b, " > "...)
	b = appendAddr(b, ip[16:20])
	return append(b, ": "...)
}

func appendSummary(b []byte, f []byte, depth int) []byte {
	if len(f) < EthHdrLen {
		return append(b, "truncated frame"...)
	}
	switch et := uint16(f[12])<<8 | uint16(f[13]); et {
	case 0x0806:
		a, err := ParseARP(f[EthHdrLen:])
		if err != nil {
			return append(append(b, "ARP, "...), err.Error()...)
		}
		if a.Op == 1 {
			b = append(b, "ARP, Request who-has "...)
			b = appendAddr(b, a.TPA[:])
			b = append(b, " tell "...)
			return appendAddr(b, a.SPA[:])
		}
		b = append(b, "ARP, Reply "...)
		b = appendAddr(b, a.SPA[:])
		b = append(b, " is-at "...)
		return a.SHA.appendTo(b)
	case 0x0800:
		return appendIPv4Summary(b, f[EthHdrLen:], depth)
	default:
		b = append(b, "ethertype 0x"...)
		b = append(b, hex16(et)...)
		b = append(b, ", length "...)
		return appendUint(b, uint64(len(f)))
	}
}

func appendIPv4Summary(b []byte, ip []byte, depth int) []byte {
	if len(ip) < 20 || ip[0]>>4 != 4 || int(ip[0]&0xf)*4 > len(ip) {
		return append(b, "IP, malformed"...)
	}
	h := header.IPv4(ip)
	l4 := ip[h.HeaderLength():]
	if tl := int(h.TotalLength()); tl >= int(h.HeaderLength()) && tl <= len(ip) {
		l4 = ip[h.HeaderLength():tl]
	}
	switch h.Protocol() {
	case ProtoICMP:
		b = appendHosts(b, ip)
		if len(l4) < 8 {
			b = append(b, "ICMP, truncated"...)
			break
		}
		ic := header.ICMPv4(l4)
		b = append(b, "ICMP "...)
		b = append(b, icmpName(ic.Type(), ic.Code())...)
		switch ic.Type() {
		case header.ICMPv4Echo, header.ICMPv4EchoReply:
			b = append(b, ", id "...)
			b = appendUint(b, uint64(ic.Ident()))
			b = append(b, ", seq "...)
			b = appendUint(b, uint64(ic.Sequence()))
		case header.ICMPv4DstUnreachable:
			if ic.Code() == header.ICMPv4FragmentationNeeded {
				b = append(b, " (mtu "...)
				b = appendUint(b, uint64(ic.MTU()))
				b = append(b, ')')
			}
		}
	case ProtoUDP:
		if len(l4) < 8 {
			b = appendHosts(b, ip)
			b = append(b, "UDP, truncated"...)
			break
		}
		u := header.UDP(l4)
		b = appendEndpoints(b, ip, l4)
		b = append(b, "UDP, length "...)
		b = appendUint(b, uint64(len(l4)-8))
		if (u.DestinationPort() == 8472 || u.DestinationPort() == 4789) && len(l4) >= 16+EthHdrLen && l4[8]&0x08 != 0 && depth == 0 {
			vni := uint32(l4[12])<<16 | uint32(l4[13])<<8 | uint32(l4[14])
			b = append(b, " VXLAN, vni "...)
			b = appendUint(b, uint64(vni))
			b = append(b, ": "...)
			return appendSummary(b, l4[16:], depth+1)
		}
	case ProtoTCP:
		if len(l4) < 20 {
			b = appendHosts(b, ip)
			b = append(b, "TCP, truncated"...)
			break
		}
		t := header.TCP(l4)
		b = appendEndpoints(b, ip, l4)
		b = append(b, "Flags ["...)
		b = appendTCPFlags(b, t.Flags())
		b = append(b, "], seq "...)
		b = appendUint(b, uint64(t.SequenceNumber()))
		if t.Flags()&header.TCPFlagAck != 0 {
			b = append(b, ", ack "...)
			b = appendUint(b, uint64(t.AckNumber()))
		}
		if off := int(t.DataOffset()); off <= len(l4) {
			b = append(b, ", length "...)
			b = appendUint(b, uint64(len(l4)-off))
		}
	case ProtoSCTP:
		if len(l4) < 12 {
			b = appendHosts(b, ip)
			b = append(b, "sctp, truncated"...)
			break
		}
		b = appendEndpoints(b, ip, l4)
		b = append(b, "sctp"...)
		b = appendSCTPChunks(b, l4[12:])
	default:
		b = appendHosts(b, ip)
		b = append(b, "ip-proto-"...)
		b = appendUint(b, uint64(h.Protocol()))
	}
	b = append(b, ", ttl "...)
	return appendUint(b, uint64(h.TTL()))
}

func appendTCPFlags(b []byte, f header.TCPFlags) []byte {
	n := len(b)
	if f&header.TCPFlagSyn != 0 {
		b = append(b, 'S')
	}
	if f&header.TCPFlagFin != 0 {
		b = append(b, 'F')
	}
	if f&header.TCPFlagRst != 0 {
		b = append(b, 'R')
	}
	if f&header.TCPFlagPsh != 0 {
		b = append(b, 'P')
	}
	if f&header.TCPFlagAck != 0 {
		b = append(b, '.')
	}
	if len(b) == n {
		b = append(b, "none"...)
	}
	return b
}

var sctpChunkNames = [...]string{0: "DATA", 1: "INIT", 2: "INIT ACK", 3: "SACK", 4: "HB REQ", 5: "HB ACK",
	6: "ABORT", 7: "SHUTDOWN", 8: "SHUTDOWN ACK", 9: "OP ERR", 10: "COOKIE ECHO", 11: "COOKIE ACK", 14: "SHUTDOWN COMPLETE"}

// appendSCTPChunks lists the chunks as tcpdump does: "(1) [INIT] [init
// tag: T] [rwnd: R] [OS: O] [MIS: M] [init TSN: N]".
func appendSCTPChunks(b []byte, c []byte) []byte {
	for i := 1; len(c) >= 4; i++ {
		typ, n := c[0], int(c[2])<<8|int(c[3])
		name := ""
		if int(typ) < len(sctpChunkNames) {
			name = sctpChunkNames[typ]
		}
		b = append(b, " ("...)
		b = appendUint(b, uint64(i))
		b = append(b, ") ["...)
		if name == "" {
			b = append(b, "chunk type "...)
			b = appendUint(b, uint64(typ))
		} else {
			b = append(b, name...)
		}
		b = append(b, ']')
		if (typ == 1 || typ == 2) && n >= 20 && len(c) >= 20 {
			be := func(o int) uint64 {
				return uint64(uint32(c[o])<<24 | uint32(c[o+1])<<16 | uint32(c[o+2])<<8 | uint32(c[o+3]))
			}
			b = append(b, " [init tag: "...)
			b = appendUint(b, be(4))
			b = append(b, "] [rwnd: "...)
			b = appendUint(b, be(8))
			b = append(b, "] [OS: "...)
			b = appendUint(b, uint64(uint16(c[12])<<8|uint16(c[13])))
			b = append(b, "] [MIS: "...)
			b = appendUint(b, uint64(uint16(c[14])<<8|uint16(c[15])))
			b = append(b, "] [init TSN: "...)
			b = appendUint(b, be(16))
			b = append(b, ']')
		}
		if n < 4 {
			return b
		}
		n = (n + 3) &^ 3
		if n > len(c) {
			return b
		}
		c = c[n:]
	}
	return b
}
