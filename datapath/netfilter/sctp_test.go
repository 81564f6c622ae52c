package netfilter

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sctpRules are the SCTP rules kube-proxy writes (-p sctp -m sctp
// --dport) and the short form iptables completes itself.
const sctpRules = `*filter
-A OUTPUT -d 10.96.9.9/32 -p sctp -m comment --comment "tel/sig:sctp cluster IP" -m sctp --dport 3868 -j ACCEPT
-A OUTPUT -p sctp --dport 80 --sport 1:100 -j ACCEPT
-A OUTPUT -p sctp -m multiport --dports 3868,3869 -j ACCEPT
-A OUTPUT -p sctp -m sctp ! --dport 9 -j DROP
COMMIT
`

func savedRules(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "-A ") {
			out = append(out, l)
		}
	}
	return out
}

// TestSCTPMatch: -m sctp parses and saves as iptables-save prints it, and a
// rule with it needs -p sctp (the kernel's checkentry refuses it).
func TestSCTPMatch(t *testing.T) {
	nf := newNF(t)
	require.NoError(t, nf.Restore(sctpRules, RestoreOptions{}))
	require.Equal(t, []string{
		`-A OUTPUT -d 10.96.9.9/32 -p sctp -m comment --comment "tel/sig:sctp cluster IP" -m sctp --dport 3868 -j ACCEPT`,
		`-A OUTPUT -p sctp -m sctp --sport 1:100 --dport 80 -j ACCEPT`,
		`-A OUTPUT -p sctp -m multiport --dports 3868,3869 -j ACCEPT`,
		`-A OUTPUT -p sctp -m sctp ! --dport 9 -j DROP`,
	}, savedRules(nf.Save(SaveOptions{})))
	for _, bad := range []string{"-A OUTPUT -p tcp -m sctp --dport 80 -j ACCEPT", "-A OUTPUT -m sctp --dport 80 -j ACCEPT"} {
		err := nf.Restore("*filter\n"+bad+"\nCOMMIT\n", RestoreOptions{})
		require.ErrorContains(t, err, "iptables-restore: line 2 failed: RULE_APPEND failed (Invalid argument)")
	}
}

// TestSCTPMatchAgainstIptablesNft loads the same rules with the real
// iptables-nft-restore in a namespace of its own and compares
// iptables-save, and that the kernel refuses the same bad rules.
func TestSCTPMatchAgainstIptablesNft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	for _, bin := range []string{"ip", "iptables-nft-restore", "iptables-nft-save"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s", bin)
		}
	}
	name := fmt.Sprintf("kwdp-sctp-%d", os.Getpid()) // unique: other runs of this test may be going on
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	restore := func(in string) error {
		cmd := exec.Command("ip", "netns", "exec", name, "iptables-nft-restore")
		cmd.Stdin = strings.NewReader(in)
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "Could not fetch rule set generation id") {
			t.Skipf("nf_tables not usable here: %s", out)
		}
		return err
	}
	if err := restore(sctpRules); err != nil {
		t.Skipf("iptables-nft-restore cannot load sctp rules here (xt_sctp missing?): %v", err)
	}
	out, err := exec.Command("ip", "netns", "exec", name, "iptables-nft-save", "-t", "filter").CombinedOutput()
	require.NoError(t, err, "%s", out)
	nf := newNF(t)
	require.NoError(t, nf.Restore(sctpRules, RestoreOptions{}))
	require.Equal(t, savedRules(string(out)), savedRules(nf.Save(SaveOptions{})))
	require.Error(t, restore("*filter\n-A OUTPUT -p tcp -m sctp --dport 80 -j ACCEPT\nCOMMIT\n"))
}
