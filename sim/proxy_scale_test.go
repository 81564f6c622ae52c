package sim

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// scaleCluster builds nodes nodes with 30 pods each and services
// ClusterIP Services of 3 endpoints (bench/scale's cluster, smaller),
// with the pods added in batches of batch (1: one AddPod at a time).
func scaleCluster(tb testing.TB, nodes, services, batch int) *Cluster {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Seed = 1
	cfg.ClusterCIDR = netip.MustParsePrefix("10.64.0.0/11")
	c, err := NewCluster(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range nodes {
		addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 20, byte((i + 10) >> 8), byte(i + 10)}), 16)
		if _, err := c.AddNode(NodeSpec{Name: fmt.Sprintf("node-%05d", i), NICs: []NICSpec{{
			Name: "eth0", Segment: "underlay", Addr: addr, Gateway: netip.MustParseAddr("172.20.0.1")}}}); err != nil {
			tb.Fatal(err)
		}
	}
	const perNode, endpoints = 30, 3
	total := nodes * perNode
	groups := max(total/endpoints, 1)
	web := []Container{{Name: "web", Ports: []ContainerPort{{Name: "http", ContainerPort: 80}}}}
	var specs []PodSpec
	for j := range total {
		specs = append(specs, PodSpec{Namespace: "scale", Name: fmt.Sprintf("pod-%06d", j), Node: fmt.Sprintf("node-%05d", j%nodes),
			Labels: map[string]string{"group": strconv.Itoa((j / endpoints) % groups)}, Containers: web})
		if len(specs) == batch || j == total-1 {
			if _, err := c.AddPods(specs); err != nil {
				tb.Fatal(err)
			}
			specs = nil
		}
	}
	svcs := make([]ServiceSpec, services)
	for i := range svcs {
		svcs[i] = ServiceSpec{Selector: map[string]string{"group": strconv.Itoa(i % groups)}, Service: kubeproxy.Service{
			Namespace: "scale", Name: fmt.Sprintf("svc-%05d", i),
			Ports: []kubeproxy.ServicePort{{Name: "http", Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}}
	}
	if _, err := c.AddServices(svcs); err != nil {
		tb.Fatal(err)
	}
	return c
}

var benchScale *Cluster

// BenchmarkProxyScale times, on 200 nodes and 10,000 Services, one
// endpoint going away and coming back (two endpoint changes, each synced
// on every node), and an hour with nothing changed (every node's
// kube-proxy makes its hourly full sync).
func BenchmarkProxyScale(b *testing.B) {
	if benchScale == nil {
		benchScale = scaleCluster(b, 200, 10000, 1000)
	}
	c := benchScale
	b.Run("EndpointChange", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p := c.Pod("scale", "pod-000000")
			spec := p.Spec
			if err := c.DeletePod("scale", "pod-000000"); err != nil {
				b.Fatal(err)
			}
			if _, err := c.AddPod(spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HourlyFullSync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.RunFor(ProxyMaxSyncInterval); err != nil {
				b.Fatal(err)
			}
		}
	})
}
