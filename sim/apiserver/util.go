package apiserver

//lint:file-ignore SA1019 the API server still writes the Endpoints object of default/kubernetes (v1.33)

import (
	"fmt"
	"hash/maphash"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func newInvalid(k Kind, name string, errs ...*field.Error) error {
	return apierrors.NewInvalid(k.GroupKind(), name, field.ErrorList(errs))
}

// kubernetesService is the default/kubernetes Service the API server keeps:
// the first address of the service range, port https 443 → 6443.
func (s *Server) kubernetesService() *corev1.Service {
	first := s.cfg.ServiceCIDR.Masked().Addr().Next()
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: first.String(),
			Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443,
				TargetPort: intstr.FromInt32(s.cfg.SecurePort)}},
		},
	}
}

// SetKubernetesEndpoints points default/kubernetes at addr:6443, as the
// API server's endpoint reconciler does for its --advertise-address: the
// Endpoints object and the EndpointSlice named kubernetes.
func (s *Server) SetKubernetesEndpoints(addr netip.Addr) error {
	port := s.cfg.SecurePort
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: addr.String()}},
			Ports: []corev1.EndpointPort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}}}},
	}
	if err := s.upsert(ep); err != nil {
		return err
	}
	return s.upsert(KubernetesEndpointSlice(addr, port))
}

func (s *Server) upsert(o Object) error {
	old, err := s.Get(KindOf(o), o.GetNamespace(), o.GetName())
	if err == nil {
		o.SetResourceVersion(old.GetResourceVersion())
		_, err = s.Update(o)
		return err
	}
	_, err = s.Create(o)
	return err
}

// Record stores a corev1.Event about obj, as a component's event recorder
// does (type Normal or Warning; reason; message). Repeats of the same
// reason and message for the same object bump its count, as the client-side
// event correlator does.
func (s *Server) Record(obj Object, component, eventType, reason, message string) {
	kind := KindOf(obj)
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := metav1.NewTime(s.Now())
	dk := eventDedup{obj.GetUID(), ns, reason, message}
	h := s.events.hash(dk)
	r, ok, slotFree := s.events.findAt(h, dk)
	if ok {
		name := r.key
		if r.compact {
			name = s.compact.at(r.slot).key()
			s.expandEvents() // a repeat: written as an update, in full
		} else if _, pending := s.compact.find(name); pending {
			s.expandEvents()
		}
		if o, ok := s.objs["Event"][name]; ok {
			c := o.(*corev1.Event).DeepCopy()
			c.Count++
			c.LastTimestamp = now
			_, _ = s.write(c, false, false)
			return
		}
	}
	k, _ := LookupKind(kind)
	// The name is "<object>.<now in ns, hex>" and the key it is stored
	// under "<namespace>/<name>": the key is made in the scratch buffer,
	// probed there (looking a map up by string(bytes) makes no string),
	// made one string, and the name is its tail (a compact Event keeps
	// what it is made of instead).
	nanos := s.Now().UnixNano()
	b := append(append(s.keyBuf[:0], ns...), '/')
	b = strconv.AppendInt(append(append(b, obj.GetName()...), '.'), nanos, 16)
	base := len(b)
	if t := &s.evTaken; t.rev == s.rev && string(t.base) == string(b) {
		// The last event recorded, with nothing written since, took
		// this name or one of its zeros: those before it are taken.
		for range t.n {
			b = append(b, '0')
		}
	}
	var kh uint64 // b's hash in the compact store, and whether no key holds it
	var khFree bool
	for {
		if _, taken := s.objs["Event"][string(b)]; !taken {
			var c *compactEvent
			if c, kh, khFree = s.compact.lookup(b); c == nil {
				break
			}
		}
		b = append(b, '0')
	}
	klen := len(b)
	if !s.eager && s.tx == nil && len(s.watches["Event"]) == 0 && isDNSLabel(ns) {
		// What createAt would check, allocate and store, kept compactly
		// until the kind is read: no watcher hears of it, no
		// transaction can undo it, its metadata is valid (else the key
		// made here is let go, and the Event stored in full).
		s.keyBuf = b
		if text, ok := s.eventTextOf(eventText{kind, eventType, component, reason}); ok && isDNSSubdomain(unsafe.String(&b[len(ns)+1], klen-len(ns)-1)) {
			if s.compact.hash == nil {
				s.compact = newCompactStore()
			}
			s.made = madeIDs{}
			s.uids++
			s.rev++
			c := compactEvent{at: now.Time, ns: ns, name: obj.GetName(), rv: obj.GetResourceVersion(), uid: obj.GetUID(), msg: message,
				nanos: nanos, zeros: uint16(klen - base), uidN: s.uids, rev: s.rev, text: text, cluster: obj.GetNamespace() == ""}
			if created := s.Now(); created != now.Time {
				c.created = new(time.Time) // only here: &created would move every created to the heap
				*c.created = created
			}
			i := s.compact.add(c, kh, khFree)
			s.events.setAt(h, dk, evRef{slot: i, compact: true}, slotFree)
			s.evTaken.set(b[:base], klen-base+1, s.rev)
			return
		}
	}
	// The UID and resourceVersion it will get are made in the same
	// string (createAt checks them).
	b, n := s.nextIDs(b)
	s.keyBuf = b
	all := string(b)
	kk := all[:klen]
	s.made = madeIDs{ids: all[klen:], n: n - klen, uids: s.uids, rev: s.rev}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: kk[len(ns)+1:]},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(),
			UID: obj.GetUID(), APIVersion: k.GV.String(), ResourceVersion: obj.GetResourceVersion()},
		Reason: reason, Message: message, Type: eventType,
		Source:         corev1.EventSource{Component: component},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, _, err := s.createAt(ev, false, kk, all[klen:], true); err != nil {
		panic(fmt.Sprintf("apiserver: recording event: %v", err))
	}
	s.events.setAt(h, dk, evRef{key: kk}, slotFree)
	s.evTaken.set(b[:base], klen-base+1, s.rev)
}

