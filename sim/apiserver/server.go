// Package apiserver is kubewalk's in-memory Kubernetes API server: a store
// of k8s.io/api objects with the validation, defaulting and allocation that
// matter to networking (ClusterIPs, NodePorts), the real API server's error
// texts and field paths, resourceVersions from one store revision, and
// watches delivered in write order.
//
// Modelled on kube-apiserver v1.33–v1.35 with etcd3 storage: the
// resourceVersion is the store revision in decimal, shared by all kinds;
// a list is sorted by namespace, then name; deleting an object delivers its
// last state to watchers. Watch callbacks run synchronously, in write
// order, from the call that wrote; controllers queue their reactions on
// the world's event queue, so no goroutine, lock or map order is involved.
package apiserver

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewalk/kubewalk/internal/textarena"
)

// Config is what kube-apiserver is started with, as kubeadm sets it.
type Config struct {
	// ServiceCIDR is --service-cluster-ip-range (kubeadm: 10.96.0.0/12).
	ServiceCIDR netip.Prefix
	// NodePortRange is --service-node-port-range (30000-32767).
	NodePortLo, NodePortHi int
	// AdvertiseAddress is --advertise-address: the endpoint of the
	// default/kubernetes Service, port 6443.
	AdvertiseAddress netip.Addr
	// SecurePort is --secure-port (6443).
	SecurePort int32
}

// Server is the in-memory API server. Its clock and random source are the
// world's: creationTimestamps are virtual, and allocation is seeded.
type Server struct {
	cfg   Config
	clock func() time.Time
	rng   *rand.Rand

	rev     uint64
	objs    map[string]map[string]Object // kind → "ns/name" → stored object (never mutated)
	watches map[string][]watcher
	uids    uint64

	indexers map[string]map[string]IndexFunc                      // kind → index → func
	indexes  map[string]map[string]map[string]map[string]struct{} // kind → index → value → keys
	events   *eventIndex                                          // event dedup key → event key

	tx *txn // open transaction, if any
	// keyBuf is scratch space for keys looked up without being kept;
	// idxBuf for index values (addPodLabels).
	keyBuf, idxBuf []byte
	// podLabels: the Pod label index is initIndexes' own (podLabelValues).
	// labelsKept counts the writes that left it as it was (same
	// namespace and labels), for tests.
	podLabels  bool
	labelsKept int
	// valuesKept counts the writes reindex left an index alone at (the
	// values the same), for tests; moveAll, set by a test, makes it move
	// every key instead, as it did before: the reference.
	valuesKept int
	moveAll    bool
	// copyAll: DisableSharing was called.
	copyAll bool
	// evTaken is the names the last Record found taken.
	evTaken evTaken
	// made is the UID and resourceVersion text nextIDs last made, and at
	// which counters: createAt takes a guess that is that text, at the
	// same counters, without making it again.
	made madeIDs
	// compact holds the Events recorded and not yet read: see
	// compactEvent. Every read of the kind Event (objsOf) expands them
	// into objs first.
	compact compactStore
	// eventTexts are the compact Events' kinds, types, components and
	// reasons, each once; eventTextIdx finds one.
	eventTexts   []eventText
	eventTextIdx map[eventText]uint32
	// eager: Events are stored in full as they are recorded (EagerEvents).
	eager bool
	// texts holds the UIDs, resourceVersions and keys made.
	texts textarena.Arena
	// dedupHash, set by tests, replaces the event correlator's hash.
	dedupHash func(eventDedup) uint64
}

// madeIDs is the text nextIDs made (UID then resourceVersion, the UID's
// length n) when the counters were uids and rev.
type madeIDs struct {
	ids       string
	n         int
	uids, rev uint64
}

// DisableSharing makes the server copy wherever it would share its stored
// objects or keep a caller's: Peek and PeekByIndexFunc return copies,
// read-only watchers get the copy the others get, Submit and WriteStatus
// copy what they are handed. It is the reference the sharing is compared
// with (what every caller saw before it was introduced).
func (s *Server) DisableSharing() { s.copyAll = true; s.EagerEvents() }

type txn struct {
	undo    []undo
	rev     uint64
	uids    uint64
	pending []pendingEvent
}

type pendingEvent struct {
	kind string
	ev   watch.Event
}

