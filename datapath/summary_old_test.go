// The fmt-based summary of earlier versions, kept as the oracle of
// FuzzSummarizeUnchanged.

package datapath

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// summarizeFmt is the fmt-based Summarize this package had before; it describes a frame in one line, the way tcpdump would: ARP
// requests and replies, ICMP, UDP and TCP with flags, and VXLAN with its
// inner frame. It allocates; call it only for traced packets.
func summarizeFmt(f []byte) string {
	var b strings.Builder
	summarizeOld(&b, f, 0)
	return b.String()
}

func summarizeOld(b *strings.Builder, f []byte, depth int) {
	if len(f) < EthHdrLen {
		b.WriteString("truncated frame")
		return
	}
	switch et := uint16(f[12])<<8 | uint16(f[13]); et {
	case 0x0806:
		a, err := ParseARP(f[EthHdrLen:])
		if err != nil {
			b.WriteString("ARP, " + err.Error())
			return
		}
		if a.Op == 1 {
			fmt.Fprintf(b, "ARP, Request who-has %s tell %s", addrString(a.TPA), addrString(a.SPA))
		} else {
			fmt.Fprintf(b, "ARP, Reply %s is-at %s", addrString(a.SPA), a.SHA)
		}
	case 0x0800:
		summarizeIPv4Old(b, f[EthHdrLen:], depth)
	default:
		fmt.Fprintf(b, "ethertype 0x%04x, length %d", et, len(f))
	}
}

func summarizeIPv4Old(b *strings.Builder, ip []byte, depth int) {
	if len(ip) < 20 || ip[0]>>4 != 4 || int(ip[0]&0xf)*4 > len(ip) {
		b.WriteString("IP, malformed")
		return
	}
	h := header.IPv4(ip)
	src, dst := addrString([4]byte(ip[12:16])), addrString([4]byte(ip[16:20]))
	l4 := ip[h.HeaderLength():]
	if tl := int(h.TotalLength()); tl >= int(h.HeaderLength()) && tl <= len(ip) {
		l4 = ip[h.HeaderLength():tl]
	}
	switch h.Protocol() {
	case ProtoICMP:
		if len(l4) < 8 {
			fmt.Fprintf(b, "%s > %s: ICMP, truncated", src, dst)
			break
		}
		ic := header.ICMPv4(l4)
		fmt.Fprintf(b, "%s > %s: ICMP %s", src, dst, icmpName(ic.Type(), ic.Code()))
		switch ic.Type() {
		case header.ICMPv4Echo, header.ICMPv4EchoReply:
			fmt.Fprintf(b, ", id %d, seq %d", ic.Ident(), ic.Sequence())
		case header.ICMPv4DstUnreachable:
			if ic.Code() == header.ICMPv4FragmentationNeeded {
				fmt.Fprintf(b, " (mtu %d)", ic.MTU())
			}
		}
	case ProtoUDP:
		if len(l4) < 8 {
			fmt.Fprintf(b, "%s > %s: UDP, truncated", src, dst)
			break
		}
		u := header.UDP(l4)
		fmt.Fprintf(b, "%s.%d > %s.%d: UDP, length %d", src, u.SourcePort(), dst, u.DestinationPort(), len(l4)-8)
		if (u.DestinationPort() == 8472 || u.DestinationPort() == 4789) && len(l4) >= 16+EthHdrLen && l4[8]&0x08 != 0 && depth == 0 {
			vni := uint32(l4[12])<<16 | uint32(l4[13])<<8 | uint32(l4[14])
			fmt.Fprintf(b, " VXLAN, vni %d: ", vni)
			summarizeOld(b, l4[16:], depth+1)
			return
		}
	case ProtoTCP:
		if len(l4) < 20 {
			fmt.Fprintf(b, "%s > %s: TCP, truncated", src, dst)
			break
		}
		t := header.TCP(l4)
		fmt.Fprintf(b, "%s.%d > %s.%d: Flags [%s], seq %d", src, t.SourcePort(), dst, t.DestinationPort(), tcpFlagsOld(t.Flags()), t.SequenceNumber())
		if t.Flags()&header.TCPFlagAck != 0 {
			fmt.Fprintf(b, ", ack %d", t.AckNumber())
		}
		if off := int(t.DataOffset()); off <= len(l4) {
			fmt.Fprintf(b, ", length %d", len(l4)-off)
		}
	case ProtoSCTP:
		if len(l4) < 12 {
			fmt.Fprintf(b, "%s > %s: sctp, truncated", src, dst)
			break
		}
		fmt.Fprintf(b, "%s.%d > %s.%d: sctp", src, uint16(l4[0])<<8|uint16(l4[1]), dst, uint16(l4[2])<<8|uint16(l4[3]))
		summarizeSCTPChunksOld(b, l4[12:])
	default:
		fmt.Fprintf(b, "%s > %s: ip-proto-%d", src, dst, h.Protocol())
	}
	fmt.Fprintf(b, ", ttl %d", h.TTL())
}

