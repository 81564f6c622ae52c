package sim

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// threeNodes is a kubeadm cluster: a tainted control plane and two workers.
func threeNodes(t *testing.T, maxPods int) *Cluster {
	t.Helper()
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	for i, n := range []struct {
		name string
		role NodeRole
	}{{"cp1", RoleControlPlane}, {"w1", RoleWorker}, {"w2", RoleWorker}} {
		_, err := c.AddNode(NodeSpec{Name: n.name, Role: n.role, MaxPods: maxPods, Labels: map[string]string{"disk": fmt.Sprint("ssd", i)},
			NICs: []NICSpec{{Name: "eth0", Segment: "lan", Addr: netip.MustParsePrefix(fmt.Sprintf("192.168.122.%d/24", 11+i))}}})
		require.NoError(t, err)
	}
	return c
}

func pod(name string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27",
			Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func getPod(t *testing.T, c *Cluster, name string) *corev1.Pod {
	t.Helper()
	o, err := c.API.Get("Pod", "default", name)
	require.NoError(t, err)
	return o.(*corev1.Pod)
}

func TestSchedulerPlacesAndExplains(t *testing.T) {
	c := threeNodes(t, 0)
	require.NoError(t, c.Apply(pod("a", nil), pod("b", nil), pod("lost", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"disk": "nvme"}
	})))
	require.NoError(t, c.Settle())
	a, b := getPod(t, c, "a"), getPod(t, c, "b")
	require.ElementsMatch(t, []string{"w1", "w2"}, []string{a.Spec.NodeName, b.Spec.NodeName}, "spread over the workers, not the tainted control plane")
	require.Equal(t, corev1.PodRunning, a.Status.Phase)
	require.True(t, netip.MustParsePrefix("10.244.0.0/16").Contains(netip.MustParseAddr(a.Status.PodIP)))
	require.Equal(t, a.Status.PodIP, c.Pod("default", "a").IP.String(), "status.podIP is the address CNI gave the sandbox")

	lost := getPod(t, c, "lost")
	require.Equal(t, corev1.PodPending, lost.Status.Phase)
	want := "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	require.Equal(t, want, lost.Status.Conditions[0].Message)
	evs := c.API.EventsFor("Pod", "default", "lost")
	require.Len(t, evs, 1)
	require.Equal(t, "FailedScheduling", evs[0].Reason)
	require.Equal(t, want, evs[0].Message)

	// A node that matches joins: the pod is retried and runs there.
	_, err := c.AddNode(NodeSpec{Name: "w3", Labels: map[string]string{"disk": "nvme"},
		NICs: []NICSpec{{Name: "eth0", Segment: "lan", Addr: netip.MustParsePrefix("192.168.122.40/24")}}})
	require.NoError(t, err)
	lost = getPod(t, c, "lost")
	require.Equal(t, "w3", lost.Spec.NodeName)
	require.Equal(t, corev1.PodRunning, lost.Status.Phase)
}

func TestMaxPodsLeavesThe111thPending(t *testing.T) {
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	_, err = c.AddNode(NodeSpec{Name: "solo", NICs: []NICSpec{{Name: "eth0", Segment: "lan", Addr: netip.MustParsePrefix("192.168.122.11/24")}}})
	require.NoError(t, err)
	var objs []*corev1.Pod
	for i := range 111 {
		objs = append(objs, pod(fmt.Sprintf("p%03d", i), nil))
	}
	for _, p := range objs {
		require.NoError(t, c.Apply(p))
	}
	require.NoError(t, c.Settle())
	running, pending := 0, []string{}
	for _, o := range c.API.List("Pod", "default") {
		switch p := o.(*corev1.Pod); p.Status.Phase {
		case corev1.PodRunning:
			running++
		case corev1.PodPending:
			pending = append(pending, p.Name+": "+p.Status.Conditions[0].Message)
		}
	}
	require.Equal(t, 110, running, "kubelet maxPods 110")
	require.Equal(t, []string{"p110: 0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."}, pending)
}

