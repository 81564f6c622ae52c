package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTraceProxyMode(t *testing.T) {
	code, out, errs := call("trace", "--scenario", "reference", "--from", "outside", "--to", "cka-cp1:30080", "--proxy-mode", "nftables")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "vmap @service-nodeports => @service-nodeports element tcp . 30080 : goto external-QM4IEN7H-net/web/tcp/")
	require.Contains(t, out, "masquerade fully-random")
	require.NotContains(t, out, "KUBE-NODEPORTS")

	code, out, errs = call("trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/web:80", "--explore", "--proxy-mode", "nftables")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "2 branch(es) for the first packet from net/client to service/net/web:80:\n 50.000%  10.244.1.3:80\n 50.000%  10.244.2.2:80\n", out)

	code, _, errs = call("trace", "--scenario", "reference", "--from", "outside", "--to", "cka-cp1:30080", "--proxy-mode", "userspace")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `KubeProxyConfiguration.ProxyMode: Invalid value: "userspace": must be iptables, ipvs, nftables or blank`)
}
