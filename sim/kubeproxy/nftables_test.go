package kubeproxy

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The chain names kube-proxy's own nftables tests use
// (pkg/proxy/nftables/proxier_test.go).
func TestNFTChainNames(t *testing.T) {
	assert.Equal(t, "ULMVA6XW-ns1/svc1/tcp/p80", NFTServiceChainBase("ns1", "svc1", "p80", ProtocolTCP))
	assert.Equal(t, "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80",
		NFTEndpointChainBase("ns1", "svc1", "p80", ProtocolTCP, netip.MustParseAddrPort("10.180.0.1:80")))
	long := NFTHashAndTruncate(string(make([]byte, 300)))
	assert.Len(t, long, 240)
	assert.Equal(t, "...", long[237:])
}
