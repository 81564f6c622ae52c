package sim

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// Nodes that join between two Service or EndpointSlice events sync the
// same kube-proxy snapshot generation (a node joining changes nothing
// kube-proxy syncs), so the Services changed at the next step are found
// once for all of them; and every node's tables, counters included, are
// what restoring the text on each prints.
func TestNodesJoiningShareTheSnapshotGeneration(t *testing.T) {
	build := func(share bool) *Cluster {
		shareProxyRules = share
		defer func() { shareProxyRules = true }()
		c := lanNodes(t)
		_, err := c.AddService(ServiceSpec{Selector: map[string]string{"app": "web"}, Service: kubeproxy.Service{Namespace: "ns", Name: "web",
			Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
		require.NoError(t, err)
		for i := 3; i < 6; i++ {
			_, err := c.AddNode(NodeSpec{Name: fmt.Sprintf("n%d", i), NICs: []NICSpec{{Name: "eth0", Segment: "lan",
				Addr: netip.MustParsePrefix(fmt.Sprintf("192.168.1.%d/24", 11+i)), Gateway: netip.MustParseAddr("192.168.1.1")}}})
			require.NoError(t, err)
		}
		return c
	}
	gens := func(c *Cluster) []uint64 {
		var out []uint64
		for _, n := range c.Nodes() {
			out = append(out, n.Proxier.(*iptablesProxier).lastGen)
		}
		return out
	}
	shared, text := build(true), build(false)
	g := gens(shared)
	require.NotZero(t, g[3])
	assert.Equal(t, []uint64{g[3], g[3], g[3]}, g[3:], "the nodes that joined after the Service synced one generation")

	web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
	steps := []struct {
		name string
		do   func(c *Cluster) error
	}{
		{"pods on every node", func(c *Cluster) error {
			var specs []PodSpec
			for i := range 6 {
				specs = append(specs, PodSpec{Namespace: "ns", Name: fmt.Sprint("web-", i), Node: fmt.Sprint("n", i), Labels: map[string]string{"app": "web"}, Containers: web})
			}
			_, err := c.AddPods(specs)
			return err
		}},
		{"an endpoint gone", func(c *Cluster) error { return c.DeletePod("ns", "web-4") }},
		{"a node joins", func(c *Cluster) error {
			_, err := c.AddNode(NodeSpec{Name: "n6", NICs: []NICSpec{{Name: "eth0", Segment: "lan",
				Addr: netip.MustParsePrefix("192.168.1.17/24"), Gateway: netip.MustParseAddr("192.168.1.1")}}})
			return err
		}},
		{"another endpoint gone", func(c *Cluster) error { return c.DeletePod("ns", "web-1") }},
	}
	for _, st := range steps {
		stepShared(t, shared, text, st.name, st.do)
		g := gens(shared)
		for i := range g {
			assert.Equal(t, g[0], g[i], "%s: every node synced the last generation", st.name)
		}
		for _, n := range shared.Nodes() {
			assert.NotNil(t, n.Netfilter.Table("nat").Shared(), "%s: %s loads compiled rules", st.name, n.Name)
		}
	}
}
