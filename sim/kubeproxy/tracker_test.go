package kubeproxy

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// changedBetween is what kube-proxy's change trackers report between two
// snapshots: the Services whose Service or EndpointSlices differ.
func changedBetween(a, b Snapshot) map[string]bool {
	type state struct {
		svc    []Service
		slices []EndpointSlice
	}
	collect := func(s Snapshot) map[string]*state {
		m := map[string]*state{}
		get := func(k string) *state {
			if m[k] == nil {
				m[k] = &state{}
			}
			return m[k]
		}
		for _, svc := range s.Services {
			st := get(svc.Namespace + "/" + svc.Name)
			st.svc = append(st.svc, svc)
		}
		for _, es := range s.EndpointSlices {
			st := get(es.Namespace + "/" + es.ServiceName)
			st.slices = append(st.slices, es)
		}
		return m
	}
	ma, mb := collect(a), collect(b)
	out := map[string]bool{}
	for k, sa := range ma {
		if !reflect.DeepEqual(sa, mb[k]) {
			out[k] = true
		}
	}
	for k := range mb {
		if ma[k] == nil {
			out[k] = true
		}
	}
	return out
}

// scanIndex is a Tracker's Index found by scanning snap: ok false when
// the Service is there twice or its EndpointSlices are not one after
// another (an Index does not answer for such a snapshot).
func scanIndex(snap Snapshot, namespace, name string) (svc, first, n int, ok bool) {
	svc = -1
	for i := range snap.Services {
		if s := &snap.Services[i]; s.Namespace == namespace && s.Name == name {
			if svc >= 0 {
				return 0, 0, 0, false
			}
			svc = i
		}
	}
	for i := range snap.EndpointSlices {
		if es := &snap.EndpointSlices[i]; es.Namespace == namespace && es.ServiceName == name {
			if n > 0 && first+n != i {
				return 0, 0, 0, false
			}
			if n == 0 {
				first = i
			}
			n++
		}
	}
	return svc, first, n, true
}

// bigSnapshot is n ClusterIP Services of eps endpoints each.
func bigSnapshot(n, eps int) Snapshot {
	var snap Snapshot
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%04d", i)
		snap.Services = append(snap.Services, Service{Namespace: "big", Name: name, ClusterIP: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}),
			Ports: []ServicePort{{Name: "http", Protocol: ProtocolTCP, Port: 80, TargetPort: FromInt(8080)}}})
		var list []Endpoint
		for j := 0; j < eps; j++ {
			list = append(list, ep(netip.AddrFrom4([4]byte{10, 244, byte(i >> 4), byte(i<<4 | j)}).String(), "cka-w1"))
		}
		snap.EndpointSlices = append(snap.EndpointSlices, slice("big", name, tcp("http", 8080), list...))
	}
	return snap
}

