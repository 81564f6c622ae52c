package kubectl

//lint:file-ignore SA1019 kubectl get endpoints still prints the deprecated Endpoints kind

import (
	"cmp"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fakeLister is an API server's read side over a fixed set of objects.
type fakeLister struct {
	objs []Object
	now  time.Time
}

func kindOf(o Object) string {
	switch o.(type) {
	case *corev1.Pod:
		return "Pod"
	case *corev1.Node:
		return "Node"
	case *corev1.Service:
		return "Service"
	case *corev1.Endpoints:
		return "Endpoints"
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *corev1.Namespace:
		return "Namespace"
	case *corev1.Event:
		return "Event"
	case *discoveryv1.EndpointSlice:
		return "EndpointSlice"
	case *appsv1.Deployment:
		return "Deployment"
	case *appsv1.ReplicaSet:
		return "ReplicaSet"
	case *appsv1.DaemonSet:
		return "DaemonSet"
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget"
	case *coordinationv1.Lease:
		return "Lease"
	}
	return ""
}

func (f *fakeLister) List(kind, ns string) []Object {
	var out []Object
	for _, o := range f.objs {
		if kindOf(o) == kind && (ns == "" || o.GetNamespace() == ns) {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b Object) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return out
}

func (f *fakeLister) Get(kind, ns, name string) (Object, error) {
	for _, o := range f.List(kind, ns) {
		if o.GetName() == name && o.GetNamespace() == ns {
			return o, nil
		}
	}
	r, _ := ResourceForKind(kind)
	return nil, apierrors.NewNotFound(r.GroupResource(), name)
}

func (f *fakeLister) Now() time.Time { return f.now }

// epoch is when the fixture cluster was created; the views look at it
// 25 hours later.
var epoch = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func at(d time.Duration) metav1.Time { return metav1.NewTime(epoch.Add(d)) }

func ptr[T any](v T) *T { return &v }

func meta(ns, name string, created time.Duration) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), CreationTimestamp: at(created)}
}

func node(name, ip string, role string, ready corev1.ConditionStatus, cidr string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: meta("", name, 0)}
	n.Labels = map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
	}
	if role != "" {
		n.Labels["node-role.kubernetes.io/"+role] = ""
	}
	n.Annotations = map[string]string{
		"flannel.alpha.coreos.com/public-ip":                     ip,
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
	}
	n.Spec.PodCIDR = cidr
	n.Spec.PodCIDRs = []string{cidr}
	reason, msg := "KubeletReady", "kubelet is posting ready status"
	if ready != corev1.ConditionTrue {
		reason, msg = "NodeStatusUnknown", "Kubelet stopped posting node status."
	}
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, LastHeartbeatTime: at(30 * time.Second), LastTransitionTime: at(30 * time.Second), Reason: "FlannelIsUp", Message: "Flannel is running on this node"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: at(24 * time.Hour), LastTransitionTime: at(0), Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: at(24 * time.Hour), LastTransitionTime: at(20 * time.Second), Reason: reason, Message: msg},
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	rl := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4015452Ki"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("20463184Ki"),
	}
	n.Status.Capacity = rl
	n.Status.Allocatable = rl
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		MachineID: "m-" + name, SystemUUID: "u-" + name, BootID: "b-" + name,
		KernelVersion: "6.1.0-28-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", OperatingSystem: "linux", Architecture: "amd64",
		ContainerRuntimeVersion: "containerd://1.7.24", KubeletVersion: "v1.36.3",
	}
	return n
}

func runningPod(ns, name, nodeName, hostIP, ip string, created time.Duration, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: meta(ns, name, created)}
	p.Labels = labels
	p.Spec.NodeName = nodeName
	p.Spec.Containers = []corev1.Container{{Name: "web", Image: "nginx:1.27",
		Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}}}
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr[int64](300)},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr[int64](300)},
	}
	start := at(created + time.Second)
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = hostIP
	p.Status.HostIPs = []corev1.HostIP{{IP: hostIP}}
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	p.Status.StartTime = &start
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "web", Ready: true, Started: ptr(true), Image: "docker.io/library/nginx:1.27",
		ImageID:     "docker.io/library/nginx@sha256:0a399eb1",
		ContainerID: "containerd://" + name,
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(created + 3*time.Second)}},
	}}
	p.Status.QOSClass = corev1.PodQOSBestEffort
	return p
}

