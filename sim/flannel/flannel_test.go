package flannel

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath"
)

// A node starts once: a second Start of the same name is refused,
// however many nodes have started since.
func TestStartTwice(t *testing.T) {
	e := datapath.NewEngine(1)
	n := NewNetwork(DefaultConfig())
	start := func(name string, i int) error {
		host := e.NewNetns(name, "host")
		_, err := host.AddNIC("eth0", datapath.MAC{0x52, 0x54, 0, 0, 0, byte(i)}, 1500)
		require.NoError(t, err)
		require.NoError(t, host.AddAddr("eth0", netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 0, byte(10 + i)}), 24)))
		_, err = n.Start(name, host, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24),
			netip.AddrFrom4([4]byte{192, 168, 0, byte(10 + i)}), "eth0")
		return err
	}
	require.NoError(t, start("a", 1))
	require.NoError(t, start("b", 2))
	require.NoError(t, start("c", 3))
	require.EqualError(t, start("a", 4), "flanneld on a: already joined")
	require.Len(t, n.Nodes(), 3)
}