// TestTrackerEqualsGenerate: a Tracker told the Services changed since its
// last sync writes, sync after sync, exactly what Generate and
// GeneratePartial write from scratch (rules, explanations, UDP state,
// errors), through Services added, deleted, changed, endpoints removed
// and made terminating, the large-cluster mode switching on and off, and
// an invalid snapshot in between.
//
// With an Index (indexed), the Services changed are read from their
// places only, and everything is the same.
func TestTrackerEqualsGenerate(t *testing.T) {
	indexedRuns := 0
	defer func() { assert.Positive(t, indexedRuns, "Generates that read the Services changed through Index") }()
	for _, sc := range scenarios() {
		// (Indexed as the cluster's tracker is: for any node.)
		for _, mode := range []struct{ anyNode, indexed bool }{{false, false}, {true, false}, {true, true}} {
			anyNode := mode.anyNode
			t.Run(fmt.Sprintf("%s/anyNode=%v/indexed=%v", sc.name, anyNode, mode.indexed), func(t *testing.T) {
				steps := []Snapshot{sc.snap}
				if len(sc.snap.Services) > 0 {
					// The first Service deleted, then back.
					steps = append(steps, Snapshot{Services: sc.snap.Services[1:], EndpointSlices: sc.snap.EndpointSlices}, sc.snap)
				}
				// Every slice loses its first endpoint; the next one
				// terminates.
				var fewer Snapshot
				fewer.Services = sc.snap.Services
				for _, es := range sc.snap.EndpointSlices {
					es.Endpoints = append([]Endpoint(nil), es.Endpoints...)
					if len(es.Endpoints) > 0 {
						es.Endpoints = es.Endpoints[1:]
					}
					if len(es.Endpoints) > 0 {
						e := es.Endpoints[0]
						es.Endpoints[0] = terminating(e.Addresses[0].String(), e.NodeName, true)
					}
					fewer.EndpointSlices = append(fewer.EndpointSlices, es)
				}
				steps = append(steps, fewer)
				// Two slices with a loopback endpoint: the first one's
				// error (the snapshot's order), then back.
				if n := len(sc.snap.EndpointSlices); n > 0 {
					bad := Snapshot{Services: sc.snap.Services}
					for j, es := range sc.snap.EndpointSlices {
						if j >= n-2 && len(es.Endpoints) > 0 {
							es.Endpoints = append([]Endpoint(nil), es.Endpoints...)
							es.Endpoints[0] = ep("127.0.0."+fmt.Sprint(j+1), es.Endpoints[0].NodeName)
						}
						bad.EndpointSlices = append(bad.EndpointSlices, es)
					}
					steps = append(steps, sc.snap, bad, sc.snap)
				}
				// A duplicate Service: the validation error, then back.
				if len(sc.snap.Services) > 0 {
					dup := Snapshot{Services: append(append([]Service(nil), sc.snap.Services...), sc.snap.Services[0]), EndpointSlices: sc.snap.EndpointSlices}
					steps = append(steps, dup, sc.snap)
				}
				// Many endpoints (large-cluster mode), then back.
				if !anyNode {
					big := bigSnapshot(334, 3)
					big.Services = append(big.Services, sc.snap.Services...)
					big.EndpointSlices = append(big.EndpointSlices, sc.snap.EndpointSlices...)
					steps = append(steps, big, sc.snap)
				}
				steps = append(steps, Snapshot{})

				tr := &Tracker{AnyNode: anyNode}
				if mode.indexed {
					tr.Index = scanIndex
					defer func() { indexedRuns += tr.indexed }()
				}
				cfg := sc.cfg
				want := cfg
				if anyNode {
					want.NodeName, want.NodeIPs = "", nil
				}
				var last Snapshot
				lastOK := false
				for i, snap := range steps {
					var since map[string]bool
					if lastOK {
						since = changedBetween(last, snap)
					}
					changed := changedBetween(last, snap)
					write := func(ns, name string) bool { return changed[ns+"/"+name] }
					full, ferr := Generate(want, snap)
					got, gerr := tr.Generate(cfg, snap, since, nil)
					require.Equal(t, ferr, gerr, "step %d", i)
					if ferr != nil {
						lastOK = false
						continue
					}
					require.Equal(t, full.RestoreInput(), got.RestoreInput(), "step %d: full", i)
					assert.Equal(t, full, got, "step %d: full", i)
					// Again, as a partial sync from the last step.
					part, perr := GeneratePartial(want, snap, write)
					require.NoError(t, perr)
					got, gerr = tr.Generate(cfg, snap, map[string]bool{}, write)
					require.NoError(t, gerr)
					require.Equal(t, part.RestoreInput(), got.RestoreInput(), "step %d: partial", i)
					assert.Equal(t, part, got, "step %d: partial", i)
					last, lastOK = snap, true
				}
			})
		}
	}
}

