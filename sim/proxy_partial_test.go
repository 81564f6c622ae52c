package sim

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// lanNodes is a cluster of nodes n0, n1 and n2 on one LAN
// (192.168.1.11-13/24).
func lanNodes(t *testing.T) *Cluster {
	t.Helper()
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	for i := range 3 {
		_, err := c.AddNode(NodeSpec{Name: fmt.Sprintf("n%d", i), NICs: []NICSpec{{Name: "eth0", Segment: "lan",
			Addr: netip.MustParsePrefix(fmt.Sprintf("192.168.1.%d/24", 11+i)), Gateway: netip.MustParseAddr("192.168.1.1")}}})
		require.NoError(t, err)
	}
	return c
}

// partialCluster is three nodes, a pod of app "a" and pods of app "b" on
// each, and Services a and b selecting them.
func partialCluster(t *testing.T, share bool) *Cluster {
	t.Helper()
	shareProxyRules = share
	t.Cleanup(func() { shareProxyRules = true })
	c := lanNodes(t)
	web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
	for i := range 3 {
		for _, app := range []string{"a", "b"} {
			_, err := c.AddPod(PodSpec{Namespace: "ns", Name: fmt.Sprintf("%s-%d", app, i), Node: fmt.Sprintf("n%d", i),
				Labels: map[string]string{"app": app}, Containers: web})
			require.NoError(t, err)
		}
	}
	var specs []ServiceSpec
	for _, app := range []string{"a", "b"} {
		specs = append(specs, ServiceSpec{Selector: map[string]string{"app": app}, Service: kubeproxy.Service{Namespace: "ns", Name: app,
			Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
	}
	_, err := c.AddServices(specs)
	require.NoError(t, err)
	return c
}

// fullSyncAll makes every node's kube-proxy do a full sync, as after a
// failure or an hour after the last.
func fullSyncAll(t *testing.T, c *Cluster) {
	t.Helper()
	for _, n := range c.Nodes() {
		n.Proxier.(*iptablesProxier).synced = false
	}
	require.NoError(t, c.Sync())
}

func saves(c *Cluster) []string {
	var out []string
	for _, n := range c.Nodes() {
		out = append(out, n.Netfilter.Save(netfilter.SaveOptions{Counters: true}))
	}
	return out
}

// TestPartialSyncsEqualFullSync: after a sequence of endpoint changes,
// each synced partially (kube-proxy writes only the chains of the Service
// changed), every node's tables print what a full sync of the same state
// prints, with the compiled rulesets shared between nodes and without.
func TestPartialSyncsEqualFullSync(t *testing.T) {
	for _, share := range []bool{true, false} {
		c := partialCluster(t, share)
		steps := []func() error{
			func() error { return c.DeletePod("ns", "b-2") },
			func() error {
				_, err := c.AddPod(PodSpec{Namespace: "ns", Name: "b-3", Node: "n0", Labels: map[string]string{"app": "b"},
					Containers: []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}})
				return err
			},
			func() error { return c.DeletePod("ns", "b-0") },
			func() error { return c.DeletePod("ns", "b-1") },
			func() error { return c.DeletePod("ns", "b-3") }, // b has no endpoints
		}
		for i, step := range steps {
			require.NoError(t, step(), "step %d", i)
			require.NoError(t, c.Settle())
			require.NoError(t, c.proxyError())
			for _, n := range c.Nodes() {
				p := n.Proxier.(*iptablesProxier)
				assert.True(t, p.synced, "step %d: %s", i, n.Name)
			}
			got := saves(c)
			fullSyncAll(t, c)
			assert.Equal(t, saves(c), got, "share %v, step %d: partial syncs, then a full sync", share, i)
		}
	}
}

// TestPartialSyncKeepsCounters: a partial sync leaves the chains of the
// Services that did not change in the kernel, counters and all; the
// top-level chains it rewrites, and the chains of the Service changed,
// start again from zero, as iptables-restore leaves a chain it flushes
// and refills. A full sync resets them all.
func TestPartialSyncKeepsCounters(t *testing.T) {
	for _, share := range []bool{true, false} {
		c := partialCluster(t, share)
		client := c.Nodes()[0].Pods()[0]
		_, err := client.Netns.DialTCP(client.IP, c.Service("ns", "a").ClusterIP(), 40000, 80, 1, nil)
		require.NoError(t, err)
		require.NoError(t, c.World.Run())
		n0 := c.Nodes()[0]
		svcA := svcChainHash(t, n0, "ns/a")
		before := n0.Netfilter.Save(netfilter.SaveOptions{Counters: true, Tables: []string{"nat"}})
		require.NotEqual(t, "[0:0]", counterOf(before, "KUBE-SVC-"+svcA), "the connection went through Service a's chain")
		require.NotEqual(t, "[0:0]", counterOf(before, "KUBE-SERVICES"))

		require.NoError(t, c.DeletePod("ns", "b-2")) // Service b changes, a does not
		after := n0.Netfilter.Save(netfilter.SaveOptions{Counters: true, Tables: []string{"nat"}})
		assert.Equal(t, counterOf(before, "KUBE-SVC-"+svcA), counterOf(after, "KUBE-SVC-"+svcA), "share %v: a's chain kept", share)
		assert.Equal(t, "[0:0]", counterOf(after, "KUBE-SERVICES"), "share %v: KUBE-SERVICES rewritten", share)

		fullSyncAll(t, c)
		full := n0.Netfilter.Save(netfilter.SaveOptions{Counters: true, Tables: []string{"nat"}})
		assert.Equal(t, "[0:0]", counterOf(full, "KUBE-SVC-"+svcA), "share %v: a full sync rewrites every chain", share)
	}
}

// svcChainHash returns the hash part of Service svc's KUBE-SVC chain on n.
func svcChainHash(t *testing.T, n *Node, svc string) string {
	t.Helper()
	r, ok := n.ProxyRules().Service(svc, kubeproxy.ProtocolTCP)
	require.True(t, ok, svc)
	require.NotEmpty(t, r.ClusterChain)
	return strings.TrimPrefix(r.ClusterChain, "KUBE-SVC-")
}

// counterOf returns the counters of the first rule of chain in save, the
// total of every rule's packets when there are several ("[p:b]" of the
// first rule whose counters are not zero, else "[0:0]").
func counterOf(save, chain string) string {
	re := regexp.MustCompile(`(?m)^(\[\d+:\d+\]) -A ` + regexp.QuoteMeta(chain) + ` `)
	for _, m := range re.FindAllStringSubmatch(save, -1) {
		if m[1] != "[0:0]" {
			return m[1]
		}
	}
	return "[0:0]"
}

// TestSnapshotPatchedEqualsSnapshot: kube-proxy's snapshot after an
// endpoint change is patched from the one before (the Services changed
// replaced), and is what Snapshot builds from every Service; after a
// Service is added or deleted it is built again.
func TestSnapshotPatchedEqualsSnapshot(t *testing.T) {
	c := partialCluster(t, true)
	web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
	steps := []func() error{
		func() error { return c.DeletePod("ns", "b-2") },
		func() error {
			_, err := c.AddPod(PodSpec{Namespace: "ns", Name: "b-3", Node: "n0", Labels: map[string]string{"app": "b"}, Containers: web})
			return err
		},
		func() error {
			_, err := c.AddService(ServiceSpec{Selector: map[string]string{"app": "a"}, Service: kubeproxy.Service{Namespace: "ns", Name: "c",
				Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
			return err
		},
		func() error { return c.DeletePod("ns", "a-0") },
		func() error { // a Service changed (its Services copied, not shared)
			o, err := c.API.Get("Service", "ns", "c")
			if err != nil {
				return err
			}
			svc := o.(*corev1.Service).DeepCopy()
			svc.Spec.Ports[0].Port = 8080
			if _, err := c.API.Update(svc); err != nil {
				return err
			}
			return c.Settle()
		},
		func() error { return c.DeleteService("ns", "b") },
		func() error { return c.DeletePod("ns", "a-1") },
	}
	pt := c.proxyTracker()
	for i, step := range steps {
		// The snapshot before stays as it was (the nodes' last syncs
		// hold it), and is no longer taken for the current one.
		before := c.snapshot()
		kept := kubeproxy.Snapshot{Services: slices.Clone(before.Services), EndpointSlices: slices.Clone(before.EndpointSlices)}
		require.NoError(t, step(), "step %d", i)
		assert.Equal(t, c.Snapshot(), c.snapshot(), "step %d", i)
		assert.Equal(t, kept, before, "step %d: the snapshot before", i)
		_, current := c.snapshotGen(before)
		assert.False(t, current, "step %d: the snapshot before taken for the current one", i)
		for _, s := range c.Services() {
			want := kubeproxy.EndpointSlice{Namespace: s.Spec.Namespace, ServiceName: s.Spec.Name}
			if l := c.slices[s.Name()]; len(l) > 0 {
				want = c.proxySliceOf(l[0])
			}
			assert.Equal(t, want, s.EndpointSlice, "step %d: %s", i, s.Name())
		}
	}
	assert.Positive(t, pt.patchedSnaps, "patched")
	assert.Positive(t, pt.sharedServices, "patched snapshots sharing the Services of the one before")
	assert.Less(t, pt.sharedServices, pt.patchedSnaps, "patched snapshots with their Services copied")
}

// TestFullSyncEnsuresJumpsAgain: the hourly full sync finds kube-proxy's
// jump rules with iptables -C and inserts one someone deleted since (the
// shared rulesets' full sync skips the checks only while no command
// changed the node's tables).
func TestFullSyncEnsuresJumpsAgain(t *testing.T) {
	c := partialCluster(t, true)
	n0 := c.Nodes()[0]
	jump := []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}
	ok, err := n0.Netfilter.Check("nat", "PREROUTING", jump...)
	require.NoError(t, err)
	require.True(t, ok)
	before := n0.Netfilter.Save(netfilter.SaveOptions{Tables: []string{"nat"}})
	require.NoError(t, c.RunFor(ProxyMaxSyncInterval)) // a full sync, nothing changed
	assert.Equal(t, before, n0.Netfilter.Save(netfilter.SaveOptions{Tables: []string{"nat"}}))
	require.NoError(t, n0.Netfilter.Exec("nat", append([]string{"-D", "PREROUTING"}, jump...)...))
	ok, err = n0.Netfilter.Check("nat", "PREROUTING", jump...)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, c.RunFor(ProxyMaxSyncInterval))
	ok, err = n0.Netfilter.Check("nat", "PREROUTING", jump...)
	require.NoError(t, err)
	assert.True(t, ok, "the full sync inserted the jump again")
	assert.Equal(t, before, n0.Netfilter.Save(netfilter.SaveOptions{Tables: []string{"nat"}}))
}

// TestStaleUDPFlowsWithoutUDPServices: while no Service has a UDP port,
// the syncs after EndpointSlice events look for one once (their snapshots
// share the Services) and clear nothing; once a UDP Service is added, an
// endpoint of it going away clears its flows on every node, as
// StaleUDPFlowsAfterSync finds them.
func TestStaleUDPFlowsWithoutUDPServices(t *testing.T) {
	c := partialCluster(t, true)
	type seen struct {
		node  string
		flows []kubeproxy.StaleUDPFlow
	}
	var got []seen
	proxyStaleFlows = func(n *Node, flows []kubeproxy.StaleUDPFlow) { got = append(got, seen{n.Name, flows}) }
	t.Cleanup(func() { proxyStaleFlows = nil })
	pt := c.proxyTracker()
	require.NoError(t, c.DeletePod("ns", "a-0"))
	scans := pt.udpScans
	require.NotEmpty(t, got)
	web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
	for _, step := range []func() error{
		func() error { return c.DeletePod("ns", "b-0") },
		func() error {
			_, err := c.AddPod(PodSpec{Namespace: "ns", Name: "a-0", Node: "n0", Labels: map[string]string{"app": "a"}, Containers: web})
			return err
		},
	} {
		require.NoError(t, step())
	}
	assert.Equal(t, scans, pt.udpScans, "the Services looked at again after EndpointSlice events only")
	for _, s := range got {
		assert.Empty(t, s.flows, s.node)
	}
	_, err := c.AddService(ServiceSpec{Selector: map[string]string{"app": "b"}, Service: kubeproxy.Service{Namespace: "ns", Name: "dns",
		Ports: []kubeproxy.ServicePort{{Name: "dns", Protocol: kubeproxy.ProtocolUDP, Port: 53, TargetPort: kubeproxy.FromInt(80)}}}})
	require.NoError(t, err)
	got = nil
	before := c.snapshot()
	require.NoError(t, c.DeletePod("ns", "b-1"))
	want := kubeproxy.StaleUDPFlowsAfterSync(c.ProxyConfig(c.Nodes()[0]), before, c.snapshot())
	require.NotEmpty(t, want)
	nodes := map[string]bool{}
	for _, s := range got {
		if len(s.flows) > 0 {
			assert.Equal(t, want, s.flows, s.node)
			nodes[s.node] = true
		}
	}
	assert.Len(t, nodes, len(c.Nodes()), "every node cleared the UDP Service's flows")
}
