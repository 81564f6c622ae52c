package netfilter

import (
	"os"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newNF(t testing.TB) *Netfilter {
	t.Helper()
	e := datapath.NewEngine(1)
	ns := e.NewNetns("node", "host")
	return Install(ns, nil)
}

func TestRoundTripKubeProxyDump(t *testing.T) {
	in, err := os.ReadFile("testdata/kube-proxy.save")
	require.NoError(t, err)
	nf := newNF(t)
	require.NoError(t, nf.Restore(string(in), RestoreOptions{}))
	assert.Equal(t, string(in), nf.Save(SaveOptions{}))
}

// TestCountersFollowRules: a rule's counters are the namespace's, kept with
// the rule while rules are inserted and deleted around it (iptables -I/-D,
// a --noflush restore of other chains), given by the input under
// --counters, and zero for a rule loaded anew, as on the kernel.
func TestCountersFollowRules(t *testing.T) {
	nf := newNF(t)
	require.NoError(t, nf.Restore(`*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:A - [0:0]
[3:180] -A FORWARD -s 10.0.0.1/32 -j A
[7:420] -A FORWARD -s 10.0.0.2/32 -j ACCEPT
COMMIT
`, RestoreOptions{Counters: true}))
	fwd := nf.Table(Filter).Chain("FORWARD")
	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"restored with -c", func() error { return nil },
			"[3:180] -A FORWARD -s 10.0.0.1/32 -j A\n[7:420] -A FORWARD -s 10.0.0.2/32 -j ACCEPT\n"},
		{"insert before", func() error { return nf.Exec(Filter, "-I", "FORWARD", "-s", "10.0.0.3/32", "-j", "DROP") },
			"[0:0] -A FORWARD -s 10.0.0.3/32 -j DROP\n[3:180] -A FORWARD -s 10.0.0.1/32 -j A\n[7:420] -A FORWARD -s 10.0.0.2/32 -j ACCEPT\n"},
		{"delete between", func() error { return nf.Exec(Filter, "-D", "FORWARD", "-s", "10.0.0.1/32", "-j", "A") },
			"[0:0] -A FORWARD -s 10.0.0.3/32 -j DROP\n[7:420] -A FORWARD -s 10.0.0.2/32 -j ACCEPT\n"},
		{"noflush restore of another chain", func() error {
			return nf.Restore("*filter\n:A - [0:0]\n[9:9] -A A -j ACCEPT\nCOMMIT\n", RestoreOptions{Noflush: true, Counters: true})
		}, "[0:0] -A FORWARD -s 10.0.0.3/32 -j DROP\n[7:420] -A FORWARD -s 10.0.0.2/32 -j ACCEPT\n[9:9] -A A -j ACCEPT\n"},
		{"reloaded without counters", func() error {
			return nf.Restore("*filter\n:A - [0:0]\n-A A -j ACCEPT\nCOMMIT\n", RestoreOptions{Noflush: true, Counters: true})
		}, "[0:0] -A FORWARD -s 10.0.0.3/32 -j DROP\n[7:420] -A FORWARD -s 10.0.0.2/32 -j ACCEPT\n[0:0] -A A -j ACCEPT\n"},
	}
	for _, s := range steps {
		require.NoError(t, s.do(), s.name)
		out := nf.Save(SaveOptions{Counters: true, Tables: []string{Filter}})
		_, rules, _ := strings.Cut(out, ":OUTPUT ACCEPT [0:0]\n:A - [0:0]\n")
		assert.Equal(t, s.want+"COMMIT\n", rules, s.name)
	}
	p, b := fwd.RuleCounters(1)
	assert.Equal(t, [2]uint64{7, 420}, [2]uint64{p, b})
}
