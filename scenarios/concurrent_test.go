package scenarios

import (
	"strings"
	"sync"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/stretchr/testify/require"
)

// TestWorldsOnSeparateGoroutines: worlds built and changed at once on
// separate goroutines (a Go test suite's parallel tests) share nothing
// that changes what each shows: every node's `iptables-save -c` and
// `conntrack -L` after the same datagrams are those of a world built
// alone, and `go test -race` finds no shared
// state written without synchronisation (the compiled rulesets' numbers,
// the interned load plans).
func TestWorldsOnSeparateGoroutines(t *testing.T) {
	dumps := func() ([]string, error) {
		r, err := NewReference(7)
		if err != nil {
			return nil, err
		}
		if err := r.DeletePod("net", "web-1"); err != nil {
			return nil, err
		}
		// Datagrams from net/client to net/web-2 across the overlay:
		// counters, conntrack entries and the fast path's replays.
		for range 3 {
			frame, err := r.ClientFrameToWeb2(9000)
			if err != nil {
				return nil, err
			}
			if err := r.Client.Netns.Device("eth0").Transmit(frame, nil); err != nil {
				return nil, err
			}
			if err := r.World.Run(); err != nil {
				return nil, err
			}
		}
		var out []string
		for _, n := range r.Nodes() {
			out = append(out, n.Name+"\n"+n.Netfilter.Save(netfilter.SaveOptions{Counters: true})+n.Conntrack.Dump())
		}
		return out, nil
	}
	alone, err := dumps()
	require.NoError(t, err)
	require.Contains(t, strings.Join(alone, ""), "dport=9000", "the datagrams were tracked")
	const worlds = 4
	got := make([][]string, worlds)
	errs := make([]error, worlds)
	var wg sync.WaitGroup
	for i := range worlds {
		wg.Go(func() { got[i], errs[i] = dumps() })
	}
	wg.Wait()
	for i := range worlds {
		require.NoError(t, errs[i])
		require.Equal(t, alone, got[i], "world %d", i)
	}
}
