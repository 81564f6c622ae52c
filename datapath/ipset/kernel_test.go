package ipset

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var initvalRE = regexp.MustCompile(`initval 0x[0-9a-f]+`)

// normalise masks the random initval and sorts each set's member lines
// (the kernel lists hash members in bucket order).
func normalise(list string) string {
	list = initvalRE.ReplaceAllString(list, "initval X")
	var out []string
	for _, set := range strings.Split(strings.TrimSuffix(list, "\n"), "\n\n") {
		head, members, _ := strings.Cut(set, "Members:\n")
		lines := strings.Split(members, "\n")
		lines = slices.DeleteFunc(lines, func(s string) bool { return s == "" })
		slices.Sort(lines)
		out = append(out, head+"Members:\n"+strings.Join(lines, "\n"))
	}
	return strings.Join(out, "\n\n")
}

// TestAgainstKernelIPSet builds kubeProxySets with the real ipset in a
// network namespace and compares `ipset list` and `ipset save`.
func TestAgainstKernelIPSet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	for _, tool := range []string{"ip", "ipset"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	// The pid keeps concurrent test runs out of each other's namespace.
	ns := fmt.Sprintf("kwipset%d-test", os.Getpid())
	_ = exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a namespace: %s", out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	for _, c := range kubeProxySets {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "ipset"}, c...)...).CombinedOutput()
		if err != nil && strings.Contains(string(out), "Kernel support protocol") {
			t.Skipf("no ip_set in this kernel: %s", out)
		}
		require.NoError(t, err, "%v: %s", c, out)
	}
	real, err := exec.Command("ip", "netns", "exec", ns, "ipset", "list").Output()
	require.NoError(t, err)
	r := build(t)
	require.Equal(t, normalise(string(real)), normalise(r.List()))
	save, err := exec.Command("ip", "netns", "exec", ns, "ipset", "save").Output()
	require.NoError(t, err)
	sortLines := func(s string) []string {
		l := strings.Split(initvalRE.ReplaceAllString(s, "initval X"), "\n")
		slices.Sort(l)
		return l
	}
	require.Equal(t, sortLines(string(save)), sortLines(r.Save()))
	// The errors the tool prints for bad input.
	for _, c := range [][]string{
		{"create", "X", "hash:ip,port", "bogus"},
		{"add", "KUBE-CLUSTER-IP", "10.96.0.1,foo:1"},
		{"add", "NOPE", "1.2.3.4"},
		{"add", "KUBE-CLUSTER-IP", "10.96.0.1,tcp:443"},
		{"del", "KUBE-CLUSTER-IP", "10.96.0.2,tcp:443"},
	} {
		out, _ := exec.Command("ip", append([]string{"netns", "exec", ns, "ipset"}, c...)...).CombinedOutput()
		first, _, _ := strings.Cut(string(out), "\n")
		require.EqualError(t, r.Exec(c...), first, "%v", c)
	}
}
