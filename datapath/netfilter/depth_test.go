package netfilter

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// nested is a filter table where OUTPUT jumps into C1, C1 into C2, ... and
// Cn accepts: n nested jumps.
func nested(n int) string {
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, ":C%d - [0:0]\n", i)
	}
	b.WriteString("-A OUTPUT -j C1\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "-A C%d -j C%d\n", i, i+1)
	}
	fmt.Fprintf(&b, "-A C%d -j ACCEPT\nCOMMIT\n", n)
	return b.String()
}

// refusedLines is what Restore reports for nested(n): nil when loaded.
func refusedLines(t *testing.T, n int) []int {
	nf := newNF(t)
	err := nf.Restore(nested(n), RestoreOptions{})
	if err == nil {
		return nil
	}
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pe.Lines[0], pe.Line)
	require.Contains(t, pe.Msg, "RULE_APPEND failed (Too many links): rule in chain C15")
	require.Empty(t, nf.Table(Filter).Chain("OUTPUT").Rules(), "nothing loaded")
	return pe.Lines
}

// TestChainsNestedTooDeepAreRefusedAtLoad: iptables-nft (the backend
// modelled) loads 15 nested jumps and refuses 16, naming the rule that
// went too deep and every rule after it, as nf_tables validates the table
// after each rule of the batch. Before, 16 to 64 levels loaded and deeper
// ones loaded too and dropped packets silently at walk time.
func TestChainsNestedTooDeepAreRefusedAtLoad(t *testing.T) {
	require.Nil(t, refusedLines(t, 15))
	// Lines: 1 *filter, 2..n+1 chains, n+2 OUTPUT's jump, n+2+k the rule of Ck.
	require.Equal(t, []int{33, 34}, refusedLines(t, 16))
	require.Equal(t, []int{37, 38, 39, 40, 41, 42}, refusedLines(t, 20))
	require.Len(t, refusedLines(t, 70), 70-14)

	// One command at a time (iptables -A), the 16th level is refused too.
	nf := newNF(t)
	require.NoError(t, nf.Restore(nested(15), RestoreOptions{}))
	require.NoError(t, nf.Exec(Filter, "-N", "C16"))
	err := nf.Exec(Filter, "-A", "C15", "-j", "C16")
	require.ErrorContains(t, err, "RULE_APPEND failed (Too many links): rule in chain C15")
	require.Len(t, nf.Table(Filter).Chain("C15").Rules(), 1)
}

// TestChainDepthAgainstIptablesNft restores the same rulesets with the
// real iptables-nft-restore in a namespace of its own and compares the
// refused lines.
func TestChainDepthAgainstIptablesNft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	for _, bin := range []string{"ip", "iptables-nft-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s", bin)
		}
	}
	name := fmt.Sprintf("kwdp-depth-%d", os.Getpid()) // unique: other runs of this test may be going on
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	re := regexp.MustCompile(`(?m)^line (\d+): RULE_APPEND failed \(Too many links\): rule in chain C\d+$`)
	for _, n := range []int{15, 16, 20} {
		cmd := exec.Command("ip", "netns", "exec", name, "iptables-nft-restore")
		cmd.Stdin = strings.NewReader(nested(n))
		out, err := cmd.CombinedOutput()
		var kernel []int
		for _, m := range re.FindAllStringSubmatch(string(out), -1) {
			l, _ := strconv.Atoi(m[1])
			kernel = append(kernel, l)
		}
		if kernel == nil {
			require.NoError(t, err, "%s", out)
		}
		require.Equal(t, kernel, refusedLines(t, n), "n=%d: %s", n, out)
	}
}
