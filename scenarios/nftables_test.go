package scenarios

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/internal/golden"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// TestNFTablesListing pins `nft list table ip kube-proxy` on cka-w1 of the
// flow scenario: one Service of every kind.
func TestNFTablesListing(t *testing.T) {
	f, err := NewFlowsMode(1, kubeproxy.ModeNFTables)
	require.NoError(t, err)
	out, ok := f.W1.NFTables.ListTable("ip", "kube-proxy")
	require.True(t, ok)
	golden.Check(t, "nftables-flows-cka-w1.list", out)
	assert.Nil(t, f.W1.ProxyRules(), "no iptables rules in nftables mode")
	assert.Nil(t, f.W1.Netfilter.Table("nat").Chain("KUBE-SERVICES"))
}

// TestNFTablesTraceNamesTheDecision: a traced NodePort walk says which
// map element and which numgen value chose the endpoint.
func TestNFTablesTraceNamesTheDecision(t *testing.T) {
	r, err := NewReferenceMode(1, kubeproxy.ModeNFTables)
	require.NoError(t, err)
	tr := &trace.Trace{}
	_, err = r.Outside.Netns.DialTCP(r.Outside.IP, r.CP1.InternalIP, 40000, WebNodePort, 1, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	text := tr.Text(trace.Detailed)
	assert.Contains(t, text, "vmap @service-nodeports => @service-nodeports element tcp . 30080 : goto external-QM4IEN7H-net/web/tcp/")
	assert.Regexp(t, `numgen random mod 2 vmap \{ 0 : goto endpoint-\S+, 1 : goto endpoint-\S+ \} => numgen random mod 2 = [01] : goto endpoint-`, text)
	assert.True(t, strings.Contains(text, "masquerade fully-random"))
}

// TestNFTablesResyncIsStable: a second sync with nothing changed leaves
// the same table; deleting a Service flushes its chains now and deletes
// them at a sync a second or more later, as kube-proxy does.
func TestNFTablesResyncIsStable(t *testing.T) {
	f, err := NewFlowsMode(1, kubeproxy.ModeNFTables)
	require.NoError(t, err)
	before, _ := f.W1.NFTables.ListTable("ip", "kube-proxy")
	require.NoError(t, f.Sync())
	after, _ := f.W1.NFTables.ListTable("ip", "kube-proxy")
	assert.Equal(t, before, after)

	require.NoError(t, f.DeleteService("net", "sticky"))
	tab := f.W1.NFTables.Table("ip", "kube-proxy")
	var stale []string
	for _, c := range tab.Chains() {
		if strings.Contains(c.Name, "net/sticky/") {
			assert.Empty(t, c.Rules(), "stale chain %s is flushed", c.Name)
			stale = append(stale, c.Name)
		}
	}
	require.NotEmpty(t, stale)
	for _, s := range tab.Sets() {
		assert.False(t, strings.HasPrefix(s.Name, "affinity-") && strings.Contains(s.Name, "net/sticky/"), "affinity set %s deleted at once", s.Name)
	}
	require.NoError(t, f.World.Advance(2e9))
	require.NoError(t, f.Sync())
	for _, c := range f.W1.NFTables.Table("ip", "kube-proxy").Chains() {
		assert.NotContains(t, c.Name, "net/sticky/")
	}
}

// TestSetProxyModeRestartsKubeProxy: switching modes on a running cluster
// is a kube-proxy restart: the new mode cleans up the old one's rules.
func TestSetProxyModeRestartsKubeProxy(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	nat := r.W1.Netfilter.Table("nat")
	require.NotNil(t, nat.Chain("KUBE-SERVICES"))

	require.NoError(t, r.SetProxyMode(kubeproxy.ModeNFTables))
	for _, ch := range nat.Chains() {
		assert.False(t, strings.HasPrefix(ch.Name, "KUBE-SVC-") || ch.Name == "KUBE-SERVICES", "iptables chain %s left behind", ch.Name)
	}
	for _, ch := range []string{"PREROUTING", "OUTPUT", "POSTROUTING"} {
		for _, rule := range nat.Chain(ch).Rules() {
			assert.NotContains(t, rule.String(), "KUBE-", "jump left in nat %s", ch)
		}
	}
	require.NotNil(t, r.W1.NFTables.Table("ip", "kube-proxy"))
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web.ClusterIP(), 40000, 80, 1, nil)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	assert.True(t, c.Established, "ClusterIP works after the restart")

	require.NoError(t, r.SetProxyMode(""))
	assert.Nil(t, r.W1.NFTables.Table("ip", "kube-proxy"), "iptables mode deletes table ip kube-proxy")
	assert.NotNil(t, nat.Chain("KUBE-SERVICES"))

	err = r.SetProxyMode("userspace")
	assert.EqualError(t, err, `configmap kube-system/kube-proxy: mode: KubeProxyConfiguration.ProxyMode: Invalid value: "userspace": must be iptables, ipvs, nftables or blank (blank means the best-available proxy [currently iptables])`)
	assert.Equal(t, kubeproxy.ModeIPTables, r.Config.ProxyMode)
}
