package netstack

import (
	"fmt"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
)

// FrameLines renders every frame tr captured, one line each: its virtual
// time, where it was seen and its bytes (the determinism tests compare
// runs by them).
func FrameLines(tr *trace.Trace) []string {
	var frames []string
	for _, o := range tr.Obs {
		if o.Frame != nil {
			frames = append(frames, fmt.Sprintf("%v %s/%s/%s %x", o.At, o.Node, o.Netns, o.Device, o.Frame))
		}
	}
	return frames
}

// referenceStacks is the reference cluster (random seed seed) with
// net/web-1 deleted and stacks attached to net/client (cka-w1) and
// net/web-2 (cka-w2).
func referenceStacks(t *testing.T, seed uint64) (r *scenarios.Reference, client, web *Stack) {
	t.Helper()
	r, err := scenarios.NewReference(seed)
	require.NoError(t, err)
	require.NoError(t, r.DeletePod("net", "web-1"))
	client, err = AttachPod(r.World, r.Client)
	require.NoError(t, err)
	web, err = AttachPod(r.World, r.Web2)
	require.NoError(t, err)
	return r, client, web
}

// SetDirectOutput turns the short TCP output path on or off for a test
// and returns the function that puts it back.
func SetDirectOutput(on bool) (restore func()) {
	prev := directOutput
	directOutput = on
	return func() { directOutput = prev }
}

// SetDirectBody turns direct response body reads on or off for a test and
// returns the function that puts it back.
func SetDirectBody(on bool) (restore func()) {
	prev := directBody
	directBody = on
	return func() { directBody = prev }
}
