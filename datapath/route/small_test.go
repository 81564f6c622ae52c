package route

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// A table of up to smallMax routes keeps them in one slice; what it
// answers is what the maps answer. Random adds, replaces, deletes (by
// metric and the first), device removals, shared tables held, skipped
// and unshared, on one table that keeps small ones in the slice and one
// that always uses the maps: every Add's and Delete's result, Lookup of
// addresses in and around every prefix, Get, Len, List, the generation
// and the shared table's claims must be the same after every step, and
// the slice and the move to the maps must both have been used.
func TestSmallTableIsTheMaps(t *testing.T) {
	require.Less(t, unsafe.Sizeof(Table{})-unsafe.Sizeof([2]Route{}), uintptr(160), "the maps are behind a pointer, made when needed")
	prefixes := []string{"0.0.0.0/0", "10.244.0.0/16", "10.244.3.0/24", "10.244.4.0/24", "10.244.3.128/25",
		"10.244.3.7/32", "10.0.0.0/8", "192.168.7.0/24", "10.244.3.0/25"}
	sawSmall, sawMoved := 0, 0
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var small, maps Table
		maps.mapsOnly = true
		var ss, sm Shared
		ss.Dev, sm.Dev = 3, 3
		route := func() Route {
			p := netip.MustParsePrefix(prefixes[rng.IntN(len(prefixes))])
			r := Route{Dst: p, Dev: 1 + rng.IntN(3), DevName: "d", Metric: []int{0, 0, 50, 100}[rng.IntN(4)], Proto: ProtoBoot}
			if rng.IntN(2) == 0 {
				r.Gw = p.Addr().Next()
			}
			return r
		}
		for step := range 60 {
			what := ""
			switch op := rng.IntN(12); {
			case op < 5:
				r := route()
				what = fmt.Sprint("add ", r.String(), r.Metric)
				require.Equal(t, maps.Add(r), small.Add(r), what)
			case op == 5:
				r := route()
				what = "replace " + r.String()
				require.Equal(t, maps.Replace(r), small.Replace(r), what)
			case op == 6, op == 7:
				r := route()
				m := r.Metric
				if op == 7 {
					m = -1
				}
				what = fmt.Sprint("delete ", r.Dst, m)
				require.Equal(t, maps.Delete(r.Dst, m), small.Delete(r.Dst, m), what)
			case op == 8:
				d := 1 + rng.IntN(3)
				what = fmt.Sprint("delete dev ", d)
				maps.DeleteDev(d)
				small.DeleteDev(d)
			case op == 9:
				r := route()
				what = "shared put " + r.String()
				require.Equal(t, sm.Put(r), ss.Put(r), what)
				if !maps.Shared() {
					skip := netip.MustParsePrefix(prefixes[rng.IntN(len(prefixes))])
					maps.Share(&sm, skip, nil)
					small.Share(&ss, skip, nil)
				}
			case op == 10:
				what = "unshare"
				maps.Unshare()
				small.Unshare()
			default:
				skip := netip.MustParsePrefix(prefixes[rng.IntN(len(prefixes))])
				what = fmt.Sprint("skip ", skip)
				maps.SetSkip(skip)
				small.SetSkip(skip)
			}
			what = fmt.Sprintf("seed %d step %d: %s", seed, step, what)
			require.Equal(t, canon(maps.List()), canon(small.List()), what)
			require.Equal(t, maps.Len(), small.Len(), what)
			require.Equal(t, maps.Gen(), small.Gen(), what)
			require.Equal(t, len(sm.claims), len(ss.claims), what)
			for p, c := range sm.claims {
				require.Len(t, ss.claims[p], len(c), what)
			}
			for _, ps := range prefixes {
				p := netip.MustParsePrefix(ps)
				for _, a := range []netip.Addr{p.Addr(), p.Addr().Next(), p.Addr().Prev()} {
					if !a.IsValid() {
						continue
					}
					w, wok := maps.Lookup(a.As4())
					g, gok := small.Lookup(a.As4())
					require.Equal(t, wok, gok, what+" lookup "+a.String())
					if wok {
						require.Equal(t, *w, *g, what+" lookup "+a.String())
					}
				}
				for _, m := range []int{0, 50, 100} {
					w, wok := maps.Get(p, m)
					g, gok := small.Get(p, m)
					require.Equal(t, wok, gok, what)
					require.Equal(t, w, g, what)
				}
			}
			if small.isSmall() && len(small.small) > 0 {
				sawSmall++
			}
			if !small.isSmall() && !maps.isSmall() {
				sawMoved++
			}
			require.False(t, maps.isSmall() && maps.Len() > 0 && !maps.Shared(), "the reference keeps its routes in the maps")
		}
	}
	require.Positive(t, sawSmall, "tables kept small")
	require.Positive(t, sawMoved, "tables moved to the maps")
}

// canon is routes in a total order: List orders by destination and
// metric only, so the order of two routes equal in both (which a table
// holding a shared route may get) is the sort's.
func canon(rs []Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s metric=%d dev=%d", r.String(), r.Metric, r.Dev))
	}
	slices.Sort(out)
	return out
}
