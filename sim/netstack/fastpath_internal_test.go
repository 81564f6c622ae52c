package netstack

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// crossNodeGET is the reference cluster with net/web-1 deleted, nginx on
// net/web-2 (cka-w2) and a stack in net/client (cka-w1), after one GET to
// the net/web ClusterIP: the kept-alive connection is open.
func crossNodeGET(t *testing.T) (*scenarios.Reference, *Stack, *Stack, *http.Client) {
	t.Helper()
	r, client, web := referenceStacks(t, 1)
	srv, err := web.ServeHTTP(":80", NginxHandler(web))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	c := client.HTTPClient(0)
	get(t, c)
	return r, client, web, c
}

func get(t *testing.T, c *http.Client) {
	t.Helper()
	resp, err := c.Get("http://10.111.80.136/")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(b), "Welcome to nginx!")
}

// ipv4TCP is an IPv4 packet carrying a 20-byte TCP header, from src to
// dst, with a correct header checksum; edit changes the header before the
// checksum is computed.
func ipv4TCP(src, dst [4]byte, edit func(ip header.IPv4)) header.IPv4 {
	ip := header.IPv4(make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize))
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4(src), DstAddr: tcpip.AddrFrom4(dst)})
	if edit != nil {
		edit(ip)
	}
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
	return ip
}

// TestDirectTCP: the segments that skip gVisor's IP layer are exactly the
// ones it would only pass up to TCP; everything else takes its IP input.
func TestDirectTCP(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	s, err := AttachPod(r.World, r.Client)
	require.NoError(t, err)
	local := r.Client.IP.As4()
	peer := [4]byte{10, 244, 2, 5}
	bcast := local
	bcast[3] = 255 // the pod's /24
	for _, tc := range []struct {
		name     string
		src, dst [4]byte
		edit     func(ip header.IPv4)
		want     bool
	}{
		{"a segment to the pod", peer, local, nil, true},
		{"IP options", peer, local, func(ip header.IPv4) { ip[0] = 0x46 }, false},
		{"more fragments", peer, local, func(ip header.IPv4) { ip.SetFlagsFragmentOffset(header.IPv4FlagMoreFragments, 0) }, false},
		{"a later fragment", peer, local, func(ip header.IPv4) { ip.SetFlagsFragmentOffset(0, 8) }, false},
		{"UDP", peer, local, func(ip header.IPv4) { ip[9] = uint8(header.UDPProtocolNumber) }, false},
		{"total length past the packet", peer, local, func(ip header.IPv4) { ip.SetTotalLength(100) }, false},
		{"from the broadcast address", [4]byte{255, 255, 255, 255}, local, nil, false},
		{"from a multicast address", [4]byte{224, 0, 0, 1}, local, nil, false},
		{"from loopback", [4]byte{127, 0, 0, 1}, local, nil, false},
		{"from the subnet broadcast", bcast, local, nil, false},
		{"to the subnet broadcast", peer, bcast, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, s.directTCP(ipv4TCP(tc.src, tc.dst, tc.edit)))
		})
	}
	ip := ipv4TCP(peer, local, nil)
	ip[8]-- // TTL changed, checksum not
	require.False(t, s.directTCP(ip), "a bad header checksum")
}

// TestDirectTCPSkipsIPLayer: the segments of a kept-alive GET reach the
// stacks' TCP without going through gVisor's IPv4 input (its counters do
// not move), and are answered as before.
func TestDirectTCPSkipsIPLayer(t *testing.T) {
	_, client, web, c := crossNodeGET(t)
	ipIn := client.st.Stats().IP.PacketsReceived.Value() + web.st.Stats().IP.PacketsReceived.Value()
	tcpIn := client.st.Stats().TCP.ValidSegmentsReceived.Value() + web.st.Stats().TCP.ValidSegmentsReceived.Value()
	for range 3 {
		get(t, c)
	}
	require.Equal(t, ipIn, client.st.Stats().IP.PacketsReceived.Value()+web.st.Stats().IP.PacketsReceived.Value())
	require.GreaterOrEqual(t, client.st.Stats().TCP.ValidSegmentsReceived.Value()+web.st.Stats().TCP.ValidSegmentsReceived.Value(),
		tcpIn+6, "request and response per GET")
}