func TestDeploymentReplacesDeletedPodsAndSlicesFollow(t *testing.T) {
	c := threeNodes(t, 0)
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: pod("x", nil).Spec}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
	require.NoError(t, c.Apply(d, svc))
	require.NoError(t, c.Settle())
	pods := c.API.List("Pod", "default")
	require.Len(t, pods, 2)
	rs := c.API.List("ReplicaSet", "default")
	require.Len(t, rs, 1)
	require.Regexp(t, `^web-[bcdfghjklmnpqrstvwxz2456789]+$`, rs[0].GetName())
	require.Regexp(t, "^"+rs[0].GetName()+`-[bcdfghjklmnpqrstvwxz2456789]{5}$`, pods[0].GetName())
	endpoints := func() []string {
		var out []string
		for _, o := range c.API.List("EndpointSlice", "default") {
			es := o.(*discoveryv1.EndpointSlice)
			if es.Labels[discoveryv1.LabelServiceName] != "web" {
				continue
			}
			for _, ep := range es.Endpoints {
				out = append(out, ep.Addresses[0])
			}
		}
		return out
	}
	require.Len(t, endpoints(), 2)
	require.Len(t, c.Service("default", "web").EndpointSlice.Endpoints, 2, "kube-proxy's view")

	victim := pods[0].GetName()
	require.NoError(t, c.DeletePod("default", victim))
	pods = c.API.List("Pod", "default")
	require.Len(t, pods, 2, "the ReplicaSet replaced it")
	for _, p := range pods {
		require.NotEqual(t, victim, p.GetName())
		require.Equal(t, corev1.PodRunning, p.(*corev1.Pod).Status.Phase)
	}
	require.Len(t, endpoints(), 2)
	o, _ := c.API.Get("Deployment", "default", "web")
	require.Equal(t, int32(2), o.(*appsv1.Deployment).Status.AvailableReplicas)
}

func TestDaemonSetOnePodPerEligibleNode(t *testing.T) {
	c := threeNodes(t, 0)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "agent"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "agent"}},
				Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}}}}
	require.NoError(t, c.Apply(ds))
	require.NoError(t, c.Settle())
	nodes := map[string]string{}
	for _, o := range c.API.List("Pod", "kube-system") {
		p := o.(*corev1.Pod)
		nodes[p.Spec.NodeName] = p.Status.PodIP
	}
	require.Equal(t, map[string]string{"w1": "192.168.122.12", "w2": "192.168.122.13"}, nodes,
		"not on the control plane (no toleration for its taint); hostNetwork pods have the node's address")
	o, _ := c.API.Get("DaemonSet", "kube-system", "agent")
	require.Equal(t, int32(2), o.(*appsv1.DaemonSet).Status.NumberReady)

	// Tolerate the control-plane taint: a third pod.
	ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	require.NoError(t, c.Apply(ds))
	require.NoError(t, c.Settle())
	require.Len(t, c.API.List("Pod", "kube-system"), 3)
}

func TestApplyIsAtomic(t *testing.T) {
	c := threeNodes(t, 0)
	bad := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: 80}}}}
	err := c.Apply(pod("first", nil), bad)
	require.EqualError(t, err, `Service "bad" is invalid: spec.ports[0].nodePort: Invalid value: 80: provided port is not in the valid range. The range of valid ports is 30000-32767`)
	require.NoError(t, c.Settle())
	_, err = c.API.Get("Pod", "default", "first")
	require.True(t, IsNotFound(err), "nothing half-applied")
	require.Nil(t, c.Pod("default", "first"))
}

func TestControlPlaneIsDeterministic(t *testing.T) {
	run := func() []string {
		c := threeNodes(t, 0)
		three := int32(3)
		require.NoError(t, c.Apply(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: pod("x", nil).Spec}}}))
		require.NoError(t, c.Settle())
		var out []string
		for _, o := range c.API.List("Pod", "") {
			p := o.(*corev1.Pod)
			out = append(out, p.Name+" "+p.Spec.NodeName+" "+p.Status.PodIP+" "+p.ResourceVersion+" "+p.CreationTimestamp.String())
		}
		return out
	}
	require.Equal(t, run(), run())
}

func TestKubeadmAddons(t *testing.T) {
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	_, err = c.AddNode(NodeSpec{Name: "cp1", Role: RoleControlPlane, NICs: []NICSpec{{Name: "eth0", Segment: "lan", Addr: netip.MustParsePrefix("192.168.122.11/24")}}})
	require.NoError(t, err)
	require.NoError(t, c.InstallKubeadmAddons())
	_, err = c.AddNode(NodeSpec{Name: "w1", NICs: []NICSpec{{Name: "eth0", Segment: "lan", Addr: netip.MustParsePrefix("192.168.122.21/24")}}})
	require.NoError(t, err)
	where := map[string]string{}
	for _, o := range c.API.List("Pod", "") {
		p := o.(*corev1.Pod)
		require.Equal(t, corev1.PodRunning, p.Status.Phase, p.Name)
		where[p.Namespace+"/"+p.Labels["k8s-app"]+p.Labels["component"]+"@"+p.Spec.NodeName] = p.Status.PodIP
	}
	require.Equal(t, "192.168.122.11", where["kube-system/kube-apiserver@cp1"])
	require.Equal(t, "192.168.122.21", where["kube-system/kube-proxy@w1"], "the DaemonSet follows a joining node")
	require.Equal(t, "192.168.122.21", where["kube-flannel/flannel@w1"])
	require.Len(t, c.API.List("Pod", "kube-system"), 4+2+2, "static pods, kube-proxy on both nodes, coredns x2")
	dns := c.Service("kube-system", "kube-dns")
	require.NotNil(t, dns)
	require.Equal(t, "10.96.0.10", dns.ClusterIP().String())
	require.Len(t, dns.EndpointSlice.Endpoints, 2)
	for _, ep := range dns.EndpointSlice.Endpoints {
		require.Equal(t, "cp1", ep.NodeName, "coredns ran before any worker joined, on the control plane it tolerates")
	}
	k := c.Service("default", "kubernetes")
	require.Equal(t, "10.96.0.1", k.ClusterIP().String())
	require.Equal(t, "192.168.122.11", k.EndpointSlice.Endpoints[0].Addresses[0].String())
}

