package netstack_test

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/require"
)

// exchange runs a cross-node HTTP exchange (a fresh connection per GET,
// then two GETs on a kept-alive one, and a wget) and returns every frame
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
	var frames []string
	for _, o := range tr.Obs {
		if o.Frame != nil {
			frames = append(frames, fmt.Sprintf("%v %s/%s/%s %x", o.At, o.Node, o.Netns, o.Device, o.Frame))
		}
	}
	require.NotEmpty(t, frames)
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
