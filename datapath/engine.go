package datapath

import (
	"math/rand/v2"
	"time"
)

// Timer is something that fires at a virtual time: an ARP retransmission, a
// delayed delivery. Fire runs on the engine's event loop.
type Timer interface {
	Fire(w *Walk)
}

// StaleTimer is a Timer that can be cancelled after it was scheduled (a
// stopped or reset timer). When Stale reports true the engine discards the
// event without running it and without moving the clock to its time, so a
// cancelled timer neither fires nor makes the world look busy.
type StaleTimer interface {
	Timer
	Stale() bool
}

type eventKind uint8

const (
	evRx     eventKind = iota + 1 // frame arrives on Dev
	evOutput                      // locally generated IP packet enters Netns output
	evTimer
	evStaleTimer // a timer that is a StaleTimer (checked once, when scheduled)
)

// timerKind is the event kind for t: whether it can be cancelled is
// asked once, when it is scheduled, not every time it heads the queue.
func timerKind(t Timer) eventKind {
	if _, ok := t.(StaleTimer); ok {
		return evStaleTimer
	}
	return evTimer
}

type event struct {
	at    time.Duration
	seq   uint64
	dev   *Device
	ns    *Netns
	pkt   *Packet
	timer Timer
	kind  eventKind
	// bg marks a background event (a periodic heartbeat, a retry with
	// backoff): it runs when its time comes but does not keep Run going.
	bg bool
}

// Engine is the event loop every network namespace of one simulated world
// shares: a virtual clock, a seeded random source (math/rand/v2 PCG) and an
// event queue ordered by (time, sequence number). Handing a packet to a
// device is an event; inside one namespace processing is synchronous.
// There are no goroutines: the same seed and inputs give the same walk.
type Engine struct {
	now time.Duration
	seq uint64
	// queue is a binary min-heap on (at, seq) of small keys; each names
	// the slot of slots holding its event, so sifting moves 24 bytes, not
	// the whole event (a walk's delayed event rises above every queued
	// timer and falls back on removal). free lists the unused slots.
	queue []qkey
	slots []event
	free  []int32
	// fifo holds packet events scheduled with no delay, in sequence
	// order, from fhead on: they are due now and after everything already
	// queued, so they need no heap (most events of a walk are a device
	// handing a frame to the next one at once). The order is still (time,
	// sequence). Timers, whatever their delay, go to the heap.
	fifo  []nowEvent
	fhead int
	// dq holds the packet events scheduled with one same delay, dDelay
	// (set when dq is empty), in sequence order from dhead: their times
	// ascend with the clock, so they need no heap either (a frame crossing
	// the underlay waits its fixed latency). Not with the fast path off,
	// which the fast path's equivalence test compares with.
	dq     []nowEvent
	dhead  int
	dDelay time.Duration
	// headSrc says where head found the next event.
	headSrc uint8
	fg      int // queued events that are not background
	rng     *rand.Rand
	Pool    Pool

	// Walk is the context handed to stages.
	walk Walk

	// arps holds the ARP table of each kernel (node name).
	arps map[string]*ARPTable

	// MaxEvents bounds Run as a guard against forwarding loops; 0 means
	// the default of 1,000,000 events per Run call.
	MaxEvents int

	values []engineValue

	// recBuf is the storage of the fast path's recordings (fastpath.go,
	// Walk.rec the one in progress); cfgGen changes with every configuration change the
	// fast path's recordings do not check one by one; fastOff turns the
	// fast path off.
	recBuf  *fastRec
	cfgGen  uint64
	fastOff bool

	// next is a packet event due now that the event running scheduled
	// when nothing queued was due before it (the fifo empty, the heap's
	// top later than now): it is the next event whatever the running one
	// does after (what it schedules comes later in sequence), so it runs
	// as soon as the running one returns, without the fifo (handOn). A
	// replay's hand-over across a delay may be next too (handOnLater),
	// at its later time: runNext checks then that nothing is due before
	// it. inl
	// is how many more events the running one may hand on so (RunUntil's
	// event limit; 0 outside RunUntil, so Step runs one event), inlined
	// how many it did, until RunUntil's bound.
	next nowEvent
	// nextFrom is the replayed entry that handed next on (Walk.from
	// while next runs), or nil.
	nextFrom *fastEntry
	inl      int
	inlined  int
	// nextDelay is the delay next was handed on across (handOnLater),
	// nextSum whether the replay handing it on knows its L4 checksum is
	// right (fastRun's sum; read with nextFrom).
	nextDelay time.Duration
	nextSum   bool
	// encSum is whether the replay's last encapsulation was done in
	// full (VXLAN.encap, which sums the outer UDP checksum; fastRun).
	encSum bool
	// runSum is fastRun's: the frame's L4 checksum is right by
	// construction (set by its caller, kept through linked replays).
	runSum bool
	// laterLinks counts the replays linkLater ran, sumsKnown the outer
	// UDP checksums fastDecap took as right by construction, encSummed
	// the encapsulations replayed from a template with the outer UDP
	// checksum summed as encap sums it (for tests).
	laterLinks, sumsKnown, encSummed uint64
	// deferred are the fast path's entries whose replays deferred
	// counter increments since the counters were last settled
	// (SettleCounters), each once.
	deferred []*fastEntry
	until    time.Duration
}