// TestFlanneldWatchesNodes: each flanneld programs a route, neighbour and
// FDB entry for every other Node's lease, and removes them when the Node
// object is deleted (kubectl delete node).
func TestFlanneldWatchesNodes(t *testing.T) {
	c := threeNodes(t, 0)
	w1 := c.Node("w1")
	require.Contains(t, w1.Host.IPRoute(), "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink")
	w2mac := c.Node("w2").Flannel.VTEP.MAC().String()
	require.Contains(t, w1.Host.IPNeigh(""), "10.244.2.0 dev flannel.1 lladdr "+w2mac+" PERMANENT")
	require.NoError(t, c.Delete("Node", "", "w2"))
	require.NoError(t, c.Settle())
	require.NotContains(t, w1.Host.IPRoute(), "10.244.2.0/24")
	require.NotContains(t, w1.Host.IPNeigh(""), w2mac)
	require.Contains(t, w1.Host.IPRoute(), "10.244.0.0/24 via 10.244.0.0 dev flannel.1 onlink", "cp1's lease stays")
}

// TestPodDeletionIsGraceful: a deleted pod bound to a node is Terminating
// (deletionTimestamp set, its endpoint terminating and not ready) until its
// kubelet has stopped it; a ReplicaSet replaces it at once.
func TestPodDeletionIsGraceful(t *testing.T) {
	c := threeNodes(t, 0)
	one := int32(1)
	require.NoError(t, c.Apply(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: pod("x", nil).Spec}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}))
	require.NoError(t, c.Settle())
	old := c.API.List("Pod", "default")[0].GetName()
	require.NoError(t, c.Delete("Pod", "default", old))
	require.NoError(t, c.RunFor(100*time.Millisecond))
	p := getPod(t, c, old)
	require.NotNil(t, p.DeletionTimestamp, "Terminating")
	require.Equal(t, int64(30), *p.DeletionGracePeriodSeconds)
	require.NotNil(t, c.Pod("default", old), "its sandbox still runs")
	var terminating []bool
	for _, o := range c.API.List("EndpointSlice", "default") {
		for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
			if ep.TargetRef != nil && ep.TargetRef.Name == old {
				terminating = append(terminating, *ep.Conditions.Terminating, *ep.Conditions.Ready)
			}
		}
	}
	require.Equal(t, []bool{true, false}, terminating, "terminating, not ready")
	require.Len(t, c.API.List("Pod", "default"), 2, "the replacement exists while the old pod terminates")
	require.NoError(t, c.Settle())
	_, err := c.API.Get("Pod", "default", old)
	require.True(t, IsNotFound(err), "the kubelet confirmed the deletion")
	require.Nil(t, c.Pod("default", old))
	require.Len(t, c.API.List("Pod", "default"), 1)
}

// TestSchedulerHostPortConflicts: a hostPort is taken once per node (the
// NodePorts filter); the third pod fits nowhere, and preemption could not
// help on the nodes whose ports are taken by pods of equal priority.
func TestSchedulerHostPortConflicts(t *testing.T) {
	c := threeNodes(t, 0)
	hp := func(name string) *corev1.Pod {
		return pod(name, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = 8080 })
	}
	require.NoError(t, c.Apply(hp("a"), hp("b"), hp("c")))
	require.NoError(t, c.Settle())
	a, b, third := getPod(t, c, "a"), getPod(t, c, "b"), getPod(t, c, "c")
	require.ElementsMatch(t, []string{"w1", "w2"}, []string{a.Spec.NodeName, b.Spec.NodeName})
	require.Empty(t, third.Spec.NodeName)
	require.Equal(t, "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 node(s) didn't have free ports for the requested pod ports. preemption: 0/3 nodes are available: 2 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.",
		third.Status.Conditions[0].Message)
}
