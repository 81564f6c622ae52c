package netstack_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim/netstack"
	"github.com/stretchr/testify/require"
)

func TestDialErrors(t *testing.T) {
	w := newWeb(t, 1)
	web2 := w.Web2.IP.String()
	for _, tc := range []struct {
		name, addr string
		errno      syscall.Errno
		msg        string
	}{
		{"port nobody listens on", web2 + ":81", syscall.ECONNREFUSED, "dial tcp " + web2 + ":81: connect: connection refused"},
		// A pod IP nobody has on the client's node: cka-w1 fails ARP on
		// cni0 and answers ICMP host unreachable.
		{"no such pod", "10.244.1.99:80", syscall.EHOSTUNREACH, "dial tcp 10.244.1.99:80: connect: no route to host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := w.World.Now()
			_, err := w.client.Dial("tcp", tc.addr)
			require.Error(t, err)
			require.ErrorIs(t, err, tc.errno)
			require.EqualError(t, err, tc.msg)
			var op *net.OpError
			require.ErrorAs(t, err, &op)
			t.Logf("%s after %v", err, w.World.Now()-start)
		})
	}
}

func TestDialDeletedPod(t *testing.T) {
	w := newWeb(t, 1)
	web2 := w.Web2.IP.String()
	w.srv2.Close()
	require.NoError(t, w.DeletePod("net", "web-2"))
	_, err := w.client.Dial("tcp", web2+":80")
	require.ErrorIs(t, err, syscall.EHOSTUNREACH, "cka-w2 cannot resolve the deleted pod's address")
	out, errOut, code := netstack.Wget(w.World, w.Client.Netns, "http://"+web2+"/")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Equal(t, "wget: can't connect to remote host ("+web2+"): No route to host\n", errOut)
}

func TestReadDeadlineVirtual(t *testing.T) {
	w := newWeb(t, 1)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	defer ln.Close()
	c, err := w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.NoError(t, err)
	defer c.Close()
	start, wall := w.World.Now(), time.Now()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = c.Read(make([]byte, 10))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Contains(t, err.Error(), "i/o timeout")
	require.Equal(t, 30*time.Second, w.World.Now()-start, "the deadline is on the world's clock")
	require.Less(t, time.Since(wall), 10*time.Second)
}

func TestIdleWorldReturns(t *testing.T) {
	w := newWeb(t, 1)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	defer ln.Close()
	c, err := w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.NoError(t, err)
	defer c.Close()
	// Nobody will ever write: the read returns instead of hanging.
	_, err = c.Read(make([]byte, 10))
	var idle *netstack.IdleError
	require.ErrorAs(t, err, &idle)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
}

func TestServerResetMidRead(t *testing.T) {
	w := newWeb(t, 1)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// Closing with unread data makes the kernel (and gVisor) send RST.
		buf := make([]byte, 1)
		c.Read(buf)
		c.Close()
	}()
	c, err := w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.NoError(t, err)
	_, err = c.Write([]byte("hello, more than one byte"))
	require.NoError(t, err)
	_, err = io.ReadAll(c)
	require.ErrorIs(t, err, syscall.ECONNRESET)
	require.Contains(t, err.Error(), "read: connection reset by peer")
}

func TestWgetErrors(t *testing.T) {
	w := newWeb(t, 1)
	for _, tc := range []struct{ url, stderr string }{
		{"http://" + w.Web2.IP.String() + ":81/", "wget: can't connect to remote host (" + w.Web2.IP.String() + "): Connection refused\n"},
		{"http://web/", "wget: bad address 'web'\n"},
		{"ftp://10.111.80.136/", "wget: not an http or ftp url: ftp://10.111.80.136/\n"},
	} {
		out, errOut, code := netstack.Wget(w.World, w.Client.Netns, tc.url)
		require.Equal(t, 1, code, tc.url)
		require.Empty(t, out)
		require.Equal(t, tc.stderr, errOut)
	}
	require.True(t, errors.Is(&netstack.IdleError{}, os.ErrDeadlineExceeded))
}

