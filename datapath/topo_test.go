package datapath

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// capture is a probe stage that keeps a copy of every frame it sees.
type capture struct{ frames [][]byte }

func (c *capture) Process(w *Walk, p *Packet) Verdict {
	c.frames = append(c.frames, append([]byte(nil), p.Frame()...))
	return VerdictContinue
}

// testTopo is a host with bridge br0 (10.0.0.1/24) and two pods a (.2) and
// b (.3) on it, each with a default route via .1; the host forwards.
type testTopo struct {
	e          *Engine
	host, a, b *Netns
	br         *Device
	va, vb     *Device // host-side veths
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func newTopo(t testing.TB) *testTopo {
	t.Helper()
	e := NewEngine(42)
	tp := &testTopo{e: e, host: e.NewNetns("node", "host")}
	tp.host.Sysctl.IPForward = true
	br, err := tp.host.AddBridge("br0")
	require.NoError(t, err)
	br.SetUp(true)
	require.NoError(t, tp.host.AddAddr("br0", pfx("10.0.0.1/24")))
	tp.br = br
	for i, name := range []string{"a", "b"} {
		ns := e.NewNetns("node", name)
		eth0, hv, err := ns.AddVeth("eth0", tp.host, "veth-"+name)
		require.NoError(t, err)
		eth0.SetUp(true)
		hv.SetUp(true)
		require.NoError(t, tp.host.SetMaster(hv.Name, "br0"))
		require.NoError(t, ns.AddAddr("eth0", netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(2 + i)}), 24)))
		require.NoError(t, ns.AddRoute(RouteSpec{Dst: pfx("0.0.0.0/0"), Via: addr("10.0.0.1"), Dev: "eth0"}))
		if i == 0 {
			tp.a, tp.va = ns, hv
		} else {
			tp.b, tp.vb = ns, hv
		}
	}
	return tp
}

// ipv4 builds a minimal IPv4 packet with a valid header checksum.
func ipv4(src, dst [4]byte, proto, ttl uint8, payload []byte) []byte {
	b := make([]byte, 20+len(payload))
	writeIPv4(b, 0, len(b), 1, false, ttl, proto, src, dst)
	copy(b[20:], payload)
	return b
}

// udp builds an IPv4/UDP packet with a correct checksum.
func udp(src, dst [4]byte, sport, dport uint16, ttl uint8, payload []byte) []byte {
	l4 := make([]byte, 8+len(payload))
	l4[0], l4[1], l4[2], l4[3] = byte(sport>>8), byte(sport), byte(dport>>8), byte(dport)
	l4[4], l4[5] = byte(len(l4)>>8), byte(len(l4))
	copy(l4[8:], payload)
	b := ipv4(src, dst, ProtoUDP, ttl, l4)
	c := ^l4Checksum(b, b[20:], 17)
	b[26], b[27] = byte(c>>8), byte(c)
	return b
}
