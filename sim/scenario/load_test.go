package scenario

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const small = `apiVersion: kubewalk.io/v1alpha1
kind: Cluster
nodes:
- name: cp1
  nics:
  - {network: lan, address: 192.168.1.10/24, gateway: 192.168.1.1}
- name: w1
  nics:
  - {network: lan, address: 192.168.1.11/24, gateway: 192.168.1.1}
`

func TestClusterDefaults(t *testing.T) {
	f, err := Parse("small.yaml", []byte(small))
	require.NoError(t, err)
	c := f.Cluster
	require.NotNil(t, c)
	assert.Equal(t, Pos{File: "small.yaml", Line: 1, Column: 1}, f.ClusterPos)
	for _, tc := range []struct {
		field     string
		got, want any
	}{
		{"name", c.Name, "kubewalk"},
		{"seed", c.Seed, uint64(1)},
		{"networks", c.Networks, []Network{{Name: "lan"}}},
		{"networking.podSubnet", c.Networking.PodSubnet, netip.MustParsePrefix("10.244.0.0/16")},
		{"networking.serviceSubnet", c.Networking.ServiceSubnet, netip.MustParsePrefix("10.96.0.0/12")},
		{"networking.nodeCIDRMaskSize", c.Networking.NodeCIDRMaskSize, 24},
		{"networking.apiServerAddress", c.Networking.APIServerAddress, netip.MustParseAddr("192.168.1.10")},
		{"networking.apiServerPort", c.Networking.APIServerPort, 6443},
		{"networking.cni", c.Networking.CNI, Flannel},
		{"networking.kubeProxyMode", c.Networking.KubeProxyMode, IPTablesProxyMode},
		{"kubelet.maxPods", c.Kubelet.MaxPods, 110},
		{"kubelet.clusterDNS", c.Kubelet.ClusterDNS, []netip.Addr{netip.MustParseAddr("10.96.0.10")}},
		{"kubelet.clusterDomain", c.Kubelet.ClusterDomain, "cluster.local"},
		{"nodes[0].role", c.Nodes[0].Role, ControlPlaneRole},
		{"nodes[1].role", c.Nodes[1].Role, WorkerRole},
		{"nodes[1].kubelet", c.Nodes[1].Kubelet, Running},
		{"nodes[1].containerRuntime", c.Nodes[1].ContainerRuntime, Running},
		{"nodes[1].nics[0].name", c.Nodes[1].NICs[0].Name, "eth0"},
		{"nodes[1].nics[0].mtu", c.Nodes[1].NICs[0].MTU, 1500},
	} {
		assert.Equal(t, tc.want, tc.got, tc.field)
	}
}

func TestDefaultsOnlyZeroValues(t *testing.T) {
	f, err := Parse("x.yaml", []byte(`apiVersion: kubewalk.io/v1alpha1
kind: Cluster
name: lab
seed: 7
networking: {podSubnet: 10.32.0.0/12, serviceSubnet: 10.100.0.0/16, nodeCIDRMaskSize: 26, apiServerAddress: 10.0.0.2, apiServerPort: 8443, cni: none, kubeProxyMode: ipvs, addons: none}
kubelet: {maxPods: 20, clusterDNS: [10.100.0.10, 10.100.0.11], clusterDomain: lab.local}
networks: [{name: lan}, {name: spare}]
nodes:
- name: cp1
  kubelet: stopped
  containerRuntime: stopped
  nics:
  - {network: lan, address: 10.0.0.1/24, gateway: 10.0.0.254, mtu: 9000, mac: "52:54:00:00:00:01"}
  - {name: ens4, network: lan, address: 10.0.0.2/24}
`))
	require.NoError(t, err)
	c := f.Cluster
	assert.Equal(t, "lab", c.Name)
	assert.Equal(t, uint64(7), c.Seed)
	assert.Equal(t, Networking{PodSubnet: netip.MustParsePrefix("10.32.0.0/12"), ServiceSubnet: netip.MustParsePrefix("10.100.0.0/16"),
		NodeCIDRMaskSize: 26, APIServerAddress: netip.MustParseAddr("10.0.0.2"), APIServerPort: 8443, CNI: NoCNI, KubeProxyMode: IPVSProxyMode, Addons: NoAddons}, c.Networking)
	assert.Equal(t, Kubelet{MaxPods: 20, ClusterDNS: []netip.Addr{netip.MustParseAddr("10.100.0.10"), netip.MustParseAddr("10.100.0.11")}, ClusterDomain: "lab.local"}, c.Kubelet)
	assert.Equal(t, []Network{{Name: "lan"}, {Name: "spare"}}, c.Networks)
	assert.Equal(t, Stopped, c.Nodes[0].Kubelet)
	assert.Equal(t, Stopped, c.Nodes[0].ContainerRuntime)
	assert.Equal(t, NIC{Name: "eth0", Network: "lan", Address: netip.MustParsePrefix("10.0.0.1/24"), Gateway: netip.MustParseAddr("10.0.0.254"), MTU: 9000, MAC: "52:54:00:00:00:01"}, c.Nodes[0].NICs[0])
	assert.Equal(t, "ens4", c.Nodes[0].NICs[1].Name)
}

