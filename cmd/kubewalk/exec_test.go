package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExec(t *testing.T) {
	code, out, errs := call("exec", "--scenario", "reference", "-n", "net", "client", "--", "wget", "-qO-", "http://10.111.80.136")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "<title>Welcome to nginx!</title>")

	code, out, errs = call("exec", "--scenario", "reference", "-n", "net", "client", "--", "wget", "-qO-", "http://web")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "<title>Welcome to nginx!</title>")

	code, out, _ = call("exec", "--scenario", "reference", "-n", "net", "client", "--", "cat", "/etc/resolv.conf")
	require.Equal(t, 0, code)
	require.Equal(t, "search net.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n", out)

	code, _, errs = call("exec", "--scenario", "reference", "-n", "net", "client")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "one POD and, after --, a COMMAND are required")
}

// TestIgnoredFieldsWarned: fields of a user's manifest that kubewalk does
// not model are named on stderr, at the object's position, and the rest
// of the file is used.
func TestIgnoredFieldsWarned(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(f, []byte(`apiVersion: kubewalk.io/v1alpha1
kind: Cluster
networks: [{name: lan}]
nodes:
- name: n1
  role: control-plane
  nics: [{network: lan, address: 192.168.1.10/24}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  nodeName: n1
  containers:
  - name: nginx
    image: nginx:1.27
    resources: {limits: {cpu: 100m}}
`), 0o644))
	code, out, errs := call("get", "pods", "-f", f)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "web    1/1     Running")
	require.Equal(t, "Warning: "+f+":9:1: Pod default/web: kubewalk does not model spec.containers[0].resources; ignored\n", errs)
}

// TestSelectorMatchingNothingWarned: a Service in a user's file whose
// selector matches no pod loads, with a warning naming it.
func TestSelectorMatchingNothingWarned(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(f, []byte(`apiVersion: kubewalk.io/v1alpha1
kind: Cluster
networks: [{name: lan}]
nodes:
- name: n1
  nics: [{network: lan, address: 192.168.1.10/24}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: wbe}
  ports: [{port: 80}]
`), 0o644))
	code, out, errs := call("get", "svc", "web", "-f", f)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "web    ClusterIP")
	require.Equal(t, "Warning: "+f+":8:1: Service default/web: selector app=wbe matches no pod\n", errs)
}