func owned(o metav1.Object, kind, name string) {
	o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "u", Controller: ptr(true)}})
}

func event(ns, name string, kind, objName, typ, reason, component, host, msg string, first, last time.Duration, count int32) *corev1.Event {
	e := &corev1.Event{ObjectMeta: meta(ns, name, first)}
	e.InvolvedObject = corev1.ObjectReference{Kind: kind, Namespace: ns, Name: objName, UID: types.UID("uid-" + ns + "-" + objName)}
	if kind == "Node" {
		// The kubelet and the node controller name a node by its name
		// as the UID.
		e.InvolvedObject.Namespace, e.InvolvedObject.UID = "", types.UID(objName)
	}
	e.Type, e.Reason, e.Message = typ, reason, msg
	e.Source = corev1.EventSource{Component: component, Host: host}
	e.FirstTimestamp, e.LastTimestamp, e.Count = at(first), at(last), count
	return e
}

// fixture is a three-node kubeadm + flannel cluster a day after it came
// up: system pods, a web Deployment behind NodePort and LoadBalancer
// Services, a Pending pod no node fits, a crash-looping pod, one worker
// NotReady and cordoned.
func fixture() *fakeLister {
	var objs []Object
	add := func(o ...Object) { objs = append(objs, o...) }
	for _, ns := range []string{"default", "kube-flannel", "kube-node-lease", "kube-public", "kube-system", "net"} {
		n := &corev1.Namespace{ObjectMeta: meta("", ns, 0)}
		n.Labels = map[string]string{"kubernetes.io/metadata.name": ns}
		n.Status.Phase = corev1.NamespaceActive
		add(n)
	}
	cp := node("cka-cp1", "192.168.122.11", "control-plane", corev1.ConditionTrue, "10.244.0.0/24")
	cp.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	w1 := node("cka-w1", "192.168.122.21", "", corev1.ConditionTrue, "10.244.1.0/24")
	w2 := node("cka-w2", "192.168.122.22", "", corev1.ConditionUnknown, "10.244.2.0/24")
	w2.Spec.Unschedulable = true
	w2.Spec.Taints = []corev1.Taint{
		{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule, TimeAdded: ptr(at(24 * time.Hour))},
		{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr(at(24 * time.Hour))},
		{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoSchedule, TimeAdded: ptr(at(24 * time.Hour))},
	}
	add(cp, w1, w2)
	for _, n := range []string{"cka-cp1", "cka-w1"} {
		add(&coordinationv1.Lease{ObjectMeta: meta("kube-node-lease", n, 0), Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr(n), LeaseDurationSeconds: ptr[int32](40),
			RenewTime: ptr(metav1.NewMicroTime(epoch.Add(25*time.Hour - 4*time.Second))),
		}})
	}

	web := map[string]string{"app": "web", "pod-template-hash": "7c5ddbdf54"}
	for i, n := range []struct{ node, host, ip string }{{"cka-w1", "192.168.122.21", "10.244.1.2"}, {"cka-w1", "192.168.122.21", "10.244.1.3"}, {"cka-w2", "192.168.122.22", "10.244.2.2"}} {
		p := runningPod("net", "web-7c5ddbdf54-"+[]string{"2xk4q", "9wz7d", "hq6ms"}[i], n.node, n.host, n.ip, time.Hour, web)
		owned(p, "ReplicaSet", "web-7c5ddbdf54")
		add(p)
	}
	client := runningPod("net", "client", "cka-w1", "192.168.122.21", "10.244.1.4", 90*time.Minute, map[string]string{"run": "client"})
	client.Spec.Containers[0] = corev1.Container{Name: "client", Image: "busybox:1.36", Command: []string{"sleep", "infinity"},
		Env: []corev1.EnvVar{{Name: "MY_NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		}}
	client.Status.ContainerStatuses[0].Name = "client"
	client.Status.QOSClass = ""
	add(client)

	crash := runningPod("net", "crashy", "cka-w1", "192.168.122.21", "10.244.1.5", 2*time.Hour, map[string]string{"run": "crashy"})
	crash.Status.Conditions[2].Status = corev1.ConditionFalse
	crash.Status.ContainerStatuses[0].Ready = false
	crash.Status.ContainerStatuses[0].RestartCount = 7
	crash.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	crash.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", StartedAt: at(25*time.Hour - 3*time.Minute), FinishedAt: at(25*time.Hour - 2*time.Minute - 50*time.Second)}}
	add(crash)

	pending := &corev1.Pod{ObjectMeta: meta("net", "pinned", 24*time.Hour+50*time.Minute)}
	pending.Spec.Containers = []corev1.Container{{Name: "web", Image: "nginx:1.27"}}
	pending.Spec.NodeSelector = map[string]string{"disktype": "ssd"}
	pending.Status.Phase = corev1.PodPending
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 1 node(s) were unschedulable. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}}
	pending.Status.QOSClass = corev1.PodQOSBestEffort
	add(pending)
	add(event("net", "pinned.181d2a7f0c3e4b5a", "Pod", "pinned", "Warning", "FailedScheduling", "default-scheduler", "",
		pending.Status.Conditions[0].Message, 24*time.Hour+50*time.Minute, 24*time.Hour+55*time.Minute, 2))
	add(event("net", "crashy.181d2a7f0c3e4b5b", "Pod", "crashy", "Warning", "BackOff", "kubelet", "cka-w1",
		"Back-off restarting failed container web in pod crashy_net(uid)", 2*time.Hour+time.Minute, 25*time.Hour-time.Minute, 31))
	add(event("net", "crashy.181d2a7f0c3e4b5c", "Pod", "crashy", "Normal", "Scheduled", "default-scheduler", "",
		"Successfully assigned net/crashy to cka-w1", 2*time.Hour, 2*time.Hour, 1))
	add(event("default", "cka-w2.181d2a7f0c3e4b5d", "Node", "cka-w2", "Normal", "NodeNotReady", "node-controller", "",
		"Node cka-w2 status is now: NodeNotReady", 24*time.Hour+40*time.Second, 24*time.Hour+40*time.Second, 1))

	sysPod := func(name, nodeName, hostIP, ip string, labels map[string]string, ownerKind, owner string) {
		p := runningPod("kube-system", name, nodeName, hostIP, ip, 0, labels)
		p.Spec.Containers[0].Name, p.Spec.Containers[0].Image = labels["k8s-app"], "registry.k8s.io/"+labels["k8s-app"]+":v1.36.3"
		p.Spec.Containers[0].Ports = nil
		p.Status.ContainerStatuses[0].Name = labels["k8s-app"]
		owned(p, ownerKind, owner)
		add(p)
	}
	for i, n := range []*corev1.Node{cp, w1, w2} {
		ip := n.Status.Addresses[0].Address
		sysPod("kube-proxy-"+[]string{"8kx2p", "b7q9r", "zt5mw"}[i], n.Name, ip, ip, map[string]string{"k8s-app": "kube-proxy"}, "DaemonSet", "kube-proxy")
	}
	sysPod("coredns-668d6bf9bc-5x7kp", "cka-cp1", "192.168.122.11", "10.244.0.2", map[string]string{"k8s-app": "kube-dns"}, "ReplicaSet", "coredns-668d6bf9bc")

	svc := func(ns, name string, typ corev1.ServiceType, ip string, sel map[string]string, ports ...corev1.ServicePort) *corev1.Service {
		s := &corev1.Service{ObjectMeta: meta(ns, name, time.Hour)}
		s.Spec.Type, s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.Selector, s.Spec.Ports = typ, ip, []string{ip}, sel, ports
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
		if typ != corev1.ServiceTypeClusterIP {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
		add(s)
		return s
	}
	k := svc("default", "kubernetes", corev1.ServiceTypeClusterIP, "10.96.0.1", nil,
		corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(6443)})
	k.CreationTimestamp = at(0)
	k.Labels = map[string]string{"component": "apiserver", "provider": "kubernetes"}
	svc("net", "web", corev1.ServiceTypeNodePort, "10.111.80.136", map[string]string{"app": "web"},
		corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80), NodePort: 31777})
	svc("net", "web-lb", corev1.ServiceTypeLoadBalancer, "10.103.7.20", map[string]string{"app": "web"},
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http"), NodePort: 30080},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353), NodePort: 30053})
	svc("net", "nothing", corev1.ServiceTypeClusterIP, "10.100.9.9", map[string]string{"app": "nothing"},
		corev1.ServicePort{Port: 8080, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)})
	kd := svc("kube-system", "kube-dns", corev1.ServiceTypeClusterIP, "10.96.0.10", map[string]string{"k8s-app": "kube-dns"},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
		corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
		corev1.ServicePort{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)})
	kd.CreationTimestamp = at(0)

	slice := func(ns, name, svcName string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) {
		es := &discoveryv1.EndpointSlice{ObjectMeta: meta(ns, name, time.Hour), AddressType: discoveryv1.AddressTypeIPv4, Ports: ports, Endpoints: eps}
		es.Labels = map[string]string{discoveryv1.LabelServiceName: svcName, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
		add(es)
	}
	ep := func(ip, nodeName string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr(nodeName), Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready)}}
	}
	slice("default", "kubernetes", "kubernetes", []discoveryv1.EndpointPort{{Name: ptr("https"), Port: ptr[int32](6443), Protocol: ptr(corev1.ProtocolTCP)}},
		discoveryv1.Endpoint{Addresses: []string{"192.168.122.11"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
	webEps := []discoveryv1.Endpoint{ep("10.244.1.2", "cka-w1", true), ep("10.244.1.3", "cka-w1", true), ep("10.244.2.2", "cka-w2", false), ep("10.244.1.9", "cka-w1", true), ep("10.244.1.10", "cka-w1", true)}
	slice("net", "web-5xq2d", "web", []discoveryv1.EndpointPort{{Name: ptr(""), Port: ptr[int32](80), Protocol: ptr(corev1.ProtocolTCP)}}, webEps...)
	slice("net", "web-lb-8fj3k", "web-lb", []discoveryv1.EndpointPort{
		{Name: ptr("http"), Port: ptr[int32](80), Protocol: ptr(corev1.ProtocolTCP)},
		{Name: ptr("dns"), Port: ptr[int32](5353), Protocol: ptr(corev1.ProtocolUDP)}}, webEps[:2]...)
	slice("net", "nothing-2bq8x", "nothing", nil)

	epts := &corev1.Endpoints{ObjectMeta: meta("default", "kubernetes", 0), Subsets: []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: "192.168.122.11"}}, Ports: []corev1.EndpointPort{{Name: "https", Port: 6443, Protocol: corev1.ProtocolTCP}}}}}
	add(epts)

	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}}
	d := &appsv1.Deployment{ObjectMeta: meta("net", "web", time.Hour), Spec: appsv1.DeploymentSpec{Replicas: ptr[int32](3),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: tmpl},
		Status: appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}}
	add(d)
	rs := &appsv1.ReplicaSet{ObjectMeta: meta("net", "web-7c5ddbdf54", time.Hour), Spec: appsv1.ReplicaSetSpec{Replicas: ptr[int32](3),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "pod-template-hash": "7c5ddbdf54"}}, Template: tmpl},
		Status: appsv1.ReplicaSetStatus{Replicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}}
	owned(rs, "Deployment", "web")
	add(rs)
	for _, name := range []string{"kube-proxy", "kube-flannel-ds"} {
		ns := "kube-system"
		if name == "kube-flannel-ds" {
			ns = "kube-flannel"
		}
		ds := &appsv1.DaemonSet{ObjectMeta: meta(ns, name, 0), Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": name}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
				Containers: []corev1.Container{{Name: name, Image: "registry.k8s.io/" + name + ":v1.36.3"}}}}},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 2, UpdatedNumberScheduled: 3, NumberAvailable: 2}}
		add(ds)
	}
	add(&corev1.ConfigMap{ObjectMeta: meta("kube-system", "coredns", 0), Data: map[string]string{"Corefile": ".:53 {\n    errors\n}\n"}})
	add(&corev1.ConfigMap{ObjectMeta: meta("kube-system", "kube-proxy", 0), Data: map[string]string{"config.conf": "mode: iptables\n", "kubeconfig.conf": "apiVersion: v1\n"}})
	add(&policyv1.PodDisruptionBudget{ObjectMeta: meta("net", "web", time.Hour),
		Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 3}})
	add(&policyv1.PodDisruptionBudget{ObjectMeta: meta("net", "half", time.Hour),
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr(intstr.FromString("50%"))}, Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1}})
	return &fakeLister{objs: objs, now: epoch.Add(25 * time.Hour)}
}
