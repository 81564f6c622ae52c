package route

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLongestPrefixMatchAndMetric(t *testing.T) {
	var tb Table
	add := func(dst, gw string, dev, metric int) {
		r := Route{Dst: netip.MustParsePrefix(dst), Dev: dev, DevName: "d", Metric: metric}
		if gw != "" {
			r.Gw = netip.MustParseAddr(gw)
		}
		require.NoError(t, tb.Add(r))
	}
	add("0.0.0.0/0", "192.168.122.1", 1, 0)
	add("10.0.0.0/8", "", 2, 0)
	add("10.244.0.0/16", "", 3, 0)
	add("10.244.2.0/24", "10.244.2.0", 4, 0)
	add("10.244.2.0/24", "", 5, 100)
	add("10.244.2.7/32", "", 6, 0)
	for _, tc := range []struct {
		dst string
		dev int
	}{
		{"8.8.8.8", 1}, {"10.1.2.3", 2}, {"10.244.9.9", 3}, {"10.244.2.1", 4},
		{"10.244.2.7", 6}, {"10.244.2.255", 4}, {"10.244.3.0", 3}, {"11.0.0.1", 1},
	} {
		r, ok := tb.Lookup(netip.MustParseAddr(tc.dst).As4())
		require.True(t, ok, tc.dst)
		require.Equal(t, tc.dev, r.Dev, tc.dst)
	}
	require.ErrorContains(t, tb.Add(Route{Dst: netip.MustParsePrefix("10.0.0.0/8"), Dev: 9}), "File exists")
	require.True(t, tb.Delete(netip.MustParsePrefix("10.244.2.0/24"), 0))
	r, _ := tb.Lookup([4]byte{10, 244, 2, 1})
	require.Equal(t, 5, r.Dev, "the metric 100 route takes over")
	require.True(t, tb.Delete(netip.MustParsePrefix("0.0.0.0/0"), -1))
	_, ok := tb.Lookup([4]byte{8, 8, 8, 8})
	require.False(t, ok)
	require.Equal(t, 4, tb.Len())
}

func TestListOrderAndFormat(t *testing.T) {
	var tb Table
	for _, r := range []Route{
		{Dst: netip.MustParsePrefix("192.168.122.0/24"), Dev: 2, DevName: "eth0", Proto: ProtoKernel, Scope: ScopeLink, Src: netip.MustParseAddr("192.168.122.21")},
		{Dst: netip.MustParsePrefix("10.244.2.0/24"), Gw: netip.MustParseAddr("10.244.2.0"), Dev: 5, DevName: "flannel.1", OnLink: true, Proto: ProtoBoot},
		{Dst: netip.MustParsePrefix("10.244.1.0/24"), Dev: 4, DevName: "cni0", Proto: ProtoKernel, Scope: ScopeLink, Src: netip.MustParseAddr("10.244.1.1")},
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("192.168.122.1"), Dev: 2, DevName: "eth0", Proto: ProtoBoot},
		{Dst: netip.MustParsePrefix("10.244.0.0/16"), Dev: 4, DevName: "cni0", Proto: ProtoStatic, Metric: 5},
	} {
		require.NoError(t, tb.Add(r))
	}
	var got []string
	for _, r := range tb.List() {
		got = append(got, r.String())
	}
	require.Equal(t, []string{
		"default via 192.168.122.1 dev eth0 ",
		"10.244.0.0/16 dev cni0 proto static metric 5 ",
		"10.244.1.0/24 dev cni0 proto kernel scope link src 10.244.1.1 ",
		"10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink ",
		"192.168.122.0/24 dev eth0 proto kernel scope link src 192.168.122.21 ",
	}, got)
}

func TestInvalidRoutes(t *testing.T) {
	var tb Table
	for _, r := range []Route{
		{Dst: netip.MustParsePrefix("10.0.0.1/8"), Dev: 1},
		{Dst: netip.MustParsePrefix("fd00::/8"), Dev: 1},
		{Dst: netip.MustParsePrefix("10.0.0.0/8")},
		{Dst: netip.MustParsePrefix("10.0.0.0/8"), Dev: 1, Gw: netip.MustParseAddr("fe80::1")},
	} {
		var e *Error
		require.ErrorAs(t, tb.Add(r), &e, r.Dst.String())
	}
}

func BenchmarkLookup1000(b *testing.B) {
	var tb Table
	for i := range 1000 {
		_ = tb.Add(Route{Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24), Dev: 1})
	}
	b.ReportAllocs()
	for b.Loop() {
		tb.Lookup([4]byte{10, 3, 200, 7})
	}
}

func TestGetIsExact(t *testing.T) {
	var tb Table
	require.NoError(t, tb.Add(Route{Dst: netip.MustParsePrefix("10.244.0.0/16"), Dev: 1, Metric: 5}))
	r, ok := tb.Get(netip.MustParsePrefix("10.244.0.0/16"), 5)
	require.True(t, ok)
	require.Equal(t, 1, r.Dev)
	_, ok = tb.Get(netip.MustParsePrefix("10.244.0.0/16"), 0)
	require.False(t, ok, "another metric")
	_, ok = tb.Get(netip.MustParsePrefix("10.244.0.0/24"), 5)
	require.False(t, ok, "a longer prefix is not the same route")
	_, ok = tb.Get(netip.MustParsePrefix("10.0.0.0/8"), 5)
	require.False(t, ok)
}