// TestStaleChains: after a Service is deleted, the chains its ports used
// are stale (and only kube-proxy's per-Service chains are: the top-level
// ones and others' stay); a partial sync counts the chains of the
// Services it leaves out as used; the restore input declares the stale
// chains after the others and deletes them just before KUBE-SERVICES'
// last rule, as kube-proxy writes it.
func TestStaleChains(t *testing.T) {
	cfg := refConfig()
	web := webService()
	other := webService()
	other.Name, other.ClusterIP = "other", ip("10.111.80.137")
	snap := Snapshot{Services: []Service{web, other}, EndpointSlices: []EndpointSlice{
		slice("net", "web", tcp("", 80), ep("10.244.1.5", "cka-w1"), ep("10.244.2.5", "cka-w2")),
		slice("net", "other", tcp("", 80), ep("10.244.1.6", "cka-w1"))}}
	before, err := Generate(cfg, snap)
	require.NoError(t, err)
	var existing []string
	for _, line := range strings.Split(before.RestoreInputTable("nat"), "\n") {
		if name, ok := strings.CutPrefix(line, ":"); ok {
			existing = append(existing, strings.Fields(name)[0])
		}
	}
	existing = append(existing, "KUBE-SEP-NOT-OURS-X", "MY-CHAIN")
	webRules, ok := before.Service("net/web", ProtocolTCP)
	require.True(t, ok)
	want := []string{webRules.ClusterChain, webRules.Endpoints[0].Chain, webRules.Endpoints[1].Chain, "KUBE-SEP-NOT-OURS-X"}
	slices.Sort(want)

	after := Snapshot{Services: []Service{other}, EndpointSlices: snap.EndpointSlices[1:]}
	full, err := Generate(cfg, after)
	require.NoError(t, err)
	assert.Equal(t, want, full.StaleChains(existing))
	part, err := GeneratePartial(cfg, after, func(ns, name string) bool { return name == "web" })
	require.NoError(t, err)
	assert.Equal(t, want, part.StaleChains(existing), "the chains of the Service left out are in use")
	none, err := GeneratePartial(cfg, snap, func(string, string) bool { return false })
	require.NoError(t, err)
	assert.Equal(t, []string{"KUBE-SEP-NOT-OURS-X"}, none.StaleChains(existing))

	in := part.RestoreInputDeleting(want)
	assert.True(t, strings.HasPrefix(in, part.RestoreInputTable("filter")))
	nat := strings.Split(strings.TrimSuffix(part.RestoreInputTableDeleting("nat", want), "\n"), "\n")
	plain := strings.Split(strings.TrimSuffix(part.RestoreInputTable("nat"), "\n"), "\n")
	lastDecl := 0
	for i, l := range plain {
		if strings.HasPrefix(l, ":") {
			lastDecl = i
		}
	}
	var decl, del []string
	for _, c := range want {
		decl = append(decl, ":"+c+" - [0:0]")
		del = append(del, "-X "+c)
	}
	tail := len(plain) - 2 // the nodeports rule, then COMMIT
	require.Contains(t, plain[tail], "kubernetes service nodeports")
	wantNat := slices.Concat(plain[:lastDecl+1], decl, plain[lastDecl+1:tail], del, plain[tail:])
	assert.Equal(t, wantNat, nat)
	assert.Equal(t, part.RestoreInput(), part.RestoreInputDeleting(nil))
}

