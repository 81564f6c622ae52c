package kubeproxy

import (
	"reflect"
	"slices"
	"strings"
)

// A Tracker is what kube-proxy's iptables proxier keeps between syncs: the
// service ports and endpoints of every Service (its ServiceChangeTracker
// and EndpointsChangeTracker applied to svcPortMap and endpointsMap) and
// the rules each service port wrote at the last sync. Told which Services
// changed since its last sync, a sync recomputes those only, and writes
// the others' lines again as they were: what it writes is exactly what
// Generate and GeneratePartial write, at a cost proportional to the
// Services changed (plus writing the top-level chains, as the real proxier
// does at every sync).
//
// The zero Tracker is ready to use; it starts from nothing (every Service
// changed).
type Tracker struct {
	// AnyNode: the rules are generated for no node in particular
	// (NodeName and NodeIPs ignored, no endpoint local): the text of a
	// snapshot for which NodeIndependent holds, shared by every node.
	AnyNode bool

	ok       bool
	cfg      Config // as generated with (AnyNode: without the node)
	services map[nsName]*trackedService
	ports    []*svcPort // every Service's, sorted
	eps      map[svcPortKey][]*endpoint
	frags    map[*svcPort]*portFrag
	total    int // endpoints of all the ports (the large-cluster mode)
	large    bool
}

type nsName struct{ namespace, name string }

// trackedService is one Service as the last sync saw it.
type trackedService struct {
	svc   *Service // a copy
	ports []*svcPort
	keys  []svcPortKey // the endpoints map keys of its EndpointSlices
}

// Generate returns GeneratePartial(cfg, snap, write) (Generate(cfg, snap)
// when write is nil), reusing the tracker's state. since lists the
// Services ("namespace/name") whose Service or EndpointSlices differ
// between the snapshot of the tracker's last successful Generate and snap
// (nil: unknown, everything is recomputed). After an error the tracker
// starts again from nothing.
func (t *Tracker) Generate(cfg Config, snap Snapshot, since map[string]bool, write func(namespace, name string) bool) (*Rules, error) {
	gcfg := cfg
	if t.AnyNode {
		gcfg.NodeName, gcfg.NodeIPs = "", nil
	}
	if !t.ok || since == nil || !reflect.DeepEqual(gcfg, t.cfg) {
		t.reset(gcfg)
		since = nil
	}
	// The Services changed by namespace and name (no key made per
	// Service asked about).
	var sinceKeys map[nsName]bool
	if since != nil {
		sinceKeys = make(map[nsName]bool, len(since))
		for k, v := range since {
			if ns, name, ok := strings.Cut(k, "/"); ok && v {
				sinceKeys[nsName{ns, name}] = true
			}
		}
	}
	changed := func(ns, name string) bool { return since == nil || sinceKeys[nsName{ns, name}] }
	if err := t.validate(&cfg, snap, changed); err != nil {
		t.ok = false
		return nil, err
	}
	t.update(snap, changed)
	g := newGenContextTotal(&t.cfg, t.total)
	if g.largeCluster != t.large {
		clear(t.frags) // every endpoint rule gains or loses its comment
		t.large = g.largeCluster
	}
	r := g.begin()
	for _, sp := range t.ports {
		f := t.frags[sp]
		if f == nil {
			f = g.port(sp, t.eps[sp.key()])
			t.frags[sp] = f
		}
		g.apply(r, f, write == nil || write(sp.svc.Namespace, sp.svc.Name))
	}
	g.finish(r)
	r.Partial = write != nil
	t.ok = true
	return r, nil
}

// reset empties the tracker, for cfg.
func (t *Tracker) reset(cfg Config) {
	*t = Tracker{AnyNode: t.AnyNode, cfg: cfg, services: map[nsName]*trackedService{},
		eps: map[svcPortKey][]*endpoint{}, frags: map[*svcPort]*portFrag{}}
}

