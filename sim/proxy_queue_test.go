package sim

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// TestProxyQueueIsAQueueOfNames: kube-proxy's queue (proxyQueue, which
// wakes every node from its place in the nodes' order) runs the same
// syncs, of the same nodes at the same virtual times and in the same
// order, as a controller.Queue of node names: through a burst of changes
// inside the minimum sync period, a node joining, a sync that fails and
// is retried after the sync period (as a background event), and the
// hourly wake-up; every node's tables print the same, counters included.
func TestProxyQueueIsAQueueOfNames(t *testing.T) {
	type synced struct {
		node string
		at   time.Duration
	}
	var log *[]synced
	proxySynced = func(node string, at time.Duration) { *log = append(*log, synced{node, at}) }
	t.Cleanup(func() { proxySynced, proxyQueueOfNames = nil, false })
	web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
	svc := func(name string, typ kubeproxy.ServiceType, nodePort int) ServiceSpec {
		return ServiceSpec{Selector: map[string]string{"app": "web"}, Service: kubeproxy.Service{Namespace: "ns", Name: name, Type: typ,
			Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80), NodePort: nodePort}}}}
	}
	node := func(c *Cluster, i int) error {
		_, err := c.AddNode(NodeSpec{Name: fmt.Sprintf("n%d", i), NICs: []NICSpec{{Name: "eth0", Segment: "lan",
			Addr: netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 1, byte(11 + i)}), 24), Gateway: netip.MustParseAddr("192.168.1.1")}}})
		return err
	}
	steps := []struct {
		name string
		do   func(c *Cluster) error
	}{
		{"three nodes", func(c *Cluster) error {
			for i := range 3 {
				if err := node(c, i); err != nil {
					return err
				}
			}
			return nil
		}},
		{"pods and a Service", func(c *Cluster) error {
			for i := range 3 {
				if _, err := c.AddPod(PodSpec{Namespace: "ns", Name: fmt.Sprintf("web-%d", i), Node: fmt.Sprintf("n%d", i),
					Labels: map[string]string{"app": "web"}, Containers: web}); err != nil {
					return err
				}
			}
			_, err := c.AddService(svc("cip", "", 0))
			return err
		}},
		{"changes inside the minimum sync period", func(c *Cluster) error {
			if _, err := c.AddService(svc("b", "", 0)); err != nil {
				return err
			}
			if err := c.RunFor(300 * time.Millisecond); err != nil {
				return err
			}
			if err := c.DeleteService("ns", "b"); err != nil {
				return err
			}
			return c.DeletePod("ns", "web-0")
		}},
		{"a node joins", func(c *Cluster) error { return node(c, 3) }},
		{"n2's restore refused, then a change", func(c *Cluster) error {
			nf := c.Node("n2").Netfilter
			for i := 1; i <= 10; i++ {
				if err := nf.Exec("nat", "-N", fmt.Sprintf("ADMIN%d", i)); err != nil {
					return err
				}
			}
			for i := 1; i < 10; i++ {
				if err := nf.Exec("nat", "-A", fmt.Sprintf("ADMIN%d", i), "-j", fmt.Sprintf("ADMIN%d", i+1)); err != nil {
					return err
				}
			}
			if err := nf.Exec("nat", "-A", "ADMIN10", "-j", "KUBE-SERVICES"); err != nil {
				return err
			}
			if err := nf.Exec("nat", "-I", "PREROUTING", "1", "-j", "ADMIN1"); err != nil {
				return err
			}
			if _, err := c.AddService(svc("np", kubeproxy.ServiceTypeNodePort, 30080)); err == nil {
				return fmt.Errorf("n2's sync did not fail")
			}
			return c.RunFor(ProxySyncPeriod + time.Second) // the retry fails too
		}},
		{"the jump removed, the retry", func(c *Cluster) error {
			if err := c.Node("n2").Netfilter.Exec("nat", "-D", "PREROUTING", "-j", "ADMIN1"); err != nil {
				return err
			}
			return c.RunFor(ProxySyncPeriod)
		}},
		{"an endpoint gone", func(c *Cluster) error { return c.DeletePod("ns", "web-1") }},
		{"an hour later", func(c *Cluster) error { return c.RunFor(ProxyMaxSyncInterval + time.Minute) }},
	}
	var byName, fast []synced
	build := func(names bool) *Cluster {
		proxyQueueOfNames = names
		defer func() { proxyQueueOfNames = false }()
		c, err := NewCluster(DefaultConfig())
		require.NoError(t, err)
		return c
	}
	ref, c := build(true), build(false)
	require.NotNil(t, ref.cp.proxy.names)
	require.Nil(t, c.cp.proxy.names)
	for _, st := range steps {
		byName, fast = byName[:0], fast[:0]
		log = &byName
		require.NoError(t, st.do(ref), st.name)
		log = &fast
		require.NoError(t, st.do(c), st.name)
		require.NotEmpty(t, fast, "%s: no sync", st.name)
		assert.Equal(t, byName, fast, st.name)
		assert.Equal(t, ref.World.Now(), c.World.Now(), st.name)
		for i, n := range c.Nodes() {
			r := ref.Nodes()[i]
			assert.Equal(t, r.Netfilter.Save(netfilter.SaveOptions{Counters: true}), n.Netfilter.Save(netfilter.SaveOptions{Counters: true}), "%s: %s", st.name, n.Name)
			assert.Equal(t, r.RestoreFailures, n.RestoreFailures, "%s: %s", st.name, n.Name)
			assert.Equal(t, r.ProxySyncError != nil, n.ProxySyncError != nil, "%s: %s", st.name, n.Name)
		}
	}
	assert.Equal(t, 2, c.Node("n2").RestoreFailures, "the sync and its first retry failed")
	assert.Nil(t, c.Node("n2").ProxySyncError, "the second retry succeeded")
}