// TestCorruptSegmentDropped: a response segment corrupted on the way (a
// Corrupt probe) fails gVisor's checksum check and is dropped; the server
// retransmits it. Segments whose checksums the simulation computed are not
// verified again, so the check must still see corrupted ones.
func TestCorruptSegmentDropped(t *testing.T) {
	r, client, web, c := crossNodeGET(t)
	corrupt := &datapath.Corrupt{Offset: datapath.EthHdrLen + 20 + 32 + 2, Mask: 0x20, Match: func(p *datapath.Packet) bool {
		ip := p.IPv4()
		tcp, n := tcpOf(ip)
		return tcp != nil && n > 0 && bytes.HasPrefix(tcp.Payload(), []byte("HTTP/1.1 200"))
	}}
	once := &datapath.DropIf{Why: "after one", Match: func(*datapath.Packet) bool {
		if corrupt.Applied > 0 {
			corrupt.Match = func(*datapath.Packet) bool { return false }
		}
		return false
	}}
	r.Client.HostVeth.AddTxStage("corrupt", 0, corrupt)
	r.Client.HostVeth.AddTxStage("once", 1, once)
	errs := client.st.Stats().TCP.ChecksumErrors.Value()
	rexmit := web.st.Stats().TCP.Retransmits.Value()
	get(t, c)
	require.Equal(t, 1, corrupt.Applied)
	require.Equal(t, errs+1, client.st.Stats().TCP.ChecksumErrors.Value(), "the corrupted copy is dropped")
	require.Greater(t, web.st.Stats().TCP.Retransmits.Value(), rexmit, "and sent again")
}

// TestOptsHaveSACK: the SACK check reads options as gVisor's parser does.
func TestOptsHaveSACK(t *testing.T) {
	sack := func(blocks int) []byte {
		b := []byte{header.TCPOptionSACK, byte(2 + 8*blocks)}
		return append(b, make([]byte, 8*blocks)...)
	}
	ts := []byte{header.TCPOptionTS, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	for _, b := range [][]byte{
		nil,
		cat([]byte{1, 1}, ts),
		cat([]byte{1, 1}, ts, []byte{1, 1}, sack(1)),
		cat([]byte{1, 1}, sack(3)),
		sack(0),
		cat(sack(0), sack(1)),
		cat(sack(1), sack(0)),
		{header.TCPOptionSACK, 9, 0, 0, 0, 0, 0, 0, 0},
		{header.TCPOptionSACK},
		cat([]byte{header.TCPOptionTS, 9}, sack(1)),
		cat([]byte{0}, sack(1)),
		cat([]byte{30, 1}, sack(1)),
		cat([]byte{30, 3, 0}, sack(1)),
	} {
		require.Equal(t, len(header.ParseTCPOptions(b).SACKBlocks) > 0, optsHaveSACK(b), "%x", b)
	}
}

func FuzzOptsHaveSACK(f *testing.F) {
	f.Add([]byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 40 {
			b = b[:40]
		}
		if want := len(header.ParseTCPOptions(b).SACKBlocks) > 0; optsHaveSACK(b) != want {
			t.Fatalf("%x: got %v, want %v", b, !want, want)
		}
	})
}

// TestCopyPacket: a packet gVisor holds in several views (headers pushed
// in front of a payload of two chunks) is copied whole, behind a zeroed
// Ethernet header; one too big for a frame is refused.
func TestCopyPacket(t *testing.T) {
	payload := buffer.MakeWithData(bytes.Repeat([]byte("a"), 700))
	more := buffer.MakeWithData(bytes.Repeat([]byte("b"), 300))
	payload.Merge(&more)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 60, Payload: payload})
	defer pkt.DecRef()
	tcp := pkt.TransportHeader().Push(20)
	for i := range tcp {
		tcp[i] = byte(i)
	}
	ip := pkt.NetworkHeader().Push(20)
	for i := range ip {
		ip[i] = byte(100 + i)
	}
	want := pkt.ToView()
	defer want.Release()
	pool := &datapath.Pool{}
	p := pool.Get()
	require.True(t, copyPacket(p, pkt))
	require.Equal(t, want.AsSlice(), []byte(p.IPv4()))
	require.Equal(t, make([]byte, 12), p.Frame()[:12], "zeroed MACs")
	require.Equal(t, uint16(0x0800), p.EtherType())

	big := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(make([]byte, datapath.MaxFrame))})
	defer big.DecRef()
	require.False(t, copyPacket(pool.Get(), big))
}

