package route

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSharedTableIsItsCopies: a table holding a Shared table's routes
// (but the one at its skip prefix) answers Lookup, Get, Len and List as a
// table holding copies does, its generation moves when a shared route
// changes, and a change at a shared destination unshares it first.
func TestSharedTableIsItsCopies(t *testing.T) {
	pfx := netip.MustParsePrefix
	peer := func(s string) Route {
		p := pfx(s)
		return Route{Dst: p, Gw: p.Addr(), Dev: 3, DevName: "flannel.1", OnLink: true, Proto: ProtoBoot}
	}
	own := []Route{
		{Dst: pfx("0.0.0.0/0"), Gw: netip.MustParseAddr("192.168.7.1"), Dev: 2, DevName: "eth0", Proto: ProtoBoot},
		{Dst: pfx("10.244.0.0/24"), Dev: 4, DevName: "cni0", Proto: ProtoKernel, Scope: ScopeLink},
		{Dst: pfx("10.244.2.0/24"), Dev: 2, DevName: "eth0", Metric: 50, Proto: ProtoBoot, Scope: ScopeLink},
		{Dst: pfx("10.244.2.128/25"), Dev: 2, DevName: "eth0", Proto: ProtoBoot, Scope: ScopeLink},
	}
	peers := []Route{peer("10.244.0.0/24"), peer("10.244.1.0/24"), peer("10.244.2.0/24")}
	var copies, shared Table
	var s Shared
	s.Dev = 3
	for _, r := range own {
		require.NoError(t, copies.Add(r))
		require.NoError(t, shared.Add(r))
	}
	for _, r := range peers[1:] {
		require.NoError(t, copies.Replace(r))
	}
	for _, r := range peers {
		require.NoError(t, s.Put(r))
	}
	shared.Share(&s, pfx("10.244.0.0/24"), nil)
	same := func(step string) {
		t.Helper()
		require.Equal(t, copies.List(), shared.List(), step)
		require.Equal(t, copies.Len(), shared.Len(), step)
		for _, a := range []string{"10.244.0.9", "10.244.1.9", "10.244.2.9", "10.244.2.200", "10.244.3.9", "8.8.8.8"} {
			want, wok := copies.Lookup(netip.MustParseAddr(a).As4())
			got, gok := shared.Lookup(netip.MustParseAddr(a).As4())
			require.Equal(t, wok, gok, step+" "+a)
			if wok {
				require.Equal(t, *want, *got, step+" "+a)
			}
		}
		for _, r := range append(own, peers...) {
			w, wok := copies.Get(r.Dst, r.Metric)
			g, gok := shared.Get(r.Dst, r.Metric)
			require.Equal(t, wok, gok, step)
			require.Equal(t, w, g, step)
		}
	}
	same("shared")
	g := shared.Gen()
	require.True(t, s.Remove(pfx("10.244.1.0/24")))
	copies.Delete(pfx("10.244.1.0/24"), 0)
	require.NotEqual(t, g, shared.Gen(), "a shared change is a change of every table holding it")
	same("peer removed")
	require.True(t, shared.Shared())
	require.True(t, shared.Delete(pfx("10.244.2.0/24"), 0))
	require.True(t, copies.Delete(pfx("10.244.2.0/24"), 0))
	require.False(t, shared.Shared(), "deleting a shared route by hand unshares")
	same("hand delete")
	require.NoError(t, s.Put(peer("10.244.5.0/24")))
	require.Equal(t, 3, s.Len())
	same("unshared tables do not see later peers")
}

// TestSetNotifyFollowsGen: every change that moves a table's generation
// (its own routes, its shared table's, sharing and unsharing) moves the
// counter it notifies too, which is what lets the datapath's replays
// check the engine's configuration generation instead of each table's.
func TestSetNotifyFollowsGen(t *testing.T) {
	pfx := netip.MustParsePrefix
	peer := func(s string) Route {
		p := pfx(s)
		return Route{Dst: p, Gw: p.Addr(), Dev: 3, DevName: "flannel.1", OnLink: true, Proto: ProtoBoot}
	}
	var tbl Table
	var s Shared
	s.Dev = 3
	var cfg uint64
	tbl.SetNotify(&cfg)
	steps := []struct {
		name string
		do   func() error
	}{
		{"add", func() error {
			return tbl.Add(Route{Dst: pfx("10.244.0.0/24"), Dev: 4, DevName: "cni0", Proto: ProtoKernel, Scope: ScopeLink})
		}},
		{"replace", func() error {
			return tbl.Replace(Route{Dst: pfx("10.244.0.0/24"), Dev: 5, DevName: "cni1", Proto: ProtoKernel, Scope: ScopeLink})
		}},
		{"shared put before sharing", func() error { return s.Put(peer("10.244.1.0/24")) }},
		{"share", func() error { tbl.Share(&s, pfx("10.244.0.0/24"), nil); return nil }},
		{"shared put", func() error { return s.Put(peer("10.244.2.0/24")) }},
		{"shared remove", func() error { s.Remove(pfx("10.244.2.0/24")); return nil }},
		{"skip", func() error { tbl.SetSkip(pfx("10.244.1.0/24")); return nil }},
		{"unshare", func() error { tbl.Unshare(); return nil }},
		{"delete", func() error { tbl.Delete(pfx("10.244.0.0/24"), 0); return nil }},
		{"delete dev", func() error { tbl.DeleteDev(3); return nil }},
	}
	for _, st := range steps {
		gen, n := tbl.Gen(), cfg
		require.NoError(t, st.do(), st.name)
		if tbl.Gen() != gen {
			require.NotEqual(t, n, cfg, "%s: the generation moved, the counter did not", st.name)
		}
	}
	require.Equal(t, 0, tbl.Len())
}