// nowEvent is a packet event in the engine's fifo: an evRx for dev or an
// evOutput for ns.
type nowEvent struct {
	at   time.Duration
	seq  uint64
	dev  *Device
	ns   *Netns
	pkt  *Packet
	kind eventKind
}

// qkey is one entry of the engine's heap: the event's time and sequence
// number, and the slot holding it.
type qkey struct {
	at   time.Duration
	seq  uint64
	slot int32
}

type engineValue struct{ key, v any }

// Value returns what SetValue stored under key, or nil. Components built on
// top of the engine (a socket layer, say) keep their per-world state here.
func (e *Engine) Value(key any) any {
	for _, kv := range e.values {
		if kv.key == key {
			return kv.v
		}
	}
	return nil
}

// SetValue stores v under key, replacing an earlier value.
func (e *Engine) SetValue(key, v any) {
	for i := range e.values {
		if e.values[i].key == key {
			e.values[i].v = v
			return
		}
	}
	e.values = append(e.values, engineValue{key, v})
}

// NewEngine returns an engine whose random source is seeded with seed.
func NewEngine(seed uint64) *Engine {
	e := &Engine{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	e.walk.e = e
	e.Pool.eng = e
	return e
}

// arpTable returns the ARP table shared by the namespaces of node,
// creating it (the kernel's arp_tbl is created at boot).
func (e *Engine) arpTable(node string) *ARPTable {
	if e.arps == nil {
		e.arps = map[string]*ARPTable{}
	}
	t := e.arps[node]
	if t == nil {
		t = newARPTable(e.now)
		e.arps[node] = t
	}
	return t
}

// Now is the current virtual time.
func (e *Engine) Now() time.Duration { return e.now }

// Rand is the world's seeded random source. Use it only from the event loop.
func (e *Engine) Rand() *rand.Rand { return e.rng }

// Walk returns the context stages are called with.
func (e *Engine) Walk() *Walk { return &e.walk }

func (e *Engine) push(ev event) {
	if r := e.walk.rec; r != nil {
		r.fail = true // an event the recording cannot repeat
	}
	e.seq++
	ev.seq = e.seq
	e.pushSeq(ev)
}

// pushSeq queues ev with the sequence number it has.
func (e *Engine) pushSeq(ev event) {
	if !ev.bg {
		e.fg++
	}
	var slot int32
	if n := len(e.free); n > 0 {
		slot = e.free[n-1]
		e.free = e.free[:n-1]
		e.slots[slot] = ev
	} else {
		slot = int32(len(e.slots))
		e.slots = append(e.slots, ev)
	}
	k := qkey{at: ev.at, seq: ev.seq, slot: slot}
	q := append(e.queue, k)
	i := len(q) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !k.before(&q[parent]) {
			break
		}
		q[i] = q[parent]
		i = parent
	}
	q[i] = k
	e.queue = q
}

// before reports whether k runs before o: earlier, or as early and
// scheduled first.
func (k *qkey) before(o *qkey) bool {
	return k.at < o.at || (k.at == o.at && k.seq < o.seq)
}

// Where the next event is (Engine.headSrc).
const (
	srcNone uint8 = iota
	srcFifo
	srcDq
	srcHeap
)

