package sim

import (
	"cmp"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubewalk/kubewalk/sim/apiserver"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// ServiceSpec is the part of a v1.Service the simulator takes: the
// kube-proxy view (type, ports, policies, IPs) plus the pod selector the
// EndpointSlice controller uses. An unset ClusterIP is allocated from the
// service range; an unset NodePort on a NodePort or LoadBalancer Service is
// allocated from 30000-32767.
type ServiceSpec struct {
	kubeproxy.Service
	Selector map[string]string
}

// Service is a created Service with its allocated addresses and the
// EndpointSlice the controller maintains for it.
type Service struct {
	Spec          ServiceSpec
	EndpointSlice kubeproxy.EndpointSlice
}

// Name is "namespace/name".
func (s *Service) Name() string { return s.Spec.Namespace + "/" + s.Spec.Name }

// ClusterIP is spec.clusterIP.
func (s *Service) ClusterIP() netip.Addr { return s.Spec.ClusterIP }

// Port returns the service port named name (or the only port when name is
// empty).
func (s *Service) Port(name string) (kubeproxy.ServicePort, bool) {
	for _, p := range s.Spec.Ports {
		if p.Name == name || (name == "" && len(s.Spec.Ports) == 1) {
			return p, true
		}
	}
	return kubeproxy.ServicePort{}, false
}

// PortNumber returns the service port whose port number is n.
func (s *Service) PortNumber(n int) (kubeproxy.ServicePort, bool) {
	for _, p := range s.Spec.Ports {
		if p.Port == n {
			return p, true
		}
	}
	return kubeproxy.ServicePort{}, false
}

// AddService creates the Service object (the API server allocates its
// ClusterIP and NodePorts) and runs the world until the EndpointSlice
// controller and kube-proxy on every node have acted on it.
func (c *Cluster) AddService(spec ServiceSpec) (*Service, error) {
	out, err := c.AddServices([]ServiceSpec{spec})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// AddServices creates several Services at once (all or none) and lets
// kube-proxy sync them together, as a proxier batching changes does.
func (c *Cluster) AddServices(specs []ServiceSpec) ([]*Service, error) {
	objs := make([]runtime.Object, 0, len(specs))
	newNS := map[string]bool{}
	for _, spec := range specs {
		if spec.Name == "" {
			return nil, &ConfigError{Object: "service", Field: "metadata.name", Msg: "required"}
		}
		if spec.Namespace == "" {
			spec.Namespace = "default"
		}
		if c.Service(spec.Namespace, spec.Name) != nil {
			return nil, &ConfigError{Object: "service " + spec.Namespace + "/" + spec.Name, Msg: "already exists"}
		}
		if _, err := c.API.Get("Namespace", "", spec.Namespace); err != nil && !newNS[spec.Namespace] {
			newNS[spec.Namespace] = true
			objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spec.Namespace}})
		}
		objs = append(objs, serviceObject(spec))
	}
	c.API.Begin()
	for _, o := range objs {
		if _, err := c.API.Create(o.(apiserver.Object)); err != nil {
			c.API.Abort()
			return nil, &ConfigError{Object: "service " + o.(apiserver.Object).GetNamespace() + "/" + o.(apiserver.Object).GetName(), Msg: err.Error()}
		}
	}
	c.API.Commit()
	if err := c.Settle(); err != nil {
		return nil, err
	}
	if err := c.proxyError(); err != nil {
		return nil, &ConfigError{Object: "services", Msg: err.Error()}
	}
	out := make([]*Service, 0, len(specs))
	for _, spec := range specs {
		out = append(out, c.Service(cmp.Or(spec.Namespace, "default"), spec.Name))
	}
	return out, nil
}

// DeleteService deletes the Service object and runs the world until
// kube-proxy has removed its rules.
func (c *Cluster) DeleteService(namespace, name string) error {
	if err := c.API.Delete("Service", namespace, name); err != nil {
		return &ConfigError{Object: "service " + namespace + "/" + name, Msg: "not found"}
	}
	if err := c.Settle(); err != nil {
		return err
	}
	return c.proxyError()
}

// Service returns the Service namespace/name, or nil.
func (c *Cluster) Service(namespace, name string) *Service {
	return c.svcByName[namespace+"/"+name]
}

// Services returns the Services in creation order.
func (c *Cluster) Services() []*Service { return c.services }

