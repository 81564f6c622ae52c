package scenarios

import (
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
)

// TestStaleUDPConntrackCleared: a UDP "connection" to a ClusterIP is pinned
// by conntrack to its endpoint. When that endpoint goes away, kube-proxy
// deletes the entries whose reply source is the removed endpoint, so the
// client's next datagram (same 5-tuple) is DNATed afresh to a live one.
func TestStaleUDPConntrackCleared(t *testing.T) {
	f, err := NewFlows(1)
	require.NoError(t, err)
	f.World.Walk().Chooser = func(float64) bool { return false } // -> 10.244.2.2 (net/web-2)
	svc := f.Service("net", "web-udp").ClusterIP()
	_, err = f.Client.Netns.ListenUDP(40000, false)
	require.NoError(t, err)
	send := func() {
		ip, err := packet.UDP(packet.IP{Src: f.Client.IP, Dst: svc}, 40000, 53, []byte("q"))
		require.NoError(t, err)
		require.NoError(t, f.World.Send(f.Client.Netns, ip, nil))
		require.NoError(t, f.World.Run())
	}
	send()
	require.Equal(t, 1, f.Web2.Netns.UDPSocket(5353).Received)
	require.Contains(t, f.W1.Conntrack.Dump(), "src=10.244.2.2 dst=10.244.1.2 sport=5353 dport=40000")

	f.World.Walk().Chooser = nil
	require.NoError(t, f.DeletePod("net", "web-2"))
	require.NotContains(t, f.W1.Conntrack.Dump(), "src=10.244.2.2", "kube-proxy cleared the stale UDP entry")
	for _, n := range f.Nodes() {
		require.NotContains(t, n.ProxyRules().SaveNAT(), "10.244.2.2:5353", n.Name)
	}
	send()
	require.Equal(t, 1, f.Web1.Netns.UDPSocket(5353).Received, "the same flow now reaches the remaining endpoint")
	require.True(t, strings.Contains(f.W1.Conntrack.Dump(), "src=10.244.1.3 dst=10.244.1.2 sport=5353 dport=40000"))
}