// directSent is the number of segments the stack's short TCP output path
// sent, over its NICs.
func directSent(t *testing.T, s *Stack) uint64 {
	t.Helper()
	n := uint64(0)
	for _, l := range s.byDev {
		ep, err := s.st.GetNetworkEndpoint(l.id, header.IPv4ProtocolNumber)
		require.Nil(t, err)
		n += ep.(*ipOutEndpoint).direct
	}
	return n
}

// TestDirectOutput: the segments of a kept-alive GET (request, response
// and the two ACKs the delayed-ACK model holds back) go from gVisor's TCP
// to the link without gVisor's IPv4 output (its send counter does not
// move), and the exchange is answered as before.
func TestDirectOutput(t *testing.T) {
	_, client, web, c := crossNodeGET(t)
	ipOut := client.st.Stats().IP.PacketsSent.Value() + web.st.Stats().IP.PacketsSent.Value()
	direct := directSent(t, client) + directSent(t, web)
	for range 3 {
		get(t, c)
	}
	require.Equal(t, ipOut, client.st.Stats().IP.PacketsSent.Value()+web.st.Stats().IP.PacketsSent.Value())
	require.Equal(t, direct+3*4, directSent(t, client)+directSent(t, web), "four segments per GET")
}

// TestDirectOutputFallsBack: what the short path does not take goes
// through gVisor's IPv4 output: a UDP datagram (no DF), and a TCP segment
// larger than the link's MTU.
func TestDirectOutputFallsBack(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	s, err := AttachPod(r.World, r.Client)
	require.NoError(t, err)
	route, terr := s.st.FindRoute(0, tcpip.Address{}, tcpip.AddrFrom4([4]byte{10, 244, 2, 5}), header.IPv4ProtocolNumber, false)
	require.Nil(t, terr)
	defer route.Release()
	ep, terr := s.st.GetNetworkEndpoint(route.NICID(), header.IPv4ProtocolNumber)
	require.Nil(t, terr)
	oe := ep.(*ipOutEndpoint)
	for _, tc := range []struct {
		name    string
		params  stack.NetworkHeaderParams
		payload int
		direct  bool
	}{
		{"a TCP segment with DF", stack.NetworkHeaderParams{Protocol: header.TCPProtocolNumber, TTL: 64, DF: true}, 100, true},
		{"UDP", stack.NetworkHeaderParams{Protocol: header.UDPProtocolNumber, TTL: 64}, 100, false},
		{"TCP without DF", stack.NetworkHeaderParams{Protocol: header.TCPProtocolNumber, TTL: 64}, 100, false},
		{"TCP over the MTU", stack.NetworkHeaderParams{Protocol: header.TCPProtocolNumber, TTL: 64, DF: true}, 1481, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipOut := s.st.Stats().IP.PacketsSent.Value() + s.st.Stats().IP.OutgoingPacketErrors.Value()
			direct := oe.direct
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
				ReserveHeaderBytes: int(oe.MaxHeaderLength()),
				Payload:            buffer.MakeWithData(make([]byte, tc.payload)),
			})
			defer pkt.DecRef()
			s.d.lock()
			_ = oe.WritePacket(route, tc.params, pkt)
			s.d.unlock()
			if tc.direct {
				require.Equal(t, direct+1, oe.direct)
				require.Equal(t, ipOut, s.st.Stats().IP.PacketsSent.Value()+s.st.Stats().IP.OutgoingPacketErrors.Value())
			} else {
				require.Equal(t, direct, oe.direct)
				require.Greater(t, s.st.Stats().IP.PacketsSent.Value()+s.st.Stats().IP.OutgoingPacketErrors.Value(), ipOut)
			}
		})
	}
}
