package netfilter

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Namespaces sharing a CheckMemo answer Check as each would alone: the
// memo of one namespace's parse serves another only for the same table,
// chain and arguments, and only where the chain jumped to exists.
func TestSharedCheckMemoAnswersAsAlone(t *testing.T) {
	type check struct {
		table, chain string
		args         []string
	}
	checks := []check{
		{NAT, "OUTPUT", []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{Filter, "OUTPUT", []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{NAT, "OUTPUT", []string{"-p", "tcp", "-j", "DNAT", "--to-destination", "10.0.0.1:80"}},
		{Filter, "OUTPUT", []string{"-p", "tcp", "-j", "DNAT", "--to-destination", "10.0.0.1:80"}},
		{NAT, "PREROUTING", []string{"-j", "KUBE-SERVICES"}},
		{NAT, "PREROUTING", []string{"-p", "tcp", "--dport", "80", "-j", "KUBE-SERVICES"}},
	}
	// a has the chains and the rules; b has no KUBE-SERVICES in filter
	// and no rules; c has KUBE-SERVICES in both tables and no rules.
	setups := [][][]string{
		{{NAT, "-N", "KUBE-SERVICES"}, {Filter, "-N", "KUBE-SERVICES"},
			append([]string{NAT, "-A", "OUTPUT"}, checks[0].args...), {NAT, "-A", "OUTPUT", "-p", "tcp", "-j", "DNAT", "--to-destination", "10.0.0.1:80"},
			{NAT, "-A", "PREROUTING", "-j", "KUBE-SERVICES"}},
		{{NAT, "-N", "KUBE-SERVICES"}},
		{{NAT, "-N", "KUBE-SERVICES"}, {Filter, "-N", "KUBE-SERVICES"}},
	}
	type answer struct {
		ok  bool
		err string
	}
	fresh := func(setup [][]string, share *CheckMemo) *Netfilter {
		nf := newNF(t)
		if share != nil {
			nf.ShareChecks(share)
		}
		for _, cmd := range setup {
			require.NoError(t, nf.Exec(cmd[0], cmd[1:]...))
		}
		return nf
	}
	ask := func(nf *Netfilter, c check) answer {
		ok, err := nf.Check(c.table, c.chain, c.args...)
		a := answer{ok: ok}
		if err != nil {
			a.err = err.Error()
		}
		return a
	}
	// The plain answers: each Check in a namespace of its own, where
	// nothing is memoized yet.
	var alone, shared [][]answer
	for _, setup := range setups {
		var as []answer
		for range 2 {
			for _, c := range checks {
				as = append(as, ask(fresh(setup, nil), c))
			}
		}
		alone = append(alone, as)
	}
	var memo CheckMemo
	for _, setup := range setups {
		nf := fresh(setup, &memo)
		var as []answer
		for range 2 {
			for _, c := range checks {
				as = append(as, ask(nf, c))
			}
		}
		shared = append(shared, as)
	}
	assert.Equal(t, alone, shared)
	assert.NotEmpty(t, memo.m, "the namespaces memoized their parses")
	// the answers differ between namespaces: the test would see a memo
	// that served the wrong one
	assert.NotEqual(t, alone[0], alone[1])
	assert.NotEqual(t, alone[1], alone[2])
	assert.NotEqual(t, alone[0], alone[2])
}

// A command parsing arguments Check parsed before takes the rule text
// memoized only for the same chain: the tables end as they end in a
// namespace where nothing was checked.
func TestExecTakesCheckedTextAsParsed(t *testing.T) {
	jump := []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}
	mark := []string{"-p", "tcp", "-m", "tcp", "--dport", "80", "-j", "MARK", "--set-mark", "0x4000"}
	cmds := [][]string{
		{NAT, "-N", "KUBE-SERVICES"},
		append([]string{NAT, "-I", "OUTPUT"}, jump...),
		append([]string{NAT, "-A", "PREROUTING"}, jump...),
		append([]string{NAT, "-I", "POSTROUTING", "1"}, jump...),
		append([]string{NAT, "-A", "OUTPUT"}, mark...),
		append([]string{NAT, "-A", "PREROUTING"}, mark...),
		append([]string{NAT, "-D", "OUTPUT"}, jump...),
		append([]string{NAT, "-A", "OUTPUT"}, jump...),
	}
	plain := newNF(t)
	for _, c := range cmds {
		require.NoError(t, plain.Exec(c[0], c[1:]...))
	}
	var memo CheckMemo
	nf := newNF(t)
	nf.ShareChecks(&memo)
	require.NoError(t, nf.Exec(NAT, "-N", "KUBE-SERVICES"))
	for _, args := range [][]string{jump, mark} {
		ok, err := nf.Check(NAT, "OUTPUT", args...)
		require.NoError(t, err)
		assert.False(t, ok)
	}
	for _, c := range cmds[1:] {
		require.NoError(t, nf.Exec(c[0], c[1:]...))
	}
	assert.Equal(t, plain.Save(SaveOptions{Counters: true}), nf.Save(SaveOptions{Counters: true}))
}
