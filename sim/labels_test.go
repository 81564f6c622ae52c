package sim

import (
	"fmt"
	"net/netip"
	"reflect"
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
