package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/internal/golden"
)

// TestNotebookSVGIsCurrent keeps notebooks/cross-node-tcp.svg equal to what
// the command it shows prints today (go test -update rewrites it), so the
// picture the notebooks ship never shows interface names or timings the
// simulation no longer produces.
func TestNotebookSVGIsCurrent(t *testing.T) {
	code, out, errOut := call("trace", "--scenario", "reference", "--from", "net/client",
		"--to", "net/web-2", "--port", "80", "-o", "svg")
	require.Equal(t, 0, code, errOut)
	golden.Check(t, "../../../notebooks/cross-node-tcp.svg", out)
}