// popSlot removes the heap's top key and returns the slot of its event,
// which the caller reads and then hands to release.
func (e *Engine) popSlot() int32 {
	q := e.queue
	top := q[0].slot
	n := len(q) - 1
	last := q[n]
	q = q[:n]
	e.queue = q
	if n == 0 {
		return top
	}
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q[r].before(&q[l]) {
			m = r
		}
		if !q[m].before(&last) {
			break
		}
		q[i] = q[m]
		i = m
	}
	q[i] = last
	return top
}

// release clears slot s, whose event left the heap, and frees it.
func (e *Engine) release(s int32) {
	ev := &e.slots[s]
	if !ev.bg {
		e.fg--
	}
	*ev = event{}
	e.free = append(e.free, s)
}

// Pending is the number of queued events (cancelled timers not yet
// discarded included).
func (e *Engine) Pending() int {
	n := len(e.queue) + len(e.fifo) - e.fhead + len(e.dq) - e.dhead
	if e.next.kind != 0 {
		n++
	}
	return n
}

// NextAt is the time of the next event and whether there is one. Cancelled
// timers at the head of the queue are discarded first.
func (e *Engine) NextAt() (time.Duration, bool) {
	return e.head()
}

// head discards cancelled timers at the head of the queue and returns the
// time of the next event (still queued) and whether there is one; headFifo
// says where it is.
func (e *Engine) head() (time.Duration, bool) {
	if e.next.kind != 0 {
		e.queueNext()
	}
	for {
		src, at, seq := srcNone, time.Duration(0), uint64(0)
		if e.fhead < len(e.fifo) {
			f := &e.fifo[e.fhead]
			src, at, seq = srcFifo, f.at, f.seq
		}
		if e.dhead < len(e.dq) {
			if d := &e.dq[e.dhead]; src == srcNone || d.at < at || (d.at == at && d.seq < seq) {
				src, at, seq = srcDq, d.at, d.seq
			}
		}
		if len(e.queue) > 0 {
			if h := &e.queue[0]; src == srcNone || h.at < at || (h.at == at && h.seq < seq) {
				if ev := &e.slots[h.slot]; ev.kind == evStaleTimer && ev.timer.(StaleTimer).Stale() {
					e.release(e.popSlot())
					continue
				}
				src, at = srcHeap, h.at
			}
		}
		e.headSrc = src
		return at, src != srcNone
	}
}

// ScheduleRx makes dev receive p after delay.
func (e *Engine) ScheduleRx(delay time.Duration, dev *Device, p *Packet) {
	if delay == 0 {
		if e.inl > 0 && e.next.kind == 0 && e.nothingDue() {
			e.handOn(evRx, dev, nil, p)
			return
		}
		e.pushNow(evRx, dev, nil, p)
		return
	}
	if (delay == e.dDelay || e.dhead == len(e.dq)) && delay > 0 && !e.fastOff {
		e.pushDelayed(delay, evRx, dev, nil, p)
		return
	}
	e.push(event{at: e.now + delay, kind: evRx, dev: dev, pkt: p})
}

// pushDelayed queues a packet event due after delay, which is dDelay or
// the first of the empty dq's.
func (e *Engine) pushDelayed(delay time.Duration, kind eventKind, dev *Device, ns *Netns, p *Packet) {
	if r := e.walk.rec; r != nil {
		r.fail = true // an event the recording cannot repeat
	}
	if e.dhead == len(e.dq) {
		e.dq, e.dhead, e.dDelay = e.dq[:0], 0, delay
	}
	e.seq++
	e.fg++
	e.dq = append(e.dq, nowEvent{at: e.now + delay, seq: e.seq, kind: kind, dev: dev, ns: ns, pkt: p})
}

// ScheduleOutput makes ns send the locally generated IPv4 packet p (its
// Ethernet header is filled in by the neighbour layer) after delay.
func (e *Engine) ScheduleOutput(delay time.Duration, ns *Netns, p *Packet) {
	if delay == 0 {
		if e.inl > 0 && e.next.kind == 0 && e.nothingDue() {
			e.handOn(evOutput, nil, ns, p)
			return
		}
		e.pushNow(evOutput, nil, ns, p)
		return
	}
	e.push(event{at: e.now + delay, kind: evOutput, ns: ns, pkt: p})
}