func tcpFlagsOld(f header.TCPFlags) string {
	var s []byte
	if f&header.TCPFlagSyn != 0 {
		s = append(s, 'S')
	}
	if f&header.TCPFlagFin != 0 {
		s = append(s, 'F')
	}
	if f&header.TCPFlagRst != 0 {
		s = append(s, 'R')
	}
	if f&header.TCPFlagPsh != 0 {
		s = append(s, 'P')
	}
	if f&header.TCPFlagAck != 0 {
		s = append(s, '.')
	}
	if len(s) == 0 {
		return "none"
	}
	return string(s)
}

// summarizeSCTPChunks lists the chunks as tcpdump does: "(1) [INIT] [init
// tag: T] [rwnd: R] [OS: O] [MIS: M] [init TSN: N]".
func summarizeSCTPChunksOld(b *strings.Builder, c []byte) {
	for i := 1; len(c) >= 4; i++ {
		typ, n := c[0], int(c[2])<<8|int(c[3])
		name := ""
		if int(typ) < len(sctpChunkNames) {
			name = sctpChunkNames[typ]
		}
		if name == "" {
			name = "chunk type " + itoa(int(typ))
		}
		fmt.Fprintf(b, " (%d) [%s]", i, name)
		if (typ == 1 || typ == 2) && n >= 20 && len(c) >= 20 {
			be := func(o int) uint32 { return uint32(c[o])<<24 | uint32(c[o+1])<<16 | uint32(c[o+2])<<8 | uint32(c[o+3]) }
			fmt.Fprintf(b, " [init tag: %d] [rwnd: %d] [OS: %d] [MIS: %d] [init TSN: %d]", be(4), be(8),
				uint16(c[12])<<8|uint16(c[13]), uint16(c[14])<<8|uint16(c[15]), be(16))
		}
		if n < 4 {
			return
		}
		n = (n + 3) &^ 3
		if n > len(c) {
			return
		}
		c = c[n:]
	}
}

// FuzzSummarizeUnchanged checks that Summarize prints exactly what the
// fmt-based version printed, for any bytes.
func FuzzSummarizeUnchanged(f *testing.F) {
	for _, fr := range summaryFrames() {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if got, want := Summarize(frame), summarizeFmt(frame); got != want {
			t.Fatalf("Summarize(% x)\n got %q\nwant %q", frame, got, want)
		}
		if got, want := Summarize(flipMACs(frame)), summarizeFmt(frame); got != want {
			t.Fatalf("the Ethernet addresses changed the summary of % x: %q, not %q", frame, got, want)
		}
	})
}