func TestLoadErrors(t *testing.T) {
	cluster := func(nodes string) string {
		return "apiVersion: kubewalk.io/v1alpha1\nkind: Cluster\nnodes:\n" + nodes
	}
	node := "- name: cp1\n  nics:\n  - {network: lan, address: 192.168.1.10/24}\n"
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"malformed YAML", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a: b\n",
			[]string{"f.yaml:4:3: yaml: mapping values are not allowed in this context"}},
		{"tab indentation", "apiVersion: v1\nkind: Pod\nmetadata:\n\tname: web\n",
			[]string{"f.yaml:4:2: yaml: found character that cannot start any token"}},
		{"not a mapping", "- a\n- b\n", []string{`f.yaml:1:1: a document must be a mapping (an object), not a list`}},
		{"unknown kind", "apiVersion: v1\nkind: Pood\nmetadata: {name: web}\n",
			[]string{`f.yaml:2:7: no matches for kind "Pood" in version "v1" (kubewalk serves ` + servedKinds() + ")"}},
		{"a kind kubewalk does not serve", "apiVersion: v1\nkind: Secret\nmetadata: {name: web}\n",
			[]string{`f.yaml:2:7: no matches for kind "Secret" in version "v1" (kubewalk serves ` + servedKinds() + ")"}},
		{"unknown version", "---\napiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: web}\n",
			[]string{`f.yaml:3:7: no matches for kind "Deployment" in version "apps/v1beta1" (kubewalk serves ` + servedKinds() + ")"}},
		{"unknown kubewalk version", "apiVersion: kubewalk.io/v1beta1\nkind: Cluster\n",
			[]string{`f.yaml:2:7: no matches for kind "Cluster" in version "kubewalk.io/v1beta1"`}},
		{"unknown kubewalk kind", "apiVersion: kubewalk.io/v1alpha1\nkind: Clusters\n",
			[]string{`f.yaml:2:7: no matches for kind "Clusters" in version "kubewalk.io/v1alpha1"`}},
		{"apiVersion and kind not set", "metadata: {name: web}\n",
			[]string{`f.yaml:1:1: error validating data: [apiVersion not set, kind not set]`}},
		{"unknown field in the Cluster document", cluster(node + "  nicz: []\n"),
			[]string{`f.yaml:7:3: unknown field "nodes[0].nicz"`}},
		{"unknown top-level field", "apiVersion: kubewalk.io/v1alpha1\nkind: Cluster\nnode: []\n",
			[]string{`f.yaml:3:1: unknown field "node"`}},
		{"invalid enum", cluster(node+"  role: master\n- name: w1\n  kubelet: paused\n  nics: [{network: lan, address: 192.168.1.11/24}]\n") + "networking: {kubeProxyMode: userspace}\n",
			[]string{
				`f.yaml:7:9: nodes[0].role: Unsupported value: "master": supported values: "control-plane", "worker"`,
				`f.yaml:9:12: nodes[1].kubelet: Unsupported value: "paused": supported values: "running", "stopped"`,
				`f.yaml:11:29: networking.kubeProxyMode: Unsupported value: "userspace": supported values: "iptables", "nftables", "ipvs"`,
			}},
		{"wrong value types", cluster("- name: cp1\n  nics:\n  - {network: lan, address: 192.168.1.10, mtu: big, gateway: x}\n"),
			[]string{
				`f.yaml:6:29: nodes[0].nics[0].address: Invalid value: "192.168.1.10": must be a valid CIDR value, (e.g. 10.9.8.0/24)`,
				`f.yaml:6:48: nodes[0].nics[0].mtu: Invalid value: "big": must be an integer`,
				`f.yaml:6:62: nodes[0].nics[0].gateway: Invalid value: "x": must be a valid IP address, (e.g. 10.9.8.7)`,
			}},
		{"duplicate key", cluster(node + "  name: cp2\n"),
			[]string{`f.yaml:7:3: mapping key "name" already defined at line 4`}},
		{"validation gathers every error", cluster(`- name: cp1
  role: worker
  nodeIP: 10.9.9.9
  flannelIface: eth7
  sysctls: {net.ipv4.conf.all.rp_filter: "1", net.bridge.bridge-nf-call-iptables: "2"}
  nics:
  - {network: lan, address: 192.168.1.10/24, gateway: 10.0.0.1, mtu: 10}
- name: cp1
  nics: []
- name: Bad_Name
  nics: [{address: 192.168.1.12/24}]
externalHosts:
- {name: cp1, network: wan, address: 192.168.1.100/24, routes: [{to: 10.0.0.1/8}]}
networks: [{name: lan}]
networking: {podSubnet: 10.96.0.0/16}
`),
			[]string{
				`f.yaml:18:13: invalid configuration for networking: serviceSubnet: Invalid value: "10.96.0.0/12": overlaps the podSubnet 10.96.0.0/16`,
				`f.yaml:5:9: invalid configuration for node 0: role: Invalid value: "worker": the first node runs kubeadm init and must be a control-plane node`,
				`f.yaml:10:55: invalid configuration for node 0: nics[0].gateway: Invalid value: "10.0.0.1": not on the NIC's network 192.168.1.0/24 (Nexthop has invalid gateway)`,
				`f.yaml:10:70: invalid configuration for node 0: nics[0].mtu: Invalid value: 10: must be between 68 and 65535`,
				`f.yaml:6:11: invalid configuration for node 0: nodeIP: Invalid value: "10.9.9.9": not an address of the node's NICs (the kubelet fails: failed to validate nodeIP: node IP: "10.9.9.9" not found in the host's network interfaces)`,
				`f.yaml:7:17: invalid configuration for node 0: flannelIface: Invalid value: "eth7": no NIC has that name (flanneld fails: error looking up interface eth7)`,
				`f.yaml:8:83: invalid configuration for node 0: sysctls[net.bridge.bridge-nf-call-iptables]: Invalid value: "2": must be 0 or 1`,
				`f.yaml:8:42: invalid configuration for node 0: sysctls: Unsupported value: "net.ipv4.conf.all.rp_filter": supported values: "net.bridge.bridge-nf-call-iptables", "net.ipv4.ip_forward"`,
				`f.yaml:11:9: invalid configuration for node 1: name: Duplicate value: "cp1" (node 0 has it)`,
				`f.yaml:12:9: invalid configuration for node 1: nics: Required value: a node needs at least one NIC`,
				`f.yaml:13:9: invalid configuration for node 2: name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`,
				`f.yaml:14:10: invalid configuration for node 2: nics[0].network: Required value`,
				`f.yaml:16:10: invalid configuration for external host 0: name: Duplicate value: "cp1" (node 0 has it)`,
				`f.yaml:16:24: invalid configuration for external host 0: network: Not found: "wan" (not in networks)`,
				`f.yaml:16:70: invalid configuration for external host 0: routes[0].to: Invalid value: "10.0.0.1/8": must be a network address (10.0.0.0/8)`,
				`f.yaml:16:65: invalid configuration for external host 0: routes[0].via: Required value`,
			}},
		{"no nodes", "apiVersion: kubewalk.io/v1alpha1\nkind: Cluster\n",
			[]string{`f.yaml:1:1: nodes: Required value: a cluster needs at least one node`}},
		{"two Cluster documents", cluster(node) + "---\n" + cluster(node),
			[]string{`f.yaml:8:1: a second Cluster document (the first is at f.yaml:1:1); a scenario has one`}},
		{"strict decoding of a manifest", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - name: nginx\n    imagee: nginx\n    ports: [{containerPort: 80, protocl: TCP}]\n",
			[]string{
				`f.yaml:7:5: Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagee"`,
				`f.yaml:8:33: Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].ports[0].protocl"`,
			}},
		{"wrong type in a manifest", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: two\n",
			[]string{`f.yaml:5:13: Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32`}},
		{"name required", "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: net}\n",
			[]string{`f.yaml:3:11: ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required`}},
		{"duplicate names", "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: net}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: net}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: net}\n",
			[]string{`f.yaml:9:1: Pod "web" in namespace "net" is defined twice (first at f.yaml:1:1)`}},
		{"duplicate names, default namespace", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n",
			[]string{`f.yaml:5:1: Pod "web" in namespace "default" is defined twice (first at f.yaml:1:1)`}},
		{"NaN", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: .nan}\n",
			[]string{`f.yaml:4:11: data.a: Invalid value: .nan: not a finite number`}},
		{"billion laughs", "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
			[]string{`f.yaml:1:14: document too large (more than 100000 YAML nodes after expanding aliases)`, `f.yaml:1:1: error validating data: [apiVersion not set, kind not set]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("f.yaml", []byte(tc.in))
			require.Error(t, err)
			assert.Nil(t, f, "nothing of a file with a problem is returned")
			var errs Errors
			require.ErrorAs(t, err, &errs)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

const dump = `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata:
    creationTimestamp: "2026-11-30T10:00:00Z"
    labels: {app: web}
    managedFields:
    - apiVersion: v1
      fieldsType: FieldsV1
      manager: kubectl-run
      operation: Update
    name: web-1
    namespace: net
    resourceVersion: "1234"
    uid: 6b2f5c1e-0000-4000-8000-000000000001
  spec:
    containers:
    - image: nginx:1.27
      imagePullPolicy: IfNotPresent
      name: nginx
      ports:
      - {containerPort: 80, name: http, protocol: TCP}
      resources: {}
    dnsPolicy: ClusterFirst
    nodeName: cka-w1
    restartPolicy: Always
  status:
    phase: Running
    podIP: 10.244.1.3
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: net, generation: 3}
  spec:
    replicas: 2
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        containers: [{name: nginx, image: nginx}]
  status: {readyReplicas: 2}
- apiVersion: v1
  kind: Namespace
  metadata: {name: net, namespace: ignored}
metadata:
  resourceVersion: ""
`

func TestKindList(t *testing.T) {
	f, err := Parse("dump.yaml", []byte(dump))
	require.NoError(t, err)
	assert.Nil(t, f.Cluster)
	require.Len(t, f.Manifests, 3)
	pod, ok := f.Manifests[0].Object.(*corev1.Pod)
	require.True(t, ok, "%T", f.Manifests[0].Object)
	assert.Equal(t, Pos{File: "dump.yaml", Line: 4, Column: 3}, f.Manifests[0].Pos)
	assert.Equal(t, "Pod net/web-1", f.Manifests[0].Key())
	assert.Equal(t, "cka-w1", pod.Spec.NodeName)
	assert.Equal(t, int32(80), pod.Spec.Containers[0].Ports[0].ContainerPort)
	assert.Empty(t, pod.ResourceVersion, "server-set fields are cleared")
	assert.Empty(t, pod.UID)
	assert.Empty(t, pod.ManagedFields)
	assert.True(t, pod.CreationTimestamp.IsZero())
	assert.Equal(t, corev1.PodStatus{}, pod.Status)
	assert.Equal(t, []string{
		"metadata.creationTimestamp", "metadata.managedFields", "metadata.resourceVersion", "metadata.uid",
		"spec.containers[0].imagePullPolicy", "spec.dnsPolicy", "spec.restartPolicy", "status",
	}, f.Manifests[0].Ignored)

	d, ok := f.Manifests[1].Object.(*appsv1.Deployment)
	require.True(t, ok)
	assert.Equal(t, int32(2), *d.Spec.Replicas)
	assert.Equal(t, []string{"metadata.generation", "status"}, f.Manifests[1].Ignored)
	assert.Equal(t, "Namespace net", f.Manifests[2].Key(), "a cluster-scoped object has no namespace")
}

func TestTypedListItemsTakeTheListsKind(t *testing.T) {
	f, err := Parse("pods.yaml", []byte("apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n- metadata: {name: b, namespace: net}\n  spec: {nodeName: n1}\n"))
	require.NoError(t, err)
	require.Len(t, f.Manifests, 2)
	assert.Equal(t, "Pod default/a", f.Manifests[0].Key(), "namespace defaults to default, as kubectl's")
	assert.Equal(t, "Pod net/b", f.Manifests[1].Key())
	assert.Equal(t, Pos{File: "pods.yaml", Line: 5, Column: 3}, f.Manifests[1].Pos)
}

func TestListItemErrorsAtTheirItem(t *testing.T) {
	_, err := Parse("l.yaml", []byte("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b}\n  spec: {nodeNam: x}\n"))
	require.EqualError(t, err, `l.yaml:10:10: Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.nodeNam"`)
}

