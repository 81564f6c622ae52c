package netstack

import (
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// Epoch is the wall-clock time virtual time zero stands for: what a stack's
// clock reports as "now" (and nginx's Date header shows) at the start of a
// world.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// clock is the tcpip.Clock of every stack of one world: the world's virtual
// clock. AfterFunc schedules an event on the world's queue, so gVisor's
// timers (retransmission, delayed ACK, keepalive, TIME-WAIT, SYN retries)
// fire in (time, sequence) order on the event loop, synchronously, each in
// its turn. Timer methods are called with the world lock held (the driver,
// a TCP processor inside a barrier, or an application goroutine inside a
// netstack call), so they need no lock of their own.
type clock struct {
	d *driver
	// The last readings and the virtual time they are for: gVisor reads
	// the clock many times per segment, mostly at one instant, and
	// MonotonicTime.Add is a round trip through time.Time.
	at, monoAt time.Duration
	now        time.Time
	mono       tcpip.MonotonicTime
}

var _ tcpip.Clock = (*clock)(nil)

// Now implements tcpip.Clock.
func (c *clock) Now() time.Time {
	if t := c.d.e.Now(); t != c.at || c.now.IsZero() {
		c.at, c.now = t, Epoch.Add(t)
	}
	return c.now
}

// NowMonotonic implements tcpip.Clock.
func (c *clock) NowMonotonic() tcpip.MonotonicTime {
	if t := c.d.e.Now(); t != c.monoAt || c.mono == (tcpip.MonotonicTime{}) {
		c.monoAt, c.mono = t, tcpip.MonotonicTime{}.Add(t)
	}
	return c.mono
}

// AfterFunc implements tcpip.Clock: f runs on the event loop after d of
// virtual time, unless the timer is stopped or reset first.
func (c *clock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	t := &vtimer{d: c.d, f: f, stack: true}
	t.Reset(d)
	return t
}

// vtimer is a timer on the world's event queue. Each arming gets a
// generation; an event whose generation is no longer the timer's is stale
// and the engine discards it without moving the clock.
type vtimer struct {
	d     *driver
	f     func()
	gen   uint64
	armed bool
	// stack: gVisor armed it (counted in driver.stackEvents).
	stack bool
}

// vtimerEvent is one arming of a vtimer, as queued on the engine.
type vtimerEvent struct {
	t   *vtimer
	gen uint64
}

var _ datapath.StaleTimer = (*vtimerEvent)(nil)

// Stop implements tcpip.Timer.
func (t *vtimer) Stop() bool {
	was := t.armed
	if was {
		t.d.staleQueued++
	}
	t.armed = false
	t.gen++
	return was
}

// Reset implements tcpip.Timer.
func (t *vtimer) Reset(d time.Duration) {
	if t.armed {
		t.d.staleQueued++
	}
	t.gen++
	t.armed = true
	ev := t.d.newTimerEvent()
	ev.t, ev.gen = t, t.gen
	if t.stack {
		t.d.stackEvents++
	}
	t.d.e.ScheduleTimer(max(d, 0), ev)
}

// Stale reports whether the timer was stopped or re-armed since this event
// was queued; a stale event goes back to the free list.
func (ev *vtimerEvent) Stale() bool {
	if ev.t.armed && ev.t.gen == ev.gen {
		return false
	}
	ev.t.d.staleQueued--
	ev.t.d.freeTimerEvent(ev)
	return true
}

// Fire runs the timer's function on the event loop.
func (ev *vtimerEvent) Fire(w *datapath.Walk) {
	t := ev.t
	t.d.freeTimerEvent(ev)
	t.armed = false
	t.d.kick = true
	t.f()
}

func (d *driver) newTimerEvent() *vtimerEvent {
	if n := len(d.freeEvents); n > 0 {
		ev := d.freeEvents[n-1]
		d.freeEvents = d.freeEvents[:n-1]
		return ev
	}
	return &vtimerEvent{}
}

func (d *driver) freeTimerEvent(ev *vtimerEvent) {
	if ev.t.stack {
		d.stackEvents--
	}
	*ev = vtimerEvent{}
	d.freeEvents = append(d.freeEvents, ev)
}

// ackTimer is a connection's delayed-ACK timer (delack.go), armed and
// stopped about twice per request on a kept-alive connection, always for
// the same delay. It keeps one event in the engine's queue at a time:
// stopping it leaves the event queued (counted stale, as a stopped
// vtimer's), and arming it again while that event is queued only notes the
// new time (no earlier than the queued one's: the delay is fixed), with
// the sequence number an event scheduled then would have had
// (Engine.ReserveSeq). When the queued event comes up it is discarded, or
// moved to the time the timer is armed for now, in its place among that
// instant's events, or it fires. So the timer fires when, and in the order
// among other events, that a vtimer armed and stopped the same way would,
// without leaving a stale event per arming in the queue (which every other
// event paid for in heap depth).
type ackTimer struct {
	d     *driver
	f     func()
	delay time.Duration
	// armed: to fire at due, in the place of sequence number seq.
	armed bool
	due   time.Duration
	seq   uint64
	// queued: an event of ours is in the engine's queue, at (qAt, qSeq).
	queued bool
	qAt    time.Duration
	qSeq   uint64
}

var _ datapath.StaleTimer = (*ackTimer)(nil)

// Arm arms the timer to fire after its delay (re-arms it if armed).
func (t *ackTimer) Arm() {
	t.Stop()
	e := t.d.e
	t.armed, t.due, t.seq = true, e.Now()+t.delay, e.ReserveSeq()
	if t.queued {
		// The queued event comes up first (at an earlier or the same
		// time, with an earlier sequence number) and stands for this
		// arming now.
		t.d.staleQueued--
		return
	}
	t.queued, t.qAt, t.qSeq = true, t.due, t.seq
	e.ScheduleTimerSeq(t.due, t.seq, t)
}

// Stop disarms the timer; it reports whether it was armed.
func (t *ackTimer) Stop() bool {
	was := t.armed
	if was {
		t.armed = false
		t.d.staleQueued++
	}
	return was
}

// Stale implements datapath.StaleTimer: the queued event is discarded
// when the timer is not armed, or when it is armed for later (a new event
// is queued for that time, in the place of the arming's sequence number).
func (t *ackTimer) Stale() bool {
	switch {
	case !t.armed:
		t.queued = false
		t.d.staleQueued--
		return true
	case t.due != t.qAt || t.seq != t.qSeq:
		t.qAt, t.qSeq = t.due, t.seq
		t.d.e.ScheduleTimerSeq(t.due, t.seq, t)
		return true
	}
	return false
}

// Fire implements datapath.Timer.
func (t *ackTimer) Fire(*datapath.Walk) {
	t.queued, t.armed = false, false
	t.d.kick = true
	t.f()
}
