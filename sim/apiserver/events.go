package apiserver

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// compactEvent is an Event Record has stored and nobody has read yet, in
// 120 bytes held in the map's own slot (a map keeps a value over 128 bytes
// in an allocation of its own) where the corev1.Event it stands for takes
// 640 and an allocation: the kubelet records three Events for every pod
// it starts, and a 150,000-pod build reads none of its 450,000. It holds
// what the Event has of its own: the involved object's name, UID and
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
	name, rv  string     // the involved object's
	uid       types.UID  // the involved object's
	msg       string
	uidN, rev uint64 // the UID is uidFor(uidN); the resourceVersion is rev
	text      uint32 // eventTexts index
	cluster   bool   // the involved object is cluster-scoped (no namespace)
}

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

// dedup is the correlator's key of the compact Event stored under key k.
func (s *Server) dedup(c *compactEvent, k string) eventDedup {
	return eventDedup{c.uid, k[:strings.IndexByte(k, '/')], s.eventTexts[c.text].reason, c.msg}
}

// event is the Event c stands for, stored under key k, as createAt stores
// what Record hands it.
func (s *Server) event(c *compactEvent, k string) *corev1.Event {
	ns := k[:strings.IndexByte(k, '/')]
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
	if kind == "Event" && len(s.compact) > 0 {
		s.expandEvents()
	}
	return s.objs[kind]
}

// expandEvents stores every compact Event as the object it stands for
// and indexes it, in the indexes built so far. The order is the map's:
// each Event goes under its own key, and index sets are sets, so nothing
// depends on it.
func (s *Server) expandEvents() {
	if len(s.compact) == 0 {
		return
	}
	m := s.objs["Event"]
	if m == nil {
		m = make(map[string]Object, len(s.compact))
		s.objs["Event"] = m
	}
	for k, c := range s.compact {
		ev := s.event(&c, k)
		s.reindex("Event", k, nil, ev)
		m[k] = ev
	}
	s.compact = nil
}

// EagerEvents makes Record store every Event in full as it is recorded,
// as it did before compact Events: the reference they are compared with.
func (s *Server) EagerEvents() {
	s.expandEvents()
	s.eager = true
}
