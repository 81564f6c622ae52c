// Package controller holds kubewalk's control-plane controllers: the
// scheduler, the EndpointSlice, ReplicaSet, Deployment and DaemonSet
// controllers, as level-based reconcilers over the in-memory API server.
//
// A controller is a Queue of keys ("namespace/name") and a reconcile
// function, run on the world's event queue in virtual time: a watch event
// maps to keys, a queued key is not queued twice, and a reconcile reads the
// current state (a deleted object is simply absent), converges it with at
// most the writes needed, and may ask to be retried later. There are no
// goroutines, rate limiters or wall-clock reads; the same inputs give the
// same history.
package controller

import (
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
)

// Result is what a reconcile asks for next.
type Result struct {
	// RequeueAfter, when positive, reconciles the key again after this
	// much virtual time (as a background event: it does not keep a world
	// busy on its own).
	RequeueAfter time.Duration
}

// Queue is one controller's work queue.
type Queue struct {
	// Name is the controller's name, for error messages.
	Name string
	// Delay is how long after a key is added its reconcile runs: the
	// controller's reaction time (0: at the same virtual instant, after
	// the events already queued for it).
	Delay     time.Duration
	eng       *datapath.Engine
	reconcile func(key string) (Result, error)
	queued    map[string]*item // the pending item of each queued key
	// free is the items fired and let go, for the next keys queued: the
	// engine lets an event go before it fires, so an item that has fired
	// is held by nobody (the kubelet queues each pod three times).
	free []*item
	// Errors collects reconcile errors (they are retried with backoff, as
	// controller-runtime does); the last one per key is kept.
	Errors map[string]error
}

// NewQueue returns a queue running reconcile on eng.
func NewQueue(eng *datapath.Engine, name string, delay time.Duration, reconcile func(key string) (Result, error)) *Queue {
	return &Queue{Name: name, Delay: delay, eng: eng, reconcile: reconcile, queued: map[string]*item{}, Errors: map[string]error{}}
}

// Add queues key unless it is queued already.
func (q *Queue) Add(key string) { q.AddAfter(key, q.Delay) }

// AddAfter queues key to run after d, unless it is queued already to run
// no later than that (a key waiting for a retry runs early when it is
// added again, as workqueue.AddAfter's earlier deadline wins).
func (q *Queue) AddAfter(key string, d time.Duration) {
	at := q.eng.Now() + d
	if it := q.queued[key]; it != nil {
		if it.at <= at && !it.bg {
			return
		}
		it.stale = true
	}
	it := q.newItem(key, at, false)
	q.queued[key] = it
	q.eng.ScheduleTimer(d, it)
}

// newItem is an item for key at at, one let go if there is one.
func (q *Queue) newItem(key string, at time.Duration, bg bool) *item {
	if n := len(q.free); n > 0 {
		it := q.free[n-1]
		q.free[n-1] = nil
		q.free = q.free[:n-1]
		*it = item{q: q, key: key, at: at, bg: bg}
		return it
	}
	return &item{q: q, key: key, at: at, bg: bg}
}

// letGo keeps it, which has fired, for newItem (up to a bound: a burst
// of keys leaves no large list behind).
func (q *Queue) letGo(it *item) {
	if len(q.free) < 64 {
		*it = item{}
		q.free = append(q.free, it)
	}
}

func (q *Queue) addBackground(key string, d time.Duration) {
	if q.queued[key] != nil {
		return
	}
	it := q.newItem(key, q.eng.Now()+d, true)
	q.queued[key] = it
	q.eng.ScheduleBackground(d, it)
}

// Len is the number of queued keys.
func (q *Queue) Len() int { return len(q.queued) }

// retryBackoff is the delay before a failed reconcile runs again.
const retryBackoff = 5 * time.Second

type item struct {
	q     *Queue
	key   string
	at    time.Duration
	bg    bool // a retry or resync: does not keep the world busy
	stale bool // superseded by an earlier item for the same key
}

// Fire implements datapath.Timer.
// The engine has let the event go: once Fire is done with it, nobody
// holds it (queued holds a superseded item's successor, and a fired one
// is deleted from it first), and it is let go for reuse.
func (it *item) Fire(*datapath.Walk) {
	q, key := it.q, it.key
	if it.stale {
		q.letGo(it)
		return
	}
	delete(q.queued, key)
	res, err := q.reconcile(key)
	q.letGo(it) // after the reconcile, which may queue key again
	if err != nil {
		q.Errors[key] = err
		q.addBackground(key, retryBackoff)
		return
	}
	delete(q.Errors, key)
	if res.RequeueAfter > 0 {
		q.addBackground(key, res.RequeueAfter)
	}
}

// Key is "namespace/name" (or "name" for cluster-scoped objects).
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// SplitKey undoes Key.
func SplitKey(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "/"); ok {
		return ns, n
	}
	return "", key
}

// Stale implements datapath.StaleTimer: a superseded item neither runs nor
// moves the clock.
func (it *item) Stale() bool { return it.stale }