// Snapshot is what every kube-proxy sees: all Services and their slices.
func (c *Cluster) Snapshot() kubeproxy.Snapshot {
	var snap kubeproxy.Snapshot
	for _, s := range c.services {
		snap.Services = append(snap.Services, s.Spec.Service)
		for _, es := range c.slices[s.Name()] {
			snap.EndpointSlices = append(snap.EndpointSlices, c.proxySliceOf(es))
		}
	}
	return snap
}

// ProxyConfig is the kube-proxy configuration of node n.
//
// iptablesProxier.config keeps it per node and makes it again when the
// node's name or InternalIP or the cluster CIDR changes: what it is made
// of. A field added here must be added to that check.
func (c *Cluster) ProxyConfig(n *Node) kubeproxy.Config {
	return kubeproxy.Config{NodeName: n.Name, NodeIPs: []netip.Addr{n.InternalIP}, ClusterCIDR: c.Config.ClusterCIDR}
}

// Sync is kube-proxy's sync on every node, from the Services and
// EndpointSlices its informers hold (each node's Proxier programs its
// datapath for the new snapshot and clears stale UDP conntrack entries).
func (c *Cluster) Sync() error {
	snap := c.snapshot()
	var errs []error
	for _, n := range c.nodes {
		if err := c.syncNode(n, snap); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// snapshot is kube-proxy's informer view (Snapshot), computed once per
// change of Services or EndpointSlices however many nodes sync from it.
func (c *Cluster) snapshot() kubeproxy.Snapshot {
	if c.snapValid && c.snapAt == c.snapGen {
		return c.snap
	}
	if c.snapValid {
		if snap, ok := c.patchSnapshot(); ok {
			c.snap, c.snapAt = snap, c.snapGen
			return snap
		}
	}
	defer func() { c.proxyTracker().index(c.snap, nil) }()
	for _, s := range c.services {
		s.EndpointSlice = kubeproxy.EndpointSlice{Namespace: s.Spec.Namespace, ServiceName: s.Spec.Name}
		if list := c.slices[s.Name()]; len(list) > 0 {
			s.EndpointSlice = c.proxySliceOf(list[0])
		}
	}
	c.snap, c.snapAt, c.snapValid = c.Snapshot(), c.snapGen, true
	return c.snap
}

// snapshotGen returns the generation of snap if it is the cluster's
// current kube-proxy snapshot (the one snapshot() returns).
func (c *Cluster) snapshotGen(snap kubeproxy.Snapshot) (uint64, bool) {
	if !c.snapValid || c.snapAt != c.snapGen || len(snap.Services) != len(c.snap.Services) ||
		len(snap.EndpointSlices) != len(c.snap.EndpointSlices) || len(snap.Services) == 0 {
		return 0, false
	}
	if &snap.Services[0] != &c.snap.Services[0] ||
		(len(snap.EndpointSlices) > 0 && &snap.EndpointSlices[0] != &c.snap.EndpointSlices[0]) {
		return 0, false
	}
	return c.snapAt + 1, true // +1: 0 means unknown
}

// syncNode is node n's kube-proxy syncing snap. A node that fails keeps
// its previous rules and does not stop the others.
func (c *Cluster) syncNode(n *Node, snap kubeproxy.Snapshot) error {
	was := n.ProxySyncError != nil
	n.ProxySyncError = n.Proxier.Sync(snap)
	if n.ProxySyncError != nil {
		n.RestoreFailures++
	}
	switch is := n.ProxySyncError != nil; {
	case is && !was:
		c.proxyFailing++
	case was && !is:
		c.proxyFailing--
	}
	return n.ProxySyncError
}

// changedKey is the Services of changed, sorted and joined by newlines:
// the key the nodes making the same partial sync share it under. Every
// node making one step is handed the same map (proxyChangedServices keeps
// it, and nothing modifies it once made), so the key of the last map is
// kept rather than sorting ten thousand names once per node.
func (c *Cluster) changedKey(changed map[string]bool) string {
	if c.lastChanged != nil && reflect.ValueOf(c.lastChanged).UnsafePointer() == reflect.ValueOf(changed).UnsafePointer() &&
		len(changed) == c.lastChangedLen {
		return c.lastChangedKey
	}
	key := strings.Join(slices.Sorted(maps.Keys(changed)), "\n")
	c.lastChanged, c.lastChangedLen, c.lastChangedKey = changed, len(changed), key
	return key
}

// snapIndex is where each Service's entries are in a snapshot: its
// Service, and the range of its EndpointSlices.
type snapIndex struct {
	svc    map[string]int
	slices map[string][2]int // first, count
}

// index records where each Service's entries are in snap (idx, when
// known: a snapshot patched from another keeps its places), for
// patchSnapshot and proxyChangedServices. Only the recent snapshots'
// are kept.
func (pt *proxyTrack) index(snap kubeproxy.Snapshot, idx *snapIndex) {
	if len(snap.Services) == 0 {
		return
	}
	if idx == nil {
		idx = &snapIndex{svc: make(map[string]int, len(snap.Services)), slices: map[string][2]int{}}
		for i := range snap.Services {
			idx.svc[snap.Services[i].Namespace+"/"+snap.Services[i].Name] = i
		}
		for i := range snap.EndpointSlices {
			es := &snap.EndpointSlices[i]
			k := es.Namespace + "/" + es.ServiceName
			r, ok := idx.slices[k]
			if !ok {
				r[0] = i
			}
			r[1]++
			idx.slices[k] = r
		}
	}
	if pt.snapIdx == nil || len(pt.snapIdx) >= 32 {
		pt.snapIdx = map[*kubeproxy.Service]*snapIndex{}
	}
	pt.snapIdx[&snap.Services[0]] = idx
}

// indexOf returns snap's index, or nil.
func (pt *proxyTrack) indexOf(snap kubeproxy.Snapshot) *snapIndex {
	if len(snap.Services) == 0 {
		return nil
	}
	return pt.snapIdx[&snap.Services[0]]
}

// patchSnapshot is snapshot() made from the last one, replacing the
// entries of the Services the informers saw events for since, when
// none was added or deleted and none gained or lost an EndpointSlice
// (their entries stay where they are): the same snapshot, at a cost of
// the Services changed (and of a copy), not of every Service.
func (c *Cluster) patchSnapshot() (kubeproxy.Snapshot, bool) {
	pt := c.proxyTracker()
	idx := pt.indexOf(c.snap)
	if idx == nil || c.snapAt+1 < c.proxyLogFrom || len(c.services) != len(c.snap.Services) {
		return kubeproxy.Snapshot{}, false
	}
	keys := c.loggedSince(c.snapAt + 1)
	if len(keys) > 64 && len(keys) > len(c.services)/4 {
		return kubeproxy.Snapshot{}, false
	}
	// The Services are shared with the last snapshot when none of them
	// changed (an EndpointSlice event): the snapshot is told from the
	// last by its EndpointSlices (snapshotGen), whose places the index
	// keeps for both.
	svcs := c.snap.Services
	for _, k := range keys {
		if i, ok := idx.svc[k]; ok && i < len(svcs) && c.svcByName[k] != nil && !reflect.DeepEqual(c.svcByName[k].Spec.Service, svcs[i]) {
			svcs = slices.Clone(svcs)
			break
		}
	}
	if len(c.snap.EndpointSlices) == 0 && len(svcs) > 0 && &svcs[0] == &c.snap.Services[0] {
		svcs = slices.Clone(svcs) // nothing else would tell them apart
	}
	eps := slices.Clone(c.snap.EndpointSlices)
	for _, k := range keys {
		s := c.svcByName[k]
		i, ok := idx.svc[k]
		list := c.slices[k]
		r := idx.slices[k]
		if s == nil || !ok || c.services[i] != s || len(list) != r[1] {
			return kubeproxy.Snapshot{}, false
		}
		if &svcs[0] != &c.snap.Services[0] {
			svcs[i] = s.Spec.Service
		}
		s.EndpointSlice = kubeproxy.EndpointSlice{Namespace: s.Spec.Namespace, ServiceName: s.Spec.Name}
		for j, es := range list {
			eps[r[0]+j] = c.proxySliceOf(es)
			if j == 0 {
				s.EndpointSlice = eps[r[0]]
			}
		}
	}
	snap := kubeproxy.Snapshot{Services: svcs, EndpointSlices: eps}
	pt.index(snap, idx)
	pt.patchedSnaps++
	if &svcs[0] == &c.snap.Services[0] {
		pt.sharedServices++
	}
	return snap, true
}

// loggedSince returns the Services the informers saw an event for from
// snapshot generation gen on (proxyLog, which is in generation order).
func (c *Cluster) loggedSince(gen uint64) []string {
	i := sort.Search(len(c.proxyLog), func(i int) bool { return c.proxyLog[i].gen >= gen })
	var out []string
	for _, e := range c.proxyLog[i:] {
		out = append(out, e.key)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
