package sim

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/sim/apiserver"
	"github.com/kubewalk/kubewalk/sim/controller"
)

// Timings of the control plane, in virtual time. Where the real component
// has a documented default it is used; the rest are modelled.
const (
	// PodStartDelay is how long the runtime takes from a pod being bound
	// to its node to its containers running: RunPodSandbox (the pause
	// container), the CNI ADD and the container starts on a warm image
	// cache. Modelled (about a second on a kubeadm VM), not measured.
	PodStartDelay = time.Second
	// PodRetryBackoff is the kubelet pod worker's backoff after a failed
	// sync (a sandbox the network plugin could not set up): 10 s.
	PodRetryBackoff = 10 * time.Second
	// PodStopDelay is how long a deleted pod stays Terminating on its
	// node: its containers exit on SIGTERM (nginx and busybox do at
	// once), then the kubelet stops the sandbox, runs the CNI DEL and
	// deletes the pod object. Modelled, not measured.
	PodStopDelay = time.Second
	// ProxyMinSyncPeriod is kube-proxy's --iptables-min-sync-period
	// (default 1 s since v1.28): a change is synced at once when the last
	// sync is at least this old, else when it will be.
	ProxyMinSyncPeriod = time.Second
	// ProxySyncPeriod is kube-proxy's --iptables-sync-period (30 s): a
	// failed sync is logged and retried, as a full sync, after this long
	// (syncProxyRules: proxier.syncRunner.RetryAfter(proxier.syncPeriod)).
	ProxySyncPeriod = 30 * time.Second
)

// KubernetesVersion is the release whose components kubewalk models.
const KubernetesVersion = "v1.33.4"

// controlPlane holds the controllers of kube-controller-manager and
// kube-scheduler, and the per-node agents' queues.
type controlPlane struct {
	scheduler *controller.Scheduler
	slices    *controller.EndpointSlices
	rs        *controller.ReplicaSets
	deploy    *controller.Deployments
	ds        *controller.DaemonSets
	kubelet   *controller.Queue // pod keys, for every node's kubelet
	// proxy is kube-proxy's sync on every node: a queue keyed by node
	// name (proxyQueue).
	proxy proxyQueue
	// allQueued is the number of nodes (the first ones of Cluster.nodes)
	// the last queueProxySync for all nodes queued, while none has
	// synced since: queueing them again changes nothing (each is queued
	// no later than it would be), so a burst of events queues each node
	// once, not once per event.
	allQueued int
}

func (c *Cluster) startControlPlane() error {
	api, err := apiserver.New(apiserver.Config{ServiceCIDR: c.Config.ServiceCIDR},
		func() time.Time { return apiserver.Epoch.Add(c.World.Now()) }, c.World.Rand())
	if err != nil {
		return err
	}
	c.API = api
	eng := c.World.Engine
	cp := &controlPlane{
		scheduler: controller.NewScheduler(api, eng),
		slices:    controller.NewEndpointSlices(api, eng),
		rs:        controller.NewReplicaSets(api, eng),
		deploy:    controller.NewDeployments(api, eng),
		ds:        controller.NewDaemonSets(api, eng),
	}
	c.cp = cp
	cp.kubelet = controller.NewQueue(eng, "kubelet", 0, c.syncPod)
	cp.proxy = proxyQueue{c: c, byName: map[string]*proxyNode{}}
	if proxyQueueOfNames {
		cp.proxy.names = controller.NewQueue(eng, "kube-proxy", 0, c.syncProxies)
	}
	api.WatchReadOnly("Pod", func(ev watch.Event) {
		p := ev.Object.(*corev1.Pod)
		if p.Spec.NodeName != "" || c.Pod(p.Namespace, p.Name) != nil {
			cp.kubelet.Add(c.kubeletKey(p))
		}
	})
	c.watchProxyConfig()
	api.WatchReadOnly("Service", func(ev watch.Event) { c.observeService(ev) })
	api.WatchReadOnly("EndpointSlice", func(ev watch.Event) { c.observeSlice(ev) })
	// kube-proxy's node informer watches its own Node only: a joining
	// node's kube-proxy makes its first sync; the others do nothing.
	api.WatchReadOnly("Node", func(ev watch.Event) {
		if ev.Type == watch.Added {
			c.queueProxySync(ev.Object.(*corev1.Node).Name)
		}
	})

	// The API server's own objects already exist: list them, as an
	// informer's initial list does.
	for _, o := range api.List("Service", "") {
		c.observeService(watch.Event{Type: watch.Added, Object: o})
	}
	for _, o := range api.List("EndpointSlice", "") {
		c.observeSlice(watch.Event{Type: watch.Added, Object: o})
	}
	return nil
}

