package nftables

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kernelNS creates a network namespace for the test, or skips without
// root, ip or nft.
func kernelNS(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (apt-get install nftables iproute2)", tool)
		}
	}
	name := fmt.Sprintf("kwnftt-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", name, "nft"}, args...)...).CombinedOutput()
		return string(out), err
	}
}

// TestKernelListing loads the same input into the kernel with nft -f and
// into kubewalk, and compares `nft list table ip kube-proxy` (elements
// compared as sets: the kernel lists hash sets in bucket order).
func TestKernelListing(t *testing.T) {
	nft := kernelNS(t)
	path, err := filepath.Abs("testdata/kube-proxy.nft")
	require.NoError(t, err)
	out, err := nft("-f", path)
	require.NoError(t, err, out)
	real, err := nft("list", "table", "ip", "kube-proxy")
	require.NoError(t, err, real)

	n := newNFT(t)
	in, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, n.Apply(path, string(in)))
	ours, _ := n.ListTable("ip", "kube-proxy")
	assert.Equal(t, CanonicalListing(real), CanonicalListing(ours))
}

// TestKernelErrors runs every error case through the real nft and checks
// kubewalk's message against it, byte for byte.
func TestKernelErrors(t *testing.T) {
	nft := kernelNS(t)
	dir := t.TempDir()
	setup := filepath.Join(dir, "setup.nft")
	require.NoError(t, os.WriteFile(setup, []byte(errorSetup), 0o644))
	out, err := nft("-f", setup)
	require.NoError(t, err, out)
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, "e.nft")
			require.NoError(t, os.WriteFile(f, []byte(tc.in+"\n"), 0o644))
			out, err := nft("-f", f)
			require.Error(t, err, "nft accepted %q", tc.in)
			real := strings.TrimRight(strings.ReplaceAll(out, f, "/tmp/e.nft"), "\n")
			assert.Equal(t, real, tc.want)
		})
	}
}
