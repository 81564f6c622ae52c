package kubeproxy

import (
	"maps"
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
	// Index, when set, says where a Service's entries are in the
	// snapshots Generate is given, so that a sync told which Services
	// changed (since) reads their entries only, not every Service's:
	// the place of Service namespace/name in snap.Services (-1: none)
	// and of its EndpointSlices (n from first on), ok false when it does
	// not know snap. The snapshots it knows hold each Service once and
	// each Service's EndpointSlices one after another (as Snapshot
	// lists them), so the answers are what a scan of snap would find.
	Index func(snap Snapshot, namespace, name string) (svc, first, n int, ok bool)

	ok       bool
	cfg      Config // as generated with (AnyNode: without the node)
	services map[nsName]*trackedService
	ports    []*svcPort // every Service's, sorted
	eps      map[svcPortKey][]*endpoint
	frags    map[*svcPort]*portFrag
	total    int // endpoints of all the ports (the large-cluster mode)
	large    bool
	// sizes are the filter and nat rules of the last full and partial
	// Generate.
	sizes [2][2]int
	// old are the rules of the service ports update recomputes (dirty),
	// as they were: a port whose rules come out the same keeps them.
	// reshaped: update added or removed service ports.
	old      map[*svcPort]*portFrag
	dirty    []*svcPort
	reshaped bool
	// last is the last Generate's result when it was made with the set
	// of Services lastWrite (nil: every Service; lastKnown says it is
	// known), for a Generate that changes no rule to return it again.
	last      *Rules
	lastWrite map[string]bool
	lastKnown bool
	// redescribed counts the Rules made from the last ones with ports
	// described anew (for tests).
	redescribed int
	// seen is validate's duplicate check: the Services of the snapshot
	// validated last are those with stamp seenAt (the map is kept from
	// one sync to the next, not made anew for ten thousand Services).
	seen   map[nsName]uint64
	seenAt uint64
	// run is what every service port writes at every sync, kept for the
	// partial syncs; spliced counts the Generates that copied it (for
	// tests), runMade those that made it anew.
	run              portRun
	spliced, runMade int
	// indexed counts the Generates that read the Services changed
	// through Index (for tests).
	indexed int
}

// changedPlaces is where the Services changed are in a snapshot, in its
// order: their Services, and the ranges of their EndpointSlices.
type changedPlaces struct {
	svcs   []int
	slices [][2]int // first, n
}

// locate finds the Services of keys in snap through t.Index; nil when it
// does not know snap or an answer does not name the Service asked about
// (the scan then finds them).
func (t *Tracker) locate(snap Snapshot, keys map[nsName]bool) *changedPlaces {
	if t.Index == nil {
		return nil
	}
	pl := &changedPlaces{}
	for k := range keys {
		i, first, n, ok := t.Index(snap, k.namespace, k.name)
		if !ok || i >= len(snap.Services) || first < 0 || n < 0 || first+n > len(snap.EndpointSlices) {
			return nil
		}
		if i >= 0 {
			if s := &snap.Services[i]; s.Namespace != k.namespace || s.Name != k.name {
				return nil
			}
			pl.svcs = append(pl.svcs, i)
		}
		for j := first; j < first+n; j++ {
			if es := &snap.EndpointSlices[j]; es.Namespace != k.namespace || es.ServiceName != k.name {
				return nil
			}
		}
		if n > 0 {
			pl.slices = append(pl.slices, [2]int{first, n})
		}
	}
	slices.Sort(pl.svcs)
	slices.SortFunc(pl.slices, func(a, b [2]int) int { return a[0] - b[0] })
	t.indexed++
	return pl
}

// portRun is what the service ports write at every sync, in t.ports
// order: their fragments, their filter rules and their nat rules in the
// top-level chains, with where each port's begin (at i, up to i+1). A
// partial sync writing the chains of a few Services copies the runs
// between those ports at once, not ten thousand ports one by one; the
// ports recomputed since with rules of the same sizes are written over
// in place. ok: it is t.ports' with its fragments, made in the
// large-cluster mode large.
type portRun struct {
	ok          bool
	large       bool
	frags       []*portFrag
	filter, nat []rule
	fOff, nOff  []int
	idx         map[*svcPort]int
}

