package export_test

import (
	"encoding/binary"
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// vxlanPort is flannel's VXLAN UDP port.
const vxlanPort = 8472

// ipLayer locates one IPv4 header in a frame: the outer one, and the inner
// one of a VXLAN packet.
type ipLayer struct {
	off   int // IPv4 header
	l4    int // transport header
	proto uint8
	end   int // end of the IPv4 packet
}

// ipLayers finds the IPv4 headers of an Ethernet frame, outer first,
// descending into VXLAN on the flannel port.
func ipLayers(b []byte) []ipLayer {
	var out []ipLayer
	for eth := 0; ; {
		if len(b) < eth+14+20 || binary.BigEndian.Uint16(b[eth+12:]) != 0x0800 {
			return out
		}
		off := eth + 14
		ihl := int(b[off]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(b[off+2:]))
		if ihl < 20 || off+tot > len(b) || tot < ihl {
			return out
		}
		l := ipLayer{off: off, l4: off + ihl, proto: b[off+9], end: off + tot}
		out = append(out, l)
		if l.proto != 17 || l.end < l.l4+16+14 || binary.BigEndian.Uint16(b[l.l4+2:]) != vxlanPort {
			return out
		}
		eth = l.l4 + 16
	}
}

func isVXLAN(b []byte, l ipLayer) bool {
	return l.proto == 17 && l.end >= l.l4+16 && binary.BigEndian.Uint16(b[l.l4+2:]) == vxlanPort
}

// l4Valid verifies a UDP or TCP checksum with the pseudo-header (a zero
// UDP checksum, "no checksum", counts as valid here; callers check it).
func l4Valid(b []byte, l ipLayer) bool {
	ip := header.IPv4(b[l.off:l.end])
	seg := b[l.l4:l.end]
	if l.proto == 17 && binary.BigEndian.Uint16(seg[6:]) == 0 {
		return true
	}
	x := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(l.proto), ip.SourceAddress(), ip.DestinationAddress(), uint16(len(seg)))
	return checksum.Checksum(seg, x) == 0xffff
}

// completeChecksum fills in the outermost UDP or TCP checksum of a frame
// the kernel left CHECKSUM_PARTIAL (the checksum field holds only the
// pseudo-header sum; a NIC, or veth's peer, would never compute the rest).
// It reports whether it changed anything.
func completeChecksum(b []byte) bool {
	ls := ipLayers(b)
	if len(ls) == 0 {
		return false
	}
	l := ls[0]
	var at int
	switch l.proto {
	case 17:
		at = l.l4 + 6
	case 6:
		at = l.l4 + 16
	default:
		return false
	}
	if at+2 > l.end {
		return false
	}
	ip := header.IPv4(b[l.off:l.end])
	seg := b[l.l4:l.end]
	b[at], b[at+1] = 0, 0
	x := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(l.proto), ip.SourceAddress(), ip.DestinationAddress(), uint16(len(seg)))
	c := ^checksum.Checksum(seg, x)
	if c == 0 && l.proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[at:], c)
	return true
}

// maskCtx is what masks need to know about a case: the packets the test
// put on the wire itself (their IP IDs are the test's, never masked) and
// the addresses MASQUERADE can pick (the nodes').
type maskCtx struct {
	injected map[[4]uint32]bool
	masq     map[[4]byte]bool
}

func ipKey(b []byte, l ipLayer) [4]uint32 {
	return [4]uint32{binary.BigEndian.Uint32(b[l.off+12:]), binary.BigEndian.Uint32(b[l.off+16:]),
		uint32(b[l.off+9]), uint32(binary.BigEndian.Uint16(b[l.off+4:]))}
}

// mask is a field the kernel chooses by itself, so it cannot be compared
// byte for byte. apply runs on a pair of frames already known to have the
// same layout (kernel k, kubewalk s): it checks what can still be checked
// about the field and reports each failure, then blanks the field in both.
type mask struct {
	Field  string
	Reason string
	apply  func(k, s []byte, kl, sl ipLayer, inj maskCtx) []string
}