// --- kube-proxy's informers -------------------------------------------------

// observeService keeps the Services kube-proxy knows, in the order it
// first saw them.
func (c *Cluster) observeService(ev watch.Event) {
	svc := ev.Object.(*corev1.Service)
	k := svc.Namespace + "/" + svc.Name
	s, ok := c.svcByName[k]
	switch {
	case ev.Type == watch.Deleted:
		if ok {
			delete(c.svcByName, k)
			c.services = slices.DeleteFunc(c.services, func(x *Service) bool { return x == s })
		}
	case ok:
		s.Spec = proxyService(svc)
	default:
		s = &Service{Spec: proxyService(svc)}
		c.svcByName[k] = s
		c.services = append(c.services, s)
	}
	c.logProxyChange(k)
	c.snapGen++
	c.queueProxySync()
}

// observeSlice keeps each Service's EndpointSlices, in the order they
// were first seen.
func (c *Cluster) observeSlice(ev watch.Event) {
	es := ev.Object.(*discoveryv1.EndpointSlice)
	k := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
	list := c.slices[k]
	i := slices.IndexFunc(list, func(s *discoveryv1.EndpointSlice) bool { return s.Name == es.Name })
	switch {
	case ev.Type == watch.Deleted:
		if i >= 0 {
			list = slices.Delete(list, i, i+1)
		}
	case i >= 0:
		list[i] = es
	default:
		list = append(list, es)
	}
	if len(list) == 0 {
		delete(c.slices, k)
	} else {
		c.slices[k] = list
	}
	c.logProxyChange(k)
	c.snapGen++
	c.queueProxySync()
}

// queueProxySync wakes kube-proxy on the named nodes (all when none is
// named), each no sooner than ProxyMinSyncPeriod after its last sync.
// It leaves the snapshot generation alone: only a Service or
// EndpointSlice event changes what kube-proxy syncs (the callers above
// bump it), so the nodes that join between two such events sync the same
// generation and share what is computed per pair of generations (the
// Services changed, the stale UDP flows, the compiled rules).
func (c *Cluster) queueProxySync(nodes ...string) {
	cp := c.cp
	if cp == nil {
		return
	}
	q := &cp.proxy
	if len(nodes) > 0 {
		for _, name := range nodes {
			pn := q.named(name)
			q.wake(pn, c.proxyDelay(pn))
		}
		return
	}
	if cp.allQueued == len(c.nodes) && cp.allQueued > 0 {
		return
	}
	cp.allQueued = len(c.nodes)
	// Every node in order, each from its place in c.nodes (no name
	// looked up).
	if len(q.order) > len(c.nodes) {
		q.order = q.order[:len(c.nodes)]
	}
	for i, n := range c.nodes {
		if i == len(q.order) {
			q.order = append(q.order, nil)
		}
		pn := q.order[i]
		if pn == nil || pn.node != n {
			pn = q.named(n.Name)
			pn.node, pn.at = n, i
			q.order[i] = pn
		}
		q.wake(pn, c.proxyDelay(pn))
	}
}

