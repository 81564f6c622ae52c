package datapath

import "time"

// Neighbour garbage-collection defaults (net.ipv4.neigh.default.*).
const (
	// GCThresh1 is gc_thresh1: below this many entries the periodic
	// collector removes nothing.
	GCThresh1 = 128
	// GCThresh2 is gc_thresh2: from this many entries a new one triggers
	// a forced collection if none ran in the last 5 seconds.
	GCThresh2 = 512
	// GCThresh3 is gc_thresh3: the table never holds more collectable
	// entries; a new one that a forced collection cannot make room for
	// fails ("neighbor table overflow!").
	GCThresh3 = 1024
	// GCStaleTime is gc_stale_time: an unused entry older than this is
	// removed by the periodic collector.
	GCStaleTime = 60 * time.Second
	// GCInterval is how often the periodic collector runs
	// (base_reachable_time/2); the first run is one reachable_time after
	// the table is created.
	GCInterval = ReachableTime / 2
	// forcedGCWindow is the 5 s in neigh_alloc and neigh_forced_gc.
	forcedGCWindow = 5 * time.Second
)

// ARPTable is the part of the kernel's ARP table (arp_tbl) that is shared
// by every network namespace of one kernel: the garbage-collection
// thresholds and the count of entries they apply to. On Linux there is one
// arp_tbl per kernel, so the pods of a node and the node itself share its
// limits; kubewalk shares one ARPTable among the namespaces with the same
// Node name.
//
// Entries that are not PERMANENT are on a list in creation order (the
// kernel's gc_list). A new entry on a table holding GCThresh3 of them, or
// GCThresh2 with no forced collection in the last 5 s, runs
// neigh_forced_gc: from the oldest, entries without a running timer
// (STALE, FAILED, NOARP: not INCOMPLETE or freshly REACHABLE) that are
// FAILED or NOARP or not updated in the last 5 s are removed, until the
// table is back to GCThresh2. If nothing was removed and the table is at
// GCThresh3, the entry is not created: the packet that needed it is
// dropped (ReasonNeighTableOverflow) and `ip neigh add` fails with
// ENOBUFS. The periodic collector (neigh_periodic_work), every
// GCInterval while the table holds at least GCThresh1 entries, removes
// FAILED entries and entries unused for GCStaleTime that are neither
// PERMANENT nor in a timer state. It runs lazily: its past runs are
// replayed when the table is next touched, which no observer can tell
// apart from a timer.
type ARPTable struct {
	// Thresh1, Thresh2, Thresh3 are gc_thresh1/2/3.
	Thresh1, Thresh2, Thresh3 int
	// TableFulls counts failed creations (the table_fulls statistic);
	// ForcedGCRuns counts forced collections (forced_gc_runs).
	TableFulls, ForcedGCRuns uint64

	entries      int // tbl->entries: every entry
	gcEntries    int // tbl->gc_entries: entries on the gc list
	head, tail   *neighEntry
	lastFlush    time.Duration
	nextPeriodic time.Duration
	// mesh is the Mesh member VTEP among these namespaces, whose shared
	// PERMANENT entries count as the table's own.
	mesh *VXLAN
}

// total is tbl->entries: the entries of the namespaces and the mesh
// entries their member VTEP shows.
func (t *ARPTable) total() int {
	if t.mesh != nil {
		return t.entries + t.mesh.meshVisible()
	}
	return t.entries
}

func newARPTable(now time.Duration) *ARPTable {
	return &ARPTable{Thresh1: GCThresh1, Thresh2: GCThresh2, Thresh3: GCThresh3,
		lastFlush: now, nextPeriodic: now + ReachableTime}
}

// ARPTable returns the ARP table shared by the namespaces of ns's node.
func (ns *Netns) ARPTable() *ARPTable { return ns.arp }

// Entries is the number of entries in the table, in every namespace of
// the kernel (tbl->entries).
func (t *ARPTable) Entries() int { return t.total() }

func (t *ARPTable) gcAdd(e *neighEntry) {
	if e.onGC {
		return
	}
	e.onGC = true
	e.gcPrev, e.gcNext = t.tail, nil
	if t.tail != nil {
		t.tail.gcNext = e
	} else {
		t.head = e
	}
	t.tail = e
	t.gcEntries++
}

func (t *ARPTable) gcDel(e *neighEntry) {
	if !e.onGC {
		return
	}
	e.onGC = false
	if e.gcPrev != nil {
		e.gcPrev.gcNext = e.gcNext
	} else {
		t.head = e.gcNext
	}
	if e.gcNext != nil {
		e.gcNext.gcPrev = e.gcPrev
	} else {
		t.tail = e.gcPrev
	}
	e.gcPrev, e.gcNext = nil, nil
	t.gcEntries--
}

// stateAt is the entry's state at time at, REACHABLE turning STALE after
// ReachableTime as the entry's timer would have done.
func (e *neighEntry) stateAt(at time.Duration) (NeighState, time.Duration) {
	if e.state == NeighReachable && at-e.confirmed > ReachableTime {
		return NeighStale, e.confirmed + ReachableTime
	}
	return e.state, e.updated
}

