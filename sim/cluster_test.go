package sim

import (
	"net/netip"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
)

// twoPods is one node with a client pod and a server pod whose container
// declares UDP port 5353, echoing or not.
func twoPods(t *testing.T, echo bool) (*Cluster, *Pod, *Pod) {
	t.Helper()
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	_, err = c.AddNode(NodeSpec{Name: "n1", NICs: []NICSpec{{Name: "eth0", Segment: "lan",
		Addr: netip.MustParsePrefix("192.168.1.11/24"), Gateway: netip.MustParseAddr("192.168.1.1")}}})
	require.NoError(t, err)
	client, err := c.AddPod(PodSpec{Namespace: "ns", Name: "client", Node: "n1"})
	require.NoError(t, err)
	server, err := c.AddPod(PodSpec{Namespace: "ns", Name: "server", Node: "n1", Containers: []Container{{Name: "dns",
		Ports: []ContainerPort{{ContainerPort: 5353, Protocol: "UDP", Echo: echo}}}}})
	require.NoError(t, err)
	return c, client, server
}

func TestContainerUDPPortEchoesOnlyWhenAsked(t *testing.T) {
	for _, echo := range []bool{false, true} {
		c, client, server := twoPods(t, echo)
		_, err := client.Netns.ListenUDP(40000, false)
		require.NoError(t, err)
		ip, err := packet.UDP(packet.IP{Src: client.IP, Dst: server.IP}, 40000, 5353, []byte("query"))
		require.NoError(t, err)
		tr := &trace.Trace{}
		require.NoError(t, c.World.Send(client.Netns, ip, tr))
		require.NoError(t, c.World.Run())
		require.Equal(t, 1, server.Netns.UDPSocket(5353).Received, "echo=%v: the datagram reached the container", echo)
		got := client.Netns.UDPSocket(40000).Received
		if echo {
			require.Equal(t, 1, got, "an echo server answers")
		} else {
			require.Zero(t, got, "a container port is a silent listener unless it runs an echo server")
		}
	}
}
