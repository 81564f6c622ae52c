package kubectl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/internal/golden"
	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// run is `kubectl get ARGS` with the flags in args parsed the way the CLI
// passes them: what stdout shows, what stderr shows (notes and errors).
func runGet(l Lister, args []string, opts GetOptions) (string, string) {
	var out, errOut bytes.Buffer
	if err := Get(l, args, opts, &out, &errOut); err != nil {
		errOut.WriteString(ErrorText(err))
	}
	return out.String(), errOut.String()
}

func TestGetGolden(t *testing.T) {
	l := fixture()
	for _, tc := range []struct {
		golden string
		args   []string
		opts   GetOptions
	}{
		{"get-nodes.txt", []string{"nodes"}, GetOptions{}},
		{"get-nodes-wide.txt", []string{"no"}, GetOptions{Output: "wide"}},
		{"get-pods-net.txt", []string{"pods"}, GetOptions{Namespace: "net"}},
		{"get-pods-all-wide.txt", []string{"po"}, GetOptions{AllNamespaces: true, Output: "wide"}},
		{"get-svc-all.txt", []string{"svc"}, GetOptions{AllNamespaces: true}},
		{"get-svc-net-wide.txt", []string{"services"}, GetOptions{Namespace: "net", Output: "wide"}},
		{"get-endpointslices-all.txt", []string{"endpointslices"}, GetOptions{AllNamespaces: true}},
		{"get-endpoints.txt", []string{"ep"}, GetOptions{}},
		{"get-deploy-wide.txt", []string{"deploy"}, GetOptions{Namespace: "net", Output: "wide"}},
		{"get-rs-wide.txt", []string{"rs"}, GetOptions{Namespace: "net", Output: "wide"}},
		{"get-ds-all.txt", []string{"ds"}, GetOptions{AllNamespaces: true}},
		{"get-ds-all-wide.txt", []string{"daemonsets.apps"}, GetOptions{AllNamespaces: true, Output: "wide"}},
		{"get-cm.txt", []string{"cm"}, GetOptions{Namespace: "kube-system"}},
		{"get-pdb.txt", []string{"pdb"}, GetOptions{Namespace: "net"}},
		{"get-ns.txt", []string{"ns"}, GetOptions{AllNamespaces: true}},
		{"get-events-all.txt", []string{"events"}, GetOptions{AllNamespaces: true}},
		{"get-events-net-wide.txt", []string{"ev"}, GetOptions{Namespace: "net", Output: "wide"}},
		{"get-leases.txt", []string{"leases"}, GetOptions{Namespace: "kube-node-lease"}},
		{"get-pod-names.txt", []string{"pods", "client", "crashy"}, GetOptions{Namespace: "net", Output: "name"}},
		{"get-all-names.txt", []string{"deploy"}, GetOptions{AllNamespaces: true, Output: "name"}},
		{"get-svc-web-yaml.txt", []string{"svc", "web"}, GetOptions{Namespace: "net", Output: "yaml"}},
		{"get-cm-json.txt", []string{"configmaps"}, GetOptions{Namespace: "kube-system", Output: "json"}},
		{"get-pdb-yaml-list.txt", []string{"pdb", "web", "half"}, GetOptions{Namespace: "net", Output: "yaml"}},
		{"get-deploy-rs-pods.txt", []string{"deploy,rs,pods"}, GetOptions{Namespace: "net"}},
		{"get-svc-pods-all.txt", []string{"svc,po"}, GetOptions{AllNamespaces: true, Selector: "app=web"}},
		{"get-pods-selector.txt", []string{"pods"}, GetOptions{AllNamespaces: true, Selector: "k8s-app in (kube-dns,kube-proxy),k8s-app!=kube-dns"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, errOut := runGet(l, tc.args, tc.opts)
			require.Empty(t, errOut)
			golden.Check(t, tc.golden, out)
		})
	}
}

