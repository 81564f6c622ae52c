package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/internal/golden"
)

func TestGetAndDescribe(t *testing.T) {
	code, out, errs := call("get", "nodes", "-o", "wide", "--scenario", "reference")
	require.Equal(t, 0, code, errs)
	require.Empty(t, errs)
	for _, n := range []string{"cka-cp1", "cka-w1", "cka-w2"} {
		assert.Regexp(t, `(?m)^`+n+` +Ready `, out)
	}
	assert.Regexp(t, `(?m)^cka-w1 .* 192\.168\.122\.21 +<none> `, out)

	code, out, errs = call("get", "svc", "-A", "--scenario", "reference")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^default +kubernetes +ClusterIP +10\.96\.0\.1 +<none> +443/TCP `, out)
	assert.Regexp(t, `(?m)^net +web +NodePort +10\.111\.80\.136 +<none> +80:30080/TCP `, out)

	code, out, errs = call("get", "svc", "web", "-n", "net", "-o", "name", "--scenario", "reference")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "service/web\n", out)

	code, out, errs = call("describe", "node", "cka-w1", "--scenario", "reference")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^PodCIDR: +10\.244\.1\.0/24$`, out)
	assert.Regexp(t, `(?m)^  net +client `, out)
}

// kubectl's stderr and exit status: notes and API errors in kubectl's
// words (stdout still printed), usage errors as kubewalk's one line.
func TestGetErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"get", "deploy"}, 0, "No resources found in default namespace.\n"},
		{[]string{"get", "pods", "nope", "-n", "net"}, 1, "Error from server (NotFound): pods \"nope\" not found\n"},
		{[]string{"describe", "svc", "nope", "-n", "net"}, 1, "Error from server (NotFound): services \"nope\" not found\n"},
		{[]string{"get", "widgets"}, 2, "kubewalk get: the server doesn't have a resource type \"widgets\"\n"},
		{[]string{"get", "pods", "-o", "xml"}, 2, "kubewalk get: unable to match a printer suitable for the output format \"xml\", allowed formats are: json,name,wide,yaml\n"},
		{[]string{"describe", "deploy", "x"}, 2, "kubewalk describe: kubewalk describes nodes, pods and services, not deployments\n"},
		{[]string{"get"}, 2, "kubewalk get: a RESOURCE is required (nodes, pods, svc, endpointslices, deploy, rs, ds, cm, pdb, ns, events)\n"},
	} {
		code, out, errs := call(append(tc.args, "--scenario", "reference")...)
		assert.Equal(t, tc.code, code, "%v", tc.args)
		assert.Equal(t, tc.stderr, errs, "%v", tc.args)
		assert.Empty(t, out, "%v", tc.args)
	}
}

// kubewalk play runs a script from a file and from stdin to the same
// golden transcript, the same bytes every time.
func TestPlay(t *testing.T) {
	code, out, errs := call("play", "--scenario", "reference", "testdata/reference.play")
	require.Equal(t, 1, code, errs)
	assert.Empty(t, errs)
	golden.Check(t, "reference.play.txt", out)

	script, err := os.ReadFile("testdata/reference.play")
	require.NoError(t, err)
	stdin = strings.NewReader(string(script))
	defer func() { stdin = os.Stdin }()
	code, again, _ := call("play", "--scenario", "reference", "-")
	assert.Equal(t, 1, code)
	assert.Equal(t, out, again)
}

func TestPlayBadInput(t *testing.T) {
	code, _, errs := call("play", "--scenario", "reference", "testdata/missing.play")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "kubewalk play: reading the script: open testdata/missing.play: no such file or directory")

	stdin = strings.NewReader("kubectl apply -f - <<EOF\nkind: Pod\n")
	defer func() { stdin = os.Stdin }()
	code, _, errs = call("play", "--scenario", "reference", "-")
	assert.Equal(t, 2, code)
	assert.Equal(t, "kubewalk play: -: line 1: here-document delimited by end-of-file (wanted \"EOF\")\n", errs)

	stdin = strings.NewReader("trace --from net/nope --to net/web-1\n")
	code, out, _ := call("play", "--scenario", "reference", "-")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "$ trace --from net/nope --to net/web-1\ntrace: ")
}