// evTaken is what the last Record found of the names at its instant:
// the name base and the n names after it (each one more '0') are taken,
// as long as the store is at revision rev (nothing written since).
type evTaken struct {
	base []byte
	n    int
	rev  uint64
}

// set records that base and the n-1 names after it are taken at rev.
func (t *evTaken) set(base []byte, n int, rev uint64) {
	t.base, t.n, t.rev = append(t.base[:0], base...), n, rev
}

// eventDedup is what the event correlator counts repeats by: the
// involved object, the event's namespace, reason and message.
type eventDedup struct {
	uid                    types.UID
	namespace, reason, msg string
}

func eventKey(ev *corev1.Event) eventDedup {
	return eventDedup{ev.InvolvedObject.UID, ev.Namespace, ev.Reason, ev.Message}
}

// eventIndex is the correlator's memory: the event recorded last for
// each dedup key, by its key ("namespace/name"), or by its place in the
// compact store while it is compact (evRef). It is kept by a 64-bit hash
// of the dedup key, and an entry is taken only when the stored event it
// names has that dedup key (a dedup key whose hash another one holds is
// kept in more): an entry of one word and, for a compact Event, a place
// (no pointer for the collector to follow, no key string kept) instead of
// five strings, for the 450,000 events of 150,000 pods. A hash is held by
// one entry, of byHash or of compact; a dedup key in more is in one of
// more and moreCompact. The answers do not depend on the hash (its seed
// is random): only where a key is kept.
type eventIndex struct {
	s           *Server
	hash        func(eventDedup) uint64
	byHash      map[uint64]string
	compact     map[uint64]uint32
	more        map[eventDedup]string
	moreCompact map[eventDedup]uint32
}

// evRef names an event: the compact Event at place slot of the compact
// store, or the event stored under key.
type evRef struct {
	key     string
	slot    uint32
	compact bool
}

func newEventIndex(s *Server) *eventIndex {
	seed := maphash.MakeSeed()
	hash := s.dedupHash
	if hash == nil {
		hash = func(dk eventDedup) uint64 { return maphash.Comparable(seed, dk) }
	}
	return &eventIndex{s: s, hash: hash, byHash: map[uint64]string{}, compact: map[uint64]uint32{}}
}

// holds reports whether the stored event r names has dedup key dk.
func (x *eventIndex) holds(r evRef, dk eventDedup) bool {
	if r.compact {
		return x.s.dedup(x.s.compact.at(r.slot)) == dk
	}
	if o, ok := x.s.objs["Event"][r.key]; ok {
		return eventKey(o.(*corev1.Event)) == dk
	}
	c, ok := x.s.compact.find(r.key)
	return ok && x.s.dedup(c) == dk
}

// heldByOther reports whether the stored event r names has a dedup key
// other than dk.
func (x *eventIndex) heldByOther(r evRef, dk eventDedup) bool {
	if r.compact {
		return x.s.dedup(x.s.compact.at(r.slot)) != dk
	}
	if o, ok := x.s.objs["Event"][r.key]; ok {
		return eventKey(o.(*corev1.Event)) != dk
	}
	c, ok := x.s.compact.find(r.key)
	return ok && x.s.dedup(c) != dk
}

// holder is the entry holding hash h, if any.
func (x *eventIndex) holder(h uint64) (evRef, bool) {
	if i, ok := x.compact[h]; ok {
		return evRef{slot: i, compact: true}, true
	}
	k, ok := x.byHash[h]
	return evRef{key: k}, ok
}

