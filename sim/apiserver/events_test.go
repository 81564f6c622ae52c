package apiserver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// eventScript drives one server through a sequence of operations drawn
// from seed (pods created and deleted, Events recorded and repeated at one
// instant or as the clock moves, transactions committed and aborted, an
// Event watcher, Events read, updated and deleted, a namespace deleted)
// and returns what every read in it saw, the largest number of compact
// Events the server held before a read, and the largest number of them
// kept in the compact store's more (their key's hash held by another).
// A non-nil hash replaces the compact store's, a non-nil dedupHash the
// event correlator's; observe, if set, is shown the correlator's index
// after every operation.
func eventScript(t *testing.T, seed uint64, eager, autoClock bool, hash func([]byte) uint64, dedupHash func(eventDedup) uint64, observe func(*eventIndex)) (string, int, int) {
	t.Helper()
	var now time.Duration
	clock := func() time.Time {
		if autoClock { // every reading moves it, as newServer's
			now += time.Millisecond
		}
		return Epoch.Add(now)
	}
	s, err := New(Config{}, clock, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	if eager {
		s.EagerEvents()
	}
	if hash != nil {
		s.compact.hash = hash
	}
	if dedupHash != nil {
		s.dedupHash = dedupHash
		s.events = newEventIndex(s)
	}
	rng := rand.New(rand.NewPCG(seed, 9))
	var out strings.Builder
	most, before, more, moreBefore := 0, 0, 0, 0 // before: the compact Events before this operation
	read := func(what string, objs ...Object) {
		most, more = max(most, before), max(more, moreBefore)
		fmt.Fprintf(&out, "%s rv=%s:", what, s.ResourceVersion())
		for _, o := range objs {
			// Every field Record and createAt set (TestCompactEventIsTheRecorded
			// compares the whole object).
			e := o.(*corev1.Event)
			fmt.Fprintf(&out, " [%s %s/%s %s %s %d %s %v %s %s %s %s %s %s %s %s %s %s %s %d %s %s]", e.APIVersion+"/"+e.Kind, e.Namespace, e.Name,
				e.UID, e.ResourceVersion, e.Generation, e.CreationTimestamp.UTC().Format(time.RFC3339Nano), e.ManagedFields == nil,
				e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.InvolvedObject.UID, e.InvolvedObject.APIVersion,
				e.InvolvedObject.ResourceVersion, e.Reason, e.Message, e.Type, e.Source.Component,
				e.FirstTimestamp.UTC().Format(time.RFC3339Nano), e.Count, e.LastTimestamp.UTC().Format(time.RFC3339Nano), e.LastTimestamp.Location())
		}
		out.WriteByte('\n')
	}
	for _, ns := range []string{"shop", "temp"} {
		_, err := s.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		require.NoError(t, err)
	}
	pod := func() Object {
		ns := []string{"shop", "temp", "default"}[rng.IntN(3)]
		name := fmt.Sprint("p", rng.IntN(4))
		if o, ok := s.objs["Pod"][ns+"/"+name]; ok {
			return o
		}
		_ = s.Submit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
		o, ok := s.objs["Pod"][ns+"/"+name]
		if !ok {
			return nil // its namespace was deleted
		}
		return o
	}
	record := func() {
		var o Object
		if rng.IntN(8) == 0 {
			o = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "n1", ResourceVersion: "3"}} // cluster-scoped
		} else if o = pod(); o == nil {
			return
		}
		reason := []string{"Pulled", "Created", "Started", "BackOff"}[rng.IntN(4)]
		typ := []string{corev1.EventTypeNormal, corev1.EventTypeWarning}[rng.IntN(2)]
		s.Record(o, "kubelet", typ, reason, fmt.Sprint("message ", rng.IntN(2)))
	}
	anEvent := func() (string, string, bool) {
		var keys []string
		for k := range s.objs["Event"] {
			keys = append(keys, k)
		}
		for c := range s.compact.all {
			keys = append(keys, c.key())
		}
		if len(keys) == 0 {
			return "", "", false
		}
		slices.Sort(keys)
		ns, name, _ := strings.Cut(keys[rng.IntN(len(keys))], "/")
		return ns, name, true
	}
	var stop bool
	for i := range 200 {
		before, moreBefore = s.compact.n, len(s.compact.more)
		if observe != nil {
			observe(s.events)
		}
		switch op := rng.IntN(40); {
		case op < 20:
			record()
		case op < 24:
			if !autoClock {
				now += time.Duration(rng.IntN(3)) * time.Second
			}
		case op == 24:
			read("list all", s.List("Event", "")...)
		case op == 25:
			read("list shop", s.List("Event", "shop")...)
		case op == 26:
			if ns, name, ok := anEvent(); ok {
				o, err := s.Get("Event", ns, name)
				require.NoError(t, err)
				read("get", o)
			}
		case op == 27:
			if ns, name, ok := anEvent(); ok {
				o, ok := s.Peek("Event", ns, name)
				require.True(t, ok)
				read("peek", o)
			}
		case op == 28:
			read(fmt.Sprint("count ", s.Count("Event")))
		case op == 29:
			var objs []Object
			for _, e := range s.EventsFor("Pod", "shop", "p1") {
				objs = append(objs, e)
			}
			read("events for", objs...)
		case op == 30:
			if ns, name, ok := anEvent(); ok {
				require.NoError(t, s.DeleteNow("Event", ns, name))
			}
		case op == 31:
			if ns, name, ok := anEvent(); ok {
				o, err := s.Get("Event", ns, name)
				require.NoError(t, err)
				e := o.(*corev1.Event)
				e.Message += " (edited)"
				_, err = s.Update(e)
				require.NoError(t, err)
			}
		case op == 32, op == 33:
			s.Begin()
			record()
			record()
			if op == 32 {
				s.Abort()
			} else {
				s.Commit()
			}
		case op == 34:
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&out, "delete namespace: %v\n", s.DeleteNow("Namespace", "", "temp"))
			}
		case op == 35:
			if o := pod(); o != nil {
				require.NoError(t, s.DeleteNow("Pod", o.GetNamespace(), o.GetName()))
			}
		case op == 36:
			if !stop && i > 150 && rng.IntN(4) == 0 {
				// A watcher from now on: Events are stored in full.
				s.Watch("Event", func(ev watch.Event) {
					if !stop {
						fmt.Fprintf(&out, "watch %s %s\n", ev.Type, ev.Object.(*corev1.Event).Name)
					}
				})
			}
		case op == 37:
			ns, name := "shop", "by-hand"
			if _, err := s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Reason: "Manual"}); err != nil {
				fmt.Fprintf(&out, "create: %v\n", err)
			}
		default:
			record()
		}
	}
	read("final", s.List("Event", "")...)
	stop = true
	return out.String(), most, more
}

