package datapath

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// innerFrame builds an Ethernet + IPv4 frame with correct checksums:
// proto 6, 17 or 1, optsWords 32-bit words of IP options (NOPs), the
// payload after the L4 header.
func innerFrame(proto uint8, optsWords int, payload []byte, udpNoCsum bool) []byte {
	ihl := 20 + 4*optsWords
	l4h := map[uint8]int{ProtoTCP: 20, ProtoUDP: 8, ProtoICMP: 8}[proto]
	n := ihl + l4h + len(payload)
	f := make([]byte, EthHdrLen+n)
	f[12], f[13] = 0x08, 0x00
	ip := f[EthHdrLen:]
	writeIPv4(ip, 0, n, 7, true, 64, proto, [4]byte{10, 244, 1, 2}, [4]byte{10, 244, 2, 3})
	ip[0] = 0x40 | byte(ihl/4)
	for i := 20; i < ihl; i++ {
		ip[i] = 1 // NOP
	}
	ip[10], ip[11] = 0, 0
	c := ^checksum.Checksum(ip[:ihl], 0)
	ip[10], ip[11] = byte(c>>8), byte(c)
	l4 := ip[ihl:]
	copy(l4[l4h:], payload)
	src, dst := tcpip.AddrFrom4([4]byte(ip[12:16])), tcpip.AddrFrom4([4]byte(ip[16:20]))
	switch proto {
	case ProtoTCP:
		t := header.TCP(l4)
		t.Encode(&header.TCPFields{SrcPort: 40000, DstPort: 80, SeqNum: 2, AckNum: 1, DataOffset: 20, Flags: header.TCPFlagAck, WindowSize: 64240})
		t.SetChecksum(^checksum.Checksum(l4, header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(l4)))))
	case ProtoUDP:
		u := header.UDP(l4)
		u.Encode(&header.UDPFields{SrcPort: 53, DstPort: 5353, Length: uint16(len(l4))})
		if !udpNoCsum {
			u.SetChecksum(^checksum.Checksum(l4, header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(l4)))))
		}
	case ProtoICMP:
		l4[0] = 8
		c := ^checksum.Checksum(l4, 0)
		l4[2], l4[3] = byte(c>>8), byte(c)
	}
	return f
}

// fullOuter is the outer checksum summed over every byte.
func fullOuter(outer header.IPv4, seg []byte) uint16 {
	c := ^checksum.Checksum(seg, header.PseudoHeaderChecksum(header.UDPProtocolNumber,
		tcpip.AddrFrom4([4]byte(outer[12:16])), tcpip.AddrFrom4([4]byte(outer[16:20])), uint16(len(seg))))
	if c == 0 {
		c = 0xffff
	}
	return c
}

// checkOuter compares the outer checksum derived from the inner's sums
// with the full sum, for the inner frame as built and with padding.
func checkOuter(t *testing.T, inner []byte, sport uint16) {
	t.Helper()
	for _, pad := range []int{0, 1, 6} {
		in := append(append([]byte(nil), inner...), make([]byte, pad)...)
		seg := make([]byte, 8+vxlanHdrLen+len(in))
		u := header.UDP(seg)
		u.Encode(&header.UDPFields{SrcPort: sport, DstPort: 8472, Length: uint16(len(seg))})
		seg[8], seg[12], seg[14] = 0x08, 0, 1
		copy(seg[16:], in)
		outer := make([]byte, 20)
		writeIPv4(outer, 0, 20+len(seg), 1, false, 64, ProtoUDP, [4]byte{192, 168, 122, 21}, [4]byte{192, 168, 122, 22})
		_, derived := innerSum(in, true)
		inIP := header.IPv4(in[EthHdrLen:])
		wantDerived := pad == 0 && !(inIP.Protocol() == ProtoUDP && header.UDP(inIP[inIP.HeaderLength():]).Checksum() == 0)
		require.Equal(t, wantDerived, derived, "pad %d: derived from the inner sums", pad)
		require.Equal(t, fullOuter(outer, seg), outerUDPChecksum(outer, seg, true), "pad %d", pad)
		require.Equal(t, fullOuter(outer, seg), outerUDPChecksum(outer, seg, false), "pad %d, summed in full", pad)
	}
}

func TestOuterUDPChecksumFromInnerSums(t *testing.T) {
	for _, tc := range []struct {
		name      string
		proto     uint8
		opts      int
		payload   int
		udpNoCsum bool
	}{
		{"tcp ack", ProtoTCP, 0, 0, false},
		{"tcp odd payload", ProtoTCP, 0, 1001, false},
		{"tcp with ip options", ProtoTCP, 3, 64, false},
		{"udp", ProtoUDP, 0, 33, false},
		{"udp without checksum", ProtoUDP, 0, 32, true},
		{"icmp echo", ProtoICMP, 0, 56, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := make([]byte, tc.payload)
			for i := range payload {
				payload[i] = byte(i*7 + 3)
			}
			checkOuter(t, innerFrame(tc.proto, tc.opts, payload, tc.udpNoCsum), 42656)
		})
	}
}

func FuzzOuterUDPChecksum(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte{}, uint16(32768))
	f.Add(uint8(1), uint8(2), []byte("hello"), uint16(60998))
	f.Add(uint8(2), uint8(0), []byte{0xff, 0xff, 0xff}, uint16(0xffff))
	f.Fuzz(func(t *testing.T, which, opts uint8, payload []byte, sport uint16) {
		if len(payload) > 2000 {
			payload = payload[:2000]
		}
		proto := [...]uint8{ProtoTCP, ProtoUDP, ProtoICMP}[int(which)%3]
		checkOuter(t, innerFrame(proto, int(opts%11), payload, which%7 == 6), sport)
	})
}

func TestCsumIsGVisorsChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	patterns := []func(i int) byte{
		func(int) byte { return byte(rng.Uint32()) },
		func(int) byte { return 0 },
		func(int) byte { return 0xff },
		func(i int) byte { return byte(i%2) * 0xff },
		func(i int) byte { return []byte{0xff, 0xfe, 0x00, 0x01}[i%4] },
	}
	for _, pat := range patterns {
		for n := 0; n < 200; n++ {
			b := make([]byte, n)
			for i := range b {
				b[i] = pat(i)
			}
			for _, init := range []uint16{0, 1, 0xfffe, 0xffff, uint16(rng.Uint32())} {
				require.Equal(t, checksum.Checksum(b, init), csum(b, init), "n=%d init=%#x % x", n, init, b)
			}
		}
	}
}

func TestPseudoSumIsGVisorsPseudoHeaderChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	addrs := [][4]byte{{0, 0, 0, 0}, {255, 255, 255, 255}, {10, 244, 1, 2}, {0xff, 0xfe, 0, 1}}
	for range 200 {
		var a [4]byte
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		addrs = append(addrs, a)
	}
	for i, src := range addrs {
		dst := addrs[(i*7+3)%len(addrs)]
		for _, proto := range []uint8{0, ProtoTCP, ProtoUDP, 0xff} {
			for _, n := range []uint16{0, 1, 20, 0xffff, uint16(rng.Uint32())} {
				want := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(proto), tcpip.AddrFrom4(src), tcpip.AddrFrom4(dst), n)
				require.Equal(t, want, pseudoSum(src, dst, proto, n), "%v %v %d %d", src, dst, proto, n)
			}
		}
	}
	require.Equal(t, header.PseudoHeaderChecksum(0, tcpip.AddrFrom4([4]byte{}), tcpip.AddrFrom4([4]byte{}), 0), pseudoSum([4]byte{}, [4]byte{}, 0, 0))
}
