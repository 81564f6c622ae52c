package sim

import (
	"fmt"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// A Running pod's status holds the pod IP and each container's ID as the
// kubelet makes them ("containerd://", the pod's container ID but its
// last two digits, the container's index in hex), in full slices, for
// pods of one container (made in one allocation with the object), of
// several, on the pod network and on the host's; podRunningIDs for more
// than 256 (more Events than an instant has names for: the pod would not
// start).
func TestRunningPodStatusIDs(t *testing.T) {
	for i := range 5000 {
		assert.Len(t, hex2(i), hex2Len(i), "hex2Len(%d)", i)
	}
	big := &Pod{IP: netip.MustParseAddr("10.244.1.17"), ContainerID: containerID(0x9e3779b97f4a7c15)}
	ids, ipLen := (&Cluster{}).podRunningIDs(big, 300)
	want := "10.244.1.17"
	for i := range 300 {
		want += "containerd://" + big.ContainerID[:62] + hex2(i)
	}
	assert.Equal(t, want, ids)
	assert.Equal(t, len("10.244.1.17"), ipLen)
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	_, err = c.AddNode(NodeSpec{Name: "n1", NICs: []NICSpec{{Name: "eth0", Segment: "lan",
		Addr: netip.MustParsePrefix("192.168.1.11/24"), Gateway: netip.MustParseAddr("192.168.1.1")}}})
	require.NoError(t, err)
	many := func(n int) []Container {
		var cs []Container
		for i := range n {
			cs = append(cs, Container{Name: fmt.Sprintf("c%d", i)})
		}
		return cs
	}
	for _, tc := range []struct {
		name string
		spec PodSpec
	}{
		{"one", PodSpec{Name: "one", Containers: many(1)}},
		{"default", PodSpec{Name: "default"}},
		{"two", PodSpec{Name: "two", Containers: many(2)}},
		{"17", PodSpec{Name: "many", Containers: many(17)}},
		{"host network", PodSpec{Name: "host", HostNetwork: true, Containers: many(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Node = "n1"
			p, err := c.AddPod(tc.spec)
			require.NoError(t, err)
			o, err := c.API.Get("Pod", "default", tc.spec.Name)
			require.NoError(t, err)
			st := o.(*corev1.Pod).Status
			assert.Equal(t, p.IP.String(), st.PodIP)
			assert.Equal(t, []corev1.PodIP{{IP: p.IP.String()}}, st.PodIPs)
			require.Len(t, st.ContainerStatuses, len(p.Spec.Containers))
			for i, cs := range st.ContainerStatuses {
				assert.Equal(t, "containerd://"+p.ContainerID[:62]+hex2(i), cs.ContainerID, "container %d", i)
				assert.Equal(t, p.Spec.Containers[i].Name, cs.Name)
			}
			// What the kubelet stored, and what the pod keeps of it.
			for _, o := range []*corev1.Pod{p.Object, o.(*corev1.Pod)} {
				assert.Equal(t, o.Status.PodIPs, st.PodIPs)
				assert.Equal(t, len(o.Status.PodIPs), cap(o.Status.PodIPs), "full: an append copies")
				assert.Equal(t, len(o.Status.ContainerStatuses), cap(o.Status.ContainerStatuses), "full: an append copies")
			}
			assert.Equal(t, o, p.Object.DeepCopy())
		})
	}
}

// A pod added by AddPods or AddPod has one key string ("namespace/name"):
// podByName's key, and the stored object's name is its tail.
func TestPodKeyIsOneString(t *testing.T) {
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	_, err = c.AddNode(NodeSpec{Name: "n1", NICs: []NICSpec{{Name: "eth0", Segment: "lan",
		Addr: netip.MustParsePrefix("192.168.1.11/24"), Gateway: netip.MustParseAddr("192.168.1.1")}}})
	require.NoError(t, err)
	_, err = c.AddPods([]PodSpec{{Namespace: "ns", Name: "a", Node: "n1"}, {Namespace: "ns", Name: "b", Node: "n1"}})
	require.NoError(t, err)
	_, err = c.AddPod(PodSpec{Namespace: "ns", Name: "c", Node: "n1"})
	require.NoError(t, err)
	require.Len(t, c.podByName, 3)
	for k, p := range c.podByName {
		tail := unsafe.StringData(k)
		tail = (*byte)(unsafe.Add(unsafe.Pointer(tail), len("ns/")))
		for _, name := range []string{p.Object.Name, p.Spec.Name} {
			assert.Equal(t, k[len("ns/"):], name)
			assert.Same(t, tail, unsafe.StringData(name), "%s: the name is the key's tail", k)
		}
		o, _ := c.API.Peek("Pod", "ns", p.Spec.Name)
		assert.Same(t, tail, unsafe.StringData(o.GetName()), "%s: the stored object's name is the key's tail", k)
	}
}

// Pods handed out from chunks (newPod) are distinct, zero and stay as
// set while more are made; the host veths' names made in the arena read
// as vethName makes them.
func TestPodsFromChunks(t *testing.T) {
	c := &Cluster{}
	c.arenaText = c.arena.Text
	seen := map[*Pod]bool{}
	var pods []*Pod
	for i := range 3*podChunk + 5 {
		p := c.newPod()
		assert.Equal(t, Pod{}, *p, "zero")
		assert.False(t, seen[p], "distinct")
		seen[p] = true
		p.ContainerID = fmt.Sprint(i)
		pods = append(pods, p)
	}
	for i, p := range pods {
		assert.Equal(t, fmt.Sprint(i), p.ContainerID)
	}
	cl, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	_, err = cl.AddNode(NodeSpec{Name: "n1", NICs: []NICSpec{{Name: "eth0", Segment: "lan",
		Addr: netip.MustParsePrefix("192.168.1.11/24"), Gateway: netip.MustParseAddr("192.168.1.1")}}})
	require.NoError(t, err)
	p, err := cl.AddPod(PodSpec{Name: "a", Node: "n1"})
	require.NoError(t, err)
	assert.Regexp(t, `^veth[0-9a-f]{8}$`, p.HostVeth.Name)
}