// Events recorded compactly read as the Events stored in full when
// recorded: over random scripts of records, repeats, reads of every kind,
// deletes, updates, transactions and watchers, every read sees the same
// objects (names, UIDs, resourceVersions, timestamps, counts), in both
// clocks (the world's, still within an event; one that moves at every
// reading). The compact store must have held Events at some read.
func TestCompactEventsReadAsRecorded(t *testing.T) {
	for seed := range uint64(16) {
		for _, auto := range []bool{false, true} {
			want, _, _ := eventScript(t, seed, true, auto, nil, nil, nil)
			got, most, _ := eventScript(t, seed, false, auto, nil, nil, nil)
			require.Equal(t, want, got, "seed %d, clock moving at every reading %v", seed, auto)
			require.Positive(t, most, "seed %d: no read found compact Events", seed)
		}
	}
}

// The compact store finds a key by its hash, and a key whose hash another
// key holds in its second map: with a hash that gives every key one of
// two values, Events recorded compactly still read as those stored in
// full (a name taken only by a compact Event in more is still taken, a
// repeat still found), and some reads found keys in more.
func TestCompactEventsCollidingHashes(t *testing.T) {
	collide := func(b []byte) uint64 { return uint64(len(b) % 2) }
	for seed := range uint64(16) {
		for _, auto := range []bool{false, true} {
			want, _, _ := eventScript(t, seed, true, auto, nil, nil, nil)
			got, most, more := eventScript(t, seed, false, auto, collide, nil, nil)
			require.Equal(t, want, got, "seed %d, clock moving at every reading %v", seed, auto)
			require.Positive(t, most, "seed %d: no read found compact Events", seed)
			require.Positive(t, more, "seed %d: no compact Event was kept in more", seed)
		}
	}
}

