package netstack_test

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim/netstack"
	"github.com/stretchr/testify/require"
)

// exchange runs a cross-node HTTP exchange (a fresh connection per GET,
// then two GETs on a kept-alive one, a wget, and a wget of a Service name
// resolved through CoreDNS) and returns every frame
// the stacks' packets showed at every device, with its time and place.
func exchange(t *testing.T) []string {
	w := newWeb(t, 7)
	tr := &trace.Trace{Capture: true}
	w.client.Trace, w.web1.Trace, w.web2.Trace = tr, tr, tr
	c := w.client.HTTPClient(0)
	for range 2 {
		getBody(t, c, "http://10.111.80.136/")
	}
	fresh := w.client.Transport()
	fresh.DisableKeepAlives()
	for range 3 {
		getBody(t, &http.Client{Transport: fresh}, "http://10.111.80.136/")
	}
	_, errOut, code := netstackWget(w, "http://10.111.80.136/")
	require.Equal(t, 0, code, errOut)
	// A name resolved through CoreDNS: query IDs and source ports are
	// seeded too.
	servers, err := netstack.StartCoreDNS(w.Cluster)
	require.NoError(t, err)
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	w.client.SetResolvConf(podResolvConf(t, w))
	_, errOut, code = netstackWget(w, "http://web/")
	require.Equal(t, 0, code, errOut)
	dnsFrames := 0
	for _, o := range tr.Obs {
		if f := o.Frame; len(f) > 14+20+4 && f[14+9] == 17 && f[14+20+2] == 0 && f[14+20+3] == 53 {
			dnsFrames++ // a UDP datagram to port 53 (no IP options here)
		}
	}
	frames := netstack.FrameLines(tr)
	require.NotEmpty(t, frames)
	require.NotZero(t, dnsFrames)
	return frames
}

// TestDeterministicFrames is the guarantee of the package documentation:
// with GOMAXPROCS=1 two runs give the same frames, byte for byte, at the
// same virtual times.
func TestDeterministicFrames(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a := exchange(t)
	b := exchange(t)
	require.Equal(t, len(a), len(b))
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("frame %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
	require.True(t, bytes.Equal([]byte(fmt.Sprint(a)), []byte(fmt.Sprint(b))))
}

// TestDirectOutputSameFrames: the short TCP output path gives the frames
// gVisor's IPv4 output gives, byte for byte, at the same virtual times.
func TestDirectOutputSameFrames(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	restore := netstack.SetDirectOutput(false)
	a := exchange(t)
	restore()
	b := exchange(t)
	require.Equal(t, len(a), len(b))
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("frame %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
}