// proxyDelay is how long node pn's kube-proxy waits before it syncs a
// change seen now: until ProxyMinSyncPeriod after its last sync.
func (c *Cluster) proxyDelay(pn *proxyNode) time.Duration {
	if pn.synced {
		if next := pn.last + ProxyMinSyncPeriod; next > c.World.Now() {
			return next - c.World.Now()
		}
	}
	return 0
}

// proxyQueueOfNames makes kube-proxy's queue a controller.Queue of node
// names, as it was before proxyQueue (a variable so that a test can
// compare the two).
var proxyQueueOfNames = false

// proxySynced, set by tests, is called with each node's kube-proxy sync
// the queue runs and its virtual time.
var proxySynced func(node string, at time.Duration)

// proxyQueue is kube-proxy's sync on every node as a controller.Queue of
// node names (one key per node) runs it: a name queued runs after its
// delay unless queued already to run no later, a failed sync runs again
// after RequeueAfter as a background event. The state of each name is
// kept by name once and reached from the nodes' order, so that waking
// every node after an event looks no name up and hashes no string.
type proxyQueue struct {
	c      *Cluster
	byName map[string]*proxyNode
	// order is the state of c.nodes[i] at i (a hint: checked against the
	// node).
	order []*proxyNode
	// names, when set, is the controller.Queue this stands for, which
	// then does the work.
	names *controller.Queue
}

// proxyNode is one node name's entry: its kube-proxy's last sync, and its
// pending wake-up.
type proxyNode struct {
	name    string
	node    *Node // the node of that name when last seen, at c.nodes[at]
	at      int
	last    time.Duration
	synced  bool
	pending *proxyWake
}

// proxyWake is one queued sync of a node name (controller.Queue's item).
type proxyWake struct {
	q     *proxyQueue
	pn    *proxyNode
	at    time.Duration
	bg    bool // a retry: does not keep the world busy
	stale bool // superseded by an earlier one for the same name
}

// named returns the entry of the node named name.
func (q *proxyQueue) named(name string) *proxyNode {
	pn := q.byName[name]
	if pn == nil {
		pn = &proxyNode{name: name, at: -1}
		q.byName[name] = pn
	}
	return pn
}

// wake queues pn to sync after d, unless it is queued already to run no
// later than that (controller.Queue.AddAfter).
func (q *proxyQueue) wake(pn *proxyNode, d time.Duration) {
	if q.names != nil {
		q.names.AddAfter(pn.name, d)
		return
	}
	eng := q.c.World.Engine
	at := eng.Now() + d
	if w := pn.pending; w != nil {
		if w.at <= at && !w.bg {
			return
		}
		w.stale = true
	}
	w := &proxyWake{q: q, pn: pn, at: at}
	pn.pending = w
	eng.ScheduleTimer(d, w)
}

// Stale implements datapath.StaleTimer: a superseded wake-up neither runs
// nor moves the clock.
func (w *proxyWake) Stale() bool { return w.stale }

// Fire implements datapath.Timer: the node's kube-proxy syncs (the
// controller.Queue's item firing with syncProxies).
func (w *proxyWake) Fire(*datapath.Walk) {
	if w.stale {
		return
	}
	pn, q := w.pn, w.q
	pn.pending = nil
	c := q.c
	if res, _ := c.syncProxyNode(pn); res.RequeueAfter > 0 && pn.pending == nil {
		w := &proxyWake{q: q, pn: pn, at: c.World.Now() + res.RequeueAfter, bg: true}
		pn.pending = w
		c.World.Engine.ScheduleBackground(res.RequeueAfter, w)
	}
}

// syncProxies is one node's kube-proxy syncing (the reconcile of
// controller.Queue of node names).
func (c *Cluster) syncProxies(name string) (controller.Result, error) {
	return c.syncProxyNode(c.cp.proxy.named(name))
}

