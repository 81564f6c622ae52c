package play

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/scenarios"
)

// TestExecWget: busybox's wget in net/client fetches nginx's welcome page
// through the web Service's ClusterIP (kube-proxy's DNAT, a real TCP
// connection over gVisor's stack in both pods); to a port nobody serves it
// fails as busybox does and kubectl reports the exit code.
func TestExecWget(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	run := New(r.Cluster)
	var out strings.Builder
	err = run.Run(strings.NewReader("kubectl -n net exec client -- wget -qO- http://10.111.80.136\n"), &out)
	require.NoError(t, err)
	require.Contains(t, out.String(), "<title>Welcome to nginx!</title>")

	out.Reset()
	err = run.Run(strings.NewReader("kubectl -n net exec client -- wget -qO- http://10.244.2.2:8080/\n"), &out)
	require.Error(t, err)
	require.Contains(t, out.String(), "wget: can't connect to remote host (10.244.2.2): Connection refused")
	require.Contains(t, out.String(), "command terminated with exit code 1")
}

// TestExecWgetServiceName: the pod's resolv.conf (search
// net.svc.cluster.local ..., ndots:5, nameserver 10.96.0.10) takes a
// Service's name to its ClusterIP through CoreDNS in kube-system; a name
// that resolves nowhere is busybox's "bad address".
func TestExecWgetServiceName(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	run := New(r.Cluster)
	for _, url := range []string{"http://web", "http://web.net.svc.cluster.local/", "http://kubernetes.default:443/"} {
		var out strings.Builder
		err = run.Run(strings.NewReader("kubectl -n net exec client -- wget -qO- "+url+"\n"), &out)
		if url == "http://kubernetes.default:443/" {
			// Resolved to kubernetes's ClusterIP; the API server does not
			// listen in this model.
			require.Error(t, err)
			require.Contains(t, out.String(), "wget: can't connect to remote host (10.96.0.1): Connection refused", url)
			continue
		}
		require.NoError(t, err, url)
		require.Contains(t, out.String(), "<title>Welcome to nginx!</title>", url)
	}

	var out strings.Builder
	err = run.Run(strings.NewReader("kubectl -n net exec client -- wget -qO- http://nope\n"), &out)
	require.Error(t, err)
	require.Contains(t, out.String(), "wget: bad address 'nope'\ncommand terminated with exit code 1")
}
