package apiserver

import (
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Object is any stored API object: every k8s.io/api type satisfies it.
type Object interface {
	runtime.Object
	metav1.Object
}

// Scheme knows the API groups kubewalk serves: core/v1, apps/v1,
// discovery/v1, policy/v1 and coordination/v1.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(appsv1.AddToScheme(Scheme))
	utilruntime.Must(discoveryv1.AddToScheme(Scheme))
	utilruntime.Must(policyv1.AddToScheme(Scheme))
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
}

// Kind describes one served kind: its group/version, its REST resource
// name (what errors and `kubectl get` use), and whether it is namespaced.
type Kind struct {
	Name       string // "Pod"
	GV         schema.GroupVersion
	Resource   string // "pods"
	Namespaced bool
	// Short is kubectl's short name ("po", "svc"), if any.
	Short string
}

// GroupResource is the kind's qualified resource, as errors name it.
func (k Kind) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: k.GV.Group, Resource: k.Resource}
}

// GroupKind is the kind's qualified kind, as validation errors name it.
func (k Kind) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: k.GV.Group, Kind: k.Name}
}

// Kinds lists the served kinds in the order kubectl's discovery would
// present them; the store is keyed by Kind.Name.
var Kinds = []Kind{
	{"Namespace", corev1.SchemeGroupVersion, "namespaces", false, "ns"},
	{"Node", corev1.SchemeGroupVersion, "nodes", false, "no"},
	{"Pod", corev1.SchemeGroupVersion, "pods", true, "po"},
	{"Service", corev1.SchemeGroupVersion, "services", true, "svc"},
	{"Endpoints", corev1.SchemeGroupVersion, "endpoints", true, "ep"},
	{"ConfigMap", corev1.SchemeGroupVersion, "configmaps", true, "cm"},
	{"Event", corev1.SchemeGroupVersion, "events", true, "ev"},
	{"EndpointSlice", discoveryv1.SchemeGroupVersion, "endpointslices", true, ""},
	{"Deployment", appsv1.SchemeGroupVersion, "deployments", true, "deploy"},
	{"ReplicaSet", appsv1.SchemeGroupVersion, "replicasets", true, "rs"},
	{"DaemonSet", appsv1.SchemeGroupVersion, "daemonsets", true, "ds"},
	{"PodDisruptionBudget", policyv1.SchemeGroupVersion, "poddisruptionbudgets", true, "pdb"},
	{"Lease", coordinationv1.SchemeGroupVersion, "leases", true, ""},
}

// LookupKind returns the served kind named name ("Pod"), or false.
func LookupKind(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// KindOf names obj's kind from the scheme ("Pod"); "" for a type the
// scheme does not know. The kinds written most (a pod's status, its
// events, slices) are named without asking the scheme, which reflects on
// the type and looks it up in a map on every write; TestKindOfIsTheSchemes
// checks that every served kind gets the scheme's answer.
func KindOf(obj runtime.Object) string {
	switch obj.(type) {
	case *corev1.Pod:
		return "Pod"
	case *corev1.Event:
		return "Event"
	case *corev1.Node:
		return "Node"
	case *corev1.Service:
		return "Service"
	case *discoveryv1.EndpointSlice:
		return "EndpointSlice"
	case *corev1.Namespace:
		return "Namespace"
	}
	gvks, _, err := Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return ""
	}
	return gvks[0].Kind
}

// setTypeMeta fills apiVersion and kind, as objects read back from a real
// API server carry them.
func setTypeMeta(obj runtime.Object, k Kind) {
	obj.GetObjectKind().SetGroupVersionKind(k.GV.WithKind(k.Name))
}