// TestSettleDrivesStacks: Cluster.Settle runs the stacks and the
// goroutines they wake after every event, as a blocked netstack call does:
// the client's stack answers the server's data and FIN during Settle.
func TestSettleDrivesStacks(t *testing.T) {
	w := newWeb(t, 1)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	defer ln.Close()
	c, err := w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.NoError(t, err)
	defer c.Close()
	tr := &trace.Trace{}
	w.client.Trace = tr
	served := make(chan struct{})
	go func() {
		defer close(served)
		s, err := ln.Accept()
		if err != nil {
			return
		}
		s.Write([]byte("hello"))
		s.Close()
	}()
	require.NoError(t, w.Settle())
	select {
	case <-served:
	default:
		t.Fatal("the server goroutine was not run by Settle")
	}
	acks := tr.Find(func(o *trace.Observation) bool {
		return o.Netns == "net/client" && o.Stage == "route" && strings.Contains(o.Summary, "Flags [.]")
	})
	require.NotEmpty(t, acks, "the client's stack ACKed the server's data and FIN during Settle")
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
}

// TestBlockedWriteGivesUp: a write to a peer that never reads blocks on a
// zero window that is probed forever, so the world never idles; the write
// returns after the world's bound on blocked calls (an i/o timeout), or at
// its deadline, in virtual time.
func TestBlockedWriteGivesUp(t *testing.T) {
	w := newWeb(t, 1)
	netstack.SetMaxBlocked(w.World, time.Hour)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			select {} // never reads
		}
	}()
	c, err := w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.NoError(t, err)
	defer c.Close()

	require.NoError(t, c.SetWriteDeadline(time.Now().Add(30*time.Second)))
	start := w.World.Now()
	n, err := c.Write(make([]byte, 16<<20))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Less(t, n, 16<<20, "the peer's window and the send buffer filled")
	require.Equal(t, 30*time.Second, w.World.Now()-start)

	require.NoError(t, c.SetWriteDeadline(time.Time{}))
	start = w.World.Now()
	_, err = c.Write(make([]byte, 1<<20))
	var idle *netstack.IdleError
	require.ErrorAs(t, err, &idle)
	require.Greater(t, idle.Blocked, 50*time.Minute, "the zero-window probes back off to two minutes")
	require.LessOrEqual(t, w.World.Now()-start, time.Hour)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	require.Contains(t, err.Error(), "i/o timeout (blocked for ")
}

// TestDeletedClientPod: the sockets of a pod that was deleted under them
// fail as on a node whose pod network is gone, never hang: a read waits
// out the retransmissions of what was written (ETIMEDOUT), a new dial
// finds no route (ENETUNREACH).
func TestDeletedClientPod(t *testing.T) {
	w := newWeb(t, 1)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
		}
	}()
	c, err := w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, w.DeletePod("net", "client"))
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err, "the send buffer takes it")
	_, err = c.Read(make([]byte, 10))
	require.ErrorIs(t, err, syscall.ETIMEDOUT)
	require.Contains(t, err.Error(), "read: connection timed out")
	_, err = w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.ErrorIs(t, err, syscall.ENETUNREACH)
}

// TestCloseWakesBlockedCalls closes a listener and an accepted connection
// while an Accept and a Read (background calls: they only wait for the
// driver) are blocked on them: each returns net's "use of closed network
// connection" (net.ErrClosed), as with the kernel's sockets.
func TestCloseWakesBlockedCalls(t *testing.T) {
	w := newWeb(t, 1)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	c, err := w.client.Dial("tcp", w.Web2.IP.String()+":9000")
	require.NoError(t, err)
	defer c.Close()
	var sc net.Conn
	require.NoError(t, netstack.Do(w.World, func() { sc, err = ln.Accept() }))
	require.NoError(t, err)
	readErr, acceptErr := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := sc.Read(make([]byte, 10))
		readErr <- err
	}()
	go func() {
		_, err := ln.Accept()
		acceptErr <- err
	}()
	// Let both reach their blocking point (the world is idle: nothing
	// arrives for them).
	require.NoError(t, netstack.Do(w.World, func() {}))
	require.NoError(t, sc.Close())
	require.NoError(t, ln.Close())
	err = <-readErr
	require.ErrorIs(t, err, net.ErrClosed)
	require.EqualError(t, err, "read tcp "+w.Web2.IP.String()+":9000->"+c.LocalAddr().String()+": use of closed network connection")
	err = <-acceptErr
	require.ErrorIs(t, err, net.ErrClosed)
	require.EqualError(t, err, "accept tcp "+ln.Addr().String()+": use of closed network connection")
}
