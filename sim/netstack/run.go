package netstack

import (
	"errors"
	"time"

	"github.com/kubewalk/kubewalk/sim"
)

// Advance drives the world for d of virtual time with the stacks' goroutines
// brought to rest after every event (to let a connection sit idle for a
// day, say). It is World.Advance: attaching a stack makes the world's Run,
// Advance and RunUntil (and Cluster.Settle and RunFor) drive this way. It
// must not be called while another call drives the world.
func Advance(w *sim.World, d time.Duration) error { return w.Advance(d) }

// RunUntil implements sim.Runner for the world whose stacks d drives: the
// events due at or before until run with the stacks and the goroutines
// they wake brought to rest after each one, as blocked netstack calls
// drive; until < 0 runs until only background events are queued (what
// Cluster.Settle waits for), which a world whose applications still wait
// on one another reaches when nothing left can answer them.
func (d *driver) RunUntil(until time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.driving {
		return &Error{Op: "run", Msg: "the world is being driven by another call"}
	}
	d.driving = true
	defer d.release()
	if until < 0 {
		err := d.driveLocked(func() bool { return false }, true)
		var idle *IdleError
		if errors.As(err, &idle) {
			return nil
		}
		return err
	}
	if until < d.e.Now() {
		return nil
	}
	// A foreground timer at until keeps the world from idling before it;
	// once it fired, what else is due at until runs too.
	reached := false
	t := &vtimer{d: d, f: func() { reached = true }}
	t.Reset(until - d.e.Now())
	err := d.driveLocked(func() bool {
		if !reached {
			return false
		}
		next, ok := d.e.NextAt()
		return !ok || next > until
	}, false)
	var idle *IdleError
	if reached && errors.As(err, &idle) {
		return nil
	}
	return err
}

// DefaultMaxBlocked is how long, in virtual time, a blocked call without a
// deadline (or Cluster.Settle) drives a world that never goes idle before
// it gives up with an *IdleError whose Blocked is set: a write to a peer
// that never reads (its zero window is probed every two minutes, forever),
// a read from a server that keeps sending keepalives. A real program would
// block forever; a test gets an error. It is longer than the slowest
// failure a socket reports by itself (keepalive's 2 h 11 min).
const DefaultMaxBlocked = 24 * time.Hour

// SetMaxBlocked sets the world's bound on the virtual time a blocked call
// drives (DefaultMaxBlocked when d is 0; no bound when d < 0). Advance and
// RunFor are not bounded: they stop at their own time.
func SetMaxBlocked(w *sim.World, d time.Duration) {
	dr := driverFor(w.Engine)
	dr.lock()
	dr.maxBlocked = d
	dr.unlock()
}

// Do runs f on a new goroutine and drives the world until f returns: for
// blocking calls on background sockets (a listener's Accept, a
// ListenPacket socket) made from test code. If the world goes idle before
// f returns, Do returns an *IdleError and f stays blocked.
func Do(w *sim.World, f func()) error {
	return driverFor(w.Engine).do(f, nil)
}
