package netfilter

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// kubeProxyInput is a kube-proxy style --noflush restore of the nat table:
// service port to endpoint chains and the masquerade chains, with eps
// endpoints behind 10.96.0.10:53/udp; svc2 adds a second Service whose
// chain a later input leaves out (a stale chain, kept by --noflush).
func kubeProxyInput(eps int, svc2 bool) string {
	var b strings.Builder
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-SVC-X - [0:0]\n")
	for i := range eps {
		fmt.Fprintf(&b, ":KUBE-SEP-%d - [0:0]\n", i)
	}
	if svc2 {
		b.WriteString(":KUBE-SVC-Y - [0:0]\n")
	}
	b.WriteString("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n")
	b.WriteString("-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n")
	b.WriteString("-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n")
	b.WriteString("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n")
	b.WriteString("-A KUBE-SERVICES -m comment --comment \"ns/svc:dns cluster IP\" -p udp -d 10.96.0.10/32 --dport 53 -j KUBE-SVC-X\n")
	if svc2 {
		b.WriteString("-A KUBE-SERVICES -p tcp -d 10.96.0.11/32 --dport 80 -j KUBE-SVC-Y\n")
		b.WriteString("-A KUBE-SVC-Y -j KUBE-SEP-0\n")
	}
	b.WriteString("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j RETURN\n")
	b.WriteString("-A KUBE-SVC-X ! -s 10.0.1.0/24 -d 10.96.0.10/32 -p udp --dport 53 -j KUBE-MARK-MASQ\n")
	for i := range eps {
		if i < eps-1 {
			fmt.Fprintf(&b, "-A KUBE-SVC-X -m statistic --mode random --probability %.10f -j KUBE-SEP-%d\n", 1/float64(eps-i), i)
		} else {
			fmt.Fprintf(&b, "-A KUBE-SVC-X -j KUBE-SEP-%d\n", i)
		}
		fmt.Fprintf(&b, "-A KUBE-SEP-%d -s 10.0.2.2/32 -j KUBE-MARK-MASQ\n", i)
		fmt.Fprintf(&b, "-A KUBE-SEP-%d -p udp -j DNAT --to-destination 10.0.2.2:%d\n", i, 5000+i)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// ensureJumps is what kube-proxy does before its restore: create the
// chains its jump rules target and insert the jumps.
func ensureJumps(t *testing.T, nf *Netfilter) {
	t.Helper()
	require.NoError(t, nf.Exec(NAT, "-N", "KUBE-SERVICES"))
	require.NoError(t, nf.Exec(NAT, "-N", "KUBE-POSTROUTING"))
	require.NoError(t, nf.Exec(NAT, "-I", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"))
	require.NoError(t, nf.Exec(NAT, "-I", "OUTPUT", "-j", "KUBE-SERVICES"))
	require.NoError(t, nf.Exec(NAT, "-I", "POSTROUTING", "-j", "KUBE-POSTROUTING"))
	require.NoError(t, nf.Exec(NAT, "-A", "POSTROUTING", "-s", "10.0.1.0/24", "-j", "RETURN")) // a chain of the node's own (flannel's)
}

// TestSharedEqualsRestore: namespaces loading one compiled ruleset show,
// step by step, what namespaces restoring the same text show: the same
// iptables-save -c (counters exact per rule and per namespace), the same
// packets delivered, the same errors; a ruleset compiled after another
// keeps the chains the new input leaves out, with their counters; a
// command that changes a shared chain gives the namespace its own copy.
func TestSharedEqualsRestore(t *testing.T) {
	ref, a, b := newTopo(t, conntrack.Config{}), newTopo(t, conntrack.Config{}), newTopo(t, conntrack.Config{})
	for _, tp := range []*topo{ref, a, b} {
		ensureJumps(t, tp.nf)
		for i := range 3 {
			_, err := tp.server.ListenUDP(uint16(5000+i), false)
			require.NoError(t, err)
		}
	}
	opts := RestoreOptions{Noflush: true, Counters: true}
	in1, in2 := kubeProxyInput(3, true), kubeProxyInput(2, false)
	s1, err := CompileShared(NAT, nil, in1)
	require.NoError(t, err)
	s2, err := CompileShared(NAT, s1, in2)
	require.NoError(t, err)
	traffic := func(tp *topo, from uint16) {
		for i := range 20 {
			send(t, tp.client, udpPacket(ipClient, ipVIP, from+uint16(i), 53, []byte("q")), nil)
			require.NoError(t, tp.e.Run())
		}
	}
	same := func(step string) {
		want := ref.nf.Save(SaveOptions{Counters: true})
		assert.Equal(t, want, a.nf.Save(SaveOptions{Counters: true}), step)
		assert.Equal(t, len(ref.atServer.pkts), len(a.atServer.pkts), step)
	}
	require.NoError(t, ref.nf.Restore(in1, opts))
	require.NoError(t, a.nf.RestoreShared(s1))
	require.NoError(t, b.nf.RestoreShared(s1))
	same("loaded")
	assert.Same(t, a.nf.Table(NAT).base, b.nf.Table(NAT).base, "one compiled copy")
	traffic(ref, 20000)
	traffic(a, 20000)
	same("after traffic")
	assert.NotEqual(t, a.nf.Save(SaveOptions{Counters: true}), b.nf.Save(SaveOptions{Counters: true}), "counters are per namespace")
	traffic(ref, 21000)
	traffic(a, 21000)
	same("established and new flows")

	require.NoError(t, ref.nf.Restore(in2, opts))
	require.NoError(t, a.nf.RestoreShared(s2))
	same("second sync")
	assert.Contains(t, a.nf.Save(SaveOptions{}), "-A KUBE-SVC-Y -j KUBE-SEP-0\n", "the chain the input left out stays")
	assert.Same(t, s2, a.nf.Table(NAT).base)
	traffic(ref, 22000)
	traffic(a, 22000)
	same("traffic after the second sync")

	// A namespace not on s1 (a node that joined later) takes the slow
	// path and ends as restoring in2 leaves it; one on s1 that restores
	// in2 as text keeps the chain in1 had, as with the ruleset.
	c, d := newNF(t), newNF(t)
	for _, nf := range []*Netfilter{c, d} {
		ensureJumps(t, nf)
	}
	require.NoError(t, c.RestoreShared(s2))
	require.NoError(t, d.Restore(in2, opts))
	assert.Equal(t, d.Save(SaveOptions{}), c.Save(SaveOptions{}))
	assert.NotContains(t, c.Save(SaveOptions{}), "KUBE-SVC-Y")
	e := newNF(t)
	ensureJumps(t, e)
	require.NoError(t, e.Restore(in1, opts))
	require.NoError(t, e.Restore(in2, opts))
	require.NoError(t, b.nf.Restore(in2, opts))
	assert.Equal(t, e.Save(SaveOptions{Counters: true}), b.nf.Save(SaveOptions{Counters: true}))

	// Changing a shared chain.
	for _, tp := range []*topo{ref, a} {
		require.NoError(t, tp.nf.Exec(NAT, "-I", "KUBE-SERVICES", "-p", "tcp", "-d", "10.96.0.99/32", "-j", "RETURN"))
	}
	same("-I into a shared chain")
	assert.Nil(t, a.nf.Table(NAT).base, "the namespace has its own chains")
	traffic(ref, 23000)
	traffic(a, 23000)
	same("traffic after the change")
	for _, tp := range []*topo{ref, a} {
		require.NoError(t, tp.nf.Exec(NAT, "-F", "KUBE-SVC-Y"))
	}
	same("flush")
}

// TestSharedRefusedAsRestore: a shared ruleset the kernel would refuse in
// a namespace (a DNAT reached from the nat INPUT chain) fails there with
// Restore's error and changes nothing.
func TestSharedRefusedAsRestore(t *testing.T) {
	in := kubeProxyInput(1, false)
	s, err := CompileShared(NAT, nil, in)
	require.NoError(t, err)
	var errs []string
	for _, shared := range []bool{false, true} {
		nf := newNF(t)
		ensureJumps(t, nf)
		require.NoError(t, nf.Exec(NAT, "-N", "KUBE-SEP-0"))
		require.NoError(t, nf.Exec(NAT, "-A", "INPUT", "-j", "KUBE-SEP-0"))
		before := nf.Save(SaveOptions{Counters: true})
		if shared {
			err = nf.RestoreShared(s)
		} else {
			err = nf.Restore(in, RestoreOptions{Noflush: true, Counters: true})
		}
		require.Error(t, err)
		errs = append(errs, err.Error())
		assert.Equal(t, before, nf.Save(SaveOptions{Counters: true}), "nothing changed")
	}
	assert.Equal(t, errs[0], errs[1])
	assert.Contains(t, errs[1], "DNAT target: used from hooks PREROUTING/INPUT/OUTPUT")
}

// TestCompileSharedRefuses: input whose rules keep state in the namespace,
// or that writes built-in chains, is not shared.
func TestCompileSharedRefuses(t *testing.T) {
	for _, in := range []string{
		"*nat\n:A - [0:0]\n-A A -m recent --name x --set -j RETURN\nCOMMIT\n",
		"*nat\n:A - [0:0]\n-A A -m statistic --mode nth --every 2 -j RETURN\nCOMMIT\n",
		"*nat\n:A - [0:0]\n-A PREROUTING -j A\nCOMMIT\n",
		"*nat\n:A - [0:0]\n[5:300] -A A -j RETURN\nCOMMIT\n",
	} {
		_, err := CompileShared(NAT, nil, in)
		assert.ErrorIs(t, err, ErrNotShareable, in)
	}
	_, err := CompileShared(NAT, nil, "*nat\n-A NOPE -j RETURN\nCOMMIT\n")
	var pe *ParseError
	require.ErrorAs(t, err, &pe, "a bad input fails as Restore does")
	assert.Equal(t, 2, pe.Line)
}

// TestCompileSharedLikeReusesUnchangedChains: compiling after a similar
// ruleset parses only the chains whose lines changed, and gives what
// compiling from scratch gives (the same tables once loaded, the same
// errors).
func TestCompileSharedLikeReusesUnchangedChains(t *testing.T) {
	s1, err := CompileShared(NAT, nil, kubeProxyInput(3, true))
	require.NoError(t, err)
	in2 := kubeProxyInput(2, true)
	like, err := CompileSharedLike(NAT, nil, s1, in2)
	require.NoError(t, err)
	scratch, err := CompileShared(NAT, nil, in2)
	require.NoError(t, err)
	assert.Equal(t, 0, scratch.reused)
	// KUBE-SVC-X changed (two endpoints now); KUBE-SERVICES, the
	// masquerade chains, KUBE-SVC-Y and two KUBE-SEP chains did not.
	assert.Equal(t, 6, like.reused)
	var saves []string
	for _, s := range []*Shared{like, scratch} {
		nf := newNF(t)
		ensureJumps(t, nf)
		require.NoError(t, nf.RestoreShared(s))
		saves = append(saves, nf.Save(SaveOptions{Counters: true}))
	}
	assert.Equal(t, saves[1], saves[0])

	bad := strings.Replace(in2, "-A KUBE-SVC-Y -j KUBE-SEP-0", "-A KUBE-SVC-Y -j KUBE-SEP-9", 1)
	_, err1 := CompileSharedLike(NAT, nil, s1, bad)
	_, err2 := CompileShared(NAT, nil, bad)
	require.Error(t, err2)
	assert.Equal(t, err2, err1)
}

// TestCompileSharedLikeSharesUnchangedChains: a ruleset compiled onto the
// previous one holds the very chains of it that the input leaves out or
// writes the same and that jump only to such chains (no copy), parses or
// copies the others, and leaves the previous ruleset as it was for the
// namespaces still on it; loading it is restoring the text.
func TestCompileSharedLikeSharesUnchangedChains(t *testing.T) {
	in1, in2 := kubeProxyInput(3, true), kubeProxyInput(2, false)
	s1, err := CompileShared(NAT, nil, in1)
	require.NoError(t, err)
	onS1 := newNF(t)
	ensureJumps(t, onS1)
	require.NoError(t, onS1.RestoreShared(s1))
	before := onS1.Save(SaveOptions{Counters: true})

	s2, err := CompileSharedLike(NAT, s1, s1, in2)
	require.NoError(t, err)
	for _, name := range []string{"KUBE-MARK-MASQ", "KUBE-POSTROUTING", "KUBE-SEP-0", "KUBE-SEP-1", "KUBE-SEP-2", "KUBE-SVC-Y"} {
		assert.Same(t, s1.chains[name], s2.chains[name], "%s is unchanged", name)
	}
	for _, name := range []string{"KUBE-SVC-X", "KUBE-SERVICES"} {
		assert.NotSame(t, s1.chains[name], s2.chains[name], "%s changed", name)
	}
	assert.Equal(t, before, onS1.Save(SaveOptions{Counters: true}), "the namespaces on s1 see s1")

	text, shared := newNF(t), newNF(t)
	ensureJumps(t, text)
	ensureJumps(t, shared)
	for _, in := range []string{in1, in2} {
		require.NoError(t, text.Restore(in, RestoreOptions{Noflush: true, Counters: true}))
	}
	require.NoError(t, shared.RestoreShared(s1))
	require.NoError(t, shared.RestoreShared(s2))
	assert.Equal(t, text.Save(SaveOptions{Counters: true}), shared.Save(SaveOptions{Counters: true}))
}

// TestCompileSharedLikeSameRules: an input that writes again chains of the
// previous ruleset with the same lines (a partial sync after no change)
// gives a ruleset with the previous one's chains, and loading it is
// restoring the text: the chains written start again from zero.
func TestCompileSharedLikeSameRules(t *testing.T) {
	in1 := kubeProxyInput(2, false)
	in2 := "*nat\n:KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\nCOMMIT\n"
	s1, err := CompileShared(NAT, nil, in1)
	require.NoError(t, err)
	s2, err := CompileSharedLike(NAT, s1, s1, in2)
	require.NoError(t, err)
	assert.Equal(t, s1.chains, s2.chains)
	text, shared := newNF(t), newNF(t)
	ensureJumps(t, text)
	ensureJumps(t, shared)
	require.NoError(t, text.Restore(in1, RestoreOptions{Noflush: true, Counters: true}))
	require.NoError(t, shared.RestoreShared(s1))
	for _, nf := range []*Netfilter{text, shared} {
		require.NoError(t, nf.Exec(NAT, "-N", "PROBE"))
		require.NoError(t, nf.Exec(NAT, "-A", "OUTPUT", "-j", "KUBE-MARK-MASQ"))
	}
	require.NoError(t, text.Restore(in2, RestoreOptions{Noflush: true, Counters: true}))
	require.NoError(t, shared.RestoreShared(s2))
	assert.Equal(t, text.Save(SaveOptions{Counters: true}), shared.Save(SaveOptions{Counters: true}))
}

// TestPatchedSharedEqualsRestore: kube-proxy's partial syncs (a few
// chains declared anew, the top-level ones written again the same, stale
// chains flushed and deleted with -X) compiled onto the previous ruleset
// by patching it show, step by step, what restoring the text shows
// (iptables-save -c, packets delivered), refuse what restore refuses with
// its error, and leave the previous ruleset as it was.
func TestPatchedSharedEqualsRestore(t *testing.T) {
	ref, a := newTopo(t, conntrack.Config{}), newTopo(t, conntrack.Config{})
	for _, tp := range []*topo{ref, a} {
		ensureJumps(t, tp.nf)
		for i := range 3 {
			_, err := tp.server.ListenUDP(uint16(5000+i), false)
			require.NoError(t, err)
		}
	}
	opts := RestoreOptions{Noflush: true, Counters: true}
	traffic := func(tp *topo, from uint16) {
		for i := range 20 {
			send(t, tp.client, udpPacket(ipClient, ipVIP, from+uint16(i), 53, []byte("q")), nil)
			require.NoError(t, tp.e.Run())
		}
	}
	same := func(step string) {
		assert.Equal(t, ref.nf.Save(SaveOptions{Counters: true}), a.nf.Save(SaveOptions{Counters: true}), step)
		assert.Equal(t, len(ref.atServer.pkts), len(a.atServer.pkts), step)
	}
	full := kubeProxyInput(3, true)
	top := func(svc2 bool) string {
		s := ":KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n" +
			"-A KUBE-SERVICES -m comment --comment \"ns/svc:dns cluster IP\" -p udp -d 10.96.0.10/32 --dport 53 -j KUBE-SVC-X\n"
		if svc2 {
			s += "-A KUBE-SERVICES -p tcp -d 10.96.0.11/32 --dport 80 -j KUBE-SVC-Y\n"
		}
		return s + "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j RETURN\n"
	}
	steps := []struct {
		name, input string
		err         bool
	}{
		{"an endpoint gone: KUBE-SVC-X anew, KUBE-SEP-2 deleted", "*nat\n" + top(true) + ":KUBE-SVC-X - [0:0]\n:KUBE-SEP-2 - [0:0]\n" +
			"-A KUBE-SVC-X ! -s 10.0.1.0/24 -d 10.96.0.10/32 -p udp --dport 53 -j KUBE-MARK-MASQ\n" +
			"-A KUBE-SVC-X -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-0\n-A KUBE-SVC-X -j KUBE-SEP-1\n" +
			"-X KUBE-SEP-2\nCOMMIT\n", false},
		{"no change", "*nat\n" + top(true) + "COMMIT\n", false},
		{"a new endpoint chain", "*nat\n" + top(true) + ":KUBE-SVC-X - [0:0]\n:KUBE-SEP-3 - [0:0]\n" +
			"-A KUBE-SVC-X -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-3\n-A KUBE-SVC-X -j KUBE-SEP-1\n" +
			"-A KUBE-SEP-3 -p udp -j DNAT --to-destination 10.0.2.2:5002\nCOMMIT\n", false},
		{"an endpoint's rules anew under a Service written the same: KUBE-SVC-X and KUBE-SERVICES copied", "*nat\n" + top(true) + ":KUBE-SVC-X - [0:0]\n:KUBE-SEP-1 - [0:0]\n" +
			"-A KUBE-SVC-X -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-3\n-A KUBE-SVC-X -j KUBE-SEP-1\n" +
			"-A KUBE-SEP-1 -p udp -j DNAT --to-destination 10.0.2.2:5002\nCOMMIT\n", false},
		{"deleting a chain still jumped to", "*nat\n" + top(true) + ":KUBE-SEP-1 - [0:0]\n-X KUBE-SEP-1\nCOMMIT\n", true},
		{"a Service gone: KUBE-SVC-Y deleted", "*nat\n" + top(false) + ":KUBE-SVC-Y - [0:0]\n-X KUBE-SVC-Y\nCOMMIT\n", false},
	}
	require.NoError(t, ref.nf.Restore(full, opts))
	prev, err := CompileShared(NAT, nil, full)
	require.NoError(t, err)
	require.NoError(t, a.nf.RestoreShared(prev))
	traffic(ref, 20000)
	traffic(a, 20000)
	same("loaded")
	port := uint16(21000)
	for _, st := range steps {
		before := prev.chains
		wantErr := ref.nf.Restore(st.input, opts)
		s, err := CompileSharedLike(NAT, prev, prev, st.input)
		// The same from the input's chains, without its text unless it
		// is needed.
		in, ok := ParseChainLines(st.input)
		require.True(t, ok, st.name)
		texts := 0
		in.Text = func() string { texts++; return st.input }
		sl, lerr := CompileSharedLines(NAT, prev, prev, in)
		assert.Equal(t, err, lerr, st.name)
		if err == nil {
			assert.Equal(t, s.patched, sl.patched, st.name)
			if s.patched {
				assert.Zero(t, texts, "%s: no text made", st.name)
			}
			assert.Equal(t, s.names, sl.names, st.name)
			assert.Equal(t, s.lines, sl.lines, st.name)
			assert.Equal(t, s.refs, sl.refs, st.name)
			assert.Equal(t, s.declared, sl.declared, st.name)
			for name, c := range s.chains {
				var a, b []string
				for _, r := range c.rules {
					a = append(a, r.text)
				}
				for _, r := range sl.chains[name].rules {
					b = append(b, r.text)
				}
				assert.Equal(t, a, b, "%s: %s", st.name, name)
			}
			assert.Equal(t, st.input, sl.Input(), st.name)
		}
		if st.err {
			require.Error(t, wantErr, st.name)
			assert.Equal(t, wantErr, err, st.name)
			continue
		}
		require.NoError(t, wantErr, st.name)
		require.NoError(t, err, st.name)
		if st.name == "no change" {
			assert.Equal(t, prev.chains, s.chains, "the same chains")
		} else {
			assert.True(t, s.patched, "%s: patched", st.name)
		}
		for name, c := range s.chains {
			for _, r := range c.rules {
				if tc := r.target.chain; tc != nil {
					assert.Same(t, s.chains[tc.Name], tc, "%s: %s jumps to the ruleset's %s", st.name, name, tc.Name)
				}
			}
		}
		checkBookkeeping(t, s, st.name)
		require.NoError(t, a.nf.RestoreShared(s), st.name)
		same(st.name)
		assert.Equal(t, before, prev.chains, "%s: the previous ruleset is unchanged", st.name)
		traffic(ref, port)
		traffic(a, port)
		port += 1000
		same(st.name + ", traffic")
		prev = s
	}
	assert.NotContains(t, a.nf.Save(SaveOptions{}), "KUBE-SVC-Y")
	assert.NotContains(t, a.nf.Save(SaveOptions{}), "KUBE-SEP-2")
}

// lsState is a kube-proxy nat table: Service X with endpoints eps
// (KUBE-SVC-X, KUBE-SEP-i) and, if y, Service Y (KUBE-SVC-Y).
type lsState struct {
	eps []int
	y   bool
}

var lsTop = []string{"KUBE-MARK-MASQ", "KUBE-POSTROUTING", "KUBE-SERVICES"}

// chains returns the state's chains and their rule lines.
func (s lsState) chains() map[string][]string {
	m := map[string][]string{
		"KUBE-POSTROUTING": {"-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN", "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
			"-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully"},
		"KUBE-MARK-MASQ": {"-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000"},
		"KUBE-SERVICES":  {"-A KUBE-SERVICES -m comment --comment \"ns/svc:dns cluster IP\" -p udp -d 10.96.0.10/32 --dport 53 -j KUBE-SVC-X"},
	}
	if s.y {
		m["KUBE-SERVICES"] = append(m["KUBE-SERVICES"], "-A KUBE-SERVICES -p tcp -d 10.96.0.11/32 --dport 80 -j KUBE-SVC-Y")
		m["KUBE-SVC-Y"] = []string{"-A KUBE-SVC-Y -j KUBE-MARK-MASQ"}
	}
	m["KUBE-SERVICES"] = append(m["KUBE-SERVICES"], "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j RETURN")
	x := []string{"-A KUBE-SVC-X ! -s 10.0.1.0/24 -d 10.96.0.10/32 -p udp --dport 53 -j KUBE-MARK-MASQ"}
	for i, ep := range s.eps {
		sep := fmt.Sprintf("KUBE-SEP-%d", ep)
		if i < len(s.eps)-1 {
			x = append(x, fmt.Sprintf("-A KUBE-SVC-X -m statistic --mode random --probability %.10f -j %s", 1/float64(len(s.eps)-i), sep))
		} else {
			x = append(x, "-A KUBE-SVC-X -j "+sep)
		}
		m[sep] = []string{"-A " + sep + " -s 10.0.2.2/32 -j KUBE-MARK-MASQ", fmt.Sprintf("-A %s -p udp -j DNAT --to-destination 10.0.2.2:%d", sep, 5000+ep)}
	}
	m["KUBE-SVC-X"] = x
	return m
}

// changed returns the chains a partial sync from a to s declares: the
// top-level ones and, at s, those of the Services that differ.
func (s lsState) changed(a lsState) map[string]bool {
	d := map[string]bool{}
	for _, c := range lsTop {
		d[c] = true
	}
	if fmt.Sprint(a.eps) != fmt.Sprint(s.eps) {
		d["KUBE-SVC-X"] = true
		for _, ep := range s.eps {
			d[fmt.Sprintf("KUBE-SEP-%d", ep)] = true
		}
	}
	if a.y != s.y && s.y {
		d["KUBE-SVC-Y"] = true
	}
	return d
}

// lsInput is the restore input declaring and writing the chains of d
// (all of s's when d is nil) and deleting those of del.
func lsInput(s lsState, d map[string]bool, del []string) string {
	m := s.chains()
	var names []string
	for name := range m {
		if d == nil || d[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, name := range append(slices.Clone(names), del...) {
		b.WriteString(":" + name + " - [0:0]\n")
	}
	for _, name := range names {
		for _, l := range m[name] {
			b.WriteString(l + "\n")
		}
	}
	for _, name := range del {
		b.WriteString("-X " + name + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// staleOf is the per-Service chains of nf's nat table that s does not
// hold (what kube-proxy's cleanup deletes).
func staleOf(nf *Netfilter, s lsState) []string {
	m := s.chains()
	var out []string
	for _, c := range nf.Table(NAT).Chains() {
		if (strings.HasPrefix(c.Name, "KUBE-SVC-") || strings.HasPrefix(c.Name, "KUBE-SEP-")) && m[c.Name] == nil {
			out = append(out, c.Name)
		}
	}
	return out
}

// TestLoadSharedEqualsRestore: rulesets patched one from the other, each
// from the previous one's partial sync (the cluster's one copy per
// generation), loaded with LoadShared by namespaces that sync at every
// generation, every other one, or without deleting stale chains, leave
// each namespace as restoring its own partial (or full) sync's text
// leaves it: the same rules, the same counters (the chains declared
// restart from zero, the others keep theirs, stale chains kept stay
// with theirs), before and after traffic.
func TestLoadSharedEqualsRestore(t *testing.T) {
	states := []lsState{
		{eps: []int{0, 1, 2}, y: true},
		{eps: []int{0, 1}, y: true},    // an endpoint gone
		{eps: []int{0, 1, 3}, y: true}, // a new endpoint
		{eps: []int{0, 1, 3}},          // Service Y gone
		{eps: []int{0, 1, 3, 2}},       // the endpoint back (its stale chain kept by some)
		{eps: []int{0, 1, 3, 2}},       // nothing changed
		{eps: []int{1, 2}},             // two endpoints gone
	}
	opts := RestoreOptions{Noflush: true, Counters: true}
	// The cluster's rulesets, one per generation.
	sets := make([]*Shared, len(states))
	var err error
	sets[0], err = CompileShared(NAT, nil, lsInput(states[0], nil, nil))
	require.NoError(t, err)
	for g := 1; g < len(states); g++ {
		var del []string
		for name := range states[g-1].chains() {
			if states[g].chains()[name] == nil {
				del = append(del, name)
			}
		}
		slices.Sort(del)
		in := lsInput(states[g], states[g].changed(states[g-1]), del)
		sets[g], err = CompileSharedLike(NAT, sets[g-1], sets[g-1], in)
		require.NoError(t, err, g)
		checkBookkeeping(t, sets[g], fmt.Sprint("generation ", g))
	}
	// Gone from the lineage is the comparison of the chains, from any
	// generation before (and the memo answers the same again).
	// (From a later one, which is not in the lineage: compared.)
	for i := range sets {
		for j := range sets {
			var want []string
			for _, name := range sets[i].names {
				if sets[j].chains[name] == nil {
					want = append(want, name)
				}
			}
			if i == j {
				want = nil
			}
			assert.Equal(t, want, sets[j].Gone(sets[i]), "gone from %d to %d", i, j)
			assert.Equal(t, want, sets[j].Gone(sets[i]), "gone from %d to %d, memoized", i, j)
		}
	}
	type node struct {
		name      string
		syncs     func(g int) bool
		clean     func(g int) bool
		full      func(g int) bool
		ref, sh   *topo
		alike     []*topo // loaded as sh is (the same ruleset, declarations, traffic)
		last      int
		refLoaded bool
		// after, when set, runs on both namespaces after generation g's
		// load.
		after func(nf *Netfilter, g int)
	}
	always := func(int) bool { return true }
	nodes := []*node{
		{name: "every generation", syncs: always, clean: always, full: func(g int) bool { return g == 0 }},
		{name: "every other generation", syncs: func(g int) bool { return g%2 == 0 || g == len(states)-1 }, clean: always, full: func(g int) bool { return g == 0 }},
		{name: "stale chains kept, then a full sync", syncs: always, clean: func(g int) bool { return g == 0 || g == 5 }, full: func(g int) bool { return g == 0 || g == 5 }},
		// A chain of the node's own jumps to KUBE-SEP-0, which goes stale
		// (and is kept, as the node's own) at the last generation.
		{name: "an own chain jumps to a chain that goes stale", syncs: always, clean: func(g int) bool { return g == 0 }, full: func(g int) bool { return g == 0 },
			after: func(nf *Netfilter, g int) {
				if g == 0 {
					require.NoError(t, nf.Exec(NAT, "-N", "MY-JUMPS"))
					require.NoError(t, nf.Exec(NAT, "-A", "MY-JUMPS", "-j", "KUBE-SEP-0"))
				}
			}},
		// KUBE-SEP-2, carried as the node's own from generation 1 (the
		// alike namespaces' copies made from one template, side by side
		// in its slab), gets a rule appended and one inserted: each
		// namespace's copy changes alone.
		{name: "a chain carried, then edited", syncs: always, clean: func(g int) bool { return g == 0 }, full: func(g int) bool { return g == 0 },
			after: func(nf *Netfilter, g int) {
				switch g {
				case 1:
					require.NoError(t, nf.Exec(NAT, "-A", "KUBE-SEP-2", "-j", "RETURN"))
				case 2:
					require.NoError(t, nf.Exec(NAT, "-I", "KUBE-SEP-2", "1", "-j", "RETURN"))
					require.Contains(t, nf.Save(SaveOptions{}), "-A KUBE-SEP-2 -j RETURN\n-A KUBE-SEP-2 -s 10.0.2.2/32 -j KUBE-MARK-MASQ\n"+
						"-A KUBE-SEP-2 -p udp -j DNAT --to-destination 10.0.2.2:5002\n-A KUBE-SEP-2 -j RETURN\n")
				}
			}},
	}
	port := uint16(20000)
	traffic := func(tp *topo) {
		for i := range 12 {
			send(t, tp.client, udpPacket(ipClient, ipVIP, port+uint16(i), 53, []byte("q")), nil)
			require.NoError(t, tp.e.Run())
		}
	}
	for _, n := range nodes {
		n.ref, n.sh = newTopo(t, conntrack.Config{}), newTopo(t, conntrack.Config{})
		n.alike = []*topo{newTopo(t, conntrack.Config{}), newTopo(t, conntrack.Config{})}
		for _, tp := range append([]*topo{n.ref, n.sh}, n.alike...) {
			ensureJumps(t, tp.nf)
			for i := range 4 {
				_, err := tp.server.ListenUDP(uint16(5000+i), false)
				require.NoError(t, err)
			}
		}
	}
	for g, st := range states {
		for _, n := range nodes {
			if !n.syncs(g) {
				continue
			}
			step := fmt.Sprintf("%s, generation %d", n.name, g)
			var del []string
			if n.clean(g) {
				del = staleOf(n.ref.nf, st)
				assert.Equal(t, del, staleOf(n.sh.nf, st), step)
			}
			d := &Declared{Deleted: del}
			var in string
			if n.full(g) {
				d.All = true
				in = lsInput(st, nil, del)
			} else {
				d.Chains = st.changed(states[n.last])
				in = lsInput(st, d.Chains, del)
			}
			require.NoError(t, n.ref.nf.Restore(in, opts), step)
			if !d.All {
				// A declaration missing a chain that changed: refused,
				// nothing changed.
				before := n.sh.nf.Save(SaveOptions{Counters: true})
				short := &Declared{Chains: map[string]bool{}, Deleted: del}
				if g > n.last && len(d.Chains) > len(lsTop) {
					assert.ErrorIs(t, n.sh.nf.LoadShared(Load{sets[g], short}), ErrNotLoaded, step)
					assert.Equal(t, before, n.sh.nf.Save(SaveOptions{Counters: true}), step)
				}
			}
			for _, sh := range append([]*topo{n.sh}, n.alike...) {
				require.NoError(t, sh.nf.LoadShared(Load{sets[g], d}), step)
				assert.Same(t, sets[g], sh.nf.Table(NAT).Shared(), step)
				assert.Equal(t, n.ref.nf.Save(SaveOptions{Counters: true}), sh.nf.Save(SaveOptions{Counters: true}), step)
			}
			if n.after != nil {
				n.after(n.ref.nf, g)
				n.after(n.sh.nf, g)
				for _, sh := range n.alike {
					n.after(sh.nf, g)
				}
			}
			n.last = g
		}
		for _, n := range nodes {
			traffic(n.ref)
			for _, sh := range append([]*topo{n.sh}, n.alike...) {
				traffic(sh)
				assert.Equal(t, n.ref.nf.Save(SaveOptions{Counters: true}), sh.nf.Save(SaveOptions{Counters: true}), "%s, generation %d, traffic", n.name, g)
				assert.Equal(t, len(n.ref.atServer.pkts), len(sh.atServer.pkts))
			}
		}
		port += 100
	}
	// The namespace that kept KUBE-SEP-2 when it went stale held it as
	// its own until the endpoint came back.
	assert.Contains(t, nodes[2].sh.nf.Save(SaveOptions{}), ":KUBE-SEP-2 ")
	assert.Contains(t, nodes[3].sh.nf.Save(SaveOptions{}), "-A MY-JUMPS -j KUBE-SEP-0\n")
	assert.Contains(t, nodes[3].sh.nf.Save(SaveOptions{}), ":KUBE-SEP-0 ")
}

// reachKey renders an ownReach in an order of its own, to compare two.
func reachKey(r *ownReach) string {
	var out []string
	for _, x := range r.targets {
		out = append(out, "target "+x)
	}
	for _, x := range r.reached {
		out = append(out, fmt.Sprintf("reached %s %d %d", x.name, x.hooks, x.depth))
	}
	for _, j := range r.jumps {
		out = append(out, fmt.Sprintf("jump %s %p -> %s %p", j.in.Name, j.r, j.to.Name, j.to))
	}
	for _, c := range r.chains {
		out = append(out, fmt.Sprintf("chain %s %v", c.name, c.builtin))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// TestLoadSharedCarriedReachIsReachOf runs TestLoadSharedEqualsRestore
// checking every memoized reach LoadShared uses against the one reachOf
// computes, and that a load carrying stale chains extended the reach
// rather than walking the chains again.
func TestLoadSharedCarriedReachIsReachOf(t *testing.T) {
	inc := 0
	checkReach = func(tb *Table, r *ownReach, incremental bool, own map[string]*Chain, resolve func(*Chain) *Chain) {
		want, ok := reachOf(tb, own, resolve)
		require.True(t, ok)
		assert.Equal(t, reachKey(want), reachKey(r))
		if incremental {
			inc++
		}
	}
	defer func() { checkReach = nil }()
	TestLoadSharedEqualsRestore(t)
	assert.Positive(t, inc, "loads that extended the reach with carried chains")
}

// TestLoadSharedSwappedChecksAreTheFullOnes runs TestLoadSharedEqualsRestore
// with the checks a load makes from the chains swapped since the table's
// ruleset (the own chains that may clash, the targets that may not fit,
// the jumps that may need rewriting), and checks after every load what
// the full checks ensure: every own chain's jump goes to the chain of that
// name (its own, else the ruleset's), no own chain is named like one of
// the ruleset, and the memoized reach fits the ruleset in full.
//
// Loads planned from a template retarget the jumps by the template's
// chains moved (by identity): the same checks hold after them.
func TestLoadSharedSwappedChecksAreTheFullOnes(t *testing.T) {
	loads := 0
	moved := movedLoads.Load()
	checkCommitted = func(tb *Table, swapped bool) {
		if swapped {
			loads++
		}
		for name, c := range tb.chains {
			assert.False(t, tb.base.Has(name), "own chain %s is also the ruleset's", name)
			for _, r := range c.rules {
				if tc := r.target.chain; tc != nil {
					want := tb.chains[tc.Name]
					if want == nil {
						want = tb.base.chains[tc.Name]
					}
					assert.Same(t, want, tc, "%s jumps to %s", name, tc.Name)
				}
			}
		}
		assert.True(t, tb.reach.fitsSince(tb.base, tb.chains, nil, 0))
		// The own chains listed from the memoized reach are the table's.
		var own []string
		for name, c := range tb.chains {
			if !c.Builtin {
				own = append(own, name)
			}
		}
		slices.Sort(own)
		assert.Equal(t, own, tb.OwnChainNames())
	}
	defer func() { checkCommitted = nil }()
	TestLoadSharedEqualsRestore(t)
	assert.Positive(t, loads, "loads checked from the chains swapped")
	assert.Greater(t, movedLoads.Load()-moved, int64(0), "loads retargeting jumps by a template's chains moved")
}

// planKeyOf renders what a load plan makes of a table, to compare a
// plan made from a template with the full checks' one: the chains the
// table will hold (a carried one by its rules and counters), the
// reach's targets, reached chains and own chains, its jumps (by the
// chain and rule they are in and the chain they go to: an own chain by
// name, another by identity), and the rest of the plan.
func planKeyOf(p *loadPlan) string {
	var out []string
	own := p.ownAfter()
	for name, c := range own {
		line := "own " + name
		if p.carried[name] == c {
			line += fmt.Sprintf(" carried %v %q", c.ctr, c.ruleTexts())
		} else {
			line += fmt.Sprintf(" %p", c)
		}
		out = append(out, line)
	}
	for _, x := range p.reach.targets {
		out = append(out, "target "+x)
	}
	for _, x := range p.reach.reached {
		out = append(out, fmt.Sprintf("reached %s %d %d", x.name, x.hooks, x.depth))
	}
	for _, c := range p.reach.chains {
		out = append(out, fmt.Sprintf("chain %s %v", c.name, c.builtin))
	}
	for i, j := range p.reach.jumps {
		to := fmt.Sprintf("%p", j.to)
		if own[j.to.Name] == j.to {
			to = "own " + j.to.Name
		}
		pos := i < p.old
		out = append(out, fmt.Sprintf("jump %s %d -> %s %s (old %v)", j.in.Name, slices.Index(j.in.rules, j.r), j.to.Name, to, pos))
	}
	slices.Sort(out)
	out = append(out, fmt.Sprintf("old %d same %v sw %v del %v carried %d", p.old, p.same, p.sw, p.del, len(p.carried)))
	if p.addOwn {
		// The table's map, to which commit adds the chains carried,
		// holds none of them yet.
		for name := range p.carried {
			if p.own[name] != nil {
				out = append(out, "carried chain already added: "+name)
			}
		}
	}
	return strings.Join(out, "\n")
}

// ruleTexts is the text of each of c's rules.
func (c *Chain) ruleTexts() []string {
	var out []string
	for _, r := range c.rules {
		out = append(out, r.text)
	}
	return out
}

// TestLoadSharedTemplatesAreTheFullPlans runs TestLoadSharedEqualsRestore
// (whose nodes each load three namespaces alike) comparing every plan
// made from a template (another namespace's plan, by the shape of its own
// chains) with the plan the full checks make on the same table, and
// asserting that templates were used, with carried chains among them.
func TestLoadSharedTemplatesAreTheFullPlans(t *testing.T) {
	before := templateLoads.Load()
	carried := 0
	checkTemplate = func(full, p *loadPlan, fullErr, err error) {
		require.NoError(t, fullErr)
		require.NoError(t, err)
		assert.Equal(t, planKeyOf(full), planKeyOf(p))
		if p.carried != nil {
			carried++
		}
	}
	defer func() { checkTemplate = nil }()
	TestLoadSharedEqualsRestore(t)
	assert.Greater(t, templateLoads.Load()-before, int64(0), "loads planned from a template")
	assert.Positive(t, carried, "loads from a template carrying stale chains")
}

// TestReachShapesIntern: reaches equal in their targets, reached chains
// (hooks and depths) and own chains share one shape; a reach differing
// in any of them has another.
func TestReachShapesIntern(t *testing.T) {
	mk := func(f func(r *ownReach)) *reachShape {
		r := &ownReach{targets: []string{"KUBE-POSTROUTING", "KUBE-SERVICES"},
			reached: []reached{{name: "KUBE-SERVICES", hooks: 3, depth: 1}, {name: "KUBE-POSTROUTING", hooks: 16, depth: 1}},
			chains:  []ownChain{{name: "FLANNEL-POSTRTG"}, {name: "OUTPUT", builtin: true}, {name: "PREROUTING", builtin: true}}}
		if f != nil {
			f(r)
		}
		r.intern()
		return r.shape
	}
	base := mk(nil)
	assert.Same(t, base, mk(nil))
	for name, f := range map[string]func(r *ownReach){
		"a target":        func(r *ownReach) { r.targets = r.targets[:1] },
		"a reached depth": func(r *ownReach) { r.reached[1].depth = 2 },
		"a reached hook":  func(r *ownReach) { r.reached[0].hooks = 1 },
		"a chain":         func(r *ownReach) { r.chains = r.chains[1:] },
		"built-in or not": func(r *ownReach) { r.chains[0].builtin = true },
	} {
		assert.NotSame(t, base, mk(f), name)
	}
}

// TestLoadSharedWithoutTemplates runs TestLoadSharedEqualsRestore with
// every load checked in full: the namespaces end the same either way.
func TestLoadSharedWithoutTemplates(t *testing.T) {
	loadTemplates = false
	defer func() { loadTemplates = true }()
	before := templateLoads.Load()
	TestLoadSharedEqualsRestore(t)
	assert.Equal(t, before, templateLoads.Load())
}

// checkBookkeeping checks what a patched ruleset keeps of its chains
// against what they are: the sorted names, the counts of jumps to each
// chain, and that every chain it made is marked as a shared chain.
func checkBookkeeping(t *testing.T, s *Shared, step string) {
	t.Helper()
	assert.Equal(t, slices.Sorted(maps.Keys(s.chains)), s.names, "%s: names", step)
	refs := maps.Clone(s.refs)
	maps.DeleteFunc(refs, func(_ string, n int32) bool { return n == 0 }) // a count of 0 is none
	assert.Equal(t, refsOf(s), refs, "%s: jumps to each chain", step)
	for name, c := range s.chains {
		assert.NotNil(t, c.shared, "%s: %s marked", step, name)
		// A jump goes to the ruleset's chain of the name it names (what
		// patchShared's test of a jump's target by its chain relies on).
		for _, r := range c.rules {
			if tc := r.target.chain; tc != nil {
				assert.Same(t, s.chains[tc.Name], tc, "%s: %s jumps to %s", step, name, tc.Name)
			}
		}
		// The index runs are those buildIndex makes of the rules.
		fresh := &Chain{Name: name}
		for _, r := range c.rules {
			n := *r
			fresh.rules = append(fresh.rules, &n)
		}
		fresh.buildIndex()
		for i, r := range c.rules {
			assert.Equal(t, fresh.rules[i].run, r.run, "%s: %s rule %d's index run", step, name, i)
		}
	}
}

// TestPatchedSharedKeepsIndexRuns: a chain copied to jump to a chain
// replaced (KUBE-SERVICES, indexed, when one Service's chain changes)
// keeps the index runs of the rules it copies; they are what indexing it
// anew makes, and packets find the same rules.
func TestPatchedSharedKeepsIndexRuns(t *testing.T) {
	svc := func(i int, ep string) string {
		return fmt.Sprintf("-A KUBE-SVC-%d -p udp -j DNAT --to-destination %s\n", i, ep)
	}
	var top strings.Builder
	for i := range 40 {
		fmt.Fprintf(&top, "-A KUBE-SERVICES -d 10.96.1.%d/32 -p udp -m udp --dport 53 -j KUBE-SVC-%d\n", i+1, i)
	}
	var b strings.Builder
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n")
	for i := range 40 {
		fmt.Fprintf(&b, ":KUBE-SVC-%d - [0:0]\n", i)
	}
	b.WriteString(top.String())
	for i := range 40 {
		b.WriteString(svc(i, "10.0.2.2:5000"))
	}
	b.WriteString("COMMIT\n")
	base, err := CompileShared(NAT, nil, b.String())
	require.NoError(t, err)
	require.NotNil(t, base.chains["KUBE-SERVICES"].rules[0].run, "indexed")
	in := "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-7 - [0:0]\n" + top.String() + svc(7, "10.0.2.2:5001") + "COMMIT\n"
	kept := sharedRules.Load()
	s, err := CompileSharedLike(NAT, base, base, in)
	require.NoError(t, err)
	require.True(t, s.patched)
	require.NotSame(t, base.chains["KUBE-SERVICES"], s.chains["KUBE-SERVICES"], "KUBE-SERVICES copied")
	checkBookkeeping(t, s, "KUBE-SVC-7 changed")
	// The copy holds base's very rules but for the one jumping to the
	// chain replaced, and base's rules still jump to base's chains.
	for i, r := range s.chains["KUBE-SERVICES"].rules {
		br := base.chains["KUBE-SERVICES"].rules[i]
		assert.Same(t, base.chains[br.target.chain.Name], br.target.chain, "base's rule %d", i)
		assert.Same(t, s.chains[r.target.chain.Name], r.target.chain, "rule %d", i)
		if i == 7 {
			assert.NotSame(t, br, r, "the jump to KUBE-SVC-7 copied")
			assert.Same(t, s.chains["KUBE-SERVICES"], r.Chain())
			assert.Equal(t, br.text, r.text)
		} else {
			assert.Same(t, br, r, "rule %d kept", i)
		}
	}
	assert.Equal(t, int64(39), sharedRules.Load()-kept, "rules kept from the ruleset before")
}

// TestCompileSharedLikeSameInputAgain: compiling a ruleset's own input
// onto it again (a sync that changed no rule) reuses its parsed lines and
// gives what parsing them again gives: its very chains, the same
// declarations, names, lines and jump counts.
func TestCompileSharedLikeSameInputAgain(t *testing.T) {
	base, err := CompileShared(NAT, nil, kubeProxyInput(3, true))
	require.NoError(t, err)
	in := "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-X - [0:0]\n" +
		"-A KUBE-SERVICES -m comment --comment \"ns/svc:dns cluster IP\" -p udp -d 10.96.0.10/32 --dport 53 -j KUBE-SVC-X\n" +
		"-A KUBE-SERVICES -p tcp -d 10.96.0.11/32 --dport 80 -j KUBE-SVC-Y\n" +
		"-A KUBE-SVC-X -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-0\n-A KUBE-SVC-X -j KUBE-SEP-1\nCOMMIT\n"
	prev, err := CompileSharedLike(NAT, base, base, in)
	require.NoError(t, err)
	require.True(t, prev.patched)
	for range 2 {
		in := prev.Input()
		got, err := CompileSharedLike(NAT, prev, prev, in)
		require.NoError(t, err)
		unparsed := *prev
		unparsed.parsed = nil
		want, err := CompileSharedLike(NAT, &unparsed, &unparsed, in)
		require.NoError(t, err)
		require.NotNil(t, got.parsed, "the lines kept")
		assert.Equal(t, reflect.ValueOf(prev.chains).UnsafePointer(), reflect.ValueOf(got.chains).UnsafePointer(), "prev's chains")
		assert.Equal(t, want.declared, got.declared)
		assert.Equal(t, want.names, got.names)
		assert.Equal(t, want.lines, got.lines)
		assert.Equal(t, want.refs, got.refs)
		assert.Equal(t, want.reused, got.reused)
		assert.Equal(t, want.loops, got.loops)
		assert.Equal(t, prev.id, got.prev)
		assert.True(t, got.sameSince(prev.id, &Declared{All: true}))
		prev = got
	}
}

// TestPatchSharedLineWithNewline: patchShared restores the chains written
// anew by their lines, not their text; a line holding a newline (which
// the text would split into two lines) is not patched but compiled in
// full, so the result is still the text's: here a restore error.
func TestPatchSharedLineWithNewline(t *testing.T) {
	base, err := CompileShared(NAT, nil, kubeProxyInput(2, false))
	require.NoError(t, err)
	tests := []struct {
		name  string
		line  string
		patch bool
	}{
		{"one line", "-A KUBE-SVC-X -m comment --comment a -j KUBE-SEP-1", true},
		{"a newline inside", "-A KUBE-SVC-X -m comment --comment a\n-j KUBE-SEP-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top := base.lines["KUBE-SERVICES"]
			lines := map[string][]string{"KUBE-SERVICES": top, "KUBE-SVC-X": {tt.line}}
			declared := map[string]bool{"KUBE-SERVICES": true, "KUBE-SVC-X": true}
			s := patchShared(NAT, base, "", declared, lines, nil)
			assert.Equal(t, tt.patch, s != nil)
			in := ChainLines{Lines: lines, Declared: declared, Text: func() string {
				return "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-X - [0:0]\n" + strings.Join(top, "\n") + "\n" + tt.line + "\nCOMMIT\n"
			}}
			_, err := CompileSharedLines(NAT, base, base, in)
			_, want := CompileSharedLike(NAT, base, base, in.Text())
			assert.Equal(t, want, err)
			assert.Equal(t, !tt.patch, err != nil)
		})
	}
}