func TestIgnoredFieldsOfAGoObject(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "net", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "cka-w1", Containers: []corev1.Container{{
			Name: "nginx", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 80}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 5},
		}}},
	}
	assert.Equal(t, []string{"spec.containers[0].readinessProbe"}, IgnoredFields(pod), "the image is in the kubelet's events; probes are not modelled")
	assert.Empty(t, IgnoredFields(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "net"}}))
}

func TestConcat(t *testing.T) {
	a, err := Parse("a.yaml", []byte(small+"---\napiVersion: v1\nkind: Namespace\nmetadata: {name: net}\n"))
	require.NoError(t, err)
	b, err := Parse("b.yaml", []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: net}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"))
	require.NoError(t, err)
	_, err = Concat(a, b)
	require.EqualError(t, err, `b.yaml:1:1: Namespace "net" is defined twice (first at a.yaml:11:1)`)
	_, err = Concat(a, a)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "a.yaml:1:1: a second Cluster document (the first is at a.yaml:1:1)"), err.Error())
	c, err := Parse("c.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"))
	require.NoError(t, err)
	f, err := Concat(a, c)
	require.NoError(t, err)
	assert.NotNil(t, f.Cluster)
	require.Len(t, f.Objects(), 2)
	assert.Equal(t, "ConfigMap default/c", f.Manifests[1].Key())
}

