package nftables

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/internal/golden"
)

func newNFT(t testing.TB) *NFTables {
	t.Helper()
	e := datapath.NewEngine(1)
	return Install(e.NewNetns("n1", "host"), nil)
}

func TestListGolden(t *testing.T) {
	n := newNFT(t)
	in, err := os.ReadFile("testdata/kube-proxy.nft")
	require.NoError(t, err)
	require.NoError(t, n.Apply("", string(in)))
	out, ok := n.ListTable("ip", "kube-proxy")
	require.True(t, ok)
	golden.Check(t, "kube-proxy.list", out)
	assert.Equal(t, out, n.ListRuleset())
	_, ok = n.ListTable("ip", "nosuch")
	assert.False(t, ok)
}

// errorSetup is the ruleset the error cases run against.
const errorSetup = "add table ip kube-proxy\nadd chain ip kube-proxy services\nadd set ip kube-proxy s { type ipv4_addr ; }\n"

// errorCases are `nft -f /tmp/e.nft` inputs with nft 1.0.6's output
// against errorSetup, checked against the real nft in the kernel test.
var errorCases = []struct {
	name, in, want string
}{
	{"jump to missing chain", "add rule ip kube-proxy services jump nosuch",
		"/tmp/e.nft:1:38-43: Error: Could not process rule: No such file or directory\nadd rule ip kube-proxy services jump nosuch\n                                     ^^^^^^"},
	{"missing set", "add rule ip kube-proxy services ip daddr @nosuch drop",
		"/tmp/e.nft:1:42-48: Error: No such file or directory\nadd rule ip kube-proxy services ip daddr @nosuch drop\n                                         ^^^^^^^"},
	{"rule in missing chain", "add rule ip kube-proxy nosuch drop",
		"/tmp/e.nft:1:24-29: Error: Could not process rule: No such file or directory\nadd rule ip kube-proxy nosuch drop\n                       ^^^^^^"},
	{"misspelt command", "add rul ip kube-proxy services drop",
		"/tmp/e.nft:1:9-10: Error: syntax error, unexpected ip, expecting string\nadd rul ip kube-proxy services drop\n        ^^"},
	{"misspelt selector", "add rule ip kube-proxy services ip dadr 1.2.3.4 drop",
		"/tmp/e.nft:1:36-39: Error: syntax error, unexpected string\nadd rule ip kube-proxy services ip dadr 1.2.3.4 drop\n                                   ^^^^"},
	{"element of missing set", "add element ip kube-proxy nosuch { 1.2.3.4 }",
		"/tmp/e.nft:1:27-32: Error: No such file or directory\nadd element ip kube-proxy nosuch { 1.2.3.4 }\n                          ^^^^^^"},
	{"chain in missing table", "add chain ip nosuch c",
		"/tmp/e.nft:1:14-19: Error: No such file or directory\nadd chain ip nosuch c\n             ^^^^^^"},
	{"delete missing chain", "delete chain ip kube-proxy nosuch",
		"/tmp/e.nft:1:28-33: Error: Could not process rule: No such file or directory\ndelete chain ip kube-proxy nosuch\n                           ^^^^^^"},
	{"bad address", "add rule ip kube-proxy services ip daddr 1.2.3.400 drop",
		"/tmp/e.nft:1:42-50: Error: Could not resolve hostname: Name or service not known\nadd rule ip kube-proxy services ip daddr 1.2.3.400 drop\n                                         ^^^^^^^^^"},
	{"prefix in plain set", "add element ip kube-proxy s { 10.0.0.0/8 }",
		"/tmp/e.nft:1:31-40: Error: You must add 'flags interval' to your set declaration if you want to add prefix elements\nadd element ip kube-proxy s { 10.0.0.0/8 }\n                              ^^^^^^^^^^"},
	{"vmap on a set", "add rule ip kube-proxy services ip daddr . meta l4proto vmap @s",
		"/tmp/e.nft:1:62-63: Error: Expression is not a map\nadd rule ip kube-proxy services ip daddr . meta l4proto vmap @s\n                                                             ^^"},
}

func TestApplyErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNFT(t)
			require.NoError(t, n.Apply("", errorSetup))
			before := n.ListRuleset()
			err := n.Apply("/tmp/e.nft", tc.in+"\n")
			var es Errors
			require.ErrorAs(t, err, &es)
			require.Len(t, es, 1)
			assert.Equal(t, tc.want, es[0].Error())
			assert.Equal(t, before, n.ListRuleset(), "a failed transaction changes nothing")
		})
	}
}

func TestApplyAtomic(t *testing.T) {
	n := newNFT(t)
	require.NoError(t, n.Apply("", errorSetup))
	before := n.ListRuleset()
	// The first commands are fine; the last fails: none is applied, as
	// nft -f sends one batch.
	err := n.Apply("f", "add chain ip kube-proxy c2\nadd rule ip kube-proxy c2 drop\nadd element ip kube-proxy s { 1.2.3.4 }\nadd rule ip kube-proxy c2 jump nosuch\n")
	var es Errors
	require.ErrorAs(t, err, &es)
	assert.Equal(t, 4, es[0].Line)
	assert.Equal(t, before, n.ListRuleset())
	assert.Nil(t, n.Table("ip", "kube-proxy").Chain("c2"))
}

func TestDeleteAndFlush(t *testing.T) {
	n := newNFT(t)
	require.NoError(t, n.Apply("", errorSetup+"add chain ip kube-proxy ep\nadd rule ip kube-proxy services jump ep\nadd map ip kube-proxy m { type ipv4_addr : verdict ; }\nadd element ip kube-proxy m { 10.0.0.1 : goto ep }\n"))
	// A chain something jumps to cannot be deleted (EBUSY); one with only
	// rules of its own can (the kernel deletes its rules with it).
	err := n.Apply("", "delete chain ip kube-proxy ep\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Error: Could not process rule: Device or resource busy")
	require.NoError(t, n.Apply("", "add chain ip kube-proxy own\nadd rule ip kube-proxy own drop\ndelete chain ip kube-proxy own\n"))
	// kube-proxy's order: flush the referencing chain and map, then delete.
	require.NoError(t, n.Apply("", "flush chain ip kube-proxy services\nflush map ip kube-proxy m\ndelete chain ip kube-proxy ep\n"))
	assert.Nil(t, n.Table("ip", "kube-proxy").Chain("ep"))
	assert.Empty(t, n.Table("ip", "kube-proxy").Set("m").Elements())
	// delete element, delete set, delete table.
	require.NoError(t, n.Apply("", "add element ip kube-proxy s { 10.0.0.1, 10.0.0.2 }\ndelete element ip kube-proxy s { 10.0.0.1 }\n"))
	require.Len(t, n.Table("ip", "kube-proxy").Set("s").Elements(), 1)
	require.NoError(t, n.Apply("", "delete set ip kube-proxy s\ndelete table ip kube-proxy\n"))
	assert.Empty(t, n.Tables())
}

func TestPriorityNames(t *testing.T) {
	for _, tc := range []struct {
		hook datapath.Hook
		prio int
		want string
	}{
		{datapath.Prerouting, -110, "dstnat - 10"}, {datapath.Prerouting, -100, "dstnat"},
		{datapath.Output, -100, "-100"}, {datapath.Output, -90, "-90"}, {datapath.Output, -110, "-110"},
		{datapath.Postrouting, 100, "srcnat"}, {datapath.Input, 100, "100"}, {datapath.Forward, 0, "filter"},
		{datapath.Forward, 5, "filter + 5"}, {datapath.Input, -150, "mangle"},
	} {
		assert.Equal(t, tc.want, priorityString(tc.hook, tc.prio), "%s %d", tc.hook, tc.prio)
	}
}

func FuzzApply(f *testing.F) {
	in, _ := os.ReadFile("testdata/kube-proxy.nft")
	f.Add(string(in))
	for _, tc := range errorCases {
		f.Add(errorSetup + tc.in)
	}
	f.Add("add table ip t { comment \"x\" ; }\nadd chain ip t c { type nat hook prerouting priority dstnat - 10 ; }")
	f.Add("add rule ip t c numgen random mod 0 vmap { }")
	f.Fuzz(func(t *testing.T, s string) {
		n := newNFT(t)
		if err := n.Apply("", s); err == nil {
			_ = n.ListRuleset()
		}
	})
}
