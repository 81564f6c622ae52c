package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/internal/golden"
)

// TestProxyModesLab runs the lab that shows one Service in kube-proxy's
// three modes, switched as on a real cluster (edit the kube-proxy
// ConfigMap, recreate its pods): iptables chains, then nftables verdict
// maps and numgen, then IPVS virtual servers and ipsets, each with the
// walk that uses them.
func TestProxyModesLab(t *testing.T) {
	code, out, errs := call("play", "--scenario", "reference", "../../scenarios/labs/proxy-modes.play")
	require.Equal(t, 0, code, errs)
	for _, want := range []string{
		"nat/KUBE-SVC-RTHZXQ2YZKSHM2PI matched",
		"numgen random mod 2 vmap",
		"TCP  10.111.80.136:80 rr",
		"Name: KUBE-CLUSTER-IP",
	} {
		require.Contains(t, out, want)
	}
	golden.Check(t, "proxy-modes.play.txt", out)
}

// TestStateProxyModeDumps: kubewalk state prints each mode's own dump.
func TestStateProxyModeDumps(t *testing.T) {
	code, out, errs := call("state", "--scenario", "reference", "--proxy-mode", "ipvs", "--node", "cka-w1", "ipvsadm")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "TCP  10.111.80.136:80 rr\n")
	code, out, errs = call("state", "--scenario", "reference", "--proxy-mode", "ipvs", "--node", "cka-w1", "ipset-list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "Name: KUBE-CLUSTER-IP\n")
	code, out, errs = call("state", "--scenario", "reference", "--proxy-mode", "nftables", "--node", "cka-w1", "nft-ruleset")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "table ip kube-proxy {")
	code, _, errs = call("state", "--scenario", "reference", "--proxy-mode", "bogus", "--node", "cka-w1", "ipvsadm")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `Invalid value: "bogus"`)
}
