package netstack

import (
	"os"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// deadline is a read or write deadline on the world's clock. A deadline
// given as a time.Time (net.Conn's SetDeadline, a context's deadline) is
// read relative to the wall clock when it is set and rounded up to the
// millisecond: t = time.Now().Add(5*time.Second) expires after exactly 5 s
// of virtual time (as long as less than a millisecond of wall-clock time
// passed between computing t and setting it).
type deadline struct {
	t       *vtimer
	expired bool
	// active is set while the deadline is armed or has passed (written
	// under the world lock, read without it): clearing a deadline that is
	// not active changes nothing, so sock's setters skip the world lock
	// for it (net/http's server clears the read deadline of a connection
	// about four times per request). It sits in expired's padding, so a
	// socket is no bigger for it.
	active atomic.Bool
	// slots are the waits blocked on the deadline's socket: its passing
	// notifies each, as a readiness event does, so a wait selects on no
	// channel of the deadline's (and setting, passing and clearing a
	// deadline allocates nothing: net/http's server does that around
	// every request). A deadline set while a call is blocked wakes it
	// when it passes.
	slots []*waitSlot
}

// set arms the deadline. Called with d.mu held.
func (dl *deadline) set(d *driver, at time.Time) {
	if dl.t != nil {
		dl.t.Stop()
	}
	dl.expired = false
	dl.active.Store(false)
	if at.IsZero() {
		return
	}
	in := untilVirtual(at)
	if in <= 0 {
		dl.expire()
		return
	}
	dl.setAfter(d, in)
}

// setAfter arms the deadline to pass after in of virtual time.
func (dl *deadline) setAfter(d *driver, in time.Duration) {
	dl.expired = false
	dl.active.Store(true)
	if dl.t == nil {
		dl.t = &vtimer{d: d, f: dl.expire}
	}
	dl.t.Reset(in)
}

// expire passes the deadline and wakes the waits blocked on it. It asks
// the driver for no yield round of its own (no kick): it runs either in an
// application's call (set), which counts as activity, so the next settle
// gives the woken waits their turn anyway, or as a timer's function, whose
// firing kicks the settle. (A kick here cost every kept-alive GET a yield
// round in which nothing was left to run: net/http's server aborts its
// background read with a deadline in the past after each request.)
func (dl *deadline) expire() {
	if dl.expired {
		return
	}
	dl.expired = true
	dl.active.Store(true)
	for _, ws := range dl.slots {
		ws.notify()
	}
}

// add counts ws among the waits the deadline's passing wakes. Called with
// d.mu held.
func (dl *deadline) add(ws *waitSlot) {
	if dl != nil {
		dl.slots = append(dl.slots, ws)
	}
}

// remove ends what add began. Called with d.mu held.
func (dl *deadline) remove(ws *waitSlot) {
	if dl == nil {
		return
	}
	for i, x := range dl.slots {
		if x == ws {
			dl.slots = append(dl.slots[:i], dl.slots[i+1:]...)
			return
		}
	}
}

func (dl *deadline) passed() bool { return dl != nil && dl.expired }

// stop disarms the deadline's timer, leaving a passed deadline passed.
// Called with d.mu held.
func (dl *deadline) stop() {
	if dl.t != nil {
		dl.t.Stop()
	}
	dl.active.Store(dl.expired)
}

// clearIsNoop reports, without the world lock, whether setting the
// deadline to at would change nothing: at is the zero time and the
// deadline is neither armed nor passed.
func (dl *deadline) clearIsNoop(at time.Time) bool { return at.IsZero() && !dl.active.Load() }

func isClosed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// errWaitClosed is returned by wait when stop is closed.
var errWaitClosed = &Error{Op: "wait", Msg: "closed"}

// waitSlot is a wait queue entry and its channel kept by a socket for its
// waits of one kind (reads, writes), so a blocking call allocates neither.
// Closing the socket notifies its slots (closeWake), so a wait on its own
// slot blocks on the slot's channel alone, where one on another channel
// too (a dial's context) selects.
type waitSlot struct {
	e    waiter.Entry
	ch   chan struct{}
	busy bool
}

// closeWake wakes a wait blocked on ws, whose socket was just closed (its
// stop channel): the wait sees the channel closed and returns. Called with
// d.mu held.
func (ws *waitSlot) closeWake() {
	if ws.busy {
		ws.notify()
	}
}

// notify wakes the wait blocked on ws, as the wait queue does.
func (ws *waitSlot) notify() {
	select {
	case ws.ch <- struct{}{}:
	default:
	}
}

// wait blocks until ep reports one of the events in mask (checked with
// d.mu held) and returns nil, or returns os.ErrDeadlineExceeded when dl
// passes, errWaitClosed when stop is closed, or an *IdleError when nothing
// left in the world can make ep ready. A foreground wait (fg) drives the
// world itself when nobody else does; a background one (a server's
// Accept, the reads of an http.Transport's connections) only waits for the
// driver. ws, when not nil and not in use by another wait, is the entry
// registered on q. Called and returns with d.mu held.
func (s *Stack) wait(fg bool, ep tcpip.Endpoint, q *waiter.Queue, mask waiter.EventMask, dl *deadline, stop <-chan struct{}, ws *waitSlot) error {
	d := s.d
	// own: ws is the socket's slot, which closing the socket (stop)
	// notifies, so the blocking below needs no channel of stop's.
	own := ws != nil && !ws.busy
	if !own {
		ws = &waitSlot{}
	}
	if ws.ch == nil {
		ws.ch = make(chan struct{}, 1)
	}
	select {
	case <-ws.ch: // a notification left from an earlier wait
	default:
	}
	ws.busy = true
	ws.e.Init(waiter.ChannelNotifier(ws.ch), mask)
	q.EventRegister(&ws.e)
	defer func() {
		q.EventUnregister(&ws.e)
		ws.busy = false
	}()
	for {
		if ep.Readiness(mask) != 0 {
			return nil
		}
		if dl.passed() {
			return os.ErrDeadlineExceeded
		}
		if isClosed(stop) {
			return errWaitClosed
		}
		if fg && !d.driving {
			d.driving = true
			err := d.driveLocked(func() bool { return ep.Readiness(mask) != 0 || dl.passed() || isClosed(stop) }, true)
			d.release()
			if err != nil {
				return err
			}
			continue
		}
		dl.add(ws)
		// The socket's own slot is notified when it closes: stop need
		// not be waited on too (a nil channel's case never fires).
		wake := stop
		if own {
			wake = nil
		}
		var rel chan struct{}
		if fg {
			rel = d.releasedChan()
		}
		d.mu.Unlock()
		d.activity.Add(1)
		switch {
		case fg:
			select {
			case <-ws.ch:
			case <-wake:
			case <-rel:
			}
		case wake == nil:
			// A background wait on the socket's slot: a plain receive
			// (net/http's server and read loop each block here once
			// per request, and so does the server's background read).
			<-ws.ch
		default:
			select {
			case <-ws.ch:
			case <-wake:
			}
		}
		d.activity.Add(1)
		d.mu.Lock()
		dl.remove(ws)
	}
}

// untilVirtual converts a wall-clock deadline to a virtual delay, rounded
// up to the millisecond.
func untilVirtual(at time.Time) time.Duration {
	in := time.Until(at)
	if in <= 0 {
		return in
	}
	return (in + time.Millisecond - 1).Truncate(time.Millisecond)
}
