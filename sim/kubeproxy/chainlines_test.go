package kubeproxy

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
)

// checkChainLines checks ChainLinesTable against the restore text it
// stands for, as netfilter reads that text, for both tables, deleting
// the chains of prev's nat table that r leaves stale.
func checkChainLines(t *testing.T, r, prev *Rules, step string) {
	t.Helper()
	var stale []string
	if prev != nil {
		was, ok := netfilter.ParseChainLines(prev.RestoreInputTable("nat"))
		require.True(t, ok, step)
		stale = r.StaleChains(slices.Sorted(maps.Keys(was.Declared)))
	}
	for _, tb := range []string{"filter", "nat"} {
		want, ok := netfilter.ParseChainLines(r.RestoreInputTableDeleting(tb, stale))
		lines, declared, deleted, got := r.ChainLinesTable(tb, stale)
		require.Equal(t, ok, got, "%s: %s", step, tb)
		if !ok {
			continue
		}
		assert.Equal(t, want.Lines, lines, "%s: %s lines", step, tb)
		assert.Equal(t, want.Declared, declared, "%s: %s declared", step, tb)
		assert.Equal(t, want.Deleted, deleted, "%s: %s deleted", step, tb)
	}
	_, _, _, ok := r.ChainLinesTable("mangle", nil)
	assert.False(t, ok, "a table kube-proxy does not write")
}

// TestTableChainWithoutMap: a port fragment's table (no declared map)
// declares each chain once, in first-declared order, as a table with
// the map does.
func TestTableChainWithoutMap(t *testing.T) {
	tests := []struct {
		name  string
		calls []string
		want  []string
	}{
		{"none", nil, nil},
		{"distinct", []string{"KUBE-SVC-A", "KUBE-SEP-1", "KUBE-SEP-2"}, []string{"KUBE-SVC-A", "KUBE-SEP-1", "KUBE-SEP-2"}},
		{"repeated", []string{"KUBE-EXT-A", "KUBE-SVC-A", "KUBE-EXT-A", "KUBE-SEP-1", "KUBE-SVC-A"}, []string{"KUBE-EXT-A", "KUBE-SVC-A", "KUBE-SEP-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frag, full := &table{}, newTable("nat")
			for _, c := range tt.calls {
				frag.chain(c)
				full.chain(c)
			}
			assert.Equal(t, tt.want, frag.chains)
			assert.Equal(t, full.chains, frag.chains)
			assert.Nil(t, frag.declared)
		})
	}
}
