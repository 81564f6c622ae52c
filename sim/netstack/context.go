package netstack

import (
	"context"
	"sync"
	"time"

	"github.com/kubewalk/kubewalk/sim"
)

// WithTimeout returns a copy of parent that is done after d of the world's
// virtual time from now, as context.WithTimeout is after d of wall-clock
// time: its Err is then context.DeadlineExceeded. Use it for a deadline
// fixed when the context is made and spent in virtual time (a test that
// advances the world an hour between making the context and using it), or
// for code outside this package that waits on ctx.Done. Dial, DialContext,
// the Transport and the Client from HTTPClient also read a context made by
// context.WithTimeout on the world's clock, but from the moment the call
// starts.
//
// The context reports no Deadline (the deadline is not a wall-clock time);
// Done and Err carry it. Calling cancel releases its timer; it must not be
// called while the world is being driven from the same goroutine's
// netstack call (from inside a handler, say, call it after the call).
func WithTimeout(w *sim.World, parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	dr := driverFor(w.Engine)
	c := &virtualContext{parent: parent, done: make(chan struct{})}
	dr.lock()
	c.t = &vtimer{d: dr, f: func() { c.finish(context.DeadlineExceeded); dr.kick = true }}
	c.t.Reset(max(d, 0))
	dr.unlock()
	stop := context.AfterFunc(parent, func() { c.cancel(dr, context.Cause(parent)) })
	return c, func() {
		stop()
		c.cancel(dr, context.Canceled)
	}
}

// virtualContext is the context of WithTimeout.
type virtualContext struct {
	parent context.Context
	t      *vtimer
	done   chan struct{}

	mu  sync.Mutex
	err error
}

var _ context.Context = (*virtualContext)(nil)

// Deadline implements context.Context: none on the wall clock.
func (c *virtualContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (c *virtualContext) Done() <-chan struct{} { return c.done }

// Err implements context.Context.
func (c *virtualContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value implements context.Context.
func (c *virtualContext) Value(key any) any { return c.parent.Value(key) }

// String names the context as the context package's do.
func (c *virtualContext) String() string { return "netstack.WithTimeout" }

// finish marks the context done with err (the first error wins).
func (c *virtualContext) finish(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	if err == nil {
		err = context.Canceled
	}
	c.err = err
	close(c.done)
	return true
}

// cancel finishes the context from outside the event loop and disarms its
// timer.
func (c *virtualContext) cancel(d *driver, err error) {
	if !c.finish(err) {
		return
	}
	d.lock()
	c.t.Stop()
	d.unlock()
}