// syncProxyNode is the kube-proxy of the node named pn.name syncing.
func (c *Cluster) syncProxyNode(pn *proxyNode) (controller.Result, error) {
	c.cp.allQueued = 0 // the node has left the queue
	n := pn.node
	if n == nil || pn.at < 0 || pn.at >= len(c.nodes) || c.nodes[pn.at] != n {
		// Not the node at its place in c.nodes (nodes are only
		// appended, and a registration that fails takes the last one
		// off): look it up.
		if n = c.Node(pn.name); n != nil {
			pn.node, pn.at = n, slices.Index(c.nodes, n)
		}
	}
	if n == nil || n.Proxier == nil {
		return controller.Result{}, nil
	}
	pn.last, pn.synced = c.World.Now(), true
	if proxySynced != nil {
		proxySynced(n.Name, pn.last)
	}
	if err := c.syncNode(n, c.snapshot()); err != nil {
		// kube-proxy logs "Failed to execute iptables-restore" and
		// retries after its sync period; the rules already loaded stay.
		return controller.Result{RequeueAfter: ProxySyncPeriod}, nil
	}
	return controller.Result{}, nil
}

// proxyError is the kube-proxy sync failures on the nodes, if any.
func (c *Cluster) proxyError() error {
	if c.proxyFailing == 0 {
		return nil
	}
	var errs []error
	for _, n := range c.nodes {
		if n.ProxySyncError != nil {
			errs = append(errs, n.ProxySyncError)
		}
	}
	return errors.Join(errs...)
}

// --- kubelet ----------------------------------------------------------------

// registerNode is the kubelet's node registration (and the first status
// update): labels, addresses, capacity with maxPods, the conditions, and
// spec.podCIDR as the node IPAM controller allocated it. kubeadm adds the
// control-plane label and taint to control-plane nodes.
func (c *Cluster) registerNode(n *Node, spec NodeSpec) error {
	maxPods := int64(110)
	if spec.MaxPods > 0 {
		maxPods = int64(spec.MaxPods)
	}
	no := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
		"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
		"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"},
		Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0",
			"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///var/run/containerd/containerd.sock",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: n.PodCIDR.String(), PodCIDRs: []string{n.PodCIDR.String()}}}
	for k, v := range n.Annotations {
		no.Annotations[k] = v
	}
	if spec.Role == RoleControlPlane {
		no.Labels["node-role.kubernetes.io/control-plane"] = ""
		no.Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
		no.Spec.Taints = append(no.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	}
	for k, v := range spec.Labels {
		no.Labels[k] = v
	}
	for _, t := range spec.Taints {
		no.Spec.Taints = append(no.Spec.Taints, *t.DeepCopy()) // the caller's timeAdded is not kept
	}
	cap := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4005732Ki"),
		corev1.ResourceEphemeralStorage: resource.MustParse("19430032Ki"), corev1.ResourcePods: *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	no.Status = corev1.NodeStatus{
		Capacity: cap, Allocatable: cap.DeepCopy(),
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.InternalIP.String()}, {Type: corev1.NodeHostName, Address: n.Name}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: KubernetesVersion, ContainerRuntimeVersion: "containerd://1.7.24",
			OSImage: "Ubuntu 24.04.1 LTS", KernelVersion: "6.8.0-51-generic", OperatingSystem: "linux", Architecture: "amd64"},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
	}
	c.setNodeConditions(n, no)
	err := c.API.Submit(no) // made for the purpose: the server may keep it
	return err
}

// NetworkNotReadyMessage is what the kubelet reports while the runtime
// has no network plugin (no CNI config): containerd's status, wrapped by
// the kubelet.
const NetworkNotReadyMessage = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"

