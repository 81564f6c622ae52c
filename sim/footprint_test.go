package sim

import (
	"fmt"
	"net/netip"
	"reflect"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// footprintCluster is n nodes on one underlay, as bench/scale builds them.
func footprintCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = 1
	c, err := NewCluster(cfg)
	require.NoError(t, err)
	for i := range n {
		_, err := c.AddNode(NodeSpec{Name: fmt.Sprintf("node-%02d", i), NICs: []NICSpec{{Name: "eth0", Segment: "underlay",
			Addr: netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 20, 0, byte(10 + i)}), 16), Gateway: netip.MustParseAddr("172.20.0.1")}}})
		require.NoError(t, err)
	}
	return c
}

// TestPodFootprint: the objects a pod's start allocates (its API object
// and Events, the kubelet's bookkeeping, the sandbox namespace and the CNI
// ADD), counted over waves of one pod per node as bench/scale creates
// them. The count is what decides how much of a large build the garbage
// collector takes: 70 per pod here before the lazily made namespace maps
// and the shared labels, 61 after. The specs are made before counting.
func TestPodFootprint(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	const nodes, waves = 20, 10
	c := footprintCluster(t, nodes)
	web := []Container{{Name: "web", Ports: []ContainerPort{{Name: "http", ContainerPort: 80}}}}
	batches := make([][]PodSpec, waves)
	for w := range batches {
		for i := range nodes {
			j := w*nodes + i
			batches[w] = append(batches[w], PodSpec{Namespace: "scale", Name: fmt.Sprintf("pod-%04d", j), Node: fmt.Sprintf("node-%02d", i),
				Labels: map[string]string{"group": strconv.Itoa(j / 3)}, Containers: web})
		}
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for _, b := range batches {
		_, err := c.AddPods(b)
		require.NoError(t, err)
	}
	runtime.ReadMemStats(&m1)
	perPod := float64(m1.Mallocs-m0.Mallocs) / (nodes * waves)
	t.Logf("%.1f objects allocated per pod", perPod)
	assert.LessOrEqual(t, perPod, 62.0)
}

// TestPodSpecLabelsAreTheObjects: a running pod's Spec.Labels is its
// stored object's labels map, not a copy; the object's map is the
// caller's copied (a caller's later change reaches neither), and
// LabelPod stores a new map, leaving the old object's as it was.
func TestPodSpecLabelsAreTheObjects(t *testing.T) {
	c := footprintCluster(t, 1)
	labels := map[string]string{"app": "web"}
	p, err := c.AddPod(PodSpec{Namespace: "default", Name: "web", Node: "node-00", Labels: labels})
	require.NoError(t, err)
	assert.Equal(t, reflect.ValueOf(p.Object.Labels).UnsafePointer(), reflect.ValueOf(p.Spec.Labels).UnsafePointer())
	labels["app"] = "changed"
	assert.Equal(t, map[string]string{"app": "web"}, p.Spec.Labels)
	old := p.Object
	require.NoError(t, c.LabelPod("default", "web", "tier", "front"))
	assert.Equal(t, map[string]string{"app": "web", "tier": "front"}, c.Pod("default", "web").Spec.Labels)
	assert.Equal(t, map[string]string{"app": "web"}, old.Labels)
	o, ok := c.API.Peek("Pod", "default", "web")
	require.True(t, ok)
	assert.Equal(t, map[string]string{"app": "web", "tier": "front"}, o.GetLabels())
}
