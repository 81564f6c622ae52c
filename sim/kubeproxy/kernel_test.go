package kubeproxy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRealKernel loads the generated rules into a fresh network namespace
// with the real iptables tools and compares what iptables-save prints with
// Rules.Save. It runs for each iptables variant installed (nf_tables and
// legacy), and never touches the host namespace.
//
// Two loads per scenario:
//  1. the kube-proxy way: `iptables -N` + `iptables -I` for every jump rule
//     (in kube-proxy's order), the canary chains, then RestoreInput through
//     `iptables-restore --noflush --counters`; iptables-save must print
//     exactly SaveFilter/SaveNAT (after dropping its "#" comment lines);
//  2. `iptables-restore --test` of Save itself (it is valid restore input).
func TestRealKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip) to create network namespaces")
	}
	variants := []struct{ name, ipt, restore, save string }{
		{"nft", "iptables-nft", "iptables-nft-restore", "iptables-nft-save"},
		{"legacy", "iptables-legacy", "iptables-legacy-restore", "iptables-legacy-save"},
		{"default", "iptables", "iptables-restore", "iptables-save"},
	}
	ran := false
	for _, v := range variants {
		if !haveAll(v.ipt, v.restore, v.save) {
			continue
		}
		if v.name == "default" && ran {
			continue // already covered by a named variant
		}
		ran = true
		t.Run(v.name, func(t *testing.T) {
			for _, sc := range scenarios() {
				t.Run(sc.name, func(t *testing.T) {
					if sc.cfg.NFAcct {
						t.Skip("-m nfacct needs nfacct objects created over netlink; not modelled here")
					}
					r, err := Generate(sc.cfg, sc.snap)
					require.NoError(t, err)

					ns := newNetns(t)
					for _, j := range r.JumpRules() {
						// EnsureChain: -N fails if the chain exists; ignore that.
						_, _ = run(ns, nil, v.ipt, "-w", "-t", j.Table, "-N", j.Args[len(j.Args)-1])
						out, err := run(ns, nil, v.ipt, append([]string{"-w", "-t", j.Table, "-I", j.Chain}, j.Args...)...)
						require.NoError(t, err, "%s", out)
					}
					for tbl, chains := range r.EnsuredChains() {
						for _, c := range chains {
							_, _ = run(ns, nil, v.ipt, "-w", "-t", tbl, "-N", c)
						}
					}
					out, err := run(ns, []byte(r.RestoreInput()), v.restore, "-w", "--noflush", "--counters")
					require.NoError(t, err, "%s\n%s", out, r.RestoreInput())

					for _, tbl := range []struct {
						name string
						want string
					}{{"filter", r.SaveFilter()}, {"nat", r.SaveNAT()}} {
						got, err := run(ns, nil, v.save, "-t", tbl.name)
						require.NoError(t, err, "%s", got)
						assert.Equal(t, tbl.want, stripComments(got), "iptables-save -t %s (%s)", tbl.name, v.name)
					}

					ns2 := newNetns(t)
					out, err = run(ns2, []byte(r.Save()), v.restore, "-w", "--test")
					require.NoError(t, err, "iptables-restore --test of Save: %s", out)
				})
			}
		})
	}
	if !ran {
		t.Skip("needs iptables (iptables-restore, iptables-save); install the iptables package")
	}
}

func haveAll(bins ...string) bool {
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			return false
		}
	}
	return true
}

var nsCounter atomic.Int64

// newNetns creates a kwtest- namespace deleted when the test ends.
func newNetns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("kwtest-kp-%d-%d", os.Getpid(), nsCounter.Add(1))
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	if err != nil {
		t.Skipf("cannot create network namespace %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("deleting netns %s: %v: %s", name, err, out)
		}
	})
	return name
}

func run(ns string, stdin []byte, bin string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		b.WriteString(l)
	}
	return b.String()
}