// setNodeConditions is the kubelet's node status setters: the pressure
// conditions and Ready, which is False with the runtime's network error
// while there is no network plugin. The node lifecycle controller's
// TaintNodesByCondition turns Ready=False into the not-ready:NoSchedule
// taint; flannel reports NetworkUnavailable=False once it runs.
func (c *Cluster) setNodeConditions(n *Node, no *corev1.Node) {
	now := metav1.NewTime(c.API.Now())
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	conds := []corev1.NodeCondition{}
	if n.Flannel != nil && !n.NetworkUnavailable {
		conds = append(conds, cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "FlannelIsUp", "Flannel is running on this node"))
	}
	conds = append(conds,
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
	if n.NetworkUnavailable {
		conds = append(conds, cond(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", NetworkNotReadyMessage))
	} else {
		conds = append(conds, cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"))
	}
	for i, nc := range conds {
		for _, old := range no.Status.Conditions {
			if old.Type == nc.Type && old.Status == nc.Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	no.Status.Conditions = conds
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	has := slices.ContainsFunc(no.Spec.Taints, func(t corev1.Taint) bool { return t.Key == notReady.Key && t.Effect == notReady.Effect })
	switch {
	case n.NetworkUnavailable && !has:
		no.Spec.Taints = append(no.Spec.Taints, notReady)
	case !n.NetworkUnavailable && has:
		no.Spec.Taints = slices.DeleteFunc(no.Spec.Taints, func(t corev1.Taint) bool { return t.Key == notReady.Key && t.Effect == notReady.Effect })
	}
}

// updateNodeStatus writes the node's conditions and taints again (the
// kubelet's status update and the lifecycle controller's taint).
func (c *Cluster) updateNodeStatus(n *Node) error {
	o, err := c.API.Get("Node", "", n.Name)
	if err != nil {
		return err
	}
	no := o.(*corev1.Node)
	c.setNodeConditions(n, no)
	if _, err := c.API.Update(no); err != nil {
		return err
	}
	o, _ = c.API.Get("Node", "", n.Name)
	up := o.(*corev1.Node)
	up.Status = no.Status
	_, err = c.API.UpdateStatus(up)
	return err
}

// SetNetworkUnavailable makes node n's runtime report no network plugin
// (no valid CNI config) or a working one again, and updates the Node.
func (c *Cluster) SetNetworkUnavailable(n *Node, unavailable bool) error {
	n.NetworkUnavailable = unavailable
	return c.updateNodeStatus(n)
}

// syncPod is the kubelet's pod worker for one pod, on whichever node it
// is bound to: a bound pod not yet running gets its sandbox (network
// namespace, CNI ADD) and containers, then status Running and Ready; a
// deleted pod has its containers killed and the CNI DEL run.
func (c *Cluster) syncPod(key string) (controller.Result, error) {
	ns, name := controller.SplitKey(key)
	running := c.podByName[key] // a pod's key is "namespace/name", as podByName's
	// The stored object, read and never modified (the informer cache's
	// copy): the writes below are of copies.
	o, ok := c.API.Peek("Pod", ns, name)
	if !ok {
		if running != nil {
			c.killPod(running)
		}
		return controller.Result{}, nil
	}
	pod := o.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		// Terminating: stop the containers, then confirm the deletion.
		if c.stopping[key] == 0 {
			c.stopping[key] = c.World.Now() + PodStopDelay
			delete(c.started, key)
			c.cp.kubelet.AddAfter(key, PodStopDelay)
			return controller.Result{}, nil
		}
		if c.World.Now() < c.stopping[key] {
			c.cp.kubelet.AddAfter(key, c.stopping[key]-c.World.Now())
			return controller.Result{}, nil
		}
		delete(c.stopping, key)
		if running != nil {
			c.killPod(running)
		}
		c.API.Record(pod, "kubelet", corev1.EventTypeNormal, "Killing", "Stopping container "+containerNames(pod))
		return controller.Result{}, c.API.DeleteNow("Pod", ns, name)
	}
	if running != nil || pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return controller.Result{}, nil
	}
	n := c.Node(pod.Spec.NodeName)
	if n == nil {
		return controller.Result{}, nil // no kubelet by that name: the pod stays Pending
	}
	if c.started[key] == 0 {
		// The pod worker has just seen the pod: the sandbox and the
		// containers are ready PodStartDelay later.
		c.started[key] = c.World.Now() + PodStartDelay
		c.cp.kubelet.AddAfter(key, PodStartDelay)
		return controller.Result{}, nil
	}
	if c.World.Now() < c.started[key] {
		c.cp.kubelet.AddAfter(key, c.started[key]-c.World.Now())
		return controller.Result{}, nil
	}
	if n.NetworkUnavailable && !pod.Spec.HostNetwork {
		msg := "network is not ready: " + NetworkNotReadyMessage
		c.podWaiting(pod, "ContainerCreating", "")
		c.API.Record(pod, "kubelet", corev1.EventTypeWarning, "NetworkNotReady", msg)
		c.podErrs[key] = errors.New(msg)
		return controller.Result{RequeueAfter: PodRetryBackoff}, nil
	}
	if pod.Labels["k8s-app"] == "kube-proxy" && pod.Namespace == "kube-system" {
		// The container is kube-proxy: it reads its configuration now.
		if err := c.restartProxy(n); err != nil {
			msg := "Back-off restarting failed container kube-proxy in pod " + pod.Name + ": " + err.Error()
			c.podWaiting(pod, "CrashLoopBackOff", msg)
			c.API.Record(pod, "kubelet", corev1.EventTypeWarning, "BackOff", msg)
			c.podErrs[key] = err
			return controller.Result{RequeueAfter: PodRetryBackoff}, nil
		}
	}
	p, err := c.runPod(podSpecOf(pod, &c.podMemo), n, pod, key)
	if err != nil {
		c.podWaiting(pod, "ContainerCreating", "")
		c.API.Record(pod, "kubelet", corev1.EventTypeWarning, "FailedCreatePodSandBox", err.Error())
		c.podErrs[key] = err
		return controller.Result{RequeueAfter: PodRetryBackoff}, nil
	}
	delete(c.podErrs, key)
	delete(c.started, key)
	c.podRunning(pod, p, key)
	return controller.Result{}, nil
}

func (c *Cluster) podWaiting(pod *corev1.Pod, reason, msg string) {
	st := pod.Status.DeepCopy()
	st.Phase = corev1.PodPending
	st.HostIP = c.Node(pod.Spec.NodeName).internalIPString()
	st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	st.ContainerStatuses = nil
	for _, ct := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: ct.Name, Image: ct.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}})
	}
	now := metav1.NewTime(c.API.Now())
	if st.StartTime == nil {
		st.StartTime = &now
	}
	up := pod.DeepCopy()
	up.Status = *st
	controller.SetPodCondition(up, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
		Message: "containers with unready status: [" + containerNames(pod) + "]", LastTransitionTime: now})
	_ = c.API.WriteStatus(up)
}

