package sim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// TestProxyRulesSharedAcrossNodes: when every node's kube-proxy writes the
// same rules, the nodes load one compiled copy of them, and every node's
// tables print, counters included, what restoring the text on each node
// prints (the same cluster built with sharing off); a Service with a
// Local traffic policy makes the rules depend on the node, and each node
// restores its own (and keeps its own chains until the next full sync).
func TestProxyRulesSharedAcrossNodes(t *testing.T) {
	build := func(share bool) *Cluster {
		shareProxyRules = share
		defer func() { shareProxyRules = true }()
		c := lanNodes(t)
		web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
		for i := range 3 {
			_, err := c.AddPod(PodSpec{Namespace: "ns", Name: fmt.Sprintf("web-%d", i), Node: fmt.Sprintf("n%d", i), Labels: map[string]string{"app": "web"}, Containers: web})
			require.NoError(t, err)
		}
		return c
	}
	svc := func(name string, local bool) ServiceSpec {
		s := ServiceSpec{Selector: map[string]string{"app": "web"}, Service: kubeproxy.Service{Namespace: "ns", Name: name,
			Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}}
		if local {
			s.InternalTrafficPolicy = kubeproxy.TrafficPolicyLocal
		}
		return s
	}
	steps := []struct {
		name   string
		do     func(c *Cluster) error
		shared bool
	}{
		{"two Services", func(c *Cluster) error {
			_, err := c.AddServices([]ServiceSpec{svc("a", false), svc("b", false)})
			return err
		}, true},
		{"traffic", func(c *Cluster) error {
			client := c.Nodes()[0].Pods()[0]
			_, err := client.Netns.DialTCP(client.IP, c.Service("ns", "a").ClusterIP(), 40000, 80, 1, nil)
			if err == nil {
				err = c.World.Run()
			}
			return err
		}, true},
		{"an endpoint gone", func(c *Cluster) error { return c.DeletePod("ns", "web-2") }, true},
		{"a Service with internalTrafficPolicy Local", func(c *Cluster) error { _, err := c.AddService(svc("local", true)); return err }, false},
		// A partial sync writes too little to be compiled onto nothing:
		// the nodes restore its text onto their own chains until the
		// next full sync.
		{"the Local Service deleted", func(c *Cluster) error { return c.DeleteService("ns", "local") }, false},
		{"a Service deleted", func(c *Cluster) error { return c.DeleteService("ns", "b") }, false},
		{"an hour later, a Service added (a full sync)", func(c *Cluster) error {
			if err := c.RunFor(ProxyFullSyncPeriod); err != nil {
				return err
			}
			_, err := c.AddService(svc("c", false))
			return err
		}, true},
		{"an endpoint gone (a partial sync)", func(c *Cluster) error { return c.DeletePod("ns", "web-1") }, true},
	}
	shared, text := build(true), build(false)
	for _, st := range steps {
		shareProxyRules = true
		require.NoError(t, st.do(shared), st.name)
		shareProxyRules = false
		require.NoError(t, st.do(text), st.name)
		shareProxyRules = true
		nodes := shared.Nodes()
		for i, n := range nodes {
			want := text.Nodes()[i].Netfilter.Save(netfilter.SaveOptions{Counters: true})
			assert.Equal(t, want, n.Netfilter.Save(netfilter.SaveOptions{Counters: true}), "%s: %s", st.name, n.Name)
			assert.Nil(t, text.Nodes()[i].Netfilter.Table("nat").Shared())
			if st.shared {
				assert.NotNil(t, n.Netfilter.Table("nat").Shared(), "%s: %s", st.name, n.Name)
			} else {
				assert.Nil(t, n.Netfilter.Table("nat").Shared(), "%s: %s", st.name, n.Name)
			}
		}
	}
	assert.Same(t, shared.Nodes()[1].Netfilter.Table("nat").Shared(), shared.Nodes()[2].Netfilter.Table("nat").Shared(), "one compiled copy")
}
