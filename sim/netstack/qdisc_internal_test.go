package netstack

import (
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestLinkWriteAllocs: a packet the stack writes reaches the link without
// an allocation of its own (gVisor's default queueing discipline wraps
// each one in a list of one), and reaches the world's queue.
func TestLinkWriteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts vary under the race detector (sync.Pool drops items at random)")
	}
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	s, err := AttachPod(r.World, r.Client)
	require.NoError(t, err)
	ip := ipv4TCP(r.Client.IP.As4(), r.Web2.IP.As4(), nil)
	l := s.byDev[0]
	e := s.ns.Engine()
	before := e.Pending()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	write := func() {
		terr := s.st.WritePacketToRemote(l.id, "", header.IPv4ProtocolNumber, buffer.MakeWithData(ip))
		require.Nil(t, terr)
	}
	write()
	require.Equal(t, before+1, e.Pending(), "the packet is queued on the world")
	// What the same packet costs handed to the link directly: the packet
	// buffer and the world's queue, nothing of the stack's.
	direct := testing.AllocsPerRun(100, func() {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ip)})
		require.Nil(t, l.write(pkt))
		pkt.DecRef()
	})
	require.Equal(t, direct, testing.AllocsPerRun(100, write))
}
