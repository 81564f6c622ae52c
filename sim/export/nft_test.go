package export_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/export"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// TestScriptNFTablesMode: in nftables mode the script feeds each node's
// kube-proxy transaction to nft -f, does not set route_localnet (nftables
// mode has no localhost NodePorts) and loads no KUBE- iptables chains.
func TestScriptNFTablesMode(t *testing.T) {
	r, err := scenarios.NewReferenceMode(1, kubeproxy.ModeNFTables)
	require.NoError(t, err)
	e, err := export.Generate(r.Cluster, export.Options{})
	require.NoError(t, err)
	assert.Equal(t, 3, strings.Count(e.Setup, " nft -f - <<'KUBEWALK_EOF'\n"), "one table per node")
	assert.Contains(t, e.Setup, "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }\n")
	assert.Contains(t, e.Setup, "add element ip kube-proxy service-nodeports { tcp . 30080 : goto external-QM4IEN7H-net/web/tcp/ }\n")
	assert.NotContains(t, e.Setup, "route_localnet")
	assert.NotContains(t, e.Setup, "-A KUBE-")
}
