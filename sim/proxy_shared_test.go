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
		stepShared(t, shared, text, st.name, st.do)
		for i, n := range shared.Nodes() {
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

// TestProxyOutOfStepNodesShareRulesets: nodes whose kube-proxies synced
// last at different generations (one paused while others synced, as
// batched changes and the minimum sync period leave them) load the same
// rulesets of the new generation, and every node's tables print,
// counters included, what restoring its own sync's text prints (the same
// cluster built with sharing off), after partial syncs, traffic and the
// hourly full sync.
func TestProxyOutOfStepNodesShareRulesets(t *testing.T) {
	web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
	traffic := func(c *Cluster, port uint16) error {
		for _, svc := range []string{"a", "b"} {
			client := c.Nodes()[0].Pods()[0]
			if _, err := client.Netns.DialTCP(client.IP, c.Service("ns", svc).ClusterIP(), port, 80, 1, nil); err != nil {
				return err
			}
			port++
		}
		return c.World.Run()
	}
	// paused runs do with the kube-proxies of the nodes named stopped,
	// then lets them catch up, all changes at once.
	paused := func(c *Cluster, do func() error, stopped ...int) error {
		var ps []kubeproxy.Proxier
		for _, i := range stopped {
			ps = append(ps, c.Nodes()[i].Proxier)
			c.Nodes()[i].Proxier = nil
		}
		if err := do(); err != nil {
			return err
		}
		for k, i := range stopped {
			c.Nodes()[i].Proxier = ps[k]
			c.queueProxySync(c.Nodes()[i].Name)
		}
		return c.Settle()
	}
	steps := []struct {
		name string
		do   func(c *Cluster) error
	}{
		{"traffic", func(c *Cluster) error { return traffic(c, 40000) }},
		{"n0 paused for two endpoint changes", func(c *Cluster) error {
			return paused(c, func() error {
				if err := c.DeletePod("ns", "a-1"); err != nil {
					return err
				}
				return c.DeletePod("ns", "b-2")
			}, 0)
		}},
		{"traffic again", func(c *Cluster) error { return traffic(c, 41000) }},
		{"n1 and n2 paused while the endpoints come back", func(c *Cluster) error {
			return paused(c, func() error {
				if _, err := c.AddPod(PodSpec{Namespace: "ns", Name: "a-1", Node: "n1", Labels: map[string]string{"app": "a"}, Containers: web}); err != nil {
					return err
				}
				if err := traffic(c, 42000); err != nil {
					return err
				}
				_, err := c.AddPod(PodSpec{Namespace: "ns", Name: "b-2", Node: "n2", Labels: map[string]string{"app": "b"}, Containers: web})
				return err
			}, 1, 2)
		}},
		{"traffic once more", func(c *Cluster) error { return traffic(c, 43000) }},
		{"n2 paused while Service a loses every endpoint", func(c *Cluster) error {
			return paused(c, func() error {
				for _, p := range []string{"a-0", "a-1", "a-2"} {
					if err := c.DeletePod("ns", p); err != nil {
						return err
					}
				}
				return nil
			}, 2)
		}},
		{"an hour later (full syncs), traffic", func(c *Cluster) error {
			if err := c.RunFor(ProxyMaxSyncInterval); err != nil {
				return err
			}
			return traffic(c, 44000)
		}},
		{"an endpoint back after the full syncs", func(c *Cluster) error {
			_, err := c.AddPod(PodSpec{Namespace: "ns", Name: "a-0", Node: "n0", Labels: map[string]string{"app": "a"}, Containers: web})
			return err
		}},
	}
	for _, large := range []bool{false, true} {
		shared, text := partialCluster(t, true), partialCluster(t, false)
		if large {
			// 340 more Services of b's three pods: more than 1,000
			// endpoints, kube-proxy's large-cluster mode (stale chains
			// deleted at most every --iptables-sync-period).
			for _, c := range []*Cluster{shared, text} {
				shareProxyRules = c == shared
				var specs []ServiceSpec
				for i := range 340 {
					specs = append(specs, ServiceSpec{Selector: map[string]string{"app": "b"}, Service: kubeproxy.Service{Namespace: "ns", Name: fmt.Sprintf("many-%d", i),
						Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
				}
				_, err := c.AddServices(specs)
				require.NoError(t, err)
				shareProxyRules = true
			}
			require.True(t, shared.Nodes()[0].ProxyRules().LargeCluster)
		}
		// In large-cluster mode the endpoint changes cross the 1,000
		// endpoints back and forth: every comment changes, and nodes that
		// wrote a Service in either mode hold different rules.
		outOfStepSteps(t, shared, text, steps, !large)
	}
}

// stepShared runs one step on the cluster sharing rulesets and, with
// sharing off, on the one restoring text, and checks that every node's
// tables print the same, counters included.
func stepShared(t *testing.T, shared, text *Cluster, name string, do func(*Cluster) error) {
	t.Helper()
	shareProxyRules = true
	require.NoError(t, do(shared), name)
	shareProxyRules = false
	require.NoError(t, do(text), name)
	shareProxyRules = true
	for i, n := range shared.Nodes() {
		want := text.Nodes()[i].Netfilter.Save(netfilter.SaveOptions{Counters: true})
		assert.Equal(t, want, n.Netfilter.Save(netfilter.SaveOptions{Counters: true}), "%s: %s", name, n.Name)
	}
}

// outOfStepSteps runs steps on the cluster sharing rulesets and on the
// one restoring text, and compares every node's tables after each.
func outOfStepSteps(t *testing.T, shared, text *Cluster, steps []struct {
	name string
	do   func(c *Cluster) error
}, one bool) {
	t.Helper()
	for _, st := range steps {
		stepShared(t, shared, text, st.name, st.do)
		for _, n := range shared.Nodes() {
			for _, o := range shared.Nodes() {
				if one && o.Proxier.(*iptablesProxier).lastGen == n.Proxier.(*iptablesProxier).lastGen {
					assert.True(t, o.Netfilter.Table("nat").Shared() == n.Netfilter.Table("nat").Shared(), "%s: %s and %s: one ruleset per generation", st.name, n.Name, o.Name)
				}
			}
		}
	}
	pt := shared.proxyTracker()
	if one {
		assert.Positive(t, pt.outOfStep, "nodes out of step loaded the same rulesets (%d loads)", pt.canonLoads)
	}
	assert.Positive(t, pt.canonLoads)
	assert.Contains(t, saves(shared)[0], "[0:0] -A KUBE-SERVICES", "a counter reset")
}
