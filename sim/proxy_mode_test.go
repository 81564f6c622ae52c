package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

func TestNewClusterProxyMode(t *testing.T) {
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, kubeproxy.ModeIPTables, c.Config.ProxyMode, `mode "" is iptables on Linux`)

	cfg := DefaultConfig()
	cfg.ProxyMode = "bogus"
	_, err = NewCluster(cfg)
	assert.EqualError(t, err, `cluster: proxyMode: KubeProxyConfiguration.ProxyMode: Invalid value: "bogus": must be iptables, ipvs, nftables or blank (blank means the best-available proxy [currently iptables])`)
}
