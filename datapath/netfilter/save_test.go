package netfilter

import (
	"os"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newNF(t testing.TB) *Netfilter {
	t.Helper()
	e := datapath.NewEngine(1)
	ns := e.NewNetns("node", "host")
	return Install(ns, nil)
}

func TestRoundTripKubeProxyDump(t *testing.T) {
	in, err := os.ReadFile("testdata/kube-proxy.save")
	require.NoError(t, err)
	nf := newNF(t)
	require.NoError(t, nf.Restore(string(in), RestoreOptions{}))
	assert.Equal(t, string(in), nf.Save(SaveOptions{}))
}
