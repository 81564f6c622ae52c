package kubectl

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// Object is any stored API object: every k8s.io/api type satisfies it.
type Object = apiserver.Object

var _ Lister = (*apiserver.Server)(nil)

// Lister is the read side of an API server the views need: the objects of
// a kind (namespace "" = all namespaces, sorted by namespace then name, as
// etcd's key order gives them), one object by name (a NotFound
// *apierrors.StatusError when absent), and the world's virtual clock.
// *apiserver.Server satisfies it.
type Lister interface {
	List(kind, namespace string) []Object
	Get(kind, namespace, name string) (Object, error)
	Now() time.Time
}

// Resource is one API resource kubectl knows by name: what `kubectl get`
// accepts for it, where it lives, and its table.
type Resource struct {
	Kind       string   // "Pod"
	Plural     string   // "pods"
	Singular   string   // "pod"
	Short      []string // "po"
	Group      string   // "" for core, "apps", "discovery.k8s.io", "policy"
	Version    string   // "v1"
	Namespaced bool

	columns []column
	row     func(o Object, now time.Time, wide bool) []string
}

// GroupVersionKind is the resource's served version.
func (r *Resource) GroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

// GroupResource is what error texts name: "pods", "deployments.apps".
func (r *Resource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.Group, Resource: r.Plural}
}

// NameOf is the `-o name` form of an object of this resource:
// "pod/web-1", "deployment.apps/web" (kind lower-cased, then its group).
func (r *Resource) NameOf(name string) string {
	gk := schema.GroupKind{Group: r.Group, Kind: r.Kind}
	return strings.ToLower(gk.String()) + "/" + name
}

// column is one table column: its header as printers.go names it and
// whether it is shown only with -o wide (Priority 1).
type column struct {
	name string
	wide bool
}

func cols(names ...string) []column {
	c := make([]column, len(names))
	for i, n := range names {
		if w, ok := strings.CutPrefix(n, "*"); ok {
			c[i] = column{name: w, wide: true}
		} else {
			c[i] = column{name: n}
		}
	}
	return c
}

// resources are the kinds kubewalk stores, with the column sets of
// printers.go AddHandlers (a leading * marks a Priority 1, -o wide, column).
var resources = []*Resource{
	{Kind: "Pod", Plural: "pods", Singular: "pod", Short: []string{"po"}, Version: "v1", Namespaced: true,
		columns: cols("Name", "Ready", "Status", "Restarts", "Age", "*IP", "*Node", "*Nominated Node", "*Readiness Gates"),
		row:     podRow},
	{Kind: "Node", Plural: "nodes", Singular: "node", Short: []string{"no"}, Version: "v1",
		columns: cols("Name", "Status", "Roles", "Age", "Version", "*Internal-IP", "*External-IP", "*OS-Image", "*Kernel-Version", "*Container-Runtime"),
		row:     nodeRow},
	{Kind: "Service", Plural: "services", Singular: "service", Short: []string{"svc"}, Version: "v1", Namespaced: true,
		columns: cols("Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "*Selector"),
		row:     serviceRow},
	{Kind: "Endpoints", Plural: "endpoints", Singular: "endpoints", Short: []string{"ep"}, Version: "v1", Namespaced: true,
		columns: cols("Name", "Endpoints", "Age"),
		row:     endpointsRow},
	{Kind: "EndpointSlice", Plural: "endpointslices", Singular: "endpointslice", Group: "discovery.k8s.io", Version: "v1", Namespaced: true,
		columns: cols("Name", "AddressType", "Ports", "Endpoints", "Age"),
		row:     endpointSliceRow},
	{Kind: "Deployment", Plural: "deployments", Singular: "deployment", Short: []string{"deploy"}, Group: "apps", Version: "v1", Namespaced: true,
		columns: cols("Name", "Ready", "Up-to-date", "Available", "Age", "*Containers", "*Images", "*Selector"),
		row:     deploymentRow},
	{Kind: "ReplicaSet", Plural: "replicasets", Singular: "replicaset", Short: []string{"rs"}, Group: "apps", Version: "v1", Namespaced: true,
		columns: cols("Name", "Desired", "Current", "Ready", "Age", "*Containers", "*Images", "*Selector"),
		row:     replicaSetRow},
	{Kind: "DaemonSet", Plural: "daemonsets", Singular: "daemonset", Short: []string{"ds"}, Group: "apps", Version: "v1", Namespaced: true,
		columns: cols("Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector", "Age", "*Containers", "*Images", "*Selector"),
		row:     daemonSetRow},
	{Kind: "ConfigMap", Plural: "configmaps", Singular: "configmap", Short: []string{"cm"}, Version: "v1", Namespaced: true,
		columns: cols("Name", "Data", "Age"),
		row:     configMapRow},
	{Kind: "PodDisruptionBudget", Plural: "poddisruptionbudgets", Singular: "poddisruptionbudget", Short: []string{"pdb"}, Group: "policy", Version: "v1", Namespaced: true,
		columns: cols("Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"),
		row:     pdbRow},
	{Kind: "Namespace", Plural: "namespaces", Singular: "namespace", Short: []string{"ns"}, Version: "v1",
		columns: cols("Name", "Status", "Age"),
		row:     namespaceRow},
	{Kind: "Event", Plural: "events", Singular: "event", Short: []string{"ev"}, Version: "v1", Namespaced: true,
		columns: cols("Last Seen", "Type", "Reason", "Object", "*Subobject", "*Source", "Message", "*First Seen", "*Count", "*Name"),
		row:     eventRow},
	{Kind: "Lease", Plural: "leases", Singular: "lease", Group: "coordination.k8s.io", Version: "v1", Namespaced: true,
		columns: cols("Name", "Holder", "Age"),
		row:     leaseRow},
}

// ResourceError is a resource name kubectl does not know, in kubectl's words.
type ResourceError struct{ Name string }

// Error implements the error interface.
func (e *ResourceError) Error() string {
	return fmt.Sprintf("the server doesn't have a resource type %q", e.Name)
}

// LookupResource finds a resource by any name `kubectl get` accepts for it:
// plural, singular, short name or kind, optionally qualified by its group
// ("deployments.apps", "deploy.apps"), case-insensitively for the kind.
func LookupResource(name string) (*Resource, error) {
	n := strings.ToLower(name)
	base, group, qualified := strings.Cut(n, ".")
	for _, r := range resources {
		if qualified && group != r.Group {
			continue
		}
		if base == r.Plural || base == r.Singular || base == strings.ToLower(r.Kind) {
			return r, nil
		}
		for _, s := range r.Short {
			if base == s {
				return r, nil
			}
		}
	}
	return nil, &ResourceError{Name: name}
}

// ResourceForKind finds the resource of a kind ("Pod", "Deployment").
func ResourceForKind(kind string) (*Resource, bool) {
	for _, r := range resources {
		if r.Kind == kind {
			return r, true
		}
	}
	return nil, false
}
