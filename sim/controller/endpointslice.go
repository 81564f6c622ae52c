package controller

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// EndpointSlice controller.
const ManagedBy = "endpointslice-controller.k8s.io"

// EndpointSlices is kube-controller-manager's EndpointSlice controller
// (v1.33): for every Service with a selector, the pods in its namespace
// that match it and have an IP become endpoints, with ready = the pod's
// Ready condition (or true for publishNotReadyAddresses), serving, and
// terminating once the pod is being deleted; nodeName and a targetRef to
// the pod. Pods that resolve the Service's target ports to the same port
// numbers share a slice; slices are named generateName `<service>-` and
// labelled kubernetes.io/service-name. --endpointslice-updates-batch-period
// is 0 by default, so a change is written at once. Not modelled: the
// 100-endpoints-per-slice split, topology hints, zone.
type EndpointSlices struct {
	api   *apiserver.Server
	Queue *Queue
	// members remembers which Services each pod was an endpoint of, so a
	// relabelled or deleted pod wakes the Services it left.
	members map[string][]string
}

// NewEndpointSlices starts the controller on api.
func NewEndpointSlices(api *apiserver.Server, eng *datapath.Engine) *EndpointSlices {
	c := &EndpointSlices{api: api, members: map[string][]string{}}
	c.Queue = NewQueue(eng, "endpointslice-controller", 0, c.reconcile)
	api.AddIndex("Service", indexSelector, selectorIndex)
	// The pods by label are what every Service's slices are computed
	// from: indexed as each pod is written (a status write leaves the
	// index as it is), not from every pod when the first Service comes.
	api.BuildIndex("Pod", apiserver.IndexLabel)
	api.WatchReadOnly("Service", func(ev watch.Event) {
		s := ev.Object.(*corev1.Service)
		c.Queue.Add(Key(s.Namespace, s.Name))
	})
	api.WatchReadOnly("Pod", func(ev watch.Event) {
		p := ev.Object.(*corev1.Pod)
		pk := Key(p.Namespace, p.Name)
		for _, sk := range c.members[pk] {
			c.Queue.Add(sk)
		}
		if ev.Type == watch.Deleted {
			return
		}
		for _, k := range selecting(api, p) {
			c.Queue.Add(k)
		}
	})
	api.WatchReadOnly("EndpointSlice", func(ev watch.Event) {
		es := ev.Object.(*discoveryv1.EndpointSlice)
		if es.Labels[discoveryv1.LabelManagedBy] == ManagedBy {
			c.Queue.Add(Key(es.Namespace, es.Labels[discoveryv1.LabelServiceName]))
		}
	})
	return c
}

// indexSelector is the controller's index of Services by selector: a
// Service with one is found under "<namespace>/<key>=<value>" of its
// selector's first key, so the Services a pod may match are found under
// the pod's labels, each once, without a scan of every Service (a
// client-go indexer the controller registers on its informer).
const indexSelector = "endpointslice-selector"

// selectorIndex is the indexSelector index function.
func selectorIndex(o apiserver.Object) []string {
	sel := o.(*corev1.Service).Spec.Selector
	if len(sel) == 0 {
		return nil
	}
	first := ""
	for k := range sel {
		if first == "" || k < first {
			first = k
		}
	}
	return []string{o.GetNamespace() + "/" + first + "=" + sel[first]}
}

// selecting returns the keys of the Services whose selector pod p
// matches, sorted: those indexed under one of its labels whose whole
// selector matches (what a scan of the namespace's Services finds).
func selecting(api *apiserver.Server, p *corev1.Pod) []string {
	var keys []string
	for k, v := range p.Labels {
		for _, o := range api.PeekByIndexFunc("Service", indexSelector, p.Namespace+"/"+k+"="+v, func(o apiserver.Object) bool {
			return labels.SelectorFromValidatedSet(o.(*corev1.Service).Spec.Selector).Matches(labels.Set(p.Labels))
		}) {
			keys = append(keys, Key(o.GetNamespace(), o.GetName()))
		}
	}
	slices.Sort(keys)
	return keys
}