// validate is validateSnapshot for the Services changed (the others were
// valid at the last sync, with the same configuration): the same first
// error.
func (t *Tracker) validate(cfg *Config, snap Snapshot, changed func(ns, name string) bool) error {
	if err := validateConfig(cfg); err != nil {
		return err
	}
	seen := make(map[nsName]bool, len(snap.Services))
	for i := range snap.Services {
		s := &snap.Services[i]
		if changed(s.Namespace, s.Name) {
			if err := validateService(cfg, s); err != nil {
				return err
			}
		}
		k := nsName{s.Namespace, s.Name}
		if seen[k] {
			return &ValidationError{Kind: "Service", Object: s.Namespace + "/" + s.Name, Field: "metadata.name", Value: s.Name, Reason: "Duplicate value: a Service with this name already exists in the snapshot"}
		}
		seen[k] = true
	}
	for i := range snap.EndpointSlices {
		es := &snap.EndpointSlices[i]
		if changed(es.Namespace, es.ServiceName) {
			if err := validateSlice(es, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// update brings the service ports and endpoints of the Services changed
// up to snap.
func (t *Tracker) update(snap Snapshot, changed func(ns, name string) bool) {
	// The Services changed, as they are now (nil: deleted, or slices
	// without their Service).
	now := map[nsName]*Service{}
	for i := range snap.Services {
		s := &snap.Services[i]
		if changed(s.Namespace, s.Name) {
			now[nsName{s.Namespace, s.Name}] = s
		}
	}
	var slicesNow []EndpointSlice
	for i := range snap.EndpointSlices {
		es := &snap.EndpointSlices[i]
		if changed(es.Namespace, es.ServiceName) {
			slicesNow = append(slicesNow, *es)
			if k := (nsName{es.Namespace, es.ServiceName}); now[k] == nil {
				now[k] = nil
			}
		}
	}
	for k := range t.services {
		if _, ok := now[k]; !ok && changed(k.namespace, k.name) {
			now[k] = nil
		}
	}
	var removed map[*svcPort]bool
	var added []*svcPort
	for k, s := range now {
		ts := t.services[k]
		if ts == nil {
			ts = &trackedService{}
			t.services[k] = ts
		}
		for _, sp := range ts.ports {
			t.total -= len(t.eps[sp.key()])
			delete(t.frags, sp)
		}
		for _, key := range ts.keys {
			delete(t.eps, key)
		}
		ts.keys = nil
		if s != nil && ts.svc != nil && reflect.DeepEqual(*ts.svc, *s) {
			continue // the same service ports; their endpoints changed
		}
		if len(ts.ports) > 0 && removed == nil {
			removed = map[*svcPort]bool{}
		}
		for _, sp := range ts.ports {
			removed[sp] = true
		}
		ts.svc, ts.ports = nil, nil
		if s != nil {
			cp := *s
			ts.svc = &cp
			ts.ports = servicePortsOf(ts.svc)
			added = append(added, ts.ports...)
		}
	}
	// The endpoints: kube-proxy's EndpointSliceCache for the Services
	// changed.
	for key, list := range buildEndpointsMap(&t.cfg, slicesNow) {
		t.eps[key] = list
		ts := t.services[nsName{key.namespace, key.name}]
		ts.keys = append(ts.keys, key)
	}
	for k := range now {
		ts := t.services[k]
		for _, sp := range ts.ports {
			t.total += len(t.eps[sp.key()])
		}
		if ts.svc == nil && len(ts.keys) == 0 {
			delete(t.services, k)
		}
	}
	if len(removed) > 0 || len(added) > 0 {
		ports := slices.DeleteFunc(t.ports, func(sp *svcPort) bool { return removed[sp] })
		ports = append(ports, added...)
		sortPorts(ports)
		t.ports = ports
	}
}

// ServiceChains returns the per-Service chains (KUBE-SVC, KUBE-SVL,
// KUBE-EXT, KUBE-FW, KUBE-SEP) the ports of Service namespace/name
// declared at the tracker's last Generate: what a partial sync writes for
// the Service when it changed. None for a Service the tracker does not
// hold.
func (t *Tracker) ServiceChains(namespace, name string) []string {
	ts := t.services[nsName{namespace, name}]
	if ts == nil {
		return nil
	}
	var out []string
	for _, sp := range ts.ports {
		if f := t.frags[sp]; f != nil {
			out = append(out, f.nat.chains...)
		}
	}
	return out
}