// GenerateWriting is Generate writing the per-Service chains of the
// Services in write ("namespace/name"; nil: of every Service, a full
// sync). Knowing the set, it returns the very Rules of the last Generate
// when nothing it writes differs (the Services changed since came out
// with the same rules, and the same Services are written): kube-proxy's
// second sync of a pod's deletion (its endpoint terminating, then gone)
// costs the Services changed, not the cluster. The Rules returned must
// not be modified.
func (t *Tracker) GenerateWriting(cfg Config, snap Snapshot, since map[string]bool, write map[string]bool) (*Rules, error) {
	var fn func(ns, name string) bool
	if write != nil {
		var buf []byte
		fn = func(ns, name string) bool {
			buf = append(append(append(buf[:0], ns...), '/'), name...)
			return write[string(buf)]
		}
	}
	return t.generate(cfg, snap, since, fn, write, true)
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
	return t.generate(cfg, snap, since, write, nil, false)
}

// generate is Generate; known says writeSet is the set write answers
// for.
func (t *Tracker) generate(cfg Config, snap Snapshot, since map[string]bool, write func(namespace, name string) bool, writeSet map[string]bool, known bool) (*Rules, error) {
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
	var few []nsName // sinceKeys, when a few: compared, not hashed, for each of thousands of Services
	if since != nil {
		sinceKeys = make(map[nsName]bool, len(since))
		for k, v := range since {
			if ns, name, ok := strings.Cut(k, "/"); ok && v {
				sinceKeys[nsName{ns, name}] = true
			}
		}
		if len(sinceKeys) <= 8 {
			few = slices.Collect(maps.Keys(sinceKeys))
		}
	}
	changed := func(ns, name string) bool {
		if since == nil {
			return true
		}
		if few != nil || len(sinceKeys) == 0 {
			for _, k := range few {
				if k.name == name && k.namespace == ns {
					return true
				}
			}
			return false
		}
		return sinceKeys[nsName{ns, name}]
	}
	var pl *changedPlaces
	if since != nil {
		pl = t.locate(snap, sinceKeys)
	}
	if err := t.validate(&cfg, snap, changed, since == nil, pl); err != nil {
		t.ok = false
		return nil, err
	}
	if t.old == nil {
		t.old = map[*svcPort]*portFrag{}
	}
	clear(t.old)
	t.dirty, t.reshaped = t.dirty[:0], false
	t.update(snap, changed, sinceKeys, pl)
	g := newGenContextTotal(&t.cfg, t.total)
	same := !t.reshaped && g.largeCluster == t.large
	if g.largeCluster != t.large {
		clear(t.frags) // every endpoint rule gains or loses its comment
		t.large = g.largeCluster
	}
	// The ports recomputed: those whose rules come out as they were keep
	// their old rules (the same fragment); those whose rules are the
	// same but not their description (an endpoint terminating, unused,
	// then gone) are described anew.
	var described [][2]*portFrag // old, new
	same = same && len(t.dirty) <= maxCompared
	for _, sp := range t.dirty {
		if !same {
			break // (the ports are not all t.ports' when reshaped)
		}
		if t.frags[sp] != nil {
			continue
		}
		f := g.port(sp, t.eps[sp.key()])
		switch o := t.old[sp]; {
		case o != nil && reflect.DeepEqual(o, f):
			f = o
		case o != nil && sameRules(o, f):
			described = append(described, [2]*portFrag{o, f})
		default:
			same = false
		}
		t.frags[sp] = f
	}
	clear(t.old)
	if same && known && t.last != nil && t.lastKnown && (writeSet == nil) == (t.lastWrite == nil) && maps.Equal(writeSet, t.lastWrite) {
		t.ok = true
		if run := &t.run; run.ok {
			for _, sp := range t.dirty { // the same rules (the same sizes), maybe described anew
				if i, ok := run.idx[sp]; ok {
					run.frags[i] = t.frags[sp]
				} else {
					run.ok = false
				}
			}
		}
		if len(described) > 0 {
			t.last = t.last.redescribed(described)
			t.redescribed++
		}
		return t.last, nil
	}
	t.last, t.lastKnown = nil, false
	if known && writeSet != nil {
		return t.spliceWriting(g, writeSet), nil
	}
	t.run.ok = false
	r := g.begin()
	// The rules of the last sync of this kind tell how many there are
	// (no growing copies of ten thousand rules).
	sz := &t.sizes[0]
	if write != nil {
		sz = &t.sizes[1]
	}
	r.filter.rules = slices.Grow(r.filter.rules, sz[0])
	r.nat.rules = slices.Grow(r.nat.rules, sz[1])
	r.frags = slices.Grow(r.frags, len(t.ports))
	for _, sp := range t.ports {
		f := t.frags[sp]
		if f == nil {
			f = g.port(sp, t.eps[sp.key()])
			t.frags[sp] = f
		}
		g.apply(r, f, write == nil || write(sp.svc.Namespace, sp.svc.Name))
	}
	g.finish(r)
	*sz = [2]int{len(r.filter.rules) + 8, len(r.nat.rules) + 8}
	r.Partial = write != nil
	t.ok = true
	t.last, t.lastKnown = r, known
	t.lastWrite = nil
	if known && writeSet != nil {
		t.lastWrite = maps.Clone(writeSet)
	}
	return r, nil
}