// The cells a reader looks for, computed from the objects.
func TestGetCells(t *testing.T) {
	l := fixture()
	out, _ := runGet(l, []string{"svc"}, GetOptions{Namespace: "net"})
	assert.Regexp(t, `(?m)^web +NodePort +10\.111\.80\.136 +<none> +80:31777/TCP +24h$`, out)
	assert.Regexp(t, `(?m)^web-lb +LoadBalancer +10\.103\.7\.20 +<pending> +80:30080/TCP,53:30053/UDP +24h$`, out)

	out, _ = runGet(l, []string{"nodes"}, GetOptions{Output: "wide"})
	assert.Regexp(t, `(?m)^cka-cp1 +Ready +control-plane +25h +v1\.36\.3 +192\.168\.122\.11 +<none> +Debian`, out)
	assert.Regexp(t, `(?m)^cka-w2 +NotReady,SchedulingDisabled +<none> +25h`, out)

	out, _ = runGet(l, []string{"pods"}, GetOptions{Namespace: "net"})
	assert.Regexp(t, `(?m)^crashy +0/1 +CrashLoopBackOff +7 \(2m50s ago\) +23h$`, out)
	assert.Regexp(t, `(?m)^pinned +0/1 +Pending +0 +10m$`, out)

	// Columns are as wide as their widest cell plus three spaces.
	lines := strings.Split(out, "\n")
	assert.Equal(t, strings.Index(lines[0], "READY"), len("web-7c5ddbdf54-2xk4q")+3)
}

func TestGetErrors(t *testing.T) {
	l := fixture()
	for _, tc := range []struct {
		name      string
		args      []string
		opts      GetOptions
		out, errs string
	}{
		{"empty namespace", []string{"pods"}, GetOptions{Namespace: "kube-public"}, "", "No resources found in kube-public namespace.\n"},
		{"empty namespace default", []string{"deploy"}, GetOptions{}, "", "No resources found in default namespace.\n"},
		{"empty all namespaces", []string{"endpoints"}, GetOptions{Namespace: "net", AllNamespaces: false}, "", "No resources found in net namespace.\n"},
		{"not found", []string{"pod", "nope"}, GetOptions{Namespace: "net"}, "", "Error from server (NotFound): pods \"nope\" not found\n"},
		{"not found grouped", []string{"deploy", "nope"}, GetOptions{Namespace: "net"}, "", "Error from server (NotFound): deployments.apps \"nope\" not found\n"},
		{"unknown resource", []string{"widgets"}, GetOptions{}, "", "error: the server doesn't have a resource type \"widgets\"\n"},
		{"wrong group", []string{"pods.apps"}, GetOptions{}, "", "error: the server doesn't have a resource type \"pods.apps\"\n"},
		{"bad output", []string{"pods"}, GetOptions{Output: "xml"}, "", "error: unable to match a printer suitable for the output format \"xml\", allowed formats are: json,name,wide,yaml\n"},
		{"name across namespaces", []string{"pods", "client"}, GetOptions{AllNamespaces: true}, "", "error: a resource cannot be retrieved by name across all namespaces\n"},
		{"no resource", nil, GetOptions{}, "", "error: you must specify the type of resource to get. Use \"kubectl api-resources\" for a complete list of supported resources.\n"},
		{"empty selector", []string{"pods"}, GetOptions{Namespace: "net", Selector: "app=nothing"}, "", "No resources found in net namespace.\n"},
		{"empty kinds", []string{"deploy,cm"}, GetOptions{Namespace: "kube-public"}, "", "No resources found in kube-public namespace.\n"},
		{"bad selector", []string{"pods"}, GetOptions{Selector: "app in (a"}, "", "error: unable to parse requirement: found '', expected: ',' or ')'\n"},
		{"selector with names", []string{"pods", "client"}, GetOptions{Selector: "a=b"}, "", "error: selectors and the all flag cannot be used when passing resource/name arguments\n"},
		{"some found", []string{"pods", "nope", "client"}, GetOptions{Namespace: "net", Output: "name"}, "pod/client\n", "Error from server (NotFound): pods \"nope\" not found\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs := runGet(l, tc.args, tc.opts)
			assert.Equal(t, tc.out, out)
			assert.Equal(t, tc.errs, errs)
		})
	}
}