// The correlator finds an event by its dedup key's hash, and a dedup key
// whose hash another holds in more: with a hash that gives every dedup
// key one of two values, Events recorded compactly still read as those
// stored in full (every repeat counted on the event it repeats), with
// compact Events and Events in full in more.
func TestEventIndexCollidingHashes(t *testing.T) {
	collide := func(dk eventDedup) uint64 { return uint64(len(dk.reason) % 2) }
	var compactMore, fullMore int
	for seed := range uint64(16) {
		for _, auto := range []bool{false, true} {
			want, _, _ := eventScript(t, seed, true, auto, nil, collide, nil)
			got, most, _ := eventScript(t, seed, false, auto, nil, collide, func(x *eventIndex) {
				compactMore = max(compactMore, len(x.moreCompact))
				fullMore = max(fullMore, len(x.more))
			})
			require.Equal(t, want, got, "seed %d, clock moving at every reading %v", seed, auto)
			require.Positive(t, most, "seed %d: no read found compact Events", seed)
		}
	}
	require.Positive(t, compactMore, "no compact Event was kept in more")
	require.Positive(t, fullMore, "no Event in full was kept in more")
}

// A compact Event expanded is the object Record stores in full, field by
// field; a server sharing nothing (DisableSharing) records in full.
func TestCompactEventIsTheRecorded(t *testing.T) {
	mk := func(eager bool) *Server {
		s, err := New(Config{}, func() time.Time { return Epoch.Add(3 * time.Second) }, rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err)
		if eager {
			s.DisableSharing()
		}
		p, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
		require.NoError(t, err)
		s.Record(p, "kubelet", corev1.EventTypeNormal, "Started", "Started container c")
		s.Record(p, "kubelet", corev1.EventTypeNormal, "Started", "Started container c") // a repeat: expands, then counts
		s.Record(p, "kubelet", corev1.EventTypeWarning, "BackOff", "Back-off")
		return s
	}
	full, compact := mk(true), mk(false)
	require.Zero(t, full.compact.n)
	require.Equal(t, 1, compact.compact.n, "the repeat expanded the first; the third is compact")
	c := compact.compact.at(0)
	want := full.objs["Event"][c.key()].(*corev1.Event)
	got := compact.event(c, c.key())
	require.True(t, apiequality.Semantic.DeepEqual(want, got), "%#v\n%#v", want, got)
	require.Equal(t, *want, *got)
	require.Equal(t, full.List("Event", ""), compact.List("Event", ""))
	require.Zero(t, compact.compact.n)
}

// A repeat of a compact Event recorded after a read expanded it (its
// correlator entry then names it by key) counts on it, as a repeat of an
// Event stored in full does; so does one after a transaction aborted
// (the correlator rebuilt from the store, compact Events by place).
func TestRepeatAfterExpansion(t *testing.T) {
	for _, abort := range []bool{false, true} {
		mk := func(eager bool) *Server {
			s, err := New(Config{}, func() time.Time { return Epoch.Add(3 * time.Second) }, rand.New(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			if eager {
				s.EagerEvents()
			}
			for _, n := range []string{"a", "b"} {
				require.NoError(t, s.Submit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default"},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}))
			}
			for _, n := range []string{"a", "b"} {
				p, _ := s.Peek("Pod", "default", n)
				s.Record(p, "kubelet", corev1.EventTypeNormal, "Started", "Started container c")
			}
			if abort {
				s.Begin()
				s.Abort()
			} else {
				s.List("Event", "")
			}
			for _, n := range []string{"b", "a", "a"} {
				p, _ := s.Peek("Pod", "default", n)
				s.Record(p, "kubelet", corev1.EventTypeNormal, "Started", "Started container c")
			}
			return s
		}
		full, compact := mk(true), mk(false)
		evs := compact.List("Event", "")
		require.Equal(t, full.List("Event", ""), evs)
		require.Len(t, evs, 2)
		assert.Equal(t, []int32{3, 2}, []int32{evs[0].(*corev1.Event).Count, evs[1].(*corev1.Event).Count}, "abort %v", abort)
	}
}
