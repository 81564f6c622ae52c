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
