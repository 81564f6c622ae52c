package play

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubewalk/kubewalk/internal/golden"
	"github.com/kubewalk/kubewalk/scenarios"
)

// newRunner is the reference cluster.
func newRunner(t *testing.T) *Runner {
	t.Helper()
	ref, err := scenarios.NewReference(1)
	require.NoError(t, err)
	return New(ref.Cluster)
}

func TestParse(t *testing.T) {
	script := `# a lab
kubectl get pods -A   # every namespace

kubectl apply -f - <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: lab}
EOF
kubectl get pod "x y" 'a#b' || true
kubectl apply -f - << 'END'
	tabbed
END
kubectl apply -f - <<-E
		stripped
	E
node cka-w1: ip route
`
	steps, err := Parse(strings.NewReader(script))
	require.NoError(t, err)
	require.Len(t, steps, 7)
	assert.True(t, steps[0].Comment)
	assert.Equal(t, []string{"kubectl", "get", "pods", "-A"}, steps[1].Args)
	assert.Equal(t, 2, steps[1].Line)
	assert.Equal(t, []string{"kubectl", "apply", "-f", "-"}, steps[2].Args)
	assert.Equal(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: lab}\n", steps[2].Stdin)
	assert.Equal(t, []string{"apiVersion: v1", "kind: Namespace", "metadata: {name: lab}", "EOF"}, steps[2].Heredoc)
	assert.Equal(t, []string{"kubectl", "get", "pod", "x y", "a#b"}, steps[3].Args)
	assert.True(t, steps[3].MayFail)
	assert.Equal(t, 9, steps[3].Line)
	assert.Equal(t, "\ttabbed\n", steps[4].Stdin)
	assert.Equal(t, "stripped\n", steps[5].Stdin)
	assert.Equal(t, []string{"node", "cka-w1:", "ip", "route"}, steps[6].Args)
	assert.Equal(t, 16, steps[6].Line)
}

func TestParseErrors(t *testing.T) {
	for script, want := range map[string]string{
		"kubectl apply -f - <<EOF\nkind: x\n": `line 1: here-document delimited by end-of-file (wanted "EOF")`,
		"kubectl get 'pods\n":                 "line 1: unexpected EOF while looking for matching `''",
		"echo \"a\n":                          "line 1: unexpected EOF while looking for matching `\"'",
		"ok\nkubectl apply -f - <<\n":         "line 2: heredoc without a terminator word (want <<EOF)",
		"|| true\n":                           "line 1: no command",
	} {
		_, err := Parse(strings.NewReader(script))
		var se *SyntaxError
		require.True(t, errors.As(err, &se), script)
		assert.Equal(t, want, err.Error())
	}
}

func FuzzParse(f *testing.F) {
	f.Add("kubectl get pods -A\n# c\nkubectl apply -f - <<EOF\nkind: Pod\nEOF\nsleep 90s || true\n")
	f.Add("a 'b\" c' \"d\\\"e\" f\\ g <<-'X'\n\tq\n\tX\n")
	f.Fuzz(func(t *testing.T, s string) {
		steps, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, st := range steps {
			assert.True(t, st.Comment || len(st.Args) > 0)
		}
	})
}

func TestSleep(t *testing.T) {
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "90": 90 * time.Second, "1.5": 1500 * time.Millisecond,
		"2m": 2 * time.Minute, "1h": time.Hour, "1d": 24 * time.Hour, "250ms": 250 * time.Millisecond} {
		d, err := parseSleep(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, d, in)
	}
	for _, in := range []string{"", "x", "-1s", "5y"} {
		_, err := parseSleep(in)
		assert.EqualError(t, err, `sleep: invalid time interval "`+in+`"`)
	}
	r := newRunner(t)
	before := r.Cluster.World.Now()
	require.NoError(t, r.Line("sleep 90s", "", &bytes.Buffer{}))
	assert.Equal(t, 90*time.Second, r.Cluster.World.Now()-before)
}

// The runner's Go API, step by step: apply, then read the cluster.
func TestStepByStep(t *testing.T) {
	r := newRunner(t)
	var out bytes.Buffer
	ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: lab\n"
	require.NoError(t, r.Line("kubectl apply -f -", ns, &out))
	assert.Equal(t, "namespace/lab created\n", out.String())
	_, err := r.API.Get("Namespace", "", "lab")
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, r.Line("kubectl apply -f -", ns, &out))
	assert.Equal(t, "namespace/lab unchanged\n", out.String())
}

func TestUnknownCommandStops(t *testing.T) {
	r := newRunner(t)
	var out bytes.Buffer
	err := r.Run(strings.NewReader("kubectl get ns\nfrobnicate --now\nkubectl get ns\n"), &out)
	var ee *ExitError
	require.True(t, errors.As(err, &ee))
	assert.Equal(t, 2, ee.Line)
	assert.Equal(t, 127, ee.Code)
	assert.Equal(t, 1, strings.Count(out.String(), "$ kubectl get ns"), "the script stops at the unknown command")
	assert.Contains(t, out.String(), "$ frobnicate --now\nplay: frobnicate: command not found (kubewalk play knows kubectl, sleep, node)\n")
}

func TestFailingStepStops(t *testing.T) {
	r := newRunner(t)
	var out bytes.Buffer
	err := r.Run(strings.NewReader("kubectl get pod nope || true\nkubectl get pod nope\nsleep 1s\n"), &out)
	var ee *ExitError
	require.True(t, errors.As(err, &ee))
	assert.Equal(t, 2, ee.Line)
	assert.Equal(t, 1, ee.Code)
	assert.Equal(t, "$ kubectl get pod nope || true\nError from server (NotFound): pods \"nope\" not found\n"+
		"$ kubectl get pod nope\nError from server (NotFound): pods \"nope\" not found\n", out.String())
}

