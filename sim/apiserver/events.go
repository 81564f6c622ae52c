package apiserver

import (
	"hash/maphash"
	"strconv"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// compactEvent is an Event Record has stored and nobody has read yet,
// kept in a slab of the compact store (compactStore) where the
// corev1.Event it stands for takes 640 bytes and an allocation: the
// kubelet records three Events for every pod it starts, and a
// 150,000-pod build reads none of its 450,000. It holds what the Event
// has of its own: its key, the involved object's name, UID and
// resourceVersion, the message, the instant, the counters that made its
// UID and resourceVersion, and the index of its kind, type, component
// and reason among those seen (eventTexts). The rest follows: its
// namespace and name from its key, the involved object's namespace (the
// Event's, or none for a cluster-scoped object) and apiVersion, count 1.
// The first read of the kind Event expands every compact Event into the
// object createAt would have stored at the time (expandEvents), and from
// then on it is stored like any other.
type compactEvent struct {
	at        time.Time  // first and last timestamp
	created   *time.Time // creationTimestamp when it is not at (a clock that moved within Record)
	ns        string     // the Event's namespace
	name, rv  string     // the involved object's
	uid       types.UID  // the involved object's
	msg       string
	nanos     int64  // the instant its name was made of: "<name>.<nanos in hex>"
	uidN, rev uint64 // the UID is uidFor(uidN); the resourceVersion is rev
	text      uint32 // eventTexts index
	zeros     uint16 // the '0's its name has after the instant (the names before it were taken)
	cluster   bool   // the involved object is cluster-scoped (no namespace)
}

// appendKey appends c's key ("namespace/name", its name
// "<involved name>.<instant in hex>" and its zeros) to b: the key is not
// kept, but made when needed from what it is made of.
func (c *compactEvent) appendKey(b []byte) []byte {
	b = strconv.AppendInt(append(append(append(append(b, c.ns...), '/'), c.name...), '.'), c.nanos, 16)
	for range c.zeros {
		b = append(b, '0')
	}
	return b
}

// key is c's key as a string.
func (c *compactEvent) key() string { return string(c.appendKey(nil)) }

// eventText is what many Events share: the involved object's kind, the
// Event's type, its component and its reason.
type eventText struct {
	kind, typ, component, reason string
}

// eventTextOf is the index of t in s.eventTexts, added if new; false when
// the table is full (a caller inventing reasons: its Events are stored in
// full).
func (s *Server) eventTextOf(t eventText) (uint32, bool) {
	if i, ok := s.eventTextIdx[t]; ok {
		return i, true
	}
	if len(s.eventTexts) >= 1<<12 {
		return 0, false
	}
	if s.eventTextIdx == nil {
		s.eventTextIdx = map[eventText]uint32{}
	}
	i := uint32(len(s.eventTexts))
	s.eventTexts = append(s.eventTexts, t)
	s.eventTextIdx[t] = i
	return i, true
}

// compactStore holds the compact Events in the order recorded, in slabs
// of compactSlab (appending never moves one), and finds one by key
// through a map from the key's 64-bit hash to its place: a slot of 12
// bytes and no pointer for the collector to follow, where a map by key
// kept a string and the 136-byte Event in each slot and copied both at
// every growth. A key whose hash another key holds is kept in more. The
// answers do not depend on the hash (its seed is random), only where a
// key is found; the order of everything that reads the store is the
// order recorded.
type compactStore struct {
	slabs  [][]compactEvent
	n      int
	byHash map[uint64]uint32
	more   map[string]uint32
	hash   func([]byte) uint64
	buf    []byte // scratch space for a key made to compare
}

// compactSlab is the number of compact Events in one slab.
const compactSlab = 1024

func newCompactStore() compactStore {
	seed := maphash.MakeSeed()
	return compactStore{hash: func(b []byte) uint64 { return maphash.Bytes(seed, b) }}
}

// at is the i-th compact Event recorded.
func (c *compactStore) at(i uint32) *compactEvent { return &c.slabs[i/compactSlab][i%compactSlab] }

// lookup is the compact Event under key b, if any; h is b's hash, and
// free reports that no key holds it (add then need not look again).
func (c *compactStore) lookup(b []byte) (e *compactEvent, h uint64, free bool) {
	if c.n == 0 {
		return nil, 0, true // the hash is made by add
	}
	h = c.hash(b)
	i, held := c.byHash[h]
	if held {
		e := c.at(i)
		c.buf = e.appendKey(c.buf[:0])
		if string(c.buf) == string(b) {
			return e, h, false
		}
	}
	if c.more != nil {
		if i, ok := c.more[string(b)]; ok {
			return c.at(i), h, !held
		}
	}
	return nil, h, !held
}

// find is the compact Event under key k, if any.
func (c *compactStore) find(k string) (*compactEvent, bool) {
	e, _, _ := c.lookup(unsafe.Slice(unsafe.StringData(k), len(k)))
	return e, e != nil
}

// add stores e, whose key no compact Event has, and returns its place;
// h and free are what lookup of its key gave.
func (c *compactStore) add(e compactEvent, h uint64, free bool) uint32 {
	if c.n == 0 {
		c.buf = e.appendKey(c.buf[:0])
		h, free = c.hash(c.buf), true
	}
	if c.n%compactSlab == 0 {
		c.slabs = append(c.slabs, make([]compactEvent, 0, compactSlab))
	}
	i := uint32(c.n)
	c.slabs[len(c.slabs)-1] = append(c.slabs[len(c.slabs)-1], e)
	c.n++
	if c.byHash == nil {
		c.byHash = map[uint64]uint32{}
	}
	if free {
		c.byHash[h] = i
		return i
	}
	if c.more == nil {
		c.more = map[string]uint32{}
	}
	c.more[e.key()] = i
	return i
}

// all yields the compact Events in the order recorded.
func (c *compactStore) all(yield func(*compactEvent) bool) {
	for _, slab := range c.slabs {
		for i := range slab {
			if !yield(&slab[i]) {
				return
			}
		}
	}
}

// reset lets every compact Event go (they are stored in full now).
func (c *compactStore) reset() { c.slabs, c.n, c.byHash, c.more = nil, 0, nil, nil }

// dedup is the correlator's key of the compact Event c.
func (s *Server) dedup(c *compactEvent) eventDedup {
	return eventDedup{c.uid, c.ns, s.eventTexts[c.text].reason, c.msg}
}

// event is the Event c stands for, whose key is k (c.key()), as
// createAt stores what Record hands it.
func (s *Server) event(c *compactEvent, k string) *corev1.Event {
	ns := c.ns
	t := s.eventTexts[c.text]
	ik, _ := LookupKind(t.kind)
	ins := ns
	if c.cluster {
		ins = ""
	}
	now := metav1.NewTime(c.at)
	created := now
	if c.created != nil {
		created = metav1.NewTime(*c.created)
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: k[len(ns)+1:], UID: uidFor(c.uidN),
			ResourceVersion: strconv.FormatUint(c.rev, 10), Generation: 1, CreationTimestamp: created},
		InvolvedObject: corev1.ObjectReference{Kind: t.kind, Namespace: ins, Name: c.name,
			UID: c.uid, APIVersion: ik.GV.String(), ResourceVersion: c.rv},
		Reason: t.reason, Message: c.msg, Type: t.typ,
		Source:         corev1.EventSource{Component: t.component},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	ek, _ := LookupKind("Event")
	setTypeMeta(ev, ek)
	return ev
}

// objsOf is the store of kind, with the compact Events expanded first
// when kind is Event: every read of a kind goes through it (Record's own
// probes and the correlator's look at both stores instead).
func (s *Server) objsOf(kind string) map[string]Object {
	if kind == "Event" && s.compact.n > 0 {
		s.expandEvents()
	}
	return s.objs[kind]
}

// expandEvents stores every compact Event as the object it stands for
// and indexes it, in the indexes built so far, in the order recorded.
func (s *Server) expandEvents() {
	if s.compact.n == 0 {
		return
	}
	m := s.objs["Event"]
	if m == nil {
		m = make(map[string]Object, s.compact.n)
		s.objs["Event"] = m
	}
	i := uint32(0)
	for c := range s.compact.all {
		k := c.key()
		ev := s.event(c, k)
		s.reindex("Event", k, nil, ev)
		m[k] = ev
		s.events.expanded(c, i, k)
		i++
	}
	s.compact.reset()
	s.events.compactReset()
}

// EagerEvents makes Record store every Event in full as it is recorded,
// as it did before compact Events: the reference they are compared with.
func (s *Server) EagerEvents() {
	s.expandEvents()
	s.eager = true
}