// spliceWriting is the end of generate for a partial sync writing the
// chains of the Services in write: the service ports' rules from t.run
// (made anew when the ports changed or their rules changed size), and
// the chains of the ports of the Services written.
func (t *Tracker) spliceWriting(g *genContext, write map[string]bool) *Rules {
	run := &t.run
	if run.ok && !t.reshaped && run.large == g.largeCluster {
		for _, sp := range t.dirty {
			i, ok := run.idx[sp]
			f := t.frags[sp]
			if f == nil {
				f = g.port(sp, t.eps[sp.key()])
				t.frags[sp] = f
			}
			if !ok || len(f.filter.rules) != run.fOff[i+1]-run.fOff[i] || f.natTop != run.nOff[i+1]-run.nOff[i] {
				run.ok = false
				break
			}
			run.frags[i] = f
			copy(run.filter[run.fOff[i]:], f.filter.rules)
			copy(run.nat[run.nOff[i]:], f.nat.rules[:f.natTop])
		}
	} else {
		run.ok = false
	}
	if !run.ok {
		t.runMade++
		*run = portRun{ok: true, large: g.largeCluster, frags: make([]*portFrag, len(t.ports)),
			fOff: make([]int, len(t.ports)+1), nOff: make([]int, len(t.ports)+1), idx: make(map[*svcPort]int, len(t.ports)),
			filter: make([]rule, 0, t.sizes[1][0]), nat: make([]rule, 0, t.sizes[1][1])}
		for i, sp := range t.ports {
			f := t.frags[sp]
			if f == nil {
				f = g.port(sp, t.eps[sp.key()])
				t.frags[sp] = f
			}
			run.frags[i], run.idx[sp] = f, i
			run.fOff[i], run.nOff[i] = len(run.filter), len(run.nat)
			run.filter = append(run.filter, f.filter.rules...)
			run.nat = append(run.nat, f.nat.rules[:f.natTop]...)
		}
		run.fOff[len(t.ports)], run.nOff[len(t.ports)] = len(run.filter), len(run.nat)
	}
	// The ports written, in t.ports order.
	var own []int
	for k, v := range write {
		ns, name, ok := strings.Cut(k, "/")
		if !v || !ok {
			continue
		}
		if ts := t.services[nsName{ns, name}]; ts != nil {
			for _, sp := range ts.ports {
				if i, ok := run.idx[sp]; ok {
					own = append(own, i)
				}
			}
		}
	}
	slices.Sort(own)
	own = slices.Compact(own)
	r := g.begin()
	sz := &t.sizes[1]
	r.filter.rules = slices.Grow(r.filter.rules, sz[0])
	// The ports written add their own chains' rules to the last run's
	// (a batch of new Services: thousands), and their rules.
	nat := len(run.nat)
	for _, i := range own {
		nat += len(run.frags[i].nat.rules) - run.frags[i].natTop
	}
	r.nat.rules = slices.Grow(r.nat.rules, max(sz[1], nat+8))
	r.Services = slices.Grow(r.Services, len(own))
	r.frags = append(slices.Grow(r.frags, len(run.frags)), run.frags...)
	r.filter.rules = append(r.filter.rules, run.filter...)
	from := 0
	for _, i := range own {
		r.nat.rules = append(r.nat.rules, run.nat[run.nOff[from]:run.nOff[i]]...)
		g.applyOwn(r, run.frags[i])
		from = i + 1
	}
	r.nat.rules = append(r.nat.rules, run.nat[run.nOff[from]:]...)
	g.finish(r)
	*sz = [2]int{len(r.filter.rules) + 8, len(r.nat.rules) + 8}
	r.Partial = true
	t.ok = true
	t.spliced++
	t.last, t.lastKnown = r, true
	t.lastWrite = maps.Clone(write)
	return r
}

// reset empties the tracker, for cfg.
func (t *Tracker) reset(cfg Config) {
	*t = Tracker{AnyNode: t.AnyNode, Index: t.Index, indexed: t.indexed, cfg: cfg, services: map[nsName]*trackedService{},
		eps: map[svcPortKey][]*endpoint{}, frags: map[*svcPort]*portFrag{}}
}