// TestTrackerWritingEqualsGenerate: GenerateWriting writes, sync after
// sync, what Generate and GeneratePartial write from scratch, and hands
// back the very Rules of its last call only when they are those: through
// an endpoint terminating and then gone (the second sync writes the same
// rules when the terminating endpoint is unused), a Service deleted and
// back, the large-cluster mode on and off, full syncs in between and
// partial syncs writing every Service.
func TestTrackerWritingEqualsGenerate(t *testing.T) {
	hits, redescribed, spliced, indexed := 0, 0, 0, 0
	for n, sc := range scenarios() {
		for _, withIndex := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/indexed=%v", sc.name, withIndex), func(t *testing.T) {
				drop := func(s Snapshot, f func(es *EndpointSlice)) Snapshot {
					out := Snapshot{Services: s.Services}
					for _, es := range s.EndpointSlices {
						es.Endpoints = append([]Endpoint(nil), es.Endpoints...)
						f(&es)
						out.EndpointSlices = append(out.EndpointSlices, es)
					}
					return out
				}
				term := func(s Snapshot) Snapshot { // the first endpoint of each slice terminating
					return drop(s, func(es *EndpointSlice) {
						if len(es.Endpoints) > 0 {
							e := es.Endpoints[0]
							es.Endpoints[0] = terminating(e.Addresses[0].String(), e.NodeName, true)
						}
					})
				}
				gone := func(s Snapshot) Snapshot { // then gone
					return drop(s, func(es *EndpointSlice) {
						if len(es.Endpoints) > 0 {
							es.Endpoints = es.Endpoints[1:]
						}
					})
				}
				big := bigSnapshot(334, 3)
				big.Services = append(big.Services, sc.snap.Services...)
				big.EndpointSlices = append(big.EndpointSlices, sc.snap.EndpointSlices...)
				type step struct {
					snap      Snapshot
					full, all bool // a full sync; a partial one writing every Service
				}
				steps := []step{{snap: sc.snap, full: true}, {snap: term(sc.snap)}, {snap: gone(sc.snap)}, {snap: gone(sc.snap)},
					{snap: sc.snap, full: true}}
				if n < 3 { // (the large-cluster steps cost most)
					steps = append(steps, step{snap: big}, step{snap: term(big)}, step{snap: gone(big)}, step{snap: gone(big), all: true},
						step{snap: gone(big), all: true}, step{snap: sc.snap})
				}
				steps = append(steps, step{snap: sc.snap}, step{snap: term(sc.snap), all: true}, step{snap: gone(sc.snap), all: true},
					step{snap: sc.snap, full: true}, step{snap: sc.snap, full: true})
				if len(sc.snap.Services) > 0 {
					steps = append(steps, step{snap: Snapshot{Services: sc.snap.Services[1:], EndpointSlices: sc.snap.EndpointSlices}}, step{snap: sc.snap})
				}
				tr := &Tracker{AnyNode: true}
				if withIndex {
					tr.Index = scanIndex
				}
				want := sc.cfg
				want.NodeName, want.NodeIPs = "", nil
				var last, lastExp *Rules
				var prev Snapshot
				for i, st := range steps {
					var since map[string]bool
					if i > 0 {
						since = changedBetween(prev, st.snap)
					}
					var got, exp *Rules
					var gerr, eerr error
					if st.full {
						exp, eerr = Generate(want, st.snap)
						got, gerr = tr.GenerateWriting(sc.cfg, st.snap, since, nil)
					} else {
						changed := changedBetween(prev, st.snap)
						if st.all {
							changed = changedBetween(Snapshot{}, st.snap)
						}
						exp, eerr = GeneratePartial(want, st.snap, func(ns, name string) bool { return changed[ns+"/"+name] })
						got, gerr = tr.GenerateWriting(sc.cfg, st.snap, since, changed)
					}
					require.Equal(t, eerr, gerr, "step %d", i)
					if eerr != nil {
						last = nil
						continue
					}
					require.Equal(t, exp.RestoreInput(), got.RestoreInput(), "step %d", i)
					assert.Equal(t, exp, got, "step %d", i)
					checkChainLines(t, exp, lastExp, fmt.Sprint("step ", i)) // (exp: StaleChains fills in what it finds)
					lastExp = exp
					if got == last {
						hits++
					}
					last, prev = got, st.snap
				}
				redescribed += tr.redescribed
				spliced += tr.spliced
				indexed += tr.indexed
			})
		}
	}
	assert.Positive(t, indexed, "Generates that read the Services changed through Index")
	assert.Positive(t, hits, "Rules handed back again")
	assert.Positive(t, redescribed, "Rules made from the last ones, ports described anew")
	assert.Positive(t, spliced, "partial syncs written from the run of the ports' rules")
}