// nothingDue reports whether no queued event is due now or earlier (and
// RunUntil's bound lets an event due now run): an event scheduled now
// would be the next to run.
func (e *Engine) nothingDue() bool {
	return e.fhead == len(e.fifo) && (len(e.queue) == 0 || e.queue[0].at > e.now) &&
		(e.dhead == len(e.dq) || e.dq[e.dhead].at > e.now) && (e.until < 0 || e.now <= e.until)
}

// handOn makes a packet event due now, which nothingDue found would run
// next, the engine's next: it runs when the running event returns.
func (e *Engine) handOn(kind eventKind, dev *Device, ns *Netns, p *Packet) {
	if r := e.walk.rec; r != nil {
		r.fail = true // an event the recording cannot repeat
	}
	e.seq++
	e.fg++
	e.inl--
	e.inlined++
	// Field by field: a struct literal is built on the stack and copied.
	n := &e.next
	n.at, n.seq, n.kind, n.dev, n.ns, n.pkt = e.now, e.seq, kind, dev, ns, p
	e.nextFrom, e.nextSum = nil, false
}

// handOnLater makes the receipt of p by dev after delay (> 0) the
// engine's next, as handOn, for a replay (fastRun) whose hand-over
// crosses a delay (the underlay's latency) when nothing queued is due by
// then (laterFree): the event ends there, and runNext runs the receipt
// at its time without the queue if nothing the rest of the event
// scheduled is due by then, else queues it (queueNext) where
// ScheduleRx would have. It takes the sequence number ScheduleRx would.
func (e *Engine) handOnLater(delay time.Duration, dev *Device, p *Packet) {
	e.seq++
	e.fg++
	e.inl--
	e.inlined++
	n := &e.next
	n.at, n.seq, n.kind, n.dev, n.ns, n.pkt = e.now+delay, e.seq, evRx, dev, nil, p
	e.nextFrom, e.nextDelay, e.nextSum = nil, delay, false
}

// laterFree reports whether an event due at at (later than now) would
// be the next to run: nothing is queued in the fifo or dq, the heap's
// top is later (an event queued as early came first), and RunUntil's
// bound lets it run.
func (e *Engine) laterFree(at time.Duration) bool {
	return e.fhead == len(e.fifo) && e.dhead == len(e.dq) && (len(e.queue) == 0 || e.queue[0].at > at) &&
		(e.until < 0 || at <= e.until)
}

// runNext runs the events handed on (handOn, handOnLater) after the one
// that just ran. One due later runs only if nothing queued is due by its
// time (the running event may have queued more after handing it on);
// else it is queued as ScheduleRx would have queued it, and counts no
// more among the events this run handed on.
func (e *Engine) runNext() {
	w := &e.walk
	for e.next.kind != 0 {
		if at := e.next.at; at > e.now {
			if !e.laterFree(at) {
				e.inl++
				e.inlined--
				e.queueNext()
				return
			}
			e.now = at
		}
		kind, dev, ns, p := e.next.kind, e.next.dev, e.next.ns, e.next.pkt
		e.next.kind = 0 // the rest is overwritten by the next handOn
		e.fg--
		w.from, e.nextFrom = e.nextFrom, nil
		sum := e.nextSum
		e.nextSum = false
		if kind == evRx {
			if f := w.from; f != nil && f.term.x != 0 && f.linkLater(w, dev, p, sum) {
				// The replay of f crossed a delay and the receipt's
				// replay last time holds: replayed without the device
				// and the lookup (fastRun's link, across the delay).
			} else {
				dev.receive(w, p)
			}
		} else {
			ns.sendLocal(w, p)
		}
		w.rec, w.from = nil, nil
	}
}