// validate is validateSnapshot for the Services changed (the others were
// valid at the last sync, with the same configuration): the same first
// error. Unless all changed, only the Services changed are checked for
// duplicates too: a Service whose name is taken twice differs from what
// the last sync saw (one Service of that name), so it is among them, and
// the unchanged ones were unique. With pl (where the Services changed
// are, from Index: each is there once), only their entries are read, in
// the snapshot's order.
func (t *Tracker) validate(cfg *Config, snap Snapshot, changed func(ns, name string) bool, all bool, pl *changedPlaces) error {
	if err := validateConfig(cfg); err != nil {
		return err
	}
	if pl != nil && !all {
		for _, i := range pl.svcs {
			if err := validateService(cfg, &snap.Services[i]); err != nil {
				return err
			}
		}
		for _, r := range pl.slices {
			for i := r[0]; i < r[0]+r[1]; i++ {
				if err := validateSlice(&snap.EndpointSlices[i], i); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if t.seen == nil || len(t.seen) > 2*len(snap.Services)+64 {
		t.seen = make(map[nsName]uint64, len(snap.Services)) // (Services deleted are let go)
	}
	t.seenAt++
	seen, at := t.seen, t.seenAt
	for i := range snap.Services {
		s := &snap.Services[i]
		if changed(s.Namespace, s.Name) {
			if err := validateService(cfg, s); err != nil {
				return err
			}
		} else if !all {
			continue
		}
		k := nsName{s.Namespace, s.Name}
		if seen[k] == at {
			return &ValidationError{Kind: "Service", Object: s.Namespace + "/" + s.Name, Field: "metadata.name", Value: s.Name, Reason: "Duplicate value: a Service with this name already exists in the snapshot"}
		}
		seen[k] = at
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
//
// keys, when not nil, are the Services changed (else every one is); pl,
// when not nil, is where they are in snap (only their entries are read).
func (t *Tracker) update(snap Snapshot, changed func(ns, name string) bool, keys map[nsName]bool, pl *changedPlaces) {
	// The Services changed, as they are now (nil: deleted, or slices
	// without their Service).
	now := map[nsName]*Service{}
	var slicesNow []EndpointSlice
	addSlice := func(es *EndpointSlice) {
		slicesNow = append(slicesNow, *es)
		if k := (nsName{es.Namespace, es.ServiceName}); now[k] == nil {
			now[k] = nil
		}
	}
	if pl != nil && keys != nil {
		for _, i := range pl.svcs {
			s := &snap.Services[i]
			now[nsName{s.Namespace, s.Name}] = s
		}
		for _, r := range pl.slices {
			for i := r[0]; i < r[0]+r[1]; i++ {
				addSlice(&snap.EndpointSlices[i])
			}
		}
	} else {
		for i := range snap.Services {
			s := &snap.Services[i]
			if changed(s.Namespace, s.Name) {
				now[nsName{s.Namespace, s.Name}] = s
			}
		}
		for i := range snap.EndpointSlices {
			if es := &snap.EndpointSlices[i]; changed(es.Namespace, es.ServiceName) {
				addSlice(es)
			}
		}
	}
	if keys != nil {
		for k := range keys {
			if _, ok := now[k]; !ok && t.services[k] != nil {
				now[k] = nil
			}
		}
	} else {
		for k := range t.services {
			if _, ok := now[k]; !ok {
				now[k] = nil
			}
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
			if f := t.frags[sp]; f != nil {
				t.old[sp] = f
				t.dirty = append(t.dirty, sp)
			}
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
		t.reshaped = true
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

// maxCompared is the most service ports recomputed whose rules a
// Generate compares with their old ones (a sync of a few Services
// changed; past it, the rules are written anew).
const maxCompared = 64

// sameRules reports whether two fragments of a service port write the
// same rules and chains (their descriptions may differ).
func sameRules(a, b *portFrag) bool {
	return a.natTop == b.natTop && reflect.DeepEqual(a.filter, b.filter) && reflect.DeepEqual(a.nat, b.nat) &&
		reflect.DeepEqual(a.chains, b.chains) && reflect.DeepEqual(a.udp, b.udp)
}

// redescribed returns a copy of r whose fragments pairs[i][0] are
// pairs[i][1], which write the same rules (sameRules): the same tables
// and chains, the service ports described by the new ones.
func (r *Rules) redescribed(pairs [][2]*portFrag) *Rules {
	out := *r
	out.frags = slices.Clone(r.frags)
	out.Services = slices.Clone(r.Services)
	for _, p := range pairs {
		i := slices.Index(out.frags, p[0])
		if i < 0 {
			continue
		}
		out.frags[i] = p[1]
		old := &p[0].spr
		for j := range out.Services {
			if s := &out.Services[j]; s.Namespace == old.Namespace && s.Name == old.Name && s.PortName == old.PortName && s.Protocol == old.Protocol {
				out.Services[j] = p[1].spr
				break
			}
		}
	}
	return &out
}