type portSet struct {
	ports []discoveryv1.EndpointPort
	eps   []discoveryv1.Endpoint
}

// reconcile reads the stored objects (its informers' caches: the
// slices, the Service and its pods), never modifying them, and writes
// copies.
func (c *EndpointSlices) reconcile(key string) (Result, error) {
	ns, name := SplitKey(key)
	var existing []*discoveryv1.EndpointSlice
	for _, o := range c.api.PeekByIndexFunc("EndpointSlice", apiserver.IndexService, key, func(o apiserver.Object) bool {
		return o.GetLabels()[discoveryv1.LabelManagedBy] == ManagedBy
	}) {
		existing = append(existing, o.(*discoveryv1.EndpointSlice))
	}
	var svc *corev1.Service
	if o, ok := c.api.Peek("Service", ns, name); ok {
		svc = o.(*corev1.Service)
	}
	if svc == nil || len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		for _, es := range existing {
			if err := c.api.Delete("EndpointSlice", es.Namespace, es.Name); err != nil {
				return Result{}, err
			}
		}
		return Result{}, nil
	}
	sel := labels.SelectorFromValidatedSet(svc.Spec.Selector)
	// The pods carrying the selector's rarest label, then the whole
	// selector: the label index spares a scan of every pod.
	probe := ""
	for k, v := range svc.Spec.Selector {
		cand := ns + "/" + k + "=" + v
		if probe == "" || c.api.CountByIndex("Pod", apiserver.IndexLabel, cand) < c.api.CountByIndex("Pod", apiserver.IndexLabel, probe) ||
			(c.api.CountByIndex("Pod", apiserver.IndexLabel, cand) == c.api.CountByIndex("Pod", apiserver.IndexLabel, probe) && cand < probe) {
			probe = cand
		}
	}
	pods := c.api.PeekByIndexFunc("Pod", apiserver.IndexLabel, probe, func(o apiserver.Object) bool {
		return sel.Matches(labels.Set(o.GetLabels()))
	})
	var groups []*portSet
	for _, po := range pods {
		p := po.(*corev1.Pod)
		pk := Key(p.Namespace, p.Name)
		if !slices.Contains(c.members[pk], key) {
			c.members[pk] = append(c.members[pk], key)
		}
		if p.Status.PodIP == "" || p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ports, ok := endpointPorts(svc, p)
		if !ok {
			continue
		}
		var g *portSet
		for _, x := range groups {
			if portsEqual(x.ports, ports) {
				g = x
			}
		}
		if g == nil {
			g = &portSet{ports: ports}
			groups = append(groups, g)
		}
		g.eps = append(g.eps, endpointFor(svc, p))
	}
	if len(groups) == 0 {
		// A Service with no endpoints still has one (empty) slice with its
		// ports unresolved, as the controller writes.
		groups = []*portSet{{ports: []discoveryv1.EndpointPort{}}}
	}
	for i, g := range groups {
		want := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: name + "-",
				Labels:          map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ManagedBy},
				OwnerReferences: []metav1.OwnerReference{ownerRef(svc, "v1", "Service")}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   g.eps,
			Ports:       g.ports,
		}
		for k, v := range svc.Labels {
			if _, set := want.Labels[k]; !set {
				want.Labels[k] = v
			}
		}
		if i < len(existing) {
			cur := existing[i]
			if (endpointsIdentical(cur.Endpoints, want.Endpoints) || apiequality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints)) &&
				apiequality.Semantic.DeepEqual(cur.Ports, want.Ports) &&
				(labelsIdentical(cur.Labels, want.Labels) || apiequality.Semantic.DeepEqual(cur.Labels, want.Labels)) {
				continue
			}
			upd := cur.DeepCopy()
			upd.Endpoints, upd.Ports, upd.Labels = want.Endpoints, want.Ports, want.Labels
			if _, err := c.api.Update(upd); err != nil {
				return Result{}, err
			}
			continue
		}
		if err := c.api.Submit(want); err != nil { // want is the controller's own: handed over
			return Result{}, err
		}
	}
	for _, es := range existing[min(len(groups), len(existing)):] {
		if err := c.api.Delete("EndpointSlice", es.Namespace, es.Name); err != nil {
			return Result{}, err
		}
	}
	return Result{}, nil
}