// masks is every field the differential tests do not compare byte for
// byte, in the order they are applied (checksums are verified before the
// fields they cover are blanked). The README's "Checked against the Linux
// kernel" section lists them.
var masks = []mask{
	{
		Field: "outer UDP checksum of a VXLAN packet",
		Reason: "it covers the outer source port, which is a hash (see below); " +
			"instead both checksums must be present (udpcsum) and verify",
		apply: func(k, s []byte, kl, sl ipLayer, _ maskCtx) []string {
			if !isVXLAN(k, kl) {
				return nil
			}
			var bad []string
			for _, x := range []struct {
				who string
				b   []byte
				l   ipLayer
			}{{"kernel", k, kl}, {"kubewalk", s, sl}} {
				if binary.BigEndian.Uint16(x.b[x.l.l4+6:]) == 0 {
					bad = append(bad, "outer udp.checksum: "+x.who+" sends none (0)")
				} else if !l4Valid(x.b, x.l) {
					bad = append(bad, "outer udp.checksum: "+x.who+"'s does not verify")
				}
			}
			blank(k, kl.l4+6, 2)
			blank(s, sl.l4+6, 2)
			return bad
		},
	},
	{
		Field: "outer UDP source port of a VXLAN packet",
		Reason: "udp_flow_src_port hashes the inner flow with a per-boot seed; " +
			"instead both must lie in the local port range 32768-60999",
		apply: func(k, s []byte, kl, sl ipLayer, _ maskCtx) []string {
			if !isVXLAN(k, kl) {
				return nil
			}
			var bad []string
			for _, x := range []struct {
				who string
				p   uint16
			}{{"kernel", binary.BigEndian.Uint16(k[kl.l4:])}, {"kubewalk", binary.BigEndian.Uint16(s[sl.l4:])}} {
				if x.p < 32768 || x.p > 60999 {
					bad = append(bad, fmt.Sprintf("outer udp.srcport: %s's %d is outside 32768-60999", x.who, x.p))
				}
			}
			blank(k, kl.l4, 2)
			blank(s, sl.l4, 2)
			return bad
		},
	},
	{
		Field: "TCP/UDP port of a node address chosen by MASQUERADE --random-fully (and so the transport checksum)",
		Reason: "kube-proxy's and flannel's MASQUERADE rules use --random-fully, so the kernel draws the " +
			"source port at random (NF_NAT_RANGE_PROTO_RANDOM_FULLY); the address is still compared, and " +
			"both transport checksums must verify before they are blanked",
		apply: func(k, s []byte, kl, sl ipLayer, inj maskCtx) []string {
			if (kl.proto != 6 && kl.proto != 17) || isVXLAN(k, kl) || kl.end < kl.l4+18 {
				return nil
			}
			src, dst := [4]byte(k[kl.off+12:kl.off+16]), [4]byte(k[kl.off+16:kl.off+20])
			var at []int
			if inj.masq[src] {
				at = append(at, 0)
			}
			if inj.masq[dst] {
				at = append(at, 2)
			}
			if len(at) == 0 || inj.injected[ipKey(k, kl)] {
				return nil
			}
			var bad []string
			if !l4Valid(k, kl) {
				bad = append(bad, "transport checksum: kernel's does not verify")
			}
			if !l4Valid(s, sl) {
				bad = append(bad, "transport checksum: kubewalk's does not verify")
			}
			for _, a := range at {
				blank(k, kl.l4+a, 2)
				blank(s, sl.l4+a, 2)
			}
			cs := 6
			if kl.proto == 6 {
				cs = 16
			}
			blank(k, kl.l4+cs, 2)
			blank(s, sl.l4+cs, 2)
			return bad
		},
	},
	{
		Field: "IPv4 identification (and so the header checksum) of a packet a stack generated with DF clear",
		Reason: "ip_select_ident draws it from a hashed, randomly seeded per-destination counter " +
			"(ICMP errors, echo replies, VXLAN outer headers); packets the test injected keep theirs " +
			"and are compared; both header checksums must verify before they are blanked",
		apply: func(k, s []byte, kl, sl ipLayer, inj maskCtx) []string {
			if k[kl.off+6]&0x40 != 0 || inj.injected[ipKey(k, kl)] {
				return nil
			}
			var bad []string
			if header.IPv4(k[kl.off:kl.l4]).CalculateChecksum() != 0xffff {
				bad = append(bad, "ipv4.checksum: kernel's does not verify")
			}
			if header.IPv4(s[sl.off:sl.l4]).CalculateChecksum() != 0xffff {
				bad = append(bad, "ipv4.checksum: kubewalk's does not verify")
			}
			blank(k, kl.off+4, 2)
			blank(s, sl.off+4, 2)
			blank(k, kl.off+10, 2)
			blank(s, sl.off+10, 2)
			return bad
		},
	},
}

// ignored is every kind of frame the differential tests drop from the
// kernel's captures before comparing, with the reason. The README lists
// them with the masks.
var ignored = []struct {
	What, Reason string
	match        func(b []byte) bool
}{
	{
		What: "IGMP membership reports (IPv4 protocol 2)",
		Reason: "the kernel sends unsolicited IGMPv3 reports for a while after a device comes up; " +
			"kubewalk does not model multicast group membership, and they are not part of any walk",
		match: func(b []byte) bool {
			return len(b) >= 14+20 && b[12] == 0x08 && b[13] == 0x00 && b[14+9] == 2
		},
	},
}

func isIgnored(b []byte) bool {
	for _, i := range ignored {
		if i.match(b) {
			return true
		}
	}
	return false
}

func blank(b []byte, at, n int) { clear(b[at : at+n]) }

// applyMasks masks copies of k and s, innermost layer last (outer
// checksums are checked on the original bytes first). Frames whose layers
// do not line up are left alone: the byte comparison reports them.
func applyMasks(k, s []byte, inj maskCtx) (km, sm []byte, problems []string) {
	km, sm = append([]byte(nil), k...), append([]byte(nil), s...)
	kls, sls := ipLayers(km), ipLayers(sm)
	if len(kls) != len(sls) {
		return km, sm, nil
	}
	for i := range kls {
		if kls[i].off != sls[i].off || kls[i].end != sls[i].end || kls[i].proto != sls[i].proto {
			return km, sm, nil
		}
	}
	for _, m := range masks {
		for i := range kls {
			problems = append(problems, m.apply(km, sm, kls[i], sls[i], inj)...)
		}
	}
	return km, sm, problems
}
