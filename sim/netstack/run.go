package netstack

import (
	"time"

	"github.com/kubewalk/kubewalk/sim"
)

// Advance drives the world for d of virtual time, as World.Advance does,
// but with the stacks' goroutines brought to rest after every event: use
// it instead of World.Run or World.Advance when stacks are attached (to let
// a connection sit idle for a day, say). It must not be called while
// another call drives the world.
func Advance(w *sim.World, d time.Duration) error {
	dr := driverFor(w.Engine)
	dr.mu.Lock()
	defer dr.mu.Unlock()
	if dr.driving {
		return &Error{Op: "advance", Msg: "the world is being driven by another call"}
	}
	reached := false
	t := &vtimer{d: dr, f: func() { reached = true }}
	t.Reset(d)
	dr.driving = true
	err := dr.driveLocked(func() bool { return reached })
	dr.release()
	return err
}

// Do runs f on a new goroutine and drives the world until f returns: for
// blocking calls on background sockets (a listener's Accept, a
// ListenPacket socket) made from test code. If the world goes idle before
// f returns, Do returns an *IdleError and f stays blocked.
func Do(w *sim.World, f func()) error {
	return driverFor(w.Engine).do(f, nil)
}
