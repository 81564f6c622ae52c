package netstack

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/stretchr/testify/require"
)

// TestAckStateForgotten: the delayed-ACK state of a connection goes when
// both FINs have gone (or a RST), so a world that opens connection after
// connection does not keep one per connection.
func TestAckStateForgotten(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	client, err := AttachPod(r.World, r.Client)
	require.NoError(t, err)
	var servers []*Stack
	for _, pod := range []*sim.Pod{r.Web1, r.Web2} {
		s, err := AttachPod(r.World, pod)
		require.NoError(t, err)
		srv, err := s.ServeHTTP(":80", NginxHandler(s))
		require.NoError(t, err)
		defer srv.Close()
		servers = append(servers, s)
	}
	tp := client.Transport()
	tp.DisableKeepAlives()
	c := &http.Client{Transport: tp}
	for range 5 {
		resp, err := c.Get("http://10.111.80.136/")
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	require.NoError(t, r.World.Advance(time.Second))
	n := len(client.acks)
	for _, s := range servers {
		n += len(s.acks)
	}
	require.Zero(t, n, "no state left for closed connections")

	// A kept-alive connection keeps its state on both sides.
	keep := client.HTTPClient(0)
	resp, err := keep.Get("http://10.111.80.136/")
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Len(t, client.acks, 1)
}

// TestAckTimerOrder: a delayed-ACK timer re-armed while its stopped
// event is still queued fires at the time it was armed for, in the place
// among that instant's events an event scheduled when it was armed would
// have had (after a timer scheduled for that instant before it, before one
// scheduled after it), and nothing runs at the stopped event's time.
func TestAckTimerOrder(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	s, err := AttachPod(r.World, r.Client)
	require.NoError(t, err)
	d := s.d
	start := r.World.Engine.Now()
	var fired []string
	at := func(name string) func() {
		return func() { fired = append(fired, name+"@"+(d.e.Now()-start).String()) }
	}
	a := &ackTimer{d: d, f: at("ack"), delay: 40 * time.Millisecond}
	d.lock()
	a.Arm() // queued for 40ms
	a.Stop()
	(&vtimer{d: d, f: func() {
		(&vtimer{d: d, f: at("before")}).Reset(40 * time.Millisecond)
		a.Arm() // for 50ms: the event queued for 40ms stands for it
		(&vtimer{d: d, f: at("after")}).Reset(40 * time.Millisecond)
	}}).Reset(10 * time.Millisecond)
	d.unlock()
	require.NoError(t, r.World.Advance(100*time.Millisecond))
	require.Equal(t, []string{"before@50ms", "ack@50ms", "after@50ms"}, fired)

	// Stopped for good, it runs nothing and leaves nothing queued.
	fired = nil
	d.lock()
	stale := d.staleQueued
	a.Arm()
	a.Stop()
	d.unlock()
	require.NoError(t, r.World.Advance(100*time.Millisecond))
	require.Empty(t, fired)
	require.False(t, a.queued)
	require.Equal(t, stale, d.staleQueued)
}

// TestAckTimerQueue: the delayed-ACK timers of a kept-alive connection,
// armed and stopped twice per GET, keep one event each in the engine's
// queue, not one per arming until its time comes. The events of gVisor's
// own timers (one per arming) are left out of the count: how many of
// their stopped armings are still queued varies with how its goroutines
// batched segments when GOMAXPROCS > 1 (race runs saw 0 to 10 more).
func TestAckTimerQueue(t *testing.T) {
	r, client, _, c := crossNodeGET(t)
	ours := func() int { return r.World.Engine.Pending() - client.d.stackEvents }
	before := ours()
	for range 200 {
		get(t, c)
	}
	require.LessOrEqual(t, ours(), before+2)
}
