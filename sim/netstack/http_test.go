package netstack_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
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

// onlyWeb2 deletes net/web-1, so net/web's one endpoint is across nodes
// from the client.
func (w *web) onlyWeb2(t testing.TB) {
	t.Helper()
	w.srv1.Close()
	require.NoError(t, w.DeletePod("net", "web-1"))
}

func getBody(t testing.TB, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(b)
}

// find returns the observations of tr at stage with action, whose detail
// or summary contains sub.
func find(tr *trace.Trace, stage string, a trace.Action, sub string) []trace.Observation {
	return tr.Find(func(o *trace.Observation) bool {
		return o.Stage == stage && o.Action == a && (strings.Contains(o.Detail, sub) || strings.Contains(o.Summary, sub) ||
			strings.Contains(o.After, sub))
	})
}

func TestGetClusterIPAcrossNodes(t *testing.T) {
	w := newWeb(t, 1)
	w.onlyWeb2(t)
	tr := &trace.Trace{}
	w.client.Trace, w.web2.Trace = tr, tr
	resp, body := getBody(t, w.client.HTTPClient(0), "http://10.111.80.136/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "<title>Welcome to nginx!</title>")
	require.Equal(t, netstack.NginxVersion, resp.Header.Get("Server"))
	require.Equal(t, netstack.Epoch.Add(w.World.Now()).Format(http.TimeFormat), resp.Header.Get("Date"), "Date is the virtual clock")

	web2 := w.Web2.IP.String()
	// DNAT on cka-w1 to the endpoint on cka-w2, VXLAN both ways, and the
	// reply un-DNATed back to the ClusterIP before it reaches the client.
	require.NotEmpty(t, find(tr, "nat/PREROUTING", trace.Rewritten, "> "+web2+":80"), "DNAT to web-2")
	require.NotEmpty(t, tr.Find(func(o *trace.Observation) bool {
		return o.Node == "cka-w1" && o.Device == "flannel.1" && o.Action == trace.Encapsulated
	}), "VXLAN from cka-w1")
	require.NotEmpty(t, tr.Find(func(o *trace.Observation) bool {
		return o.Node == "cka-w2" && o.Device == "flannel.1" && o.Action == trace.Encapsulated
	}), "VXLAN back from cka-w2")
	delivered := tr.Find(func(o *trace.Observation) bool {
		return o.Netns == "net/client" && o.Stage == "socket" && o.Action == trace.Delivered
	})
	require.NotEmpty(t, delivered)
	for _, o := range delivered {
		require.True(t, strings.HasPrefix(o.Summary, "10.111.80.136.80 > "), "reply un-DNATed: %s", o.Summary)
	}
}

func TestGetNodePortFromOutside(t *testing.T) {
	w := newWeb(t, 1)
	for _, node := range []string{"192.168.122.11", "192.168.122.21", "192.168.122.22"} {
		out, errOut, code := netstack.Wget(w.World, w.Outside.Netns, "http://"+node+":30080/")
		require.Equal(t, 0, code, errOut)
		require.Empty(t, errOut)
		require.Contains(t, out, "<title>Welcome to nginx!</title>", node)
	}
}

func TestGetPersistentConnection(t *testing.T) {
	w := newWeb(t, 1)
	tr := &trace.Trace{}
	w.client.Trace = tr
	c := w.client.HTTPClient(0)
	for range 3 {
		resp, body := getBody(t, c, "http://10.111.80.136/")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, "Welcome to nginx!")
	}
	syns := tr.Find(func(o *trace.Observation) bool {
		return o.Netns == "net/client" && o.Stage == "route" && strings.Contains(o.Summary, "Flags [S]")
	})
	require.Len(t, syns, 1, "three GETs over one kept-alive connection")
}

func TestNginxNotFound(t *testing.T) {
	w := newWeb(t, 1)
	resp, body := getBody(t, w.client.HTTPClient(0), "http://10.111.80.136/missing")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, body, "<title>404 Not Found</title>")
	out, errOut, code := netstack.Wget(w.World, w.Client.Netns, "http://10.111.80.136/missing")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Equal(t, "wget: server returned error: HTTP/1.1 404 Not Found\n", errOut)
}

func netstackWget(w *web, url string) (string, string, int) {
	return netstack.Wget(w.World, w.Client.Netns, url)
}

// TestRoundTripRequest: the response's Request is the request sent, as
// http.Transport's RoundTrip gives it, on a new connection and a kept-alive
// one (the Transport cancels a request through the http.Transport's own
// cancellation, not through a copy of the request with a context of its
// own).
func TestRoundTripRequest(t *testing.T) {
	w := newWeb(t, 1)
	w.onlyWeb2(t)
	tr := w.client.Transport()
	for range 2 {
		req, err := http.NewRequest(http.MethodGet, "http://10.111.80.136/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Same(t, req, resp.Request)
	}
}

// TestRoundTripIdleGivesUp: a GET to a server that accepts and never
// answers returns the idle error when nothing is left to run: the request
// is cancelled (its connection closed, as cancelling its context would),
// or RoundTrip, told to give up, would stay blocked and the Get with it.
func TestRoundTripIdleGivesUp(t *testing.T) {
	w := newWeb(t, 1)
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	_, err = w.client.HTTPClient(0).Get("http://" + w.Web2.IP.String() + ":9000/")
	var idle *netstack.IdleError
	require.ErrorAs(t, err, &idle)
}