// endpointsIdentical reports whether a and b hold the same endpoints
// field by field, with the same fields unset (nil): then they are
// semantically equal, found without reflection (the reconcile that
// follows every slice write compares ten thousand Services' endpoints).
// False says nothing: the caller asks apiequality.Semantic.DeepEqual.
func endpointsIdentical(a, b []discoveryv1.Endpoint) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if (x.Addresses == nil) != (y.Addresses == nil) || !slices.Equal(x.Addresses, y.Addresses) ||
			!ptrEqual(x.Conditions.Ready, y.Conditions.Ready) || !ptrEqual(x.Conditions.Serving, y.Conditions.Serving) ||
			!ptrEqual(x.Conditions.Terminating, y.Conditions.Terminating) ||
			!ptrEqual(x.Hostname, y.Hostname) || !ptrEqual(x.TargetRef, y.TargetRef) || !ptrEqual(x.NodeName, y.NodeName) ||
			!ptrEqual(x.Zone, y.Zone) || x.DeprecatedTopology != nil || y.DeprecatedTopology != nil || x.Hints != nil || y.Hints != nil {
			return false
		}
	}
	return true
}

// labelsIdentical is endpointsIdentical for two label maps.
func labelsIdentical(a, b map[string]string) bool {
	return (a == nil) == (b == nil) && maps.Equal(a, b)
}

// portsEqual is apiequality.Semantic.DeepEqual for two port lists
// (pointers compared by what they point to), without reflection: it runs
// for every pod of every Service.
func portsEqual(a, b []discoveryv1.EndpointPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if !ptrEqual(x.Name, y.Name) || !ptrEqual(x.Protocol, y.Protocol) || !ptrEqual(x.Port, y.Port) || !ptrEqual(x.AppProtocol, y.AppProtocol) {
			return false
		}
	}
	return true
}

func ptrEqual[T comparable](a, b *T) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}

func ownerRef(o apiserver.Object, apiVersion, kind string) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: o.GetName(), UID: o.GetUID(), Controller: &t, BlockOwnerDeletion: &t}
}

// endpointPorts resolves every Service port's targetPort against the pod's
// container ports (a named targetPort needs a container port of that name
// and protocol); a pod that cannot resolve one is left out.
func endpointPorts(svc *corev1.Service, p *corev1.Pod) ([]discoveryv1.EndpointPort, bool) {
	out := make([]discoveryv1.EndpointPort, 0, len(svc.Spec.Ports))
	for _, sp := range svc.Spec.Ports {
		port, ok := FindPort(p, sp)
		if !ok {
			return nil, false
		}
		name, proto, num := sp.Name, sp.Protocol, port
		out = append(out, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &num})
	}
	return out, true
}

// FindPort is podutil.FindPort: a numeric targetPort is used as it is; a
// named one is looked up among the pod's container ports with the Service
// port's protocol.
func FindPort(p *corev1.Pod, sp corev1.ServicePort) (int32, bool) {
	if sp.TargetPort.Type == intstr.Int {
		return int32(sp.TargetPort.IntValue()), true
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == sp.TargetPort.StrVal && cp.Protocol == sp.Protocol {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func endpointFor(svc *corev1.Service, p *corev1.Pod) discoveryv1.Endpoint {
	ready := IsPodReady(p)
	terminating := p.DeletionTimestamp != nil
	serving := ready
	if svc.Spec.PublishNotReadyAddresses {
		ready = true
	}
	if terminating {
		ready = false
	}
	node := p.Spec.NodeName
	ep := discoveryv1.Endpoint{
		Addresses:  []string{p.Status.PodIP},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		NodeName:   &node,
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
	}
	if p.Spec.Hostname != "" && svc.Spec.ClusterIP == corev1.ClusterIPNone {
		h := p.Spec.Hostname
		ep.Hostname = &h
	}
	return ep
}

// IsPodReady reports the pod's Ready condition.
func IsPodReady(p *corev1.Pod) bool {
	c := podCondition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}