// queueNext puts an event handed on but not yet run back at the head of
// the fifo (nothing queued precedes it), or one handed on across a delay
// into the heap: for a RunUntil or Step called while an event runs, and
// for runNext when something queued is due before it.
func (e *Engine) queueNext() {
	if e.next.kind == 0 {
		return
	}
	ev := e.next
	e.next, e.nextFrom, e.nextSum = nowEvent{}, nil, false
	if ev.at > e.now {
		// Handed on across a delay (handOnLater): queued in its place
		// among the events of its time, in the dq as ScheduleRx would
		// have queued it if the dq is still empty (what was scheduled
		// since comes later), else in the heap.
		if e.dhead == len(e.dq) {
			e.dq, e.dhead, e.dDelay = e.dq[:0], 0, e.nextDelay
			e.dq = append(e.dq, ev)
			return
		}
		e.fg-- // pushSeq counts it again
		e.pushSeq(event{at: ev.at, seq: ev.seq, kind: ev.kind, dev: ev.dev, ns: ev.ns, pkt: ev.pkt})
		return
	}
	if e.fhead > 0 {
		e.fhead--
		e.fifo[e.fhead] = ev
	} else {
		e.fifo = append(e.fifo, nowEvent{})
		copy(e.fifo[1:], e.fifo)
		e.fifo[0] = ev
	}
}

// pushNow queues a foreground packet event due now: what push does for a
// zero delay, without building and copying the whole event twice.
func (e *Engine) pushNow(kind eventKind, dev *Device, ns *Netns, p *Packet) {
	if r := e.walk.rec; r != nil {
		r.fail = true // an event the recording cannot repeat
	}
	e.seq++
	e.fg++
	e.fifo = append(e.fifo, nowEvent{at: e.now, seq: e.seq, kind: kind, dev: dev, ns: ns, pkt: p})
}

// fifoNext reports whether the fifo's head runs next, before the heap's
// top, and is due by until (until < 0: any time).
func (e *Engine) fifoNext(until time.Duration) bool {
	if e.fhead == len(e.fifo) {
		return false
	}
	f := &e.fifo[e.fhead]
	if until >= 0 && f.at > until {
		return false
	}
	if e.dhead < len(e.dq) {
		if d := &e.dq[e.dhead]; d.at < f.at || (d.at == f.at && d.seq < f.seq) {
			return false
		}
	}
	if len(e.queue) == 0 {
		return true
	}
	h := &e.queue[0]
	return f.at < h.at || (f.at == h.at && f.seq < h.seq)
}

// runFifo removes the fifo's head, which fifoNext reported runs next, and
// runs it: the step most events of a walk take, one device handing a
// frame to the next at once.
func (e *Engine) runFifo() {
	f := &e.fifo[e.fhead]
	kind, dev, ns, p, at := f.kind, f.dev, f.ns, f.pkt, f.at
	*f = nowEvent{}
	e.fhead++
	if e.fhead == len(e.fifo) {
		e.fifo, e.fhead = e.fifo[:0], 0
	}
	e.runPacket(kind, dev, ns, p, at)
}

// runDq removes dq's head, which head found runs next, and runs it.
func (e *Engine) runDq() {
	d := &e.dq[e.dhead]
	kind, dev, ns, p, at := d.kind, d.dev, d.ns, d.pkt, d.at
	*d = nowEvent{}
	e.dhead++
	if e.dhead == len(e.dq) {
		e.dq, e.dhead = e.dq[:0], 0
	}
	e.runPacket(kind, dev, ns, p, at)
}

// runPacket runs a packet event the fifo or dq just gave up: the clock
// moves to its time, the device receives it (or the namespace sends it),
// then the events it handed on run.
func (e *Engine) runPacket(kind eventKind, dev *Device, ns *Netns, p *Packet, at time.Duration) {
	e.fg-- // packet events are never background
	if at > e.now {
		e.now = at
	}
	w := &e.walk
	if kind == evRx {
		dev.receive(w, p)
	} else {
		ns.sendLocal(w, p)
	}
	w.rec = nil
	if e.next.kind != 0 {
		e.runNext()
	}
}

// ScheduleTimer fires t after delay.
func (e *Engine) ScheduleTimer(delay time.Duration, t Timer) {
	e.push(event{at: e.now + delay, kind: timerKind(t), timer: t})
}

// ReserveSeq takes the sequence number an event scheduled now would get,
// for a timer queued later with ScheduleTimerSeq: among the events of its
// time it runs where it would have run had it been scheduled now.
func (e *Engine) ReserveSeq() uint64 {
	if r := e.walk.rec; r != nil {
		r.fail = true // as for any event scheduled during a recording
	}
	e.seq++
	return e.seq
}

