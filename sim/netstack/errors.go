package netstack

import (
	"context"
	"net"
	"os"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// Error reports a netstack call that cannot be made: a namespace of another
// world, a network other than tcp/udp, an address that does not parse.
type Error struct {
	Op, Netns, Msg string
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Netns == "" {
		return "netstack: " + e.Op + ": " + e.Msg
	}
	return "netstack: " + e.Op + " in " + e.Netns + ": " + e.Msg
}

// IdleError is what a blocked call returns when nothing left in the world
// can make it complete: no event is queued (no packet in flight, no timer
// armed) and no goroutine is on its way into a netstack call. A real
// program would block forever here; a test gets this instead of a hang.
// It is a timeout (net.Error), so code that handles i/o timeouts handles
// it, and it reads as one.
//
// A world that never goes idle but never completes the call either (a
// write to a peer that never reads, whose zero window is probed forever)
// gives the same error after DefaultMaxBlocked of virtual time (see
// SetMaxBlocked), with Blocked set.
type IdleError struct {
	// At is the virtual time the world went idle, or the call gave up.
	At time.Duration
	// Blocked, when not zero, is how long the call was blocked in a world
	// that did not go idle.
	Blocked time.Duration
}

// Error implements the error interface.
func (e *IdleError) Error() string {
	if e.Blocked > 0 {
		return "i/o timeout (blocked for " + e.Blocked.String() + " of virtual time at " + e.At.String() + " with no deadline; see netstack.SetMaxBlocked)"
	}
	return "i/o timeout (world idle at " + e.At.String() + ": nothing left that could answer)"
}

// Timeout implements net.Error.
func (e *IdleError) Timeout() bool { return true }

// Temporary implements net.Error.
func (e *IdleError) Temporary() bool { return true }

// Is makes errors.Is(err, os.ErrDeadlineExceeded) hold, as for a deadline.
func (e *IdleError) Is(target error) bool { return target == os.ErrDeadlineExceeded }

var _ net.Error = (*IdleError)(nil)

// errno maps a gVisor error to the errno Linux returns in its place.
func errno(err tcpip.Error) error {
	switch err.(type) {
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrNetworkUnreachable, *tcpip.ErrNoNet:
		return syscall.ENETUNREACH
	case *tcpip.ErrHostDown:
		return syscall.EHOSTDOWN
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrClosedForSend:
		return syscall.EPIPE
	case *tcpip.ErrNotConnected:
		return syscall.ENOTCONN
	case *tcpip.ErrPortInUse, *tcpip.ErrAlreadyBound:
		return syscall.EADDRINUSE
	case *tcpip.ErrBadLocalAddress:
		return syscall.EADDRNOTAVAIL
	case *tcpip.ErrNoPortAvailable:
		return syscall.EAGAIN
	case *tcpip.ErrMessageTooLong:
		return syscall.EMSGSIZE
	case *tcpip.ErrInvalidEndpointState:
		return syscall.EINVAL
	case *tcpip.ErrNoBufferSpace:
		return syscall.ENOBUFS
	case *tcpip.ErrAlreadyConnected:
		return syscall.EISCONN
	case *tcpip.ErrAborted:
		return syscall.EPIPE
	}
	return &Error{Op: "socket", Msg: err.String()}
}

// mapCtxErr turns a context's error into the net package's, as its
// mapErr does: a deadline is an i/o timeout (os.ErrDeadlineExceeded), a
// cancellation "operation was canceled".
func mapCtxErr(err error) error {
	switch err {
	case context.DeadlineExceeded:
		return os.ErrDeadlineExceeded
	case context.Canceled:
		return errCanceled{}
	}
	return err
}

// errCanceled is the net package's error for a dial whose context was
// cancelled; errors.Is(err, context.Canceled) holds.
type errCanceled struct{}

func (errCanceled) Error() string        { return "operation was canceled" }
func (errCanceled) Is(target error) bool { return target == context.Canceled }

// opError wraps err as the net package does: "dial tcp 10.96.0.1:80:
// connect: connection refused".
func opError(op, network, syscallName string, src, dst net.Addr, err error) error {
	if errnoErr, ok := err.(syscall.Errno); ok && syscallName != "" {
		err = os.NewSyscallError(syscallName, errnoErr)
	}
	return &net.OpError{Op: op, Net: network, Source: src, Addr: dst, Err: err}
}
