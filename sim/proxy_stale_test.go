package sim

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
)

var serviceChainDecl = regexp.MustCompile(`(?m)^:(KUBE-(?:SVC|SVL|EXT|FW|SEP)-[A-Z0-9]+) `)

// serviceChains returns the per-Service chains of n's nat table.
func serviceChains(n *Node) []string {
	var out []string
	for _, m := range serviceChainDecl.FindAllStringSubmatch(n.Netfilter.Save(netfilter.SaveOptions{Tables: []string{"nat"}}), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestStaleChainsDeleted: as kube-proxy's iptables proxier does at each
// sync (outside large-cluster mode), the chains of an endpoint gone and of
// a Service deleted are deleted from every node (flushed, then -X), by the
// partial syncs, with the rulesets shared between nodes and without; a
// full sync then finds nothing more to delete.
func TestStaleChainsDeleted(t *testing.T) {
	for _, share := range []bool{true, false} {
		c := partialCluster(t, share)
		n0 := c.Nodes()[0]
		b, ok := n0.ProxyRules().Service("ns/b", "TCP")
		require.True(t, ok)
		require.Len(t, b.Endpoints, 3)
		all := serviceChains(n0)
		require.Contains(t, all, b.ClusterChain)

		// An endpoint of b goes: its KUBE-SEP chain with it.
		gone := ""
		for _, ep := range b.Endpoints {
			if ep.Endpoint.Addr() == c.Pod("ns", "b-2").IP {
				gone = ep.Chain
			}
		}
		require.NotEmpty(t, gone)
		require.NoError(t, c.DeletePod("ns", "b-2"))
		require.NoError(t, c.Settle())
		require.NoError(t, c.proxyError())
		for _, n := range c.Nodes() {
			assert.NotContains(t, serviceChains(n), gone, "share %v, %s: the endpoint's chain is deleted", share, n.Name)
			assert.Contains(t, serviceChains(n), b.ClusterChain, "share %v, %s", share, n.Name)
			assert.True(t, n.Proxier.(*iptablesProxier).cleaned)
		}

		// Service b goes: every chain of it.
		require.NoError(t, c.DeleteService("ns", "b"))
		require.NoError(t, c.Settle())
		require.NoError(t, c.proxyError())
		var want []string // the chains of the Services left (a and kubernetes)
		for _, s := range n0.ProxyRules().Services {
			require.NotEqual(t, "ns/b", s.ServicePortName)
			want = append(want, s.ClusterChain)
			for _, ep := range s.Endpoints {
				want = append(want, ep.Chain)
			}
		}
		for _, n := range c.Nodes() {
			assert.ElementsMatch(t, want, serviceChains(n), "share %v, %s: only the chains of the Services left", share, n.Name)
			for _, ch := range all {
				if !slices.Contains(want, ch) {
					assert.NotContains(t, serviceChains(n), ch)
				}
			}
		}
		got := saves(c)
		fullSyncAll(t, c)
		assert.Equal(t, got, saves(c), "share %v: a full sync deletes nothing more", share)
	}
}

// TestCleanupDue: kube-proxy deletes stale chains at every sync, except
// in large-cluster mode (more than 1,000 endpoints), where it does when
// the last cleanup is more than --iptables-sync-period ago.
func TestCleanupDue(t *testing.T) {
	for _, tc := range []struct {
		large, cleaned bool
		last, now      time.Duration
		want           bool
	}{
		{false, true, time.Second, time.Second, true},
		{true, false, 0, 0, true},
		{true, true, 10 * time.Second, 10*time.Second + ProxySyncPeriod, false},
		{true, true, 10 * time.Second, 10*time.Second + ProxySyncPeriod + time.Nanosecond, true},
	} {
		assert.Equal(t, tc.want, cleanupDue(tc.large, tc.cleaned, tc.last, tc.now), "%+v", tc)
	}
}

// TestProxyMaxIntervalSync: an idle cluster settles (the sync runner's
// timer is a background event), and kube-proxy syncs on its own only when
// nothing ran for an hour (its sync runner's maxInterval; not every
// --iptables-sync-period): that sync is full, so the counters of every
// kube-proxy chain start again, with the rulesets shared and without.
func TestProxyMaxIntervalSync(t *testing.T) {
	for _, share := range []bool{true, false} {
		c := partialCluster(t, share)
		require.NoError(t, c.Settle())
		client := c.Nodes()[0].Pods()[0]
		_, err := client.Netns.DialTCP(client.IP, c.Service("ns", "a").ClusterIP(), 40000, 80, 1, nil)
		require.NoError(t, err)
		require.NoError(t, c.World.Run())
		n0 := c.Nodes()[0]
		p := n0.Proxier.(*iptablesProxier)
		svcA := "KUBE-SVC-" + svcChainHash(t, n0, "ns/a")
		nat := func() string {
			return n0.Netfilter.Save(netfilter.SaveOptions{Counters: true, Tables: []string{"nat"}})
		}
		before := counterOf(nat(), svcA)
		require.NotEqual(t, "[0:0]", before)
		last := p.lastRun

		require.NoError(t, c.RunFor(last+ProxyMaxSyncInterval-c.World.Now()-time.Second))
		assert.Equal(t, last, p.lastRun, "share %v: no sync for %v (none every %v)", share, ProxyMaxSyncInterval, ProxySyncPeriod)
		assert.Equal(t, before, counterOf(nat(), svcA), "share %v", share)

		require.NoError(t, c.RunFor(2*time.Second))
		assert.Equal(t, last+ProxyMaxSyncInterval, p.lastRun, "share %v: the sync runner's maxInterval", share)
		assert.Equal(t, p.lastRun, p.lastFull, "share %v: a full sync", share)
		assert.Equal(t, "[0:0]", counterOf(nat(), svcA), "share %v: every chain rewritten", share)
		for _, n := range c.Nodes() {
			assert.Equal(t, p.lastRun, n.Proxier.(*iptablesProxier).lastRun, "share %v: %s too", share, n.Name)
		}
		require.NoError(t, c.proxyError())
	}
}