// summaryFrames are frames of every kind Summarize knows, whole and cut.
func summaryFrames() [][]byte {
	eth := func(et uint16, b []byte) []byte {
		return append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, byte(et >> 8), byte(et)}, b...)
	}
	a, b := [4]byte{10, 244, 1, 2}, [4]byte{10, 244, 2, 3}
	var out [][]byte
	add := func(fr []byte) {
		for n := 0; n <= len(fr); n += 1 + n/4 {
			out = append(out, fr[:n])
		}
		out = append(out, fr)
	}
	req := make([]byte, 42)
	writeARP(req, 1, MAC{2, 0, 0, 0, 0, 1}, a, BroadcastMAC, MAC{}, b)
	add(req)
	rep := make([]byte, 42)
	writeARP(rep, 2, MAC{2, 0, 0, 0, 0, 1}, a, MAC{2, 0, 0, 0, 0, 2}, MAC{2, 0, 0, 0, 0, 2}, b)
	add(rep)
	add(eth(0x86dd, make([]byte, 40)))
	tcp := make([]byte, 24)
	tcp[0], tcp[1], tcp[2], tcp[3], tcp[12], tcp[13] = 0x9c, 0x40, 0, 80, 0x50, 0x1b
	add(eth(0x0800, ipv4(a, b, ProtoTCP, 64, tcp)))
	tcp2 := append([]byte{}, tcp...)
	tcp2[13] = 0
	add(eth(0x0800, ipv4(a, b, ProtoTCP, 64, tcp2)))
	for _, ty := range []byte{0, 8, 3, 11, 5} {
		for _, code := range []byte{0, 1, 2, 3, 4, 10, 13, 7} {
			ic := []byte{ty, code, 0, 0, 0, 7, 0x05, 0xdc}
			add(eth(0x0800, ipv4(a, b, ProtoICMP, 64, ic)))
		}
	}
	udpb := udp(a, b, 40000, 53, 64, []byte("hello"))
	add(eth(0x0800, udpb))
	inner := eth(0x0800, udp(a, b, 1, 9, 64, []byte("x")))
	vx := append([]byte{0x08, 0, 0, 0, 0, 0, 1, 0}, inner...)
	add(eth(0x0800, udp([4]byte{192, 168, 122, 21}, [4]byte{192, 168, 122, 22}, 40001, 8472, 64, vx)))
	sctp := make([]byte, 12+20+4+8)
	sctp[0], sctp[3] = 1, 2
	sctp[12], sctp[14], sctp[15] = 1, 0, 20
	for i := 16; i < 32; i++ {
		sctp[i] = byte(i)
	}
	sctp[32], sctp[35] = 3, 4
	sctp[36], sctp[39] = 200, 8
	add(eth(0x0800, ipv4(a, b, ProtoSCTP, 64, sctp)))
	add(eth(0x0800, ipv4(a, b, 47, 64, make([]byte, 8))))
	bad := eth(0x0800, ipv4(a, b, ProtoTCP, 64, tcp))
	bad[14] = 0x65
	add(bad)
	return out
}

// flipMACs returns a copy of frame with its first 12 bytes inverted.
func flipMACs(frame []byte) []byte {
	c := append([]byte{}, frame...)
	for i := 0; i < len(c) && i < 12; i++ {
		c[i] = ^c[i]
	}
	return c
}

func TestSummarizeUnchanged(t *testing.T) {
	for _, fr := range summaryFrames() {
		require.Equal(t, summarizeFmt(fr), Summarize(fr), "% x", fr)
		require.Equal(t, summarizeFmt(fr), Summarize(flipMACs(fr)), "the Ethernet addresses are not summarised (Packet.Summary's memo skips them): % x", fr)
	}
}

func TestTraceSummaryMemo(t *testing.T) {
	tr := &Trace{}
	calls := 0
	render := func(f []byte) string { calls++; return Summarize(f) }
	f := append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}, udp(ipA, ipB, 1, 9, 64, []byte("x"))...)
	s1 := tr.Summary(f, 12, render)
	s2 := tr.Summary(flipMACs(f), 12, render)
	assert.Equal(t, 1, calls, "only the addresses changed")
	assert.Equal(t, s1, s2)
	g := append([]byte{}, f...)
	g[14+8]-- // the TTL
	assert.NotEqual(t, s1, tr.Summary(g, 12, render))
	assert.Equal(t, summarizeFmt(f[:len(f)-1]), tr.Summary(f[:len(f)-1], 12, render), "a shorter frame")
	assert.Equal(t, 3, calls)
}