// inTimer reports the NUD_IN_TIMER states: a timer holds a reference, so
// neither collector removes the entry.
func inTimer(s NeighState) bool { return s == NeighIncomplete || s == NeighReachable }

// periodicEligibleAt is the earliest time the periodic collector may
// remove e, if nothing touches it before: -1 if never.
func (e *neighEntry) periodicEligibleAt() time.Duration {
	switch e.state {
	case NeighPermanent, NeighIncomplete:
		return -1
	case NeighFailed:
		return e.updated
	}
	used := max(e.used, e.confirmed)
	at := used + GCStaleTime
	if e.state == NeighReachable {
		at = max(at, e.confirmed+ReachableTime+1)
	}
	return at
}

// catchUp replays the periodic collector's runs due by now.
func (t *ARPTable) catchUp(now time.Duration) {
	for t.nextPeriodic <= now {
		if t.total() < t.Thresh1 {
			t.skipTo(now)
			return
		}
		first := time.Duration(-1)
		for e := t.head; e != nil; e = e.gcNext {
			if at := e.periodicEligibleAt(); at >= 0 && (first < 0 || at < first) {
				first = at
			}
		}
		if first < 0 {
			t.skipTo(now)
			return
		}
		if first > t.nextPeriodic {
			// No run before the first removal can change anything.
			n := (first - t.nextPeriodic + GCInterval - 1) / GCInterval
			t.nextPeriodic += n * GCInterval
			continue
		}
		at := t.nextPeriodic
		for e := t.head; e != nil; {
			next := e.gcNext
			st, _ := e.stateAt(at)
			if !inTimer(st) && (st == NeighFailed || at >= max(e.used, e.confirmed)+GCStaleTime) {
				e.ns.removeNeigh(e)
			}
			e = next
		}
		t.nextPeriodic += GCInterval
	}
}

// skipTo moves the next periodic run past now.
func (t *ARPTable) skipTo(now time.Duration) {
	if t.nextPeriodic <= now {
		n := (now-t.nextPeriodic)/GCInterval + 1
		t.nextPeriodic += n * GCInterval
	}
}

// forcedGC is neigh_forced_gc; it returns how many entries it removed.
func (t *ARPTable) forcedGC(now time.Duration) int {
	t.ForcedGCRuns++
	maxClean := t.gcEntries + 1 - t.Thresh2 // gc_entries already counts the new one
	shrunk := 0
	for e := t.head; e != nil && shrunk < maxClean; {
		next := e.gcNext
		st, updated := e.stateAt(now)
		if !inTimer(st) && (st == NeighFailed || st == NeighNoARP || updated < now-forcedGCWindow || updated > now) {
			e.ns.removeNeigh(e)
			shrunk++
		}
		e = next
	}
	t.lastFlush = now
	return shrunk
}

// admit is neigh_alloc's check for a new entry that is not exempt from
// garbage collection (not PERMANENT). It reports whether the entry may be
// created.
func (t *ARPTable) admit(now time.Duration) bool {
	entries := t.gcEntries
	if entries >= t.Thresh3 || (entries >= t.Thresh2 && now > t.lastFlush+forcedGCWindow) {
		if t.forcedGC(now) == 0 && entries >= t.Thresh3 {
			t.TableFulls++
			return false
		}
	}
	return true
}

// newNeigh creates an entry for dev and ip in state st (neigh_create),
// or returns nil when the table is full.
func (ns *Netns) newNeigh(k neighKey, dev *Device, st NeighState) *neighEntry {
	t := ns.arp
	now := ns.e.now
	t.catchUp(now)
	if st != NeighPermanent && !t.admit(now) {
		return nil
	}
	e := &neighEntry{key: k, ns: ns, dev: dev, state: st, updated: now, used: now,
		confirmed: now - 2*ReachableTime}
	if ns.neigh.m == nil {
		ns.neigh.m = map[neighKey]*neighEntry{}
	}
	ns.neigh.m[k] = e
	t.entries++
	if v := dev.vx; v != nil && v.mesh != nil {
		v.mesh.claimNeigh(v, k.ip())
	}
	if st != NeighPermanent {
		t.gcAdd(e)
	}
	return e
}

// setState changes an entry's state, moving it off or onto the gc list
// when it becomes or stops being PERMANENT (neigh_update_gc_list).
func (e *neighEntry) setState(st NeighState, now time.Duration) {
	if st != e.state {
		e.updated = now
	}
	e.state = st
	if st == NeighPermanent {
		e.ns.arp.gcDel(e)
	} else {
		e.ns.arp.gcAdd(e)
	}
}

// removeNeigh deletes an entry from its namespace and the kernel's table.
func (ns *Netns) removeNeigh(e *neighEntry) {
	if ns.neigh.m[e.key] != e {
		return
	}
	delete(ns.neigh.m, e.key)
	e.removed = true
	if v := e.dev.vx; v != nil && v.mesh != nil {
		v.mesh.unclaimNeigh(v, e.key.ip())
	}
	ns.arp.gcDel(e)
	ns.arp.entries--
	for _, p := range e.queue {
		p.Release()
	}
	e.queue = nil
}
