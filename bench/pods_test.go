package bench

import (
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"testing"

	"github.com/kubewalk/kubewalk/sim"
)

// BenchmarkPodStartWaves starts 200 pods in waves of one pod per node on
// 20 nodes, as bench/scale creates them (AddPods): each pod's API object
// and three Events, the kubelet's bookkeeping, the sandbox namespace and
// the CNI ADD; an op is the 200 pods on a fresh cluster (built with the
// timer stopped). objects/pod is what decides how much of a large build
// the garbage collector takes: 70 before the lazily made namespace maps
// and the shared labels of 6c216da and 2d57a29, 61 after; 58 with the
// compact Events of 19662eb (10.5 KB/pod from 11.4), 53 with the small
// route tables of f4fb25e (9.5 KB/pod).
func BenchmarkPodStartWaves(b *testing.B) {
	const nodes, waves = 20, 10
	web := []sim.Container{{Name: "web", Ports: []sim.ContainerPort{{Name: "http", ContainerPort: 80}}}}
	b.ReportAllocs()
	var objects uint64
	var m0, m1 runtime.MemStats
	for b.Loop() {
		b.StopTimer()
		cfg := sim.DefaultConfig()
		cfg.Seed = 1
		c, err := sim.NewCluster(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for i := range nodes {
			if _, err := c.AddNode(sim.NodeSpec{Name: fmt.Sprintf("node-%02d", i), NICs: []sim.NICSpec{{Name: "eth0", Segment: "underlay",
				Addr: netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 20, 0, byte(10 + i)}), 16), Gateway: netip.MustParseAddr("172.20.0.1")}}}); err != nil {
				b.Fatal(err)
			}
		}
		batches := make([][]sim.PodSpec, waves)
		for w := range batches {
			for i := range nodes {
				j := w*nodes + i
				batches[w] = append(batches[w], sim.PodSpec{Namespace: "scale", Name: fmt.Sprintf("pod-%04d", j), Node: fmt.Sprintf("node-%02d", i),
					Labels: map[string]string{"group": strconv.Itoa(j / 3)}, Containers: web})
			}
		}
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		for _, batch := range batches {
			if _, err := c.AddPods(batch); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.ReadMemStats(&m1)
		objects += m1.Mallocs - m0.Mallocs
		b.StartTimer()
	}
	pods := float64(b.N * nodes * waves)
	b.ReportMetric(float64(objects)/pods, "objects/pod")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/pods, "ns/pod")
}
