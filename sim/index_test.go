package sim

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	"slices"

	"github.com/kubewalk/kubewalk/sim/apiserver"
	"github.com/kubewalk/kubewalk/sim/controller"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodByNameAcrossNamespacesAndDeletes(t *testing.T) {
	c, client, _ := twoPods(t, false)
	other, err := c.AddPod(PodSpec{Namespace: "other", Name: "client", Node: "n1"})
	require.NoError(t, err, "the same name in another namespace is another pod")
	assert.Same(t, client, c.Pod("ns", "client"))
	assert.Same(t, other, c.Pod("other", "client"))
	_, err = c.AddPod(PodSpec{Namespace: "ns", Name: "client", Node: "n1"})
	require.EqualError(t, err, "pod ns/client: already exists")
	require.NoError(t, c.DeletePod("ns", "client"))
	assert.Nil(t, c.Pod("ns", "client"))
	again, err := c.AddPod(PodSpec{Namespace: "ns", Name: "client", Node: "n1"})
	require.NoError(t, err, "a deleted name can be reused")
	assert.Same(t, again, c.Pod("ns", "client"))
	assert.Same(t, other, c.Pod("other", "client"))
}

func TestEndpointSliceSelectsEveryLabelInItsNamespace(t *testing.T) {
	c, _, _ := twoPods(t, false)
	web := []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}
	add := func(ns, name string, labels map[string]string) *Pod {
		p, err := c.AddPod(PodSpec{Namespace: ns, Name: name, Node: "n1", Labels: labels, Containers: web})
		require.NoError(t, err)
		return p
	}
	a := add("shop", "a", map[string]string{"app": "web", "tier": "front"})
	add("shop", "b", map[string]string{"app": "web", "tier": "back"})
	add("other", "c", map[string]string{"app": "web", "tier": "front"})
	d := add("shop", "d", map[string]string{"tier": "front", "app": "web", "extra": "x"})
	s, err := c.AddService(ServiceSpec{Selector: map[string]string{"tier": "front", "app": "web"}, Service: kubeproxy.Service{
		Namespace: "shop", Name: "front", Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
	require.NoError(t, err)
	var got []netip.Addr
	for _, ep := range s.EndpointSlice.Endpoints {
		got = append(got, ep.Addresses...)
	}
	assert.Equal(t, []netip.Addr{a.IP, d.IP}, got, "pods with both labels, in shop only, in creation order")
	empty, err := c.AddService(ServiceSpec{Selector: map[string]string{}, Service: kubeproxy.Service{
		Namespace: "shop", Name: "none", Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
	require.NoError(t, err)
	assert.Empty(t, empty.EndpointSlice.Endpoints, "an empty selector selects nothing")
}

// changedKey keeps the key of the last map it was given: the same map
// again gets it without sorting, any other map (or the same one grown)
// its own.
func TestChangedKeyOfTheSameStep(t *testing.T) {
	c := &Cluster{}
	a := map[string]bool{"ns/web": true, "default/db": true, "ns/api": true}
	require.Equal(t, "default/db\nns/api\nns/web", c.changedKey(a))
	require.Equal(t, "default/db\nns/api\nns/web", c.changedKey(a))
	b := map[string]bool{"ns/web": true}
	require.Equal(t, "ns/web", c.changedKey(b))
	b["ns/a"] = true
	require.Equal(t, "ns/a\nns/web", c.changedKey(b))
	require.Equal(t, "default/db\nns/api\nns/web", c.changedKey(a))
	require.Equal(t, "", c.changedKey(map[string]bool{}))
}

// Nodes are found by name through the index, also after a failed AddNode
// took its node back out.
func TestNodeByName(t *testing.T) {
	c, _, _ := twoPods(t, false)
	for _, n := range c.Nodes() {
		require.Same(t, n, c.Node(n.Name))
	}
	require.Nil(t, c.Node("nope"))
}

// The hand-formatted IDs are the Sprintf ones.
func TestContainerIDFormat(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x9e3779b97f4a7c15, 1<<64 - 1, 0xabc} {
		require.Equal(t, fmt.Sprintf("%064x", v), containerID(v))
	}
	for _, i := range []int{0, 1, 15, 16, 255, 256, 4096} {
		require.Equal(t, fmt.Sprintf("%02x", i), hex2(i))
	}
}

// AddPods starts several pods together: each running, as AddPod would
// start it; a bad spec creates none; a pod that cannot start is deleted
// again and named in the error while the others run.
func TestAddPods(t *testing.T) {
	c, _, _ := twoPods(t, false)
	web := []Container{{Name: "web", Ports: []ContainerPort{{Name: "http", ContainerPort: 80}}}}
	_, err := c.AddPods([]PodSpec{{Namespace: "ns", Name: "a", Node: "n1"}, {Namespace: "ns", Name: "a", Node: "n1"}})
	require.EqualError(t, err, "pod ns/a: already exists")
	_, err = c.AddPods([]PodSpec{{Namespace: "ns", Name: "a", Node: "n1"}, {Namespace: "ns", Name: "b", Node: "nope"}})
	require.EqualError(t, err, `pod ns/b: spec.nodeName: node "nope" does not exist`)
	require.Nil(t, c.Pod("ns", "a"), "a bad spec creates none")

	before := c.World.Now()
	pods, err := c.AddPods([]PodSpec{{Namespace: "shop", Name: "a", Node: "n1", Containers: web}, {Namespace: "shop", Name: "b", Node: "n1", Containers: web}})
	require.NoError(t, err)
	require.Len(t, pods, 2)
	for i, p := range pods {
		require.Same(t, c.Pod("shop", []string{"a", "b"}[i]), p)
		require.True(t, p.IP.IsValid())
		o, ok := c.API.Peek("Pod", "shop", p.Spec.Name)
		require.True(t, ok)
		require.Equal(t, "Running", string(o.(*corev1.Pod).Status.Phase))
	}
	require.Less(t, c.World.Now()-before, 2*PodStartDelay, "started together")

	clash := []Container{{Name: "x", Ports: []ContainerPort{{ContainerPort: 80}}}, {Name: "y", Ports: []ContainerPort{{ContainerPort: 80}}}}
	pods, err = c.AddPods([]PodSpec{{Namespace: "shop", Name: "ok", Node: "n1"}, {Namespace: "shop", Name: "clash", Node: "n1", Containers: clash}})
	require.ErrorContains(t, err, "pod shop/clash")
	require.Len(t, pods, 1)
	require.NotNil(t, c.Pod("shop", "ok"))
	require.Nil(t, c.Pod("shop", "clash"))
	_, stored := c.API.Peek("Pod", "shop", "clash")
	require.False(t, stored, "deleted again")
}

// Pod.Object is the stored object as the kubelet wrote it when the pod
// started (Running, its IP), not the Pending one it was created as; the
// pods a wave starts share their start time, running state, started flag
// and hostIPs (one each, not one per pod), and a copy handed out is the
// caller's own.
func TestPodObjectIsTheRunningPod(t *testing.T) {
	c, _, _ := twoPods(t, false)
	web := []Container{{Name: "web", Ports: []ContainerPort{{Name: "http", ContainerPort: 80}}}}
	node := strings.Clone("n1") // a string of the caller's own
	pods, err := c.AddPods([]PodSpec{{Namespace: "shop", Name: "a", Node: node, Containers: web}, {Namespace: "shop", Name: "b", Node: node, Containers: web}})
	require.NoError(t, err)
	var st []*corev1.PodStatus
	for _, p := range pods {
		o, ok := c.API.Peek("Pod", "shop", p.Spec.Name)
		require.True(t, ok)
		require.Same(t, o, p.Object, "the stored object")
		require.Equal(t, corev1.PodRunning, p.Object.Status.Phase)
		require.Equal(t, p.IP.String(), p.Object.Status.PodIP)
		require.Equal(t, []corev1.HostIP{{IP: "192.168.1.11"}}, p.Object.Status.HostIPs)
		require.Equal(t, p.Object.Status.StartTime.Time, p.Object.Status.ContainerStatuses[0].State.Running.StartedAt.Time)
		require.True(t, *p.Object.Status.ContainerStatuses[0].Started)
		require.Equal(t, unsafe.StringData(c.Node("n1").Name), unsafe.StringData(p.Spec.Node), "the node's own name")
		require.Equal(t, unsafe.StringData(c.Node("n1").Name), unsafe.StringData(p.Object.Spec.NodeName))
		st = append(st, &p.Object.Status)
	}
	require.Same(t, st[0].StartTime, st[1].StartTime)
	require.Same(t, st[0].ContainerStatuses[0].State.Running, st[1].ContainerStatuses[0].State.Running)
	require.Same(t, st[0].ContainerStatuses[0].Started, st[1].ContainerStatuses[0].Started)
	require.Same(t, &st[0].HostIPs[0], &st[1].HostIPs[0])
	require.Equal(t, len(st[0].HostIPs), cap(st[0].HostIPs), "full: an append copies")
	require.Len(t, st[0].Conditions, 5)
	require.Same(t, &st[0].Conditions[0], &st[1].Conditions[0], "one wave, one slice of conditions")
	require.Equal(t, len(st[0].Conditions), cap(st[0].Conditions), "full: an append copies")

	o, err := c.API.Get("Pod", "shop", "a")
	require.NoError(t, err)
	a := o.(*corev1.Pod)
	a.Status.StartTime.Time = a.Status.StartTime.Add(time.Hour)
	*a.Status.ContainerStatuses[0].Started = false
	a.Status.HostIPs[0].IP = "10.0.0.1"
	a.Status.Conditions[0].Status = corev1.ConditionFalse
	require.Equal(t, corev1.ConditionTrue, pods[1].Object.Status.Conditions[0].Status)
	require.Equal(t, pods[1].Object.Status.StartTime.Time, pods[1].Object.Status.ContainerStatuses[0].State.Running.StartedAt.Time)
	require.True(t, *pods[1].Object.Status.ContainerStatuses[0].Started)
	require.Equal(t, "192.168.1.11", pods[1].Object.Status.HostIPs[0].IP)

	// A pod started later has a start time of its own.
	require.NoError(t, c.RunFor(time.Second))
	later, err := c.AddPod(PodSpec{Namespace: "shop", Name: "c", Node: "n1", Containers: web})
	require.NoError(t, err)
	require.True(t, later.Object.Status.StartTime.After(st[0].StartTime.Time))
}

// The conditions a pod Running now gets are what setting each True on a
// copy of its own gives, whichever pod started at this instant before it
// and with what conditions (shared only between pods whose conditions
// were the same).
func TestRunningConditionsAsSet(t *testing.T) {
	t0 := metav1.NewTime(apiserver.Epoch.Add(time.Second))
	now := metav1.NewTime(apiserver.Epoch.Add(3 * time.Second))
	scheduled := []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0}}
	waiting := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [web]", LastTransitionTime: t0},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0}}
	st0 := &kubeletStart{time: now}
	for i, prior := range [][]corev1.PodCondition{nil, nil, scheduled, scheduled, waiting, nil, slices.Clone(waiting), waiting[:1]} {
		pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: prior}}
		want := pod.DeepCopy()
		for _, ty := range runningConditionTypes {
			controller.SetPodCondition(want, corev1.PodCondition{Type: ty, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		got := st0.runningConditions(pod)
		require.Equal(t, want.Status.Conditions, got, "pod %d", i)
		require.Equal(t, prior, pod.Status.Conditions, "pod %d: its own conditions are not modified", i)
	}
	a := st0.runningConditions(&corev1.Pod{Status: corev1.PodStatus{Conditions: scheduled}})
	b := st0.runningConditions(&corev1.Pod{Status: corev1.PodStatus{Conditions: slices.Clone(scheduled)}})
	require.Same(t, &a[0], &b[0], "the same conditions before: one slice")
	c := st0.runningConditions(&corev1.Pod{})
	require.NotSame(t, &a[0], &c[0])
}
