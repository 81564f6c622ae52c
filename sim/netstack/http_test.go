package netstack_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/netstack"
	"github.com/stretchr/testify/require"
)

// web is the reference cluster with nginx-like servers in both web pods
// and a stack in the client pod.
type web struct {
	*scenarios.Reference
	client, web1, web2 *netstack.Stack
	srv1, srv2         *netstack.Server
}

func newWeb(t testing.TB, seed uint64) *web {
	t.Helper()
	r, err := scenarios.NewReference(seed)
	require.NoError(t, err)
	w := &web{Reference: r}
	w.client, err = netstack.AttachPod(r.World, r.Client)
	require.NoError(t, err)
	w.web1, err = netstack.AttachPod(r.World, r.Web1)
	require.NoError(t, err)
	w.web2, err = netstack.AttachPod(r.World, r.Web2)
	require.NoError(t, err)
	w.srv1, err = w.web1.ServeHTTP(":80", netstack.NginxHandler(w.web1))
	require.NoError(t, err)
	w.srv2, err = w.web2.ServeHTTP(":80", netstack.NginxHandler(w.web2))
	require.NoError(t, err)
	t.Cleanup(func() { w.srv1.Close(); w.srv2.Close() })
	return w
}

func TestGetClusterIP(t *testing.T) {
	w := newWeb(t, 1)
	c := w.client.HTTPClient(0)
	resp, err := c.Get("http://10.111.80.136/")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "<title>Welcome to nginx!</title>")
	require.Equal(t, netstack.NginxVersion, resp.Header.Get("Server"))
	t.Log(w.World.Now(), resp.Header)
}
