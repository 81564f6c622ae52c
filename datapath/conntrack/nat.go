package conntrack

import (
	"hash/crc32"

	"github.com/kubewalk/kubewalk/datapath"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Manip is the kind of NAT manipulation (enum nf_nat_manip_type): source
// NAT runs at POSTROUTING and INPUT, destination NAT at PREROUTING and
// OUTPUT.
type Manip uint8

// Manipulation types.
const (
	ManipSrc Manip = iota
	ManipDst
)

// String returns "SNAT" or "DNAT".
func (m Manip) String() string {
	if m == ManipSrc {
		return "SNAT"
	}
	return "DNAT"
}

// NATFlags are the range flags of struct nf_nat_range2.
type NATFlags uint16

// Range flags, with the kernel's values.
const (
	MapIPs         NATFlags = 1 << 0 // NF_NAT_RANGE_MAP_IPS: MinIP..MaxIP replace the address
	ProtoSpecified NATFlags = 1 << 1 // NF_NAT_RANGE_PROTO_SPECIFIED: MinPort..MaxPort replace the port
	Random         NATFlags = 1 << 2 // NF_NAT_RANGE_PROTO_RANDOM (--random)
	Persistent     NATFlags = 1 << 3 // NF_NAT_RANGE_PERSISTENT (--persistent)
	RandomFully    NATFlags = 1 << 4 // NF_NAT_RANGE_PROTO_RANDOM_FULLY (--random-fully)
	randomAll               = Random | RandomFully
)

// NATRange is what a DNAT, SNAT or MASQUERADE target asks for
// (struct nf_nat_range2).
type NATRange struct {
	Flags            NATFlags
	MinIP, MaxIP     [4]byte
	MinPort, MaxPort uint16
}

func be32(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

func from32(v uint32) [4]byte { return [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

func (t Tuple) manipPort(m Manip) uint16 {
	if m == ManipSrc || t.Proto == datapath.ProtoICMP {
		return t.Sport
	}
	return t.Dport
}

func (t *Tuple) setManipPort(m Manip, v uint16) {
	if m == ManipSrc || t.Proto == datapath.ProtoICMP {
		t.Sport = v
	} else {
		t.Dport = v
	}
}

func hasPorts(proto uint8) bool {
	return proto == datapath.ProtoTCP || proto == datapath.ProtoUDP || proto == datapath.ProtoICMP || proto == datapath.ProtoSCTP
}

// inRange is nf_in_range for the manipulated side of t.
func inRange(t Tuple, r *NATRange, m Manip) bool {
	if r.Flags&MapIPs != 0 {
		a := t.Src
		if m == ManipDst {
			a = t.Dst
		}
		if be32(a) < be32(r.MinIP) || be32(a) > be32(r.MaxIP) {
			return false
		}
	}
	return r.Flags&ProtoSpecified == 0 || l4InRange(t, r, m)
}

func l4InRange(t Tuple, r *NATRange, m Manip) bool {
	if !hasPorts(t.Proto) {
		return true
	}
	p := t.manipPort(m)
	return p >= r.MinPort && p <= r.MaxPort
}

// used is nf_nat_used_tuple: would the reply of t clash with a live
// connection?
func (e *Entry) used(t Tuple) bool { return e.t.taken(t.Invert()) }

func (e *Entry) random(w *datapath.Walk) uint32 {
	if w != nil {
		return w.Engine().Rand().Uint32()
	}
	e.t.rover++
	return uint32(e.t.rover)
}

// SetupNAT sets up a NAT binding of type m for an unconfirmed connection
// (nf_nat_setup_info): it picks a new tuple inside r the way
// get_unique_tuple does — keep the source if it is in range and unique,
// pick the address (one address, or a hash of the flow over a range),
// then a port that makes the reply tuple unique (random with --random or
// --random-fully, from w's random source) — and rewrites the reply tuple
// so that replies are recognised. It sets SRC_NAT or DST_NAT when the
// tuple changed and the matching NAT_DONE bit in any case. Bindings of a
// confirmed connection cannot change; SetupNAT then does nothing.
func (e *Entry) SetupNAT(w *datapath.Walk, r NATRange, m Manip) {
	if e.Status&StatusConfirmed != 0 || e.NATDone(m) {
		return
	}
	cur := e.Reply.Invert()
	nt := e.uniqueTuple(w, cur, &r, m)
	if nt != cur {
		e.Reply = nt.Invert()
		e.free &^= freeReply
		if m == ManipSrc {
			e.Status |= StatusSrcNAT
		} else {
			e.Status |= StatusDstNAT
		}
	}
	if m == ManipSrc {
		e.Status |= StatusSrcNATDone
	} else {
		e.Status |= StatusDstNATDone
	}
}

// NullBinding marks manip type m done without changing addresses
// (nf_nat_alloc_null_binding), as the nat hooks do when no rule set up a
// binding. A source port that would clash with an existing connection is
// still remapped, as the kernel does.
func (e *Entry) NullBinding(w *datapath.Walk, m Manip) {
	if e.Status&StatusConfirmed != 0 || e.NATDone(m) {
		return
	}
	// get_unique_tuple keeps the tuple (the range is its own address)
	// when its reply is unused, as it nearly always is: mark the binding
	// done without building the range. (used(Reply.Invert()) looks up
	// Reply.Invert().Invert(), which is Reply for every tuple a
	// connection is created with.)
	if !e.replyTaken() {
		if m == ManipSrc {
			e.Status |= StatusSrcNATDone
		} else {
			e.Status |= StatusDstNATDone
		}
		return
	}
	a := e.Reply.Dst
	if m == ManipDst {
		a = e.Reply.Src
	}
	e.SetupNAT(w, NATRange{Flags: MapIPs, MinIP: a, MaxIP: a}, m)
}

func (e *Entry) uniqueTuple(w *datapath.Walk, orig Tuple, r *NATRange, m Manip) Tuple {
	if m == ManipSrc && r.Flags&randomAll == 0 && inRange(orig, r, m) && !e.used(orig) {
		return orig
	}
	t := orig
	// find_best_ips_proto
	if r.Flags&MapIPs != 0 {
		lo, hi := be32(r.MinIP), be32(r.MaxIP)
		v := lo
		if hi > lo {
			h := be32(orig.Src) * 0x9e3779b1
			if r.Flags&Persistent == 0 {
				h ^= be32(orig.Dst) * 0x85ebca6b
			}
			v = lo + h%(hi-lo+1)
		}
		if m == ManipSrc {
			t.Src = from32(v)
		} else {
			t.Dst = from32(v)
		}
	}
	if r.Flags&randomAll == 0 {
		if r.Flags&ProtoSpecified != 0 {
			if l4InRange(t, r, m) && (r.MinPort == r.MaxPort || !e.used(t)) {
				return t
			}
		} else if !e.used(t) {
			return t
		}
	}
	return e.l4UniqueTuple(w, t, r, m)
}

// l4UniqueTuple is nf_nat_l4proto_unique_tuple.
func (e *Entry) l4UniqueTuple(w *datapath.Walk, t Tuple, r *NATRange, m Manip) Tuple {
	var min, size uint32
	switch t.Proto {
	case datapath.ProtoICMP:
		if r.Flags&ProtoSpecified == 0 {
			min, size = 0, 65536
		} else {
			min, size = uint32(r.MinPort), uint32(r.MaxPort)-uint32(r.MinPort)+1
		}
	case datapath.ProtoTCP, datapath.ProtoUDP, datapath.ProtoSCTP:
		if r.Flags&ProtoSpecified == 0 {
			if m == ManipDst {
				return t
			}
			switch p := t.manipPort(m); {
			case p < 512:
				min, size = 1, 511
			case p < 1024:
				min, size = 600, 424
			default:
				min, size = 1024, 65536-1024
			}
		} else {
			min, size = uint32(r.MinPort), uint32(r.MaxPort)-uint32(r.MinPort)+1
		}
	default:
		return t
	}
	var off uint32
	if r.Flags&randomAll != 0 || m != ManipDst {
		off = e.random(w)
	}
	attempts := uint32(128)
	if attempts > size {
		attempts = size
	}
	for {
		for i := uint32(0); i < attempts; i, off = i+1, off+1 {
			t.setManipPort(m, uint16(min+off%size))
			if !e.used(t) {
				return t
			}
		}
		if attempts >= size || attempts < 16 {
			return t
		}
		attempts /= 2
		off = e.random(w)
	}
}

// ManipPacket applies the connection's binding of type m to p
// (nf_nat_packet): in the original direction a source (destination)
// binding rewrites the source (destination); in the reply direction the
// opposite binding is undone. It updates the IPv4 header checksum and the
// TCP/UDP checksum incrementally (a zero UDP checksum stays zero) and, for
// ICMP queries, the identifier. It returns whether it rewrote anything.
func (e *Entry) ManipPacket(p *datapath.Packet, info CTInfo, m Manip) bool {
	if e.Status&StatusNATMask == 0 {
		return false // no binding changes anything (most connections)
	}
	target, ok := e.binding(info, m)
	if !ok {
		return false
	}
	return manipIP(p.IPv4(), target, m)
}

// binding returns the tuple a packet in direction info is rewritten to by
// manipulation m, and whether the connection has such a binding: in the
// original direction a source (destination) binding applies; in the reply
// direction the opposite one is undone.
func (e *Entry) binding(info CTInfo, m Manip) (Tuple, bool) {
	statusbit := StatusSrcNAT
	if m == ManipDst {
		statusbit = StatusDstNAT
	}
	reply := info.Reply()
	if reply {
		statusbit ^= StatusNATMask
	}
	if e.Status&statusbit == 0 {
		return Tuple{}, false
	}
	if reply {
		return e.Orig.Invert(), true
	}
	return e.Reply.Invert(), true
}

// TranslateICMPError applies the binding to an ICMP error RELATED to the
// connection (nf_nat_icmp_reply_translation): the quoted datagram is
// translated back to what its sender saw (the opposite manipulation) and
// the outer header is translated like a reply, then the ICMP checksum is
// recomputed. It returns whether it rewrote anything.
func (e *Entry) TranslateICMPError(p *datapath.Packet, info CTInfo, m Manip) bool {
	target, ok := e.binding(info, m)
	if !ok {
		return false
	}
	ip := p.IPv4()
	var pr parsed
	parseIP(ip, &pr)
	if pr.frag || len(pr.l4) < 8+20 {
		return false
	}
	icmp := pr.l4
	changed := manipIP(icmp[8:], target.Invert(), 1-m)
	icmp[2], icmp[3] = 0, 0
	c := ^checksum.Checksum(icmp, 0)
	icmp[2], icmp[3] = byte(c>>8), byte(c)
	if manipIP(ip, target, m) {
		changed = true
	}
	return changed
}

// manipIP rewrites the manipulated side of the IPv4 packet ip to target
// (nf_nat_ipv4_manip_pkt): L4 port or ICMP id and checksum first, then the
// address and the header checksum. Short or fragmented packets get only
// what is present rewritten, as the kernel does for quoted datagrams.
func manipIP(ip []byte, target Tuple, m Manip) bool {
	if len(ip) < 20 {
		return false
	}
	ihl := int(ip[0]&0xf) * 4
	tot := int(ip[2])<<8 | int(ip[3])
	if ihl < 20 || ihl > len(ip) {
		return false
	}
	complete := tot <= len(ip) && tot >= ihl
	if !complete {
		tot = len(ip)
	}
	af := ip[12:16]
	na := target.Src
	if m == ManipDst {
		af = ip[16:20]
		na = target.Dst
	}
	changed := false
	frag := (uint16(ip[6])<<8|uint16(ip[7]))&0x1fff != 0
	if !frag {
		l4 := ip[ihl:tot]
		switch ip[9] {
		case datapath.ProtoTCP, datapath.ProtoUDP:
			if len(l4) < 4 {
				break
			}
			pf := l4[0:2]
			np := target.Sport
			if m == ManipDst {
				pf = l4[2:4]
				np = target.Dport
			}
			var cf []byte
			if ip[9] == datapath.ProtoTCP && len(l4) >= 18 {
				cf = l4[16:18]
			} else if ip[9] == datapath.ProtoUDP && len(l4) >= 8 && (l4[6] != 0 || l4[7] != 0) {
				cf = l4[6:8]
			}
			nb := [2]byte{byte(np >> 8), byte(np)}
			if cf != nil {
				csumReplaceAddrPort(cf, (*[4]byte)(af), &na, (*[2]byte)(pf), &nb)
				if ip[9] == datapath.ProtoUDP && cf[0] == 0 && cf[1] == 0 {
					cf[0], cf[1] = 0xff, 0xff // CSUM_MANGLED_0
				}
			}
			if pf[0] != nb[0] || pf[1] != nb[1] {
				pf[0], pf[1] = nb[0], nb[1]
				changed = true
			}
		case datapath.ProtoSCTP:
			if len(l4) < 4 {
				break
			}
			pf, np := l4[0:2], target.Sport
			if m == ManipDst {
				pf, np = l4[2:4], target.Dport
			}
			if pf[0] != byte(np>>8) || pf[1] != byte(np) {
				pf[0], pf[1] = byte(np>>8), byte(np)
				changed = true
				// SCTP's checksum is CRC32c over the whole packet, not an
				// Internet checksum: recompute it (sctp_manip_pkt). A
				// quoted, truncated packet keeps what it has.
				if complete && len(l4) >= 12 {
					SetSCTPChecksum(l4)
				}
			}
		case datapath.ProtoICMP:
			if len(l4) < 8 || !icmpHasInverse[l4[0]] {
				break
			}
			nb := [2]byte{byte(target.Sport >> 8), byte(target.Sport)}
			if l4[4] != nb[0] || l4[5] != nb[1] {
				csumReplace(l4[2:4], l4[4:6], nb[:])
				l4[4], l4[5] = nb[0], nb[1]
				changed = true
			}
		}
	}
	if [4]byte(af) != na {
		csumReplace(ip[10:12], af, na[:])
		copy(af, na[:])
		changed = true
	}
	return changed
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SCTPChecksum computes the CRC32c of an SCTP packet (common header and
// chunks) with its checksum field taken as zero, as RFC 9260 appendix A
// and sctp_compute_cksum do. The field holds it in little-endian byte
// order.
func SCTPChecksum(sctp []byte) uint32 {
	var saved [4]byte
	copy(saved[:], sctp[8:12])
	clear(sctp[8:12])
	c := crc32.Checksum(sctp, castagnoli)
	copy(sctp[8:12], saved[:])
	return c
}

// SetSCTPChecksum fills in the checksum field of an SCTP packet.
func SetSCTPChecksum(sctp []byte) {
	c := SCTPChecksum(sctp)
	sctp[8], sctp[9], sctp[10], sctp[11] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
}

// csumReplace updates the 16-bit one's complement checksum in c for the
// bytes old becoming new (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')). old
// and new have the same even length; old may alias the packet.
func csumReplace(c, old, new []byte) {
	sum := uint32(^(uint16(c[0])<<8 | uint16(c[1])))
	for i := 0; i+1 < len(old); i += 2 {
		sum += uint32(^(uint16(old[i])<<8 | uint16(old[i+1])))
		sum += uint32(uint16(new[i])<<8 | uint16(new[i+1]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	r := ^uint16(sum)
	c[0], c[1] = byte(r>>8), byte(r)
}

// csumReplaceAddrPort is csumReplace(c, a, na) then csumReplace(c, pt,
// np) in one fold (a TCP or UDP checksum when an address and a port
// change), with the same result: one's complement addition is
// associative, and the first fold is zero only when its sum is.
func csumReplaceAddrPort(c []byte, a, na *[4]byte, pt, np *[2]byte) {
	sum := uint32(^(uint16(c[0])<<8 | uint16(c[1])))
	sum += uint32(^(uint16(a[0])<<8 | uint16(a[1])))
	sum += uint32(^(uint16(a[2])<<8 | uint16(a[3])))
	sum += uint32(na[0])<<8 | uint32(na[1])
	sum += uint32(na[2])<<8 | uint32(na[3])
	sum += uint32(^(uint16(pt[0])<<8 | uint16(pt[1])))
	sum += uint32(np[0])<<8 | uint32(np[1])
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	r := ^uint16(sum)
	c[0], c[1] = byte(r>>8), byte(r)
}

// Rewrite rewrites the source (ManipSrc) or destination (ManipDst) address
// and port of the IPv4 packet ip to those of target, updating the header
// and TCP/UDP checksums incrementally, as nf_nat_ipv4_manip_pkt does. It is
// for translators outside nf_nat (IPVS's dnat and snat handlers); it
// reports whether anything changed.
func Rewrite(ip []byte, target Tuple, m Manip) bool { return manipIP(ip, target, m) }

// AlterReply replaces the reply tuple of a connection not yet confirmed
// (nf_conntrack_alter_reply), so that replies from a new peer are
// recognised: IPVS does this for the connections it schedules when
// net.ipv4.vs.conntrack=1 (ip_vs_update_conntrack). It does nothing for a
// confirmed connection.
func (e *Entry) AlterReply(t Tuple) {
	if e.Status&StatusConfirmed != 0 {
		return
	}
	e.Reply = t
	e.free &^= freeReply
}
