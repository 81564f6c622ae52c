package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// TestProxyRulesAreTheLastSuccessfulSyncs: a node whose kube-proxy loaded
// shared rulesets generates its rules when they are asked for (the
// proxier's lazy generation, made once and pointed at each successful
// sync's configuration and snapshot): they are what generating that
// sync's gives, asked for after every sync or only after several, and a
// sync that fails leaves them at the last successful one's.
func TestProxyRulesAreTheLastSuccessfulSyncs(t *testing.T) {
	c := partialCluster(t, true)
	want := func(n *Node) *kubeproxy.Rules {
		r, err := kubeproxy.Generate(c.ProxyConfig(n), n.Proxier.(*iptablesProxier).last)
		require.NoError(t, err)
		return r
	}
	check := func(step string, nodes ...*Node) {
		for _, n := range nodes {
			p := n.Proxier.(*iptablesProxier)
			require.NotNil(t, p.lazyFn, "%s: %s loaded shared rulesets", step, n.Name)
			require.Equal(t, want(n), n.ProxyRules(), "%s: %s", step, n.Name)
		}
	}
	n0, n1, n2 := c.Nodes()[0], c.Nodes()[1], c.Nodes()[2]
	require.NoError(t, c.DeletePod("ns", "a-0"))
	check("an endpoint gone", n0, n1, n2)
	// n1 is not asked between these: its generation runs once, from the
	// last sync's.
	require.NoError(t, c.DeletePod("ns", "b-0"))
	check("another", n0, n2)
	require.NoError(t, c.DeletePod("ns", "b-1"))
	check("and another", n0, n1)
	// n2's restores are refused (its rules not asked for since its last
	// successful sync): they stay that sync's while the others move on.
	nf := n2.Netfilter
	deepAdminChains(t, nf)
	before := n2.Proxier.(*iptablesProxier).last
	_, err := c.AddService(ServiceSpec{Selector: map[string]string{"app": "a"}, Service: kubeproxy.Service{Namespace: "ns", Name: "np", Type: kubeproxy.ServiceTypeNodePort,
		Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80), NodePort: 30080}}}})
	require.Error(t, err)
	require.Error(t, n2.ProxySyncError)
	check("n2's sync refused", n0, n1, n2)
	r, err := kubeproxy.Generate(c.ProxyConfig(n2), before)
	require.NoError(t, err)
	require.Equal(t, r, n2.ProxyRules(), "n2's rules are its last successful sync's")
	_, ok := n2.ProxyRules().Service("ns/np", kubeproxy.ProtocolTCP)
	require.False(t, ok)
	_, ok = n1.ProxyRules().Service("ns/np", kubeproxy.ProtocolTCP)
	require.True(t, ok)
}