// containerdPrefix begins a container ID in a pod's status.
const containerdPrefix = "containerd://"

// podRunningIDs is, in one string, the pod IP of p as text (its first
// ipLen bytes) and then the status.containerStatuses[i].containerID of
// each of its n containers: "containerd://", the pod's container ID but
// its last two digits, and i in hex (hex2).
func (c *Cluster) podRunningIDs(p *Pod, n int) (ids string, ipLen int) {
	var buf [128]byte
	b := p.IP.AppendTo(buf[:0])
	ipLen = len(b)
	for i := range n {
		b = append(append(b, containerdPrefix...), p.ContainerID[:62]...)
		if i < 0x10 {
			b = append(b, '0')
		}
		b = strconv.AppendInt(b, int64(i), 16)
	}
	return c.arena.Text(b), ipLen
}

// hex2Len is len(hex2(i)) for i >= 0.
func hex2Len(i int) int {
	n := 2
	for v := i >> 8; v > 0; v >>= 4 {
		n++
	}
	return n
}

// hex2 is i in hex, at least two digits ("%02x").
func hex2(i int) string {
	h := strconv.FormatInt(int64(i), 16)
	if len(h) < 2 {
		h = "0" + h
	}
	return h
}

func containerNames(p *corev1.Pod) string {
	var n []string
	for _, ct := range p.Spec.Containers {
		n = append(n, ct.Name)
	}
	return strings.Join(n, " ")
}

