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
