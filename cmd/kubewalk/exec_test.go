package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExec(t *testing.T) {
	code, out, errs := call("exec", "--scenario", "reference", "-n", "net", "client", "--", "wget", "-qO-", "http://10.111.80.136")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "<title>Welcome to nginx!</title>")

	code, out, _ = call("exec", "--scenario", "reference", "-n", "net", "client", "--", "cat", "/etc/resolv.conf")
	require.Equal(t, 0, code)
	require.Equal(t, "search net.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n", out)

	code, _, errs = call("exec", "--scenario", "reference", "-n", "net", "client")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "one POD and, after --, a COMMAND are required")
}