// The texts the kubelet writes for every pod, made from one word (an
// image, a container name).
const (
	textImageID = iota // "<image>@sha256:000…": the image's digest
	textPulled         // the Pulled event's message
	textCreated        // the Created event's message
	textStarted        // the Started event's message
)

// text is the kubelet's text of kind for word, made once per word and
// shared by every pod's status and events (150,000 pods of one image
// hold one copy, not one each).
func (c *Cluster) text(kind int, word string) string {
	k := textKey{kind, word}
	if t, ok := c.texts[k]; ok {
		return t
	}
	var t string
	switch kind {
	case textImageID:
		t = word + "@sha256:" + strings.Repeat("0", 64)
	case textPulled:
		t = "Container image " + strconv.Quote(word) + " already present on machine"
	case textCreated:
		t = "Created container: " + word
	case textStarted:
		t = "Started container " + word
	}
	if c.texts == nil || len(c.texts) > 4096 {
		c.texts = map[textKey]string{} // words let go (a cluster of many images)
	}
	c.texts[k] = t
	return t
}

// textKey is one text of Cluster.text.
type textKey struct {
	kind int
	word string
}

// runningPod is the object podRunning writes with what its status points
// to for a pod of one container (its pod IPs and container statuses) in
// one allocation: three objects of every running pod for the collector
// to find are one. Nothing tells the difference: a stored object is never
// modified, every copy handed out is deep, and the slices are full (an
// append copies).
type runningPod struct {
	pod corev1.Pod
	ips [1]corev1.PodIP
	cs  [1]corev1.ContainerStatus
}

// podRunning writes the status of pod, whose key is key, as its kubelet
// does once p runs.
func (c *Cluster) podRunning(pod *corev1.Pod, p *Pod, key string) {
	st0 := c.kubeletStarts()
	// A status write keeps everything but the status from the stored
	// object, and neither the server nor anyone else modifies the parts
	// shared with it: only the status is copied.
	one := len(pod.Spec.Containers) == 1
	var up *corev1.Pod
	var alloc *runningPod
	if one {
		alloc = &runningPod{pod: corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}}
		up = &alloc.pod
	} else {
		up = &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
	}
	st := &up.Status
	prev := pod.Status
	prev.Conditions = nil // made below, from pod's
	prev.DeepCopyInto(st)
	st.Phase = corev1.PodRunning
	// The pod IP and every container ID are made in one string:
	// "<ip>containerd://<id>…".
	ids, ipLen := c.podRunningIDs(p, len(pod.Spec.Containers))
	st.PodIP, ids = ids[:ipLen], ids[ipLen:]
	if one {
		alloc.ips[0] = corev1.PodIP{IP: st.PodIP}
		st.PodIPs = alloc.ips[:]
	} else {
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	st.HostIP = p.Node.internalIPString()
	st.HostIPs = p.Node.hostIPs()
	st.QOSClass = corev1.PodQOSBestEffort
	if st.StartTime == nil {
		st.StartTime = &st0.time
	}
	if one {
		st.ContainerStatuses = alloc.cs[:0]
	} else {
		st.ContainerStatuses = make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	}
	for i, ct := range pod.Spec.Containers {
		n := len(containerdPrefix) + 62 + hex2Len(i)
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: ct.Name, Image: ct.Image, Ready: true, Started: &containerStarted,
			ImageID:     c.text(textImageID, ct.Image),
			ContainerID: ids[:n],
			State:       corev1.ContainerState{Running: &st0.running}})
		ids = ids[n:]
	}
	st.Conditions = st0.runningConditions(pod) // shared by the pods of a wave
	if c.API.WriteStatusAt(up, key) == nil {
		// Pod.Object is the object as written now (the server keeps up,
		// or a copy of it when it shares nothing): the Pending object it
		// replaces is let go.
		if o, ok := c.API.Peek("Pod", pod.Namespace, pod.Name); ok {
			p.Object = o.(*corev1.Pod)
		}
	}
	for _, ct := range pod.Spec.Containers {
		c.API.Record(pod, "kubelet", corev1.EventTypeNormal, "Pulled", c.text(textPulled, ct.Image))
		c.API.Record(pod, "kubelet", corev1.EventTypeNormal, "Created", c.text(textCreated, ct.Name))
		c.API.Record(pod, "kubelet", corev1.EventTypeNormal, "Started", c.text(textStarted, ct.Name))
	}
}

