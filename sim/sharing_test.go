package sim

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim/apiserver"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// The kubelet, the controllers and kube-proxy's informers read the API
// server's stored objects and hand it the objects they write
// (Peek, WatchReadOnly, Submit, WriteStatus): the same cluster built with
// the server copying everywhere, as before (DisableSharing), has every
// object, event, resourceVersion, Pod.Object and node ruleset the same.
func TestAPISharingIsInvisible(t *testing.T) {
	build := func(copyAll bool) string {
		c, err := NewCluster(DefaultConfig())
		require.NoError(t, err)
		if copyAll {
			c.API.DisableSharing()
		}
		for n := range 3 {
			_, err := c.AddNode(NodeSpec{Name: fmt.Sprint("n", n), NICs: []NICSpec{{Name: "eth0", Segment: "lan",
				Addr: netip.MustParsePrefix(fmt.Sprintf("192.168.9.%d/24", 10+n)), Gateway: netip.MustParseAddr("192.168.9.1")}}})
			require.NoError(t, err)
		}
		web := []Container{{Name: "web", Ports: []ContainerPort{{Name: "http", ContainerPort: 80}}}}
		for i := range 9 {
			_, err := c.AddPod(PodSpec{Namespace: "shop", Name: fmt.Sprintf("web-%d", i), Node: fmt.Sprint("n", i%3),
				Labels: map[string]string{"app": fmt.Sprint("g", i%3)}, Containers: web})
			require.NoError(t, err)
		}
		var specs []ServiceSpec
		for g := range 3 {
			specs = append(specs, ServiceSpec{Selector: map[string]string{"app": fmt.Sprint("g", g)}, Service: kubeproxy.Service{
				Namespace: "shop", Name: fmt.Sprint("svc-", g),
				Ports: []kubeproxy.ServicePort{{Name: "http", Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromString("http")}}}})
		}
		_, err = c.AddServices(specs)
		require.NoError(t, err)
		require.NoError(t, c.DeletePod("shop", "web-4"))
		require.NoError(t, c.LabelPod("shop", "web-5", "app", "g0"))
		require.NoError(t, c.RunFor(5e9))

		var b strings.Builder
		for _, k := range apiserver.Kinds {
			for _, o := range c.API.List(k.Name, "") {
				y, err := yaml.Marshal(o)
				require.NoError(t, err)
				fmt.Fprintf(&b, "--- %s\n%s", k.Name, y)
			}
		}
		for _, p := range c.Pods() {
			y, err := yaml.Marshal(p.Object)
			require.NoError(t, err)
			fmt.Fprintf(&b, "--- Pod.Object %s\n%s%v\n", p.Name(), y, p.Spec)
		}
		for _, n := range c.Nodes() {
			fmt.Fprintf(&b, "--- %s\n%s", n.Name, n.Netfilter.Save(netfilter.SaveOptions{Counters: true}))
		}
		return b.String()
	}
	shared, copied := build(false), build(true)
	require.Contains(t, shared, "svc-2")
	require.Contains(t, shared, "Started container web")
	require.Equal(t, copied, shared)
}

// The kubelet hands the server the Node object it registers (Submit, no
// copy): nothing of the caller's NodeSpec is kept in it, so changing the
// spec's labels and taints afterwards leaves the stored Node as it was.
func TestRegisteredNodeKeepsNothingOfTheCaller(t *testing.T) {
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	added := metav1.NewTime(apiserver.Epoch)
	spec := NodeSpec{Name: "n0", NICs: []NICSpec{{Name: "eth0", Segment: "lan",
		Addr: netip.MustParsePrefix("192.168.9.10/24"), Gateway: netip.MustParseAddr("192.168.9.1")}},
		Labels: map[string]string{"zone": "a"},
		Taints: []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}}}
	_, err = c.AddNode(spec)
	require.NoError(t, err)
	before, err := c.API.Get("Node", "", "n0")
	require.NoError(t, err)
	spec.Labels["zone"] = "b"
	spec.Taints[0].Value = "web"
	spec.Taints[0].TimeAdded.Time = added.Add(time.Hour)
	after, ok := c.API.Peek("Node", "", "n0")
	require.True(t, ok)
	require.Equal(t, before, after)
	require.Equal(t, "a", after.GetLabels()["zone"])
	require.Equal(t, apiserver.Epoch, after.(*corev1.Node).Spec.Taints[0].TimeAdded.Time.UTC())
}
