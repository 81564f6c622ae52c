package scenario

//lint:file-ignore SA1019 a user's dump may still hold the deprecated Endpoints kind

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubewalk/kubewalk/datapath"
)

func build(t *testing.T, src string) error {
	t.Helper()
	f, err := Parse("b.yaml", []byte(src))
	require.NoError(t, err)
	_, err = Build(f, f.Cluster.Seed)
	return err
}

const twoNICs = `apiVersion: kubewalk.io/v1alpha1
kind: Cluster
kubelet: {maxPods: 30}
networking: {apiServerAddress: 10.1.0.10}
nodes:
- name: cp1
  nics:
  - {network: lan, address: 192.168.1.10/24, gateway: 192.168.1.1, mtu: 9000, mac: "52:54:00:aa:bb:cc"}
  - {network: mgmt, address: 10.1.0.10/24}
- name: w1
  sysctls: {net.bridge.bridge-nf-call-iptables: "0"}
  nics:
  - {network: lan, address: 192.168.1.11/24, gateway: 192.168.1.1}
externalHosts:
- {name: client, network: lan, address: 192.168.1.100/24, routes: [{to: 10.96.0.0/12, via: 192.168.1.11}]}
`

func TestBuild(t *testing.T) {
	f, err := Parse("b.yaml", []byte(twoNICs+`---
apiVersion: v1
kind: Namespace
metadata: {name: app}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: app}
spec:
  containers: [{name: nginx, image: nginx, ports: [{containerPort: 80}]}]
`))
	require.NoError(t, err)
	c, err := Build(f, 1)
	require.NoError(t, err)
	require.Len(t, c.Nodes(), 2)
	cp1, w1 := c.Node("cp1"), c.Node("w1")
	eth0 := cp1.Host.Device("eth0")
	assert.Equal(t, datapath.MAC{0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc}, eth0.MAC())
	assert.Equal(t, 9000, eth0.MTU())
	assert.NotNil(t, cp1.Host.Device("eth1"))
	assert.True(t, cp1.Host.Sysctl.BridgeNFCallIPTables)
	assert.False(t, w1.Host.Sysctl.BridgeNFCallIPTables, "sysctls: net.bridge.bridge-nf-call-iptables: 0")

	o, err := c.API.Get("Node", "", "cp1")
	require.NoError(t, err)
	node := o.(*corev1.Node)
	assert.Contains(t, node.Labels, "node-role.kubernetes.io/control-plane", "the first node is the control plane")
	assert.Equal(t, int64(30), node.Status.Allocatable.Pods().Value(), "kubelet.maxPods")

	o, err = c.API.Get("Endpoints", "default", "kubernetes")
	require.NoError(t, err)
	assert.Equal(t, "10.1.0.10", o.(*corev1.Endpoints).Subsets[0].Addresses[0].IP, "networking.apiServerAddress")

	p := c.Pod("app", "web")
	require.NotNil(t, p, "the scheduler placed the pod and the kubelet started it")
	assert.Equal(t, "w1", p.Node.Name, "not on the control-plane node (its NoSchedule taint)")

	h := c.ExternalHost("client")
	require.NotNil(t, h)
	assert.Contains(t, h.Netns.IPRoute(), "10.96.0.0/12 via 192.168.1.11")

	// The File is reusable: a second build is the same cluster.
	c2, err := Build(f, 1)
	require.NoError(t, err)
	assert.Equal(t, p.IP, c2.Pod("app", "web").IP)
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"missing namespace", small + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: app}\nspec: {containers: [{name: c, image: c}]}\n",
			`b.yaml:11:1: namespaces "app" not found`},
		{"invalid object", small + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: app}\nspec: {type: NodePort, ports: [{port: 80, nodePort: 80}]}\n",
			`b.yaml:15:1: Service "web" is invalid: spec.ports[0].nodePort: Invalid value: 80: provided port is not in the valid range. The range of valid ports is 30000-32767`},
		{"clusterDNS not modelled", small + "kubelet: {clusterDNS: [10.96.0.53]}\n",
			`b.yaml:1:1: kubelet.clusterDNS: [10.96.0.53] is not modelled yet (kubewalk runs the default)`},
		{"stopped kubelet not modelled", "apiVersion: kubewalk.io/v1alpha1\nkind: Cluster\nnodes:\n- {name: cp1, kubelet: stopped, nics: [{network: lan, address: 10.0.0.1/24}]}\n",
			`b.yaml:1:1: nodes[0].kubelet: stopped is not modelled yet (kubewalk runs the default)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.EqualError(t, build(t, tc.src), tc.want)
		})
	}
	f, err := Parse("m.yaml", []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n"))
	require.NoError(t, err)
	_, err = Build(f, 1)
	require.EqualError(t, err, "no kubewalk.io/v1alpha1 Cluster document: a scenario needs one to say what the nodes are")
}

func TestBuildWithoutAnOverlay(t *testing.T) {
	f, err := Parse("b.yaml", []byte(small+"networking: {cni: none}\n"))
	require.NoError(t, err)
	c, err := Build(f, 1)
	require.NoError(t, err)
	assert.Nil(t, c.Flannel)
	assert.Nil(t, c.Node("w1").Host.Device("flannel.1"))
}

// The small cluster of docs/scenario-files.md loads, builds and runs its
// Deployment's pods on the workers.
func TestDocumentedExampleBuilds(t *testing.T) {
	doc, err := os.ReadFile("../../docs/scenario-files.md")
	require.NoError(t, err)
	s := string(doc)
	start := strings.Index(s, "```yaml\napiVersion: kubewalk.io/v1alpha1")
	require.GreaterOrEqual(t, start, 0)
	body := s[start+len("```yaml\n"):]
	body = body[:strings.Index(body, "```")]
	f, err := Parse("lab.yaml", []byte(body))
	require.NoError(t, err)
	c, err := Build(f, f.Cluster.Seed)
	require.NoError(t, err)
	var nodes []string
	for _, p := range c.Pods() {
		if p.Spec.Namespace == "shop" {
			nodes = append(nodes, p.Node.Name)
		}
	}
	assert.ElementsMatch(t, []string{"w1", "w2"}, nodes, "two replicas, none on the tainted control-plane node")
	assert.False(t, c.Node("w2").Host.Sysctl.BridgeNFCallIPTables)
	require.NotNil(t, c.ExternalHost("laptop"))
}
