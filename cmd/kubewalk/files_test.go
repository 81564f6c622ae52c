package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/scenario"
)

// showReference writes kubewalk scenarios show reference, edited by edit,
// to a file and returns its path.
func showReference(t *testing.T, edit func(string) string) string {
	t.Helper()
	code, out, errs := call("scenarios", "show", "reference")
	require.Equal(t, 0, code, errs)
	require.True(t, strings.HasPrefix(out, "# reference:"), out)
	p := filepath.Join(t.TempDir(), "ref.yaml")
	require.NoError(t, os.WriteFile(p, []byte(edit(out)), 0o644))
	return p
}

func same(s string) string { return s }

func TestTraceFromTheShownFileEqualsTheBuiltIn(t *testing.T) {
	ref := showReference(t, same)
	for _, args := range [][]string{
		{"trace", "--from", "net/client", "--to", "service/net/web:80"},
		{"trace", "--from", "net/client", "--to", "service/net/web:80", "--explore"},
		{"trace", "--from", "outside", "--to", "cka-w2:30080", "-o", "json"},
		{"state", "--node", "cka-w1", "--from", "net/client", "--to", "service/net/web:80"},
		{"export"},
	} {
		code, want, errs := call(append(args, "--scenario", "reference")...)
		require.Equal(t, 0, code, errs)
		code, got, errs := call(append(args, "-f", ref)...)
		require.Equal(t, 0, code, errs)
		require.Equal(t, want, got, "%v", args)
	}
}

// buildFile builds a scenario file as the CLI does, for the answers the
// edited walks are checked against.
func buildFile(t *testing.T, path string) *scenarioCluster {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := scenario.Parse(path, data)
	require.NoError(t, err)
	c, err := scenario.Build(f, f.Cluster.Seed)
	require.NoError(t, err)
	return &scenarioCluster{c}
}

func TestAnotherReplicaInTheFileIsAnotherEndpoint(t *testing.T) {
	orig := showReference(t, same)
	edited := showReference(t, func(s string) string {
		return s + `---
apiVersion: v1
kind: Pod
metadata:
  name: web-3
  namespace: net
  labels: {app: web}
spec:
  nodeName: cka-w2
  containers:
  - name: nginx
    image: nginx
    ports:
    - {name: http, containerPort: 80}
`
	})
	web3 := buildFile(t, edited).Pod("net", "web-3")
	require.NotNil(t, web3)
	args := []string{"trace", "--from", "net/client", "--to", "service/net/web:80", "--explore"}
	code, before, errs := call(append(args, "-f", orig)...)
	require.Equal(t, 0, code, errs)
	code, after, errs := call(append(args, "-f", edited)...)
	require.Equal(t, 0, code, errs)
	ep := web3.IP.String() + ":80"
	require.NotContains(t, before, ep)
	require.Contains(t, after, ep, "the new replica is an endpoint of net/web")
	require.Contains(t, after, "3 branch(es)")
	require.Contains(t, before, "2 branch(es)")
}

func TestAnotherNodePortInTheFileMovesTheWalk(t *testing.T) {
	orig := showReference(t, same)
	edited := showReference(t, func(s string) string {
		require.Contains(t, s, "nodePort: 30080")
		return strings.Replace(s, "nodePort: 30080", "nodePort: 30099", 1)
	})
	delivered := func(file, to string) bool {
		code, out, errs := call("trace", "-f", file, "--from", "outside", "--to", to, "--level", "minimal")
		require.Equal(t, 0, code, errs)
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "/net/web-") && strings.HasSuffix(line, " tcp delivered") {
				return true
			}
		}
		return false
	}
	require.True(t, delivered(orig, "cka-w1:30080"))
	require.False(t, delivered(orig, "cka-w1:30099"))
	require.True(t, delivered(edited, "cka-w1:30099"), "the edited nodePort reaches a web pod")
	require.False(t, delivered(edited, "cka-w1:30080"), "the old nodePort no longer does")
}

func TestScenarioFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
		return p
	}
	bad := write("bad.yaml", "apiVersion: kubewalk.io/v1alpha1\nkind: Cluster\nnodes:\n- name: cp1\n  nicz: []\n---\napiVersion: v1\nkind: Pood\n")
	code, out, errs := call("trace", "-f", bad, "--from", "a", "--to", "b")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Equal(t, "kubewalk trace: "+bad+":5:3: unknown field \"nodes[0].nicz\"\n"+
		"kubewalk trace: "+bad+":8:7: no matches for kind \"Pood\" in version \"v1\" (kubewalk serves "+servedForTest(t)+")\n", errs)

	manifests := write("pods.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: extra, namespace: net}\nspec:\n  nodeName: cka-w2\n  containers: [{name: app, image: app}]\n")
	code, _, errs = call("trace", "--scenario", "reference", "-f", manifests, "--from", "net/extra", "--to", "net/web-1", "--proto", "icmp")
	require.Equal(t, 0, code, "--scenario and -f join: the built-in file, then the manifests: %s", errs)

	code, _, errs = call("trace", "-f", manifests, "--from", "net/extra", "--to", "net/web-1")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "no kubewalk.io/v1alpha1 Cluster document")

	noNS := write("nons.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: nowhere}\n")
	code, _, errs = call("state", "--scenario", "reference", "-f", noNS, "--node", "cka-w1", "ip-route")
	require.Equal(t, 2, code)
	require.Equal(t, "kubewalk state: "+noNS+":1:1: namespaces \"nowhere\" not found\n", errs, "the API server's error, at the object")

	stdin = strings.NewReader("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {bogus: 1}\n")
	defer func() { stdin = os.Stdin }()
	code, _, errs = call("trace", "--scenario", "reference", "-f", "-", "--from", "a", "--to", "b")
	require.Equal(t, 2, code)
	require.Equal(t, "kubewalk trace: STDIN:4:8: Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.bogus\"\n", errs)
	code, _, errs = call("trace", "--scenario", "reference", "-f", "-", "-f", "-", "--from", "a", "--to", "b")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "standard input can be read once")

	code, _, errs = call("trace", "--scenario", "reference", "-f", filepath.Join(dir, "missing.yaml"), "--from", "a", "--to", "b")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "missing.yaml: no such file or directory")

	code, _, errs = call("scenarios", "show", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `unknown scenario "nope"`)
}

func TestScenariosShowEveryBuiltIn(t *testing.T) {
	code, list, _ := call("scenarios")
	require.Equal(t, 0, code)
	for _, line := range strings.Split(strings.TrimSpace(list), "\n")[1:] {
		name := strings.Fields(line)[0]
		code, out, errs := call("scenarios", "show", name)
		require.Equal(t, 0, code, errs)
		f, err := scenario.Parse(name, []byte(out))
		require.NoError(t, err)
		require.Equal(t, name, f.Cluster.Name)
	}
}

type scenarioCluster struct{ *sim.Cluster }

// servedForTest is the served-kinds list a "no matches" error carries.
func servedForTest(t *testing.T) string {
	_, err := scenario.Parse("x", []byte("apiVersion: v1\nkind: Pood\n"))
	require.Error(t, err)
	s := err.Error()
	i := strings.Index(s, "(kubewalk serves ")
	return strings.TrimSuffix(s[i+len("(kubewalk serves "):], ")")
}