// Epoch is the wall-clock instant virtual time zero stands for in object
// timestamps (creationTimestamp, event times).
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// New returns an API server whose clock is now and whose allocators draw
// from rng. It creates the namespaces a kubeadm cluster starts with
// (default, kube-system, kube-public, kube-node-lease) and the
// default/kubernetes Service (the first address of the service range,
// port 443 to the advertise address :6443).
func New(cfg Config, now func() time.Time, rng *rand.Rand) (*Server, error) {
	if !cfg.ServiceCIDR.IsValid() {
		cfg.ServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")
	}
	if cfg.NodePortLo == 0 && cfg.NodePortHi == 0 {
		cfg.NodePortLo, cfg.NodePortHi = 30000, 32767
	}
	cfg.SecurePort = cmp.Or(cfg.SecurePort, 6443)
	s := &Server{cfg: cfg, clock: now, rng: rng, objs: map[string]map[string]Object{}, watches: map[string][]watcher{}}
	s.events = newEventIndex(s)
	s.initIndexes()
	for _, ns := range []string{"default", "kube-node-lease", "kube-public", "kube-system"} {
		if _, err := s.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	if _, err := s.Create(s.kubernetesService()); err != nil {
		return nil, err
	}
	if cfg.AdvertiseAddress.IsValid() {
		if err := s.SetKubernetesEndpoints(cfg.AdvertiseAddress); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Config returns the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// Now is the world's virtual clock as wall time (Epoch + virtual time).
func (s *Server) Now() time.Time { return s.clock() }

// ResourceVersion is the store's current revision.
func (s *Server) ResourceVersion() string { return strconv.FormatUint(s.rev, 10) }

func key(ns, name string) string { return ns + "/" + name }

// isKey reports whether k is key(ns, name), without making that key.
func isKey(k, ns, name string) bool {
	return len(k) == len(ns)+1+len(name) && k[:len(ns)] == ns && k[len(ns)] == '/' && k[len(ns)+1:] == name
}

func (s *Server) kind(name string) (Kind, error) {
	k, ok := LookupKind(name)
	if !ok {
		return Kind{}, apierrors.NewBadRequest(fmt.Sprintf("the server doesn't have a resource type %q", name))
	}
	return k, nil
}

// watcher is one Watch callback; readOnly ones promise not to modify the
// object they are given, so they may be handed the stored object itself.
type watcher struct {
	fn       func(watch.Event)
	readOnly bool
}

// Watch registers fn for every change to objects of kind, delivered
// synchronously in write order (after a transaction commits, for writes
// made inside one). The object fn is given is its own copy.
func (s *Server) Watch(kind string, fn func(watch.Event)) {
	s.watches[kind] = append(s.watches[kind], watcher{fn: fn})
}

// WatchReadOnly is Watch for a callback that never modifies the object it
// is given (an informer's handler that only reads it or keeps it as its
// cache's copy): it is handed the stored object, which the server never
// modifies either (a write stores a new object), and no copy is made.
func (s *Server) WatchReadOnly(kind string, fn func(watch.Event)) {
	s.watches[kind] = append(s.watches[kind], watcher{fn: fn, readOnly: true})
}

// notify delivers obj, the object as stored (never modified afterwards),
// to the watchers of kind: the read-only ones get obj, the others one copy
// made for them.
func (s *Server) notify(kind string, t watch.EventType, obj Object) {
	if s.tx != nil {
		s.tx.pending = append(s.tx.pending, pendingEvent{kind, watch.Event{Type: t, Object: obj}})
		return
	}
	s.deliver(kind, watch.Event{Type: t, Object: obj})
}

func (s *Server) deliver(kind string, ev watch.Event) {
	ws := s.watches[kind]
	var cp runtime.Object
	for _, w := range ws {
		if (!w.readOnly || s.copyAll) && cp == nil {
			cp = ev.Object.DeepCopyObject()
		}
	}
	for _, w := range ws {
		if w.readOnly && !s.copyAll {
			w.fn(ev)
		} else {
			w.fn(watch.Event{Type: ev.Type, Object: cp})
		}
	}
}

// Peek returns the stored object itself, without the copy Get makes, for
// a caller that only reads it: it must not be modified (the server never
// modifies a stored object either: a write stores a new one, so what Peek
// returned stays the state it was).
func (s *Server) Peek(kind, namespace, name string) (Object, bool) {
	k, ok := LookupKind(kind)
	if !ok {
		return nil, false
	}
	if !k.Namespaced {
		namespace = ""
	}
	// The key is made on the stack: a lookup by string(bytes) makes no
	// string, and the kubelet peeks at a pod five times as it starts it.
	var buf [96]byte
	b := append(append(append(buf[:0], namespace...), '/'), name...)
	o, ok := s.objsOf(kind)[string(b)]
	if ok && s.copyAll {
		o = o.DeepCopyObject().(Object)
	}
	return o, ok
}

// Get returns a copy of the stored object, or a NotFound error in the API
// server's words (`pods "web" not found`).
func (s *Server) Get(kind, namespace, name string) (Object, error) {
	k, err := s.kind(kind)
	if err != nil {
		return nil, err
	}
	if !k.Namespaced {
		namespace = ""
	}
	o, ok := s.objsOf(kind)[key(namespace, name)]
	if !ok {
		return nil, apierrors.NewNotFound(k.GroupResource(), name)
	}
	return o.DeepCopyObject().(Object), nil
}

// List returns copies of the objects of kind in namespace ("" for all),
// sorted by namespace, then name.
func (s *Server) List(kind, namespace string) []Object {
	m := s.objsOf(kind)
	keys := make([]string, 0, len(m))
	for k, o := range m {
		if namespace == "" || o.GetNamespace() == namespace {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]Object, len(keys))
	for i, k := range keys {
		out[i] = m[k].DeepCopyObject().(Object)
	}
	return out
}

// ListFunc returns the stored objects of kind for which keep returns true,
// without copying: keep must not modify them.
func (s *Server) ListFunc(kind string, keep func(Object) bool) []Object {
	m := s.objsOf(kind)
	keys := make([]string, 0)
	for k, o := range m {
		if keep(o) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]Object, len(keys))
	for i, k := range keys {
		out[i] = m[k].DeepCopyObject().(Object)
	}
	return out
}

// Count returns the number of stored objects of kind.
func (s *Server) Count(kind string) int { return len(s.objsOf(kind)) }

// Create stores a new object after defaulting, allocation and validation,
// and returns the stored copy.
func (s *Server) Create(obj Object) (Object, error) {
	return s.create(obj.DeepCopyObject().(Object), true)
}

// Submit is Create for a caller that hands obj over and does not need the
// stored copy back (a component posting an object it built for the
// purpose): the server may keep obj itself, so the caller must not use it
// afterwards.
func (s *Server) Submit(obj Object) error {
	if s.copyAll {
		obj = obj.DeepCopyObject().(Object)
	}
	_, err := s.create(obj, false)
	return err
}

// SubmitAt is Submit of an object whose key ("namespace/name") the
// caller has made and keeps (a kubelet's pod key): the store and its
// indexes keep that string instead of making one, so that one string
// serves both. A key that is not obj's is let go and one made.
func (s *Server) SubmitAt(obj Object, key string) error {
	if s.copyAll {
		obj = obj.DeepCopyObject().(Object)
	}
	_, _, err := s.createAt(obj, false, key, "", false)
	return err
}

// create is Create of an object the server may keep as it is (a copy, or
// one the caller made for it); it returns a copy of the stored object
// only when result is set.
func (s *Server) create(obj Object, result bool) (Object, error) {
	o, _, err := s.createKeyed(obj, result)
	return o, err
}

// createKeyed is create, returning too the key ("namespace/name") the
// object is stored under: the store's own string, for a caller that keeps
// the key (the event correlator) without making another.
func (s *Server) createKeyed(obj Object, result bool) (Object, string, error) {
	return s.createAt(obj, result, "", "", false)
}

// createAt is createKeyed for an object whose key the caller made (its
// namespace and name set, neither to be defaulted or generated), so that
// the store keeps that string; "" makes it here. ids is the caller's
// guess at the object's UID and resourceVersion as nextIDs writes them
// (a part of a string it made anyway), taken if it is right; "" or a
// wrong guess makes them here, in one string. free says the caller has
// just found kk free in the store (the event recorder, which probes for
// a free name): it is not looked up again.
func (s *Server) createAt(obj Object, result bool, kk, ids string, free bool) (Object, string, error) {
	kind := KindOf(obj)
	k, err := s.kind(kind)
	if err != nil {
		return nil, "", err
	}
	if k.Namespaced {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
	} else {
		obj.SetNamespace("")
	}
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(s.generateName(kind, obj.GetNamespace(), obj.GetGenerateName()))
	}
	if obj.GetResourceVersion() != "" {
		return nil, "", apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	st := strategies[kind]
	if st.defaults != nil {
		st.defaults(s, obj)
	}
	if errs := s.validateMeta(k, obj); len(errs) > 0 {
		return nil, "", apierrors.NewInvalid(k.GroupKind(), obj.GetName(), errs)
	}
	if k.Namespaced && kind != "Event" {
		ns, ok := s.objs["Namespace"][key("", obj.GetNamespace())]
		if !ok {
			return nil, "", apierrors.NewNotFound(corev1.Resource("namespaces"), obj.GetNamespace())
		}
		if ns.(*corev1.Namespace).DeletionTimestamp != nil {
			return nil, "", apierrors.NewForbidden(k.GroupResource(), obj.GetName(),
				fmt.Errorf("unable to create new content in namespace %s because it is being terminated", obj.GetNamespace()))
		}
	}
	if !isKey(kk, obj.GetNamespace(), obj.GetName()) {
		var buf [96]byte
		kk, free = s.texts.Text(append(append(append(buf[:0], obj.GetNamespace()...), '/'), obj.GetName()...)), false
	}
	if !free {
		if _, ok := s.objsOf(kind)[kk]; ok {
			return nil, "", apierrors.NewAlreadyExists(k.GroupResource(), obj.GetName())
		}
	}
	if st.validate != nil {
		if errs := st.validate(s, obj, nil); len(errs) > 0 {
			return nil, "", apierrors.NewInvalid(k.GroupKind(), obj.GetName(), errs)
		}
	}
	if st.allocate != nil {
		if err := st.allocate(s, obj, nil); err != nil {
			return nil, "", err
		}
	}
	var n int
	if m := s.made; ids != "" && ids == m.ids && m.uids == s.uids && m.rev == s.rev {
		n = m.n // Record's guess, made at these counters
	} else {
		var buf [64]byte
		var want []byte
		want, n = s.nextIDs(buf[:0])
		if ids != string(want) {
			ids = s.texts.Text(want)
		}
	}
	s.made = madeIDs{}
	s.uids++
	obj.SetUID(types.UID(ids[:n]))
	obj.SetCreationTimestamp(metav1.NewTime(s.Now()))
	obj.SetGeneration(1)
	obj.SetManagedFields(nil)
	s.storeNew(k, obj, kk, ids[n:])
	s.notify(kind, watch.Added, obj)
	if !result {
		return nil, kk, nil
	}
	return obj.DeepCopyObject().(Object), kk, nil
}

// uidFor is the UID of the n-th object the server creates, in the form
// "%08x-%04x-4%03x-8%03x-%012x" of its parts, formatted by hand (one
// allocation: every pod and event gets one).
func uidFor(n uint64) types.UID {
	var b [64]byte
	return types.UID(appendUID(b[:0], n))
}

// appendUID appends uidFor(n) to b.
func appendUID(b []byte, n uint64) []byte {
	at := len(b)
	b = append(b, make([]byte, 36)...)
	u := b[at:]
	hexTo(u[0:8], uint64(uint32(n*0x9e3779b1)))
	u[8] = '-'
	hexTo(u[9:13], uint64(uint16(n>>32)))
	u[13], u[14] = '-', '4'
	hexTo(u[15:18], n%0xfff)
	u[18], u[19] = '-', '8'
	hexTo(u[20:23], (n*7)%0xfff)
	u[23] = '-'
	hexTo(u[24:36], n&(1<<48-1))
	if n >= 1<<48 { // wider than %012x pads: as fmt prints it
		b = strconv.AppendUint(b[:at+24], n, 16)
	}
	return b
}

// nextIDs appends the UID of the next object created and the
// resourceVersion it is stored at (the revision after this one) to b,
// and returns where the resourceVersion starts: an object created gets
// both as one string.
func (s *Server) nextIDs(b []byte) ([]byte, int) {
	b = appendUID(b, s.uids+1)
	n := len(b)
	return strconv.AppendUint(b, s.rev+1, 10), n
}

// hexTo writes v in lower-case hex into dst, zero-padded to its length.
func hexTo(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}

func (s *Server) store(k Kind, obj Object) {
	s.storeAt(k, obj, key(obj.GetNamespace(), obj.GetName()))
}

// storeAt is store with obj's key already made.
func (s *Server) storeAt(k Kind, obj Object, kk string) { s.storeAtRV(k, obj, kk, "") }

// storeAtRV is storeAt with the new resourceVersion's text made by the
// caller ("": made here).
func (s *Server) storeAtRV(k Kind, obj Object, kk, rv string) { s.storeRV(k, obj, kk, rv, false) }

// storeNew is storeAtRV of a created object, whose key the store is known
// not to hold (createAt checked): no previous object is looked up.
func (s *Server) storeNew(k Kind, obj Object, kk, rv string) { s.storeRV(k, obj, kk, rv, true) }

func (s *Server) storeRV(k Kind, obj Object, kk, rv string, created bool) {
	s.rev++
	if rv == "" {
		var buf [20]byte
		rv = s.texts.Text(strconv.AppendUint(buf[:0], s.rev, 10))
	}
	obj.SetResourceVersion(rv)
	setTypeMeta(obj, k)
	m := s.objs[k.Name]
	if m == nil {
		m = map[string]Object{}
		s.objs[k.Name] = m
	}
	s.logUndo(k.Name, kk)
	var old Object
	if !created {
		old = m[kk]
	}
	s.reindex(k.Name, kk, old, obj)
	m[kk] = obj
}

// generateName appends five characters from the API server's alphabet
// (consonants and digits without vowels or look-alikes), drawn from the
// seeded source, until the name is free.
func (s *Server) generateName(kind, ns, base string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	if len(base) > 58 {
		base = base[:58]
	}
	for {
		b := []byte(base)
		for range 5 {
			b = append(b, alphabet[s.rng.IntN(len(alphabet))])
		}
		if _, taken := s.objsOf(kind)[key(ns, string(b))]; !taken {
			return string(b)
		}
	}
}

// GenerateName returns base plus five random characters, as the API server
// completes metadata.generateName (and as the ReplicaSet controller names
// pods).
func (s *Server) GenerateName(kind, namespace, base string) string {
	return s.generateName(kind, namespace, base)
}

// Update replaces the object's spec and metadata (status is kept: it is a
// subresource), checking resourceVersion when it is set.
func (s *Server) Update(obj Object) (Object, error) { return s.update(obj, false) }

// UpdateStatus replaces only the object's status, as a write to the status
// subresource does.
func (s *Server) UpdateStatus(obj Object) (Object, error) { return s.update(obj, true) }

// WriteStatus is UpdateStatus for a caller that hands obj over and does
// not need the stored copy back (a kubelet's status update): the server
// may keep obj itself, so the caller must not use it afterwards.
func (s *Server) WriteStatus(obj Object) error { return s.WriteStatusAt(obj, "") }

// WriteStatusAt is WriteStatus of an object whose key ("namespace/name")
// the caller holds (the one it was submitted under, SubmitAt): the store
// keeps that string instead of making another. A key that is not obj's
// (or "") is let go and one made.
func (s *Server) WriteStatusAt(obj Object, key string) error {
	if s.copyAll {
		obj = obj.DeepCopyObject().(Object)
	}
	_, err := s.writeAt(obj, true, false, key)
	return err
}

func (s *Server) update(obj Object, status bool) (Object, error) {
	return s.write(obj.DeepCopyObject().(Object), status, true)
}

// write is update of an object the server may keep as it is; it returns a
// copy of the stored object only when result is set.
func (s *Server) write(obj Object, status, result bool) (Object, error) {
	return s.writeAt(obj, status, result, "")
}

// writeAt is write with the caller's key of obj: kk when it is obj's
// ("namespace/name"), else one made here.
func (s *Server) writeAt(obj Object, status, result bool, kk string) (Object, error) {
	kind := KindOf(obj)
	k, err := s.kind(kind)
	if err != nil {
		return nil, err
	}
	ns := obj.GetNamespace()
	if !k.Namespaced {
		ns = ""
	} else if ns == "" {
		ns = metav1.NamespaceDefault
		obj.SetNamespace(ns)
	}
	if !isKey(kk, ns, obj.GetName()) {
		kk = key(ns, obj.GetName())
	}
	old, ok := s.objsOf(kind)[kk]
	if !ok {
		return nil, apierrors.NewNotFound(k.GroupResource(), obj.GetName())
	}
	if rv := obj.GetResourceVersion(); rv != "" && rv != old.GetResourceVersion() {
		return nil, apierrors.NewConflict(k.GroupResource(), obj.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	// Fields the server owns.
	obj.SetUID(old.GetUID())
	obj.SetCreationTimestamp(old.GetCreationTimestamp())
	obj.SetGeneration(old.GetGeneration())
	obj.SetManagedFields(nil)
	if old.GetDeletionTimestamp() != nil {
		obj.SetDeletionTimestamp(old.GetDeletionTimestamp())
	}
	if status {
		copySpec(obj, old)
	} else {
		copyStatus(obj, old)
		st := strategies[kind]
		if st.defaults != nil {
			st.defaults(s, obj)
		}
		if errs := s.validateMeta(k, obj); len(errs) > 0 {
			return nil, apierrors.NewInvalid(k.GroupKind(), obj.GetName(), errs)
		}
		if st.validate != nil {
			if errs := st.validate(s, obj, old); len(errs) > 0 {
				return nil, apierrors.NewInvalid(k.GroupKind(), obj.GetName(), errs)
			}
		}
		if st.allocate != nil {
			if err := st.allocate(s, obj, old); err != nil {
				return nil, err
			}
		}
		if !specEqual(obj, old) {
			obj.SetGeneration(old.GetGeneration() + 1)
		}
	}
	obj.SetResourceVersion(old.GetResourceVersion())
	setTypeMeta(obj, k)
	// A status write that changes the status is no no-op: that is found
	// comparing the status alone, before the whole object.
	if !(status && !fieldEqual(obj, old, "Status")) && apiequality.Semantic.DeepEqual(obj, old) {
		if !result {
			return nil, nil
		}
		return obj.DeepCopyObject().(Object), nil // no-op writes do not bump the revision
	}
	if obj.GetNamespace() != ns {
		kk = key(obj.GetNamespace(), obj.GetName()) // a cluster-scoped object given a namespace: stored as it always was
	}
	s.storeAt(k, obj, kk)
	s.notify(kind, watch.Modified, obj)
	if !result {
		return nil, nil
	}
	return obj.DeepCopyObject().(Object), nil
}

// fieldEqual reports whether a's and b's field name are semantically
// equal (true when the type has no such field).
func fieldEqual(a, b Object, name string) bool {
	if name == "Status" {
		// A kubelet's status write moves the phase: pods of two phases
		// have other statuses, found without reflection.
		if ap, ok := a.(*corev1.Pod); ok {
			if bp, ok := b.(*corev1.Pod); ok && ap.Status.Phase != bp.Status.Phase {
				return false
			}
		}
	}
	af := reflect.ValueOf(a).Elem().FieldByName(name)
	bf := reflect.ValueOf(b).Elem().FieldByName(name)
	if !af.IsValid() || !bf.IsValid() {
		return true
	}
	// Pointers to the fields: compared as deeply, without copying them
	// into interfaces.
	return apiequality.Semantic.DeepEqual(af.Addr().Interface(), bf.Addr().Interface())
}

// Delete removes the object and delivers its last state to watchers.
// Deleting a Namespace deletes everything in it first (the namespace
// controller's work, done at once). A Pod bound to a node is deleted
// gracefully, as with kubectl's default: it gets deletionTimestamp (now
// plus its terminationGracePeriodSeconds) and stays, Terminating, until
// its kubelet has stopped it and deletes it for good with DeleteNow.
func (s *Server) Delete(kind, namespace, name string) error {
	if kind == "Pod" {
		if namespace == "" {
			namespace = metav1.NamespaceDefault
		}
		if o, ok := s.objs[kind][key(namespace, name)]; ok {
			p := o.(*corev1.Pod)
			if p.DeletionTimestamp != nil {
				return nil // already terminating
			}
			grace := int64(30)
			if p.Spec.TerminationGracePeriodSeconds != nil {
				grace = *p.Spec.TerminationGracePeriodSeconds
			}
			if p.Spec.NodeName != "" && grace > 0 {
				c := p.DeepCopy()
				t := metav1.NewTime(s.Now().Add(time.Duration(grace) * time.Second))
				c.DeletionTimestamp = &t
				c.DeletionGracePeriodSeconds = &grace
				k, _ := LookupKind(kind)
				s.store(k, c)
				s.notify(kind, watch.Modified, c)
				return nil
			}
		}
	}
	return s.DeleteNow(kind, namespace, name)
}

// DeleteNow removes the object at once (grace period 0: the kubelet's
// final delete of a stopped pod, or kubectl delete --grace-period=0
// --force).
func (s *Server) DeleteNow(kind, namespace, name string) error {
	k, err := s.kind(kind)
	if err != nil {
		return err
	}
	if !k.Namespaced {
		namespace = ""
	} else if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	old, ok := s.objsOf(kind)[key(namespace, name)]
	if !ok {
		return apierrors.NewNotFound(k.GroupResource(), name)
	}
	if kind == "Namespace" {
		switch name {
		case "default", "kube-system", "kube-public":
			return apierrors.NewForbidden(k.GroupResource(), name, fmt.Errorf("this namespace may not be deleted"))
		}
		for _, kk := range Kinds {
			if !kk.Namespaced {
				continue
			}
			for _, o := range s.List(kk.Name, name) {
				if err := s.DeleteNow(kk.Name, name, o.GetName()); err != nil {
					return err
				}
			}
		}
	}
	s.logUndo(kind, key(namespace, name))
	delete(s.objs[kind], key(namespace, name))
	s.reindex(kind, key(namespace, name), old, nil)
	s.rev++
	last := old.DeepCopyObject().(Object)
	last.SetResourceVersion(strconv.FormatUint(s.rev, 10))
	s.notify(kind, watch.Deleted, last)
	return nil
}

// Begin opens a transaction: writes until Commit are applied to the store
// as usual, but their watch events are held back, and Abort restores the
// store as it was. Transactions do not nest.
func (s *Server) Begin() {
	if s.tx != nil {
		panic("apiserver: nested transaction")
	}
	s.tx = &txn{rev: s.rev, uids: s.uids}
}

// Commit delivers the held-back watch events in write order.
func (s *Server) Commit() {
	t := s.tx
	s.tx = nil
	for _, p := range t.pending {
		s.deliver(p.kind, p.ev)
	}
}

// Abort undoes every write since Begin; no watcher hears of them.
func (s *Server) Abort() {
	t := s.tx
	s.tx = nil
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		m := s.objs[u.kind]
		cur := m[u.key]
		if u.prev == nil {
			delete(m, u.key)
		} else {
			m[u.key] = u.prev
		}
		s.reindex(u.kind, u.key, cur, u.prev)
	}
	s.rev, s.uids = t.rev, t.uids
	s.evTaken = evTaken{} // the revision goes back: what it knew may not hold
	s.events = newEventIndex(s)
	// The events recorded compactly before Begin are not undone (a
	// transaction records in full): their keys are indexed with the rest.
	type entry struct {
		key  string
		slot int // the compact Event's place, -1 for one stored in full
	}
	var entries []entry
	for k := range s.objs["Event"] {
		entries = append(entries, entry{k, -1})
	}
	i := 0
	for c := range s.compact.all {
		entries = append(entries, entry{c.key(), i})
		i++
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range entries {
		if e.slot < 0 {
			s.events.set(eventKey(s.objs["Event"][e.key].(*corev1.Event)), evRef{key: e.key})
		} else {
			s.events.set(s.dedup(s.compact.at(uint32(e.slot))), evRef{slot: uint32(e.slot), compact: true})
		}
	}
}

// undo is one write of a transaction: the object stored before it.
type undo struct {
	kind, key string
	prev      Object
}

func (s *Server) logUndo(kind, k string) {
	if s.tx != nil {
		s.tx.undo = append(s.tx.undo, undo{kind, k, s.objs[kind][k]})
	}
}

// copyStatus sets obj's Status field (if the type has one) to old's.
func copyStatus(obj, old Object) { copyField(obj, old, "Status") }

// copySpec sets every field of obj except metadata and Status to old's.
func copySpec(obj, old Object) {
	p, ok := obj.(*corev1.Pod)
	q, ok2 := old.(*corev1.Pod)
	if ok && ok2 {
		p.Spec = q.Spec // a Pod's only such field (every status write of a kubelet)
	} else {
		copyFields(obj, old)
	}
	obj.SetLabels(old.GetLabels())
	obj.SetAnnotations(old.GetAnnotations())
	obj.SetOwnerReferences(old.GetOwnerReferences())
	obj.SetFinalizers(old.GetFinalizers())
}

// copyFields sets every field of obj except TypeMeta, ObjectMeta and
// Status to old's.
func copyFields(obj, old Object) {
	nv, ov := reflect.ValueOf(obj).Elem(), reflect.ValueOf(old).Elem()
	for i := range nv.NumField() {
		switch nv.Type().Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		nv.Field(i).Set(ov.Field(i))
	}
}

func copyField(obj, old Object, name string) {
	nf := reflect.ValueOf(obj).Elem().FieldByName(name)
	of := reflect.ValueOf(old).Elem().FieldByName(name)
	if nf.IsValid() && of.IsValid() {
		nf.Set(of)
	}
}

func specEqual(a, b Object) bool {
	av, bv := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for i := range av.NumField() {
		switch av.Type().Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !apiequality.Semantic.DeepEqual(av.Field(i).Interface(), bv.Field(i).Interface()) {
			return false
		}
	}
	return true
}

// ApplyResult is what `kubectl apply` prints for an object.
type ApplyResult string

// The results kubectl apply reports.
const (
	Created    ApplyResult = "created"
	Configured ApplyResult = "configured"
	Unchanged  ApplyResult = "unchanged"
)

// Apply creates obj, or updates the stored object with obj's metadata
// labels and annotations and everything but its status (kubectl apply's
// outcome for a manifest that owns those fields). Server-set fields the
// manifest leaves empty (clusterIP, nodePorts) are kept.
func (s *Server) Apply(obj Object) (Object, ApplyResult, error) {
	kind := KindOf(obj)
	k, err := s.kind(kind)
	if err != nil {
		return nil, "", err
	}
	ns := obj.GetNamespace()
	if !k.Namespaced {
		ns = ""
	} else if ns == "" {
		ns = metav1.NamespaceDefault
	}
	old, ok := s.objsOf(kind)[key(ns, obj.GetName())]
	if !ok {
		c := obj.DeepCopyObject().(Object)
		c.SetResourceVersion("")
		c.SetUID("")
		o, err := s.Create(c)
		return o, Created, err
	}
	c := obj.DeepCopyObject().(Object)
	c.SetNamespace(ns)
	c.SetResourceVersion("")
	before := old.GetResourceVersion()
	o, err := s.Update(c)
	if err != nil {
		return nil, "", err
	}
	if o.GetResourceVersion() == before {
		return o, Unchanged, nil
	}
	return o, Configured, nil
}

// UpdateBinding binds a pod to pod.Spec.NodeName, as a POST to the binding
// subresource does: spec.nodeName is set once, and the PodScheduled
// condition becomes True.
func (s *Server) UpdateBinding(pod *corev1.Pod) (Object, error) {
	k, _ := LookupKind("Pod")
	o, ok := s.objs["Pod"][key(pod.Namespace, pod.Name)]
	if !ok {
		return nil, apierrors.NewNotFound(k.GroupResource(), pod.Name)
	}
	old := o.(*corev1.Pod)
	if old.Spec.NodeName != "" {
		return nil, apierrors.NewConflict(k.GroupResource(), pod.Name, fmt.Errorf("pod %s is already assigned to node %q", pod.Name, old.Spec.NodeName))
	}
	c := old.DeepCopy()
	c.Spec.NodeName = pod.Spec.NodeName
	now := metav1.NewTime(s.Now())
	set := false
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == corev1.PodScheduled {
			c.Status.Conditions[i] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}
			set = true
		}
	}
	if !set {
		c.Status.Conditions = append(c.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	s.store(k, c)
	s.notify("Pod", watch.Modified, c)
	return c.DeepCopyObject().(Object), nil
}