// ScheduleTimerSeq fires t at virtual time at (not before now) in the
// place of sequence number seq, from ReserveSeq. A StaleTimer may call it
// from its Stale to move itself to a later time (at, seq after its own).
func (e *Engine) ScheduleTimerSeq(at time.Duration, seq uint64, t Timer) {
	e.pushSeq(event{at: max(at, e.now), seq: seq, kind: timerKind(t), timer: t})
}

// ScheduleBackground fires t after delay as a background event: periodic
// work (a kubelet heartbeat, a controller's resync, a retry after backoff)
// that runs when virtual time reaches it but does not by itself keep Run
// going, so a world whose only remaining work is periodic is idle.
func (e *Engine) ScheduleBackground(delay time.Duration, t Timer) {
	e.push(event{at: e.now + delay, kind: timerKind(t), timer: t, bg: true})
}

// Idle reports whether only background events are queued.
func (e *Engine) Idle() bool { return e.fg == 0 }

// Foreground is the number of queued events that are not background
// (cancelled timers not yet discarded included).
func (e *Engine) Foreground() int { return e.fg }

// Step runs the next event. It returns false when the queue is empty.
func (e *Engine) Step() bool {
	if _, ok := e.head(); !ok {
		return false
	}
	e.run()
	return true
}

// run removes the next event, which head just found, and runs it.
func (e *Engine) run() {
	switch e.headSrc {
	case srcFifo:
		e.runFifo()
		return
	case srcDq:
		e.runDq()
		return
	}
	slot := e.popSlot()
	ev := &e.slots[slot]
	at, kind, dev, ns, p, t := ev.at, ev.kind, ev.dev, ev.ns, ev.pkt, ev.timer
	e.release(slot)
	if at > e.now {
		e.now = at
	}
	w := &e.walk
	switch kind {
	case evRx:
		dev.receive(w, p)
	case evOutput:
		ns.sendLocal(w, p)
	case evTimer, evStaleTimer:
		t.Fire(w)
	}
	w.rec = nil
	if e.next.kind != 0 {
		e.runNext()
	}
}

// ErrEventLimit is returned by Run when MaxEvents were processed and events
// remain, which almost always means a forwarding or flooding loop.
type ErrEventLimit struct {
	Events int
	At     time.Duration
}

// Error implements the error interface.
func (e *ErrEventLimit) Error() string {
	return "datapath: event limit reached (" + itoa(e.Events) + " events); a forwarding loop?"
}

// Run processes events until no foreground event is queued (background
// events due before the last foreground one run on the way).
func (e *Engine) Run() error { return e.RunUntil(-1) }

// RunUntil processes events whose time is at most until (until < 0: all),
// then sets the clock to until if it is later.
func (e *Engine) RunUntil(until time.Duration) error {
	limit := e.MaxEvents
	if limit == 0 {
		limit = 1_000_000
	}
	if e.next.kind != 0 {
		e.queueNext() // called from an event that handed one on
	}
	inl, inlined, outer := e.inl, e.inlined, e.until
	e.until = until
	err := e.runUntil(until, limit, !e.fastOff)
	e.inl, e.inlined, e.until = inl, inlined, outer
	return err
}

// runUntil is RunUntil's loop; hand says whether events may be handed
// on (not with the fast path off, which the fast path's equivalence test
// compares with: there every event goes through the queue).
func (e *Engine) runUntil(until time.Duration, limit int, hand bool) error {
	hl := 0
	if hand {
		hl = limit
	}
	for n := 0; ; n++ {
		if e.fifoNext(until) {
			// A packet event is foreground: e.fg > 0.
			if n == limit {
				return &ErrEventLimit{Events: n, At: e.now}
			}
			// The event may hand on as many as the limit leaves.
			e.inl, e.inlined = hl-n-1, 0
			e.runFifo()
			n += e.inlined
			continue
		}
		at, ok := e.head()
		if !ok || (until >= 0 && at > until) || (until < 0 && e.fg == 0) {
			break
		}
		if n == limit {
			return &ErrEventLimit{Events: n, At: e.now}
		}
		e.inl, e.inlined = hl-n-1, 0
		e.run()
		n += e.inlined
	}
	if until > e.now {
		e.now = until
	}
	return nil
}

// Advance moves the clock forward by d, running everything due on the way.
func (e *Engine) Advance(d time.Duration) error { return e.RunUntil(e.now + d) }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