func TestEmptyDocumentsAndComments(t *testing.T) {
	f, err := Parse("e.yaml", []byte("# nothing\n---\n---\n# still nothing\n...\n"))
	require.NoError(t, err)
	assert.Nil(t, f.Cluster)
	assert.Empty(t, f.Manifests)
}

func TestAliasCycles(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a: &a [*a]\n", "f.yaml:1:8: anchor 'a' value contains itself"},
		{"a: &a {<<: *a}\n", "f.yaml:1:12: anchor 'a' value contains itself"},
		{"apiVersion: kubewalk.io/v1alpha1\nkind: Cluster\nnodes: &n [{name: x, nics: *n}]\n", `f.yaml:3:22: unknown field "nodes[0].nics[0].nics"`}, // the types end the recursion
	} {
		_, err := Parse("f.yaml", []byte(tc.in))
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestMergeKeys(t *testing.T) {
	f, err := Parse("m.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: &m {name: a, labels: {x: y}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  <<: *m\n  name: b\n"))
	require.NoError(t, err)
	require.Len(t, f.Manifests, 2)
	assert.Equal(t, "ConfigMap default/b", f.Manifests[1].Key())
	assert.Equal(t, map[string]string{"x": "y"}, f.Manifests[1].Object.GetLabels())
}
