package netstack

import (
	"bytes"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// sock is what TCPConn and UDPConn share: the gVisor endpoint, its wait
// queue, whether blocking calls drive the world, the virtual-time
// deadlines, and the entry and exit of a call into the stack; and what a
// read or write hands gVisor (kept here, used under the world lock, so a
// call does not allocate them).
type sock struct {
	s        *Stack
	ep       tcpip.Endpoint
	wq       *waiter.Queue
	fg       bool
	rd, wd   deadline
	closed   chan struct{}
	rws, wws waitSlot
	sw       tcpip.SliceWriter
	br       bytes.Reader
}

// SetDriving makes the socket's blocking calls drive the world (true) or
// only wait for another caller to (false).
func (c *sock) SetDriving(fg bool) {
	c.s.d.lock()
	c.fg = fg
	c.s.d.unlock()
}

func (c *sock) enter() {
	c.s.d.lock()
}

// leave ends a call that may have handed the stack's processor work, so
// the next settle runs a barrier for it.
func (c *sock) leave() {
	c.s.dirty = true
	c.leaveQuiet()
}

// leaveQuiet ends a call that cannot have handed the stack's processor
// work (a TCP read or write, a deadline: gVisor sends what they make on the
// caller's goroutine, and no segment arrives while the world lock is
// held), so the next settle has no barrier to run for it.
func (c *sock) leaveQuiet() {
	c.s.d.unlock()
}

// noopCall stands for a call that changes nothing and takes no lock (a
// deadline cleared that was not set): it still counts as activity, so a
// settling driver with GOMAXPROCS > 1 sees the caller running.
func (c *sock) noopCall() { c.s.d.activity.Add(1) }

// SetDeadline implements net.Conn, on the world's clock.
func (c *sock) SetDeadline(t time.Time) error {
	if c.rd.clearIsNoop(t) && c.wd.clearIsNoop(t) {
		c.noopCall()
		return nil
	}
	c.enter()
	defer c.leaveQuiet()
	c.rd.set(c.s.d, t)
	c.wd.set(c.s.d, t)
	return nil
}

// SetReadDeadline implements net.Conn, on the world's clock.
func (c *sock) SetReadDeadline(t time.Time) error {
	if c.rd.clearIsNoop(t) {
		c.noopCall()
		return nil
	}
	c.enter()
	defer c.leaveQuiet()
	c.rd.set(c.s.d, t)
	return nil
}

// SetWriteDeadline implements net.Conn, on the world's clock.
func (c *sock) SetWriteDeadline(t time.Time) error {
	if c.wd.clearIsNoop(t) {
		c.noopCall()
		return nil
	}
	c.enter()
	defer c.leaveQuiet()
	c.wd.set(c.s.d, t)
	return nil
}

// stopDeadlines disarms the deadlines of a socket being closed: a pending
// one is a foreground timer that would keep the world from idling (a
// Settle after a wget would run wget's 900 s read timeout). Called with
// the world lock held.
func (c *sock) stopDeadlines() {
	c.rd.stop()
	c.wd.stop()
}