// --- the API a Go test uses ---------------------------------------------------

// AppliedObject is one object of an Apply and what became of it.
type AppliedObject struct {
	Kind, Namespace, Name string
	Result                apiserver.ApplyResult
}

// Apply creates or updates each object as `kubectl apply` does. It is
// atomic: if one object is refused (invalid, its namespace missing), none
// is applied and the error names the object. Controllers react when the
// world runs (Settle, RunFor).
func (c *Cluster) Apply(objs ...runtime.Object) error {
	_, err := c.ApplyObjects(objs...)
	return err
}

// ApplyObjects is Apply, reporting each object's result.
func (c *Cluster) ApplyObjects(objs ...runtime.Object) ([]AppliedObject, error) {
	c.API.Begin()
	var out []AppliedObject
	for _, o := range objs {
		obj, ok := o.(apiserver.Object)
		if !ok || apiserver.KindOf(o) == "" {
			c.API.Abort()
			return nil, fmt.Errorf("kind %q is not served", o.GetObjectKind().GroupVersionKind().Kind)
		}
		stored, res, err := c.API.Apply(obj)
		if err != nil {
			c.API.Abort()
			return nil, err
		}
		out = append(out, AppliedObject{Kind: apiserver.KindOf(o), Namespace: stored.GetNamespace(), Name: stored.GetName(), Result: res})
	}
	c.API.Commit()
	return out, nil
}

// Delete deletes an object as `kubectl delete` does: a pod bound to a node
// is Terminating until its kubelet has stopped it (PodStopDelay), then
// gone; other objects go at once.
func (c *Cluster) Delete(kind, namespace, name string) error {
	return c.API.Delete(kind, namespace, name)
}

// Settle runs the world until only background work (retries, periodic
// resyncs) is left: every controller has converged on what it can do.
func (c *Cluster) Settle() error { return c.World.Run() }

// RunFor advances virtual time by d, running everything due on the way
// (as `sleep` in a lab script).
func (c *Cluster) RunFor(d time.Duration) error { return c.World.Advance(d) }

// podError explains why a pod is not running after Settle.
func (c *Cluster) podError(ns, name string) error {
	o, err := c.API.Get("Pod", ns, name)
	if err != nil {
		return err
	}
	pod := o.(*corev1.Pod)
	reason := string(pod.Status.Phase)
	if err := c.podErrs[controller.Key(ns, name)]; err != nil {
		return &ConfigError{Object: "pod " + ns + "/" + name, Msg: reason + ": " + err.Error()}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return &ConfigError{Object: "pod " + ns + "/" + name, Msg: reason + ": " + cond.Message}
		}
	}
	return &ConfigError{Object: "pod " + ns + "/" + name, Msg: reason}
}

// IsNotFound reports whether err is the API server's NotFound.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

// LabelPod sets label key=value on the pod object (`kubectl label pod`),
// and runs the world until the Services that now select it (or stopped
// selecting it) have been re-synced.
func (c *Cluster) LabelPod(namespace, name, key, value string) error {
	o, err := c.API.Get("Pod", namespace, name)
	if err != nil {
		return err
	}
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[key] = value
	o.SetLabels(labels)
	if _, err := c.API.Update(o); err != nil {
		return err
	}
	if p := c.Pod(namespace, name); p != nil {
		p.Spec.Labels = labels
	}
	if err := c.Settle(); err != nil {
		return err
	}
	return c.proxyError()
}