// hold makes r the entry holding hash h.
func (x *eventIndex) hold(h uint64, r evRef) {
	if r.compact {
		x.compact[h] = r.slot
		if len(x.byHash) > 0 {
			delete(x.byHash, h)
		}
		return
	}
	x.byHash[h] = r.key
	if len(x.compact) > 0 {
		delete(x.compact, h)
	}
}

// inMore is dk's entry in more, if any.
func (x *eventIndex) inMore(dk eventDedup) (evRef, bool) {
	if i, ok := x.moreCompact[dk]; ok {
		return evRef{slot: i, compact: true}, true
	}
	k, ok := x.more[dk]
	return evRef{key: k}, ok
}

// setMore makes r dk's entry in more.
func (x *eventIndex) setMore(dk eventDedup, r evRef) {
	x.dropMore(dk)
	if r.compact {
		if x.moreCompact == nil {
			x.moreCompact = map[eventDedup]uint32{}
		}
		x.moreCompact[dk] = r.slot
		return
	}
	if x.more == nil {
		x.more = map[eventDedup]string{}
	}
	x.more[dk] = r.key
}

// dropMore deletes dk's entry in more.
func (x *eventIndex) dropMore(dk eventDedup) {
	if len(x.more) > 0 {
		delete(x.more, dk)
	}
	if len(x.moreCompact) > 0 {
		delete(x.moreCompact, dk)
	}
}

// same reports whether a and b name the same event.
func (x *eventIndex) same(a, b evRef) bool {
	if a.compact != b.compact {
		// A compact Event and a key: the same when it is its key.
		if a.compact {
			a, b = b, a
		}
		c, ok := x.s.compact.find(a.key)
		return ok && c == x.s.compact.at(b.slot)
	}
	if a.compact {
		return a.slot == b.slot
	}
	return a.key == b.key
}

// find returns the event recorded for dk (one that may have been deleted
// since, as the correlator's cache may hold), if any.
func (x *eventIndex) find(dk eventDedup) (evRef, bool) {
	r, ok, _ := x.findAt(x.hash(dk), dk)
	return r, ok
}

// findAt is find of dk, whose hash is h; free reports that no dedup key
// holds h (setAt then need not look again).
func (x *eventIndex) findAt(h uint64, dk eventDedup) (r evRef, ok, free bool) {
	r, held := x.holder(h)
	if held && x.holds(r, dk) {
		return r, true, false
	}
	r, ok = x.inMore(dk)
	return r, ok, !held
}

// set records r as the event for dk.
func (x *eventIndex) set(dk eventDedup, r evRef) { x.setAt(x.hash(dk), dk, r, false) }

// setAt is set of dk, whose hash is h; free: findAt found h free, and
// nothing was set since.
func (x *eventIndex) setAt(h uint64, dk eventDedup, r evRef, free bool) {
	if free {
		x.hold(h, r)
		x.dropMore(dk)
		return
	}
	if old, ok := x.holder(h); ok && !x.same(old, r) {
		if x.heldByOther(old, dk) {
			// Another dedup key's event holds the hash.
			x.setMore(dk, r)
			return
		}
	}
	x.hold(h, r)
	x.dropMore(dk)
}

// expanded makes the entries naming the compact Event c, at place slot,
// name it by its key k: it is stored in full now (expandEvents).
func (x *eventIndex) expanded(c *compactEvent, slot uint32, k string) {
	dk := x.s.dedup(c)
	h := x.hash(dk)
	if i, ok := x.compact[h]; ok && i == slot {
		delete(x.compact, h)
		x.byHash[h] = k
	}
	if i, ok := x.moreCompact[dk]; ok && i == slot {
		delete(x.moreCompact, dk)
		if x.more == nil {
			x.more = map[eventDedup]string{}
		}
		x.more[dk] = k
	}
}

// compactReset forgets every entry naming a compact Event (the compact
// store is empty: expanded names them all by key).
func (x *eventIndex) compactReset() {
	clear(x.compact)
	x.moreCompact = nil
}

// EventsFor returns the events about the object of kind namespace/name,
// oldest first.
func (s *Server) EventsFor(kind, namespace, name string) []*corev1.Event {
	var out []*corev1.Event
	for _, o := range s.ByIndex("Event", IndexInvolved, kind+"/"+namespace+"/"+name) {
		out = append(out, o.(*corev1.Event))
	}
	slices.SortStableFunc(out, func(a, b *corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return out
}

// KubernetesEndpointSlice is the EndpointSlice the API server writes for
// default/kubernetes.
func KubernetesEndpointSlice(addr netip.Addr, port int32) *discoveryv1.EndpointSlice {
	name, proto, ready := "https", corev1.ProtocolTCP, true
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
}