// TestTrackerSplicesTheRun: a partial sync of a Tracker copies the rules
// every service port writes at every sync from the run it keeps (written
// over in place for the ports recomputed, made anew when their sizes or
// the ports change), and writes exactly what GeneratePartial writes from
// scratch, through endpoints terminating, gone and back, a Service left
// without endpoints and given them again, a Service deleted and added,
// and several Services at once.
func TestTrackerSplicesTheRun(t *testing.T) {
	base := bigSnapshot(300, 3)
	with := func(f func(s *Snapshot)) Snapshot {
		out := Snapshot{Services: slices.Clone(base.Services)}
		for _, es := range base.EndpointSlices {
			es.Endpoints = slices.Clone(es.Endpoints)
			out.EndpointSlices = append(out.EndpointSlices, es)
		}
		f(&out)
		return out
	}
	term := func(i int) func(s *Snapshot) {
		return func(s *Snapshot) {
			e := s.EndpointSlices[i].Endpoints[0]
			s.EndpointSlices[i].Endpoints[0] = terminating(e.Addresses[0].String(), e.NodeName, true)
		}
	}
	gone := func(i int) func(s *Snapshot) {
		return func(s *Snapshot) { s.EndpointSlices[i].Endpoints = s.EndpointSlices[i].Endpoints[1:] }
	}
	none := func(i int) func(s *Snapshot) {
		return func(s *Snapshot) { s.EndpointSlices[i].Endpoints = nil }
	}
	both := func(a, b func(s *Snapshot)) func(s *Snapshot) {
		return func(s *Snapshot) { a(s); b(s) }
	}
	steps := []struct {
		snap    Snapshot
		inPlace bool // the run written over in place, not made anew
		again   bool // the same rules, handed back (the run's fragments described anew)
	}{
		{snap: with(term(7))}, // (the run made)
		{snap: with(gone(7)), inPlace: true, again: true},
		{snap: base, inPlace: true},
		{snap: with(term(150)), inPlace: true},
		{snap: with(both(gone(150), term(299))), inPlace: true},
		{snap: with(none(3))}, // its cluster IP rule moves to filter: other sizes
		{snap: base},
		{snap: with(gone(0)), inPlace: true},
		{snap: Snapshot{Services: base.Services[1:], EndpointSlices: base.EndpointSlices[1:]}}, // a port less
		{snap: base},
		{snap: with(term(42)), inPlace: true},
	}
	cfg := Config{ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")}
	tr := &Tracker{AnyNode: true}
	_, err := tr.GenerateWriting(cfg, base, nil, nil)
	require.NoError(t, err)
	prev := base
	for i, st := range steps {
		changed := changedBetween(prev, st.snap)
		require.NotEmpty(t, changed, "step %d", i)
		exp, err := GeneratePartial(cfg, st.snap, func(ns, name string) bool { return changed[ns+"/"+name] })
		require.NoError(t, err)
		made, spliced := tr.runMade, tr.spliced
		got, err := tr.GenerateWriting(cfg, st.snap, changed, changed)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, exp.RestoreInput(), got.RestoreInput(), "step %d", i)
		require.Equal(t, exp, got, "step %d", i)
		if st.again {
			assert.Equal(t, spliced, tr.spliced, "step %d: handed back", i)
		} else {
			assert.Equal(t, spliced+1, tr.spliced, "step %d: written from the run", i)
		}
		assert.Equal(t, !st.inPlace, tr.runMade > made, "step %d: the run made anew", i)
		prev = st.snap
	}
}

// TestTrackerChecksDuplicatesOfTheChanged: with the Services changed
// known, the duplicate check looks at those only (one of 300 here), and
// still finds a Service named twice among them.
func TestTrackerChecksDuplicatesOfTheChanged(t *testing.T) {
	snap := bigSnapshot(300, 1)
	cfg := Config{NodeName: "cka-w1", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.56.11")}, ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")}
	tr := &Tracker{}
	_, err := tr.Generate(cfg, snap, nil, nil)
	require.NoError(t, err)
	stamped := func() int {
		n := 0
		for _, at := range tr.seen {
			if at == tr.seenAt {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 300, stamped(), "a full sync checks every Service")
	next := snap
	next.EndpointSlices = slices.Clone(snap.EndpointSlices)
	next.EndpointSlices[7].Endpoints = nil
	_, err = tr.Generate(cfg, next, changedBetween(snap, next), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, stamped(), "only the Service changed is checked")
	dup := next
	dup.Services = append(slices.Clone(next.Services), next.Services[7])
	_, err = tr.Generate(cfg, dup, changedBetween(next, dup), nil)
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	assert.Equal(t, "metadata.name", verr.Field)
}