func TestNodeCommands(t *testing.T) {
	r := newRunner(t)
	n := r.Cluster.Node("cka-w1")
	for line, want := range map[string]string{
		"node cka-w1: ip route":                      n.Host.IPRoute(),
		"node cka-w1: ip r":                          n.Host.IPRoute(),
		"node cka-w1: ip neigh":                      n.Host.IPNeigh(""),
		"node cka-w1: ip addr":                       n.Host.IPAddr(),
		"node cka-w1: bridge fdb":                    n.Host.BridgeFDB(""),
		"node cka-w1: bridge fdb show dev flannel.1": n.Host.BridgeFDB("flannel.1"),
		"node cka-w1: ip -d link show flannel.1":     n.Host.IPLink("flannel.1", true),
	} {
		var out bytes.Buffer
		require.NoError(t, r.Line(line, "", &out), line)
		assert.Equal(t, want, out.String(), line)
		assert.NotEmpty(t, want, line)
	}
	var out bytes.Buffer
	require.NoError(t, r.Line("node cka-w1: iptables-save -t nat", "", &out))
	assert.Contains(t, out.String(), "*nat\n")
	assert.NotContains(t, out.String(), "*filter\n")
	out.Reset()
	require.NoError(t, r.Line("node cka-w1: conntrack -L", "", &out))
	assert.Regexp(t, `conntrack v1\.4\.7 \(conntrack-tools\): \d+ flow entries have been shown\.\n$`, out.String())

	for line, want := range map[string]string{
		"node cka-w9: ip route":          "node cka-w9: no such node (nodes: cka-cp1, cka-w1, cka-w2)\n",
		"node cka-w1 ip route":           "node: want node NAME: COMMAND, as in: node cka-w1: ip route\n",
		"node cka-w1: systemctl status":  "node cka-w1: systemctl status: not a command kubewalk runs on nodes (it runs: ip route, ip neigh, ip addr, ip -d link, ip link, bridge fdb, iptables-save, nft list ruleset, nft list table ip *, ipvsadm -Ln, ipvsadm -Lnc, ipset list, conntrack -L)\n",
		"node cka-w1: ip link show nope": "Device \"nope\" does not exist.\n",
	} {
		var out bytes.Buffer
		require.Error(t, r.Line(line, "", &out), line)
		assert.Equal(t, want, out.String(), line)
	}
}

// The lab script from a file and from stdin gives the golden transcript,
// and the same script run twice gives the same bytes.
func TestLabGolden(t *testing.T) {
	script, err := os.ReadFile("testdata/lab.play")
	require.NoError(t, err)
	run := func() string {
		var out bytes.Buffer
		require.NoError(t, newRunner(t).Run(bytes.NewReader(script), &out))
		return out.String()
	}
	first := run()
	golden.Check(t, "lab.txt", first)
	assert.Equal(t, first, run())
}

// kubectl delete waits, as --wait=true does, until the pod is gone (its
// kubelet stopped it); with --wait=false it returns while the pod is
// still Terminating.
func TestDeleteWaits(t *testing.T) {
	r := newRunner(t)
	var out bytes.Buffer
	require.NoError(t, r.Line("kubectl delete pod web-1 -n net --wait=false", "", &out))
	assert.Equal(t, "pod \"web-1\" deleted from net namespace\n", out.String())
	out.Reset()
	require.NoError(t, r.Line("kubectl get pod web-1 -n net", "", &out))
	assert.Contains(t, out.String(), "Terminating")

	before := r.Cluster.World.Now()
	out.Reset()
	require.NoError(t, r.Line("kubectl delete pod web-2 -n net", "", &out))
	assert.Equal(t, "pod \"web-2\" deleted from net namespace\n", out.String())
	_, err := r.API.Get("Pod", "net", "web-2")
	assert.True(t, apierrors.IsNotFound(err), "gone when delete returns: %v", err)
	assert.Greater(t, r.Cluster.World.Now(), before)
}

// Any command line gets output or an error line, never a panic.
func FuzzExec(f *testing.F) {
	for _, s := range []string{
		"kubectl get pods -A -o wide", "kubectl patch svc web -n net -p '{\"spec\":{\"ports\":[{\"port\":80,\"nodePort\":31000}]}}'",
		"kubectl patch deploy x -p '[1]'", "kubectl label pod client -n net a=b c-", "kubectl scale deploy web --replicas=-1",
		"kubectl exec -n net client -- ip route", "node cka-w1: ip -d link show cni0", "sleep 1.5", "kubectl delete svc",
		"kubectl get deploy,pods -l 'app in (web'", "kubectl describe pods web", "kubectl -n",
	} {
		f.Add(s, "")
	}
	f.Add("kubectl apply -f -", "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: net}\nspec: {ports: [{port: 1}]}\n")
	ref, err := scenarios.NewReference(1)
	require.NoError(f, err)
	r := New(ref.Cluster)
	f.Fuzz(func(t *testing.T, line, stdin string) {
		if strings.HasPrefix(line, "sleep") {
			return // virtual time is cheap, but not a fuzzer's thousands of hours
		}
		var out bytes.Buffer
		if err := r.Line(line, stdin, &out); err != nil {
			assert.NotEmpty(t, out.String(), "a failing command says why: %q", line)
		}
	})
}