func TestDescribeGolden(t *testing.T) {
	l := fixture()
	for _, tc := range []struct {
		golden, ns string
		args       []string
	}{
		{"describe-node-cka-w1.txt", "", []string{"node", "cka-w1"}},
		{"describe-node-cka-w2.txt", "", []string{"nodes", "cka-w2"}},
		{"describe-pod-pinned.txt", "net", []string{"pod", "pinned"}},
		{"describe-pod-crashy.txt", "net", []string{"po", "crashy"}},
		{"describe-pod-client.txt", "net", []string{"pod", "client"}},
		{"describe-svc-web.txt", "net", []string{"svc", "web"}},
		{"describe-svc-web-lb.txt", "net", []string{"svc", "web-lb"}},
		{"describe-svc-nothing.txt", "net", []string{"service", "nothing"}},
		{"describe-svc-kubernetes.txt", "", []string{"svc", "kubernetes"}},
		{"describe-pods-prefix.txt", "net", []string{"pods", "web-7c5ddbdf54-2"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, Describe(l, tc.args, tc.ns, &out, &out))
			golden.Check(t, tc.golden, out.String())
		})
	}
}

func TestDescribeShowsSchedulerReason(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, Describe(fixture(), []string{"pod", "pinned"}, "net", &out, &out))
	assert.Contains(t, out.String(), "Warning  FailedScheduling  5m (x2 over 10m)  default-scheduler  0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector")
	assert.Regexp(t, `(?m)^Node-Selectors: +disktype=ssd$`, out.String())
	assert.Regexp(t, `(?m)^Node: +<none>$`, out.String())
}

func TestDescribeErrors(t *testing.T) {
	l := fixture()
	var out bytes.Buffer
	var errOut bytes.Buffer
	err := Describe(l, []string{"pod", "nope"}, "net", &out, &errOut)
	assert.Equal(t, "Error from server (NotFound): pods \"nope\" not found\n", ErrorText(err))
	err = Describe(l, []string{"deploy", "web"}, "net", &out, &errOut)
	assert.Equal(t, "error: kubewalk describes nodes, pods and services, not deployments\n", ErrorText(err))
	require.NoError(t, Describe(l, []string{"pods"}, "kube-public", &out, &errOut))
	assert.Equal(t, "No resources found in kube-public namespace.\n", errOut.String())
	assert.Empty(t, out.String())
}

func TestLookupResource(t *testing.T) {
	for name, kind := range map[string]string{
		"po": "Pod", "Pods": "Pod", "pod": "Pod", "svc": "Service", "deployment.apps": "Deployment",
		"deploy": "Deployment", "ds": "DaemonSet", "endpointslices.discovery.k8s.io": "EndpointSlice",
		"pdb": "PodDisruptionBudget", "no": "Node", "cm": "ConfigMap", "ns": "Namespace", "ev": "Event", "rs": "ReplicaSet",
	} {
		r, err := LookupResource(name)
		require.NoError(t, err, name)
		assert.Equal(t, kind, r.Kind, name)
	}
	r, _ := LookupResource("deploy")
	assert.Equal(t, "deployment.apps/web", r.NameOf("web"))
	r, _ = LookupResource("endpointslice")
	assert.Equal(t, "endpointslice.discovery.k8s.io/web-x", r.NameOf("web-x"))
}

func TestCellCutsAtNewline(t *testing.T) {
	assert.Equal(t, "first...", cell("first\nsecond"))
	assert.Equal(t, "plain", cell("plain"))
}

// The resources kubectl names are the kinds the API server serves, with the
// same group, version, resource name and scope.
func TestResourcesMatchServedKinds(t *testing.T) {
	for _, r := range resources {
		k, ok := apiserver.LookupKind(r.Kind)
		require.True(t, ok, r.Kind)
		assert.Equal(t, k.GV, r.GroupVersionKind().GroupVersion(), r.Kind)
		assert.Equal(t, k.GroupResource(), r.GroupResource(), r.Kind)
		assert.Equal(t, k.Namespaced, r.Namespaced, r.Kind)
	}
	assert.Len(t, resources, len(apiserver.Kinds))
}
