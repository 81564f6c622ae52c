package netstack

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// dialWeb2 connects the reference scenario's client to a listener on
// web-2's port 9000; the listener and the connection close with the test.
func dialWeb2(t *testing.T) (*scenarios.Reference, net.Listener, net.Conn) {
	t.Helper()
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	web, err := AttachPod(r.World, r.Web2)
	require.NoError(t, err)
	client, err := AttachPod(r.World, r.Client)
	require.NoError(t, err)
	ln, err := web.Listen("tcp", ":9000")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	conn, err := client.Dial("tcp", r.Web2.IP.String()+":9000")
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return r, ln, conn
}

// acceptWeb2 is dialWeb2 with the server's side of the connection
// accepted, closed when the test ends.
func acceptWeb2(t *testing.T) (*scenarios.Reference, net.Conn, net.Conn) {
	t.Helper()
	r, ln, conn := dialWeb2(t)
	var accepted net.Conn
	require.NoError(t, Do(r.World, func() { accepted, _ = ln.Accept() }))
	require.NotNil(t, accepted)
	t.Cleanup(func() { accepted.Close() })
	return r, conn, accepted
}

// TestReadTimeoutNoAllocs: net/http's server ends the background read of
// every request by setting a read deadline in the past, reading, and
// clearing the deadline; on a socket nobody else waits on that allocates
// nothing (the deadline's channel is kept, the error made once).
func TestReadTimeoutNoAllocs(t *testing.T) {
	r, _, conn := dialWeb2(t)
	past := time.Unix(1, 0)
	buf := make([]byte, 1)
	var first error
	allocs := testing.AllocsPerRun(50, func() {
		conn.SetReadDeadline(past)
		_, err := conn.Read(buf)
		if first == nil {
			first = err
		}
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		conn.SetReadDeadline(time.Time{})
	})
	require.Zero(t, allocs)
	var ne net.Error
	require.ErrorAs(t, first, &ne)
	require.True(t, ne.Timeout())
	require.Equal(t, "read tcp "+conn.LocalAddr().String()+"->"+r.Web2.IP.String()+":9000: i/o timeout", first.Error())
}

// TestDeadlineWakesBlockedRead: a deadline set while a read is blocked
// without one wakes it when it passes (net/http's server aborts its
// background read this way).
func TestDeadlineWakesBlockedRead(t *testing.T) {
	r, conn, accepted := acceptWeb2(t)

	// The accepted (background) side blocks in a read with no deadline;
	// the client's read drives the world, and its deadline (2 s) is
	// later than the one set on the blocked read (1 s from now).
	errc := make(chan error, 1)
	go func() {
		_, err := accepted.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, accepted.SetReadDeadline(time.Now().Add(time.Second)))
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
	start := r.World.Now()
	_, err := conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Equal(t, 2*time.Second, r.World.Now()-start)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "woken by the deadline set while it waited")
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked read was not woken")
	}
}

// TestClockReadings: the clock's cached readings follow the world's time.
func TestClockReadings(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	s, err := AttachPod(r.World, r.Client)
	require.NoError(t, err)
	c := s.st.Clock()
	for _, step := range []time.Duration{0, time.Millisecond, 0, 3 * time.Second} {
		require.NoError(t, r.World.Advance(step))
		s.d.lock()
		now, mono := c.Now(), c.NowMonotonic()
		s.d.unlock()
		require.Equal(t, Epoch.Add(r.World.Now()), now)
		require.Equal(t, tcpip.MonotonicTime{}.Add(r.World.Now()), mono)
	}
}

// TestPastDeadlineNoYieldRound: a deadline a goroutine sets in the past
// while the driver yields (net/http's server aborts its background read so
// after every request) costs the settle no yield round beyond the one any
// call gets: the call counts as activity, and the deadline's passing asks
// for nothing more. (It used to kick the driver: a second round, with
// nothing left to run, per kept-alive GET.)
func TestPastDeadlineNoYieldRound(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r, _, conn := dialWeb2(t)
	d := driverFor(r.World.Engine)
	// settleAfter is the fewest yield rounds, over a few tries, of a
	// settle (kicked, as a drive starts) during whose first yield a
	// goroutine makes call, as net/http's server does between the
	// driver's yields (the fewest: a goroutine outside the world can make
	// any one round not quiet).
	settleAfter := func(call func()) uint64 {
		fewest := uint64(1 << 63)
		for range 5 {
			done := make(chan struct{})
			d.mu.Lock()
			// With one processor the goroutine runs when settle yields.
			go func() { call(); close(done) }()
			d.procs, d.kick = 1, true
			y := d.yields
			d.settle()
			fewest = min(fewest, d.yields-y)
			d.mu.Unlock()
			<-done
		}
		return fewest
	}
	plain := settleAfter(func() { require.NoError(t, conn.SetReadDeadline(time.Time{})) })
	past := settleAfter(func() { require.NoError(t, conn.SetReadDeadline(time.Unix(1, 0))) })
	require.Equal(t, uint64(1), plain, "a call gets one yield round")
	require.Equal(t, plain, past, "a deadline set in the past adds no yield round")
}

// TestClearDeadlineWithoutLock: clearing a deadline that is not set (net/http's
// server does so about four times per request) takes no world lock and
// changes nothing, and clearing one that is armed or has passed, by a
// deadline in the past or by virtual time, still clears it: a read after
// it waits for data instead of timing out.
func TestClearDeadlineWithoutLock(t *testing.T) {
	_, conn, accepted := acceptWeb2(t)
	c := conn.(*TCPConn)
	d := c.s.d

	// Not set: cleared while another holds the world lock (which a
	// call taking it would wait for).
	d.mu.Lock()
	cleared := make(chan error, 1)
	go func() {
		err := conn.SetReadDeadline(time.Time{})
		if err == nil {
			err = conn.SetWriteDeadline(time.Time{})
		}
		if err == nil {
			err = conn.SetDeadline(time.Time{})
		}
		cleared <- err
	}()
	var err error
	waited := false
	select {
	case err = <-cleared:
	case <-time.After(10 * time.Second):
		waited = true
	}
	d.mu.Unlock()
	require.False(t, waited, "clearing an unset deadline waited for the world lock")
	require.NoError(t, err)

	buf := make([]byte, 2)
	readAfter := func(set func()) {
		t.Helper()
		set()
		require.NoError(t, conn.SetReadDeadline(time.Time{}))
		require.False(t, c.rd.active.Load())
		_, err := accepted.Write([]byte("ok"))
		require.NoError(t, err)
		n, err := conn.Read(buf)
		require.NoError(t, err, "the cleared deadline does not cut the read short")
		require.Equal(t, "ok", string(buf[:n]))
	}
	// Passed by being set in the past.
	readAfter(func() {
		require.NoError(t, conn.SetReadDeadline(time.Unix(1, 0)))
		require.True(t, c.rd.active.Load())
		_, err := conn.Read(buf)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	})
	// Passed in virtual time while a read waited.
	readAfter(func() {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Second)))
		_, err := conn.Read(buf)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.True(t, c.rd.active.Load())
	})
	// Armed and not passed.
	readAfter(func() {
		require.NoError(t, conn.SetDeadline(time.Now().Add(time.Hour)))
		require.True(t, c.rd.active.Load())
		require.True(t, c.wd.active.Load())
	})
	// The write deadline set just now is cleared by the lock path too.
	require.NoError(t, conn.SetWriteDeadline(time.Time{}))
	require.False(t, c.wd.active.Load())
}
