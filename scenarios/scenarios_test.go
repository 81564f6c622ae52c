package scenarios

import (
	corev1 "k8s.io/api/core/v1"

	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/internal/golden"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func frameAt(t *testing.T, tr *trace.Trace, pkt int, node, netns, dev string, a trace.Action) []byte {
	t.Helper()
	for _, o := range tr.Obs {
		if o.Packet == pkt && o.Node == node && o.Netns == netns && o.Device == dev && o.Action == a {
			require.NotNil(t, o.Frame, "capture was on")
			return o.Frame
		}
	}
	t.Fatalf("no %s of packet #%d on %s/%s %s", a, pkt, node, netns, dev)
	return nil
}

func TestCrossNodeTCPBytesAtEachObservationPoint(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	tr := &trace.Trace{Capture: true}
	conn, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1000, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	require.True(t, conn.Established, "SYN-ACK came back and was ACKed")

	mac := func(ns *datapath.Netns, dev string) []byte { m := ns.Device(dev).MAC(); return m[:] }
	w1, w2 := r.W1.Host, r.W2.Host

	// 1. Leaving the client pod: TTL 64, to the cni0 gateway's MAC.
	f := frameAt(t, tr, 1, "cka-w1", "net/client", "eth0", trace.Transmitted)
	require.Equal(t, mac(w1, "cni0"), f[0:6])
	require.Equal(t, mac(r.Client.Netns, "eth0"), f[6:12])
	require.Equal(t, uint8(64), f[14+8])

	// 2. Into flannel.1 on cka-w1: routed once (TTL 63), MACs are the VTEPs'.
	inner := frameAt(t, tr, 1, "cka-w1", "host", "flannel.1", trace.Transmitted)
	require.Equal(t, mac(w2, "flannel.1"), inner[0:6])
	require.Equal(t, mac(w1, "flannel.1"), inner[6:12])
	require.Equal(t, uint8(63), inner[14+8])

	// 3. On the underlay: outer Ethernet/IPv4/UDP/VXLAN around the inner frame.
	outer := frameAt(t, tr, 1, "cka-w1", "host", "eth0", trace.Transmitted)
	require.Equal(t, len(inner)-14+64, len(outer), "outer frame is the inner IP packet plus 64 bytes")
	require.Equal(t, mac(w2, "eth0"), outer[0:6])
	require.Equal(t, mac(w1, "eth0"), outer[6:12])
	ip := header.IPv4(outer[14:])
	require.Equal(t, netip.MustParseAddr("192.168.122.21").As4(), [4]byte(ip[12:16]))
	require.Equal(t, netip.MustParseAddr("192.168.122.22").As4(), [4]byte(ip[16:20]))
	require.Equal(t, uint8(64), ip.TTL(), "outer TTL is the default 64 (ttl auto)")
	require.Zero(t, ip.Flags()&header.IPv4FlagDontFragment, "DF clear on the outer header")
	require.Equal(t, uint8(17), ip[9])
	require.Equal(t, uint16(0xffff), header.IPv4(ip[:20]).CalculateChecksum())
	udp := header.UDP(outer[34:])
	require.Equal(t, uint16(8472), udp.DestinationPort())
	require.GreaterOrEqual(t, udp.SourcePort(), uint16(32768))
	require.Less(t, udp.SourcePort(), uint16(60999), "[32768, 60999) as udp_flow_src_port scales")
	require.NotZero(t, udp.Checksum(), "udpcsum is the kernel default")
	ps := header.PseudoHeaderChecksum(header.UDPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(outer)-34))
	require.Equal(t, uint16(0xffff), checksum.Checksum(outer[34:], ps), "UDP checksum verifies")
	require.Equal(t, []byte{0x08, 0, 0, 0, 0, 0, 1, 0}, outer[42:50], "VXLAN flags I, VNI 1")
	require.Equal(t, inner, outer[50:], "payload is the inner frame, byte for byte")

	// 4. Decapsulated on cka-w2: the same inner frame arrives on flannel.1.
	require.Equal(t, inner, frameAt(t, tr, 1, "cka-w2", "host", "flannel.1", trace.Received))

	// 5. Into web-2: routed again (TTL 62), from cka-w2's cni0 MAC.
	last := frameAt(t, tr, 1, "cka-w2", "net/web-2", "eth0", trace.Received)
	require.Equal(t, mac(r.Web2.Netns, "eth0"), last[0:6])
	require.Equal(t, mac(w2, "cni0"), last[6:12])
	require.Equal(t, uint8(62), last[14+8])
	require.Equal(t, inner[14+12:14+20], last[14+12:14+20], "addresses unchanged (no NAT)")

	// The outer source port is stable per flow: the ACK of the same flow
	// leaves with the same port.
	var acks []uint16
	for _, o := range tr.Obs {
		if o.Node == "cka-w1" && o.Device == "eth0" && o.Action == trace.Transmitted && len(o.Frame) > 50 && o.Frame[23] == 17 {
			acks = append(acks, binary.BigEndian.Uint16(o.Frame[34:36]))
		}
	}
	require.Len(t, acks, 2, "SYN and ACK crossed the underlay from cka-w1")
	require.Equal(t, acks[0], acks[1])
}

func TestCrossNodeUDPRoundTrip(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	echo, err := r.Web2.Netns.ListenUDP(5353, true)
	require.NoError(t, err)
	echo.KeepPayload = true
	sock, err := r.Client.Netns.ListenUDP(40000, false)
	require.NoError(t, err)
	ip, err := packet.UDP(packet.IP{Src: r.Client.IP, Dst: r.Web2.IP}, 40000, 5353, []byte("query"))
	require.NoError(t, err)
	tr := &trace.Trace{Capture: true}
	require.NoError(t, r.World.Send(r.Client.Netns, ip, tr))
	require.NoError(t, r.World.Run())
	require.Equal(t, 1, echo.Received)
	require.Equal(t, []byte("query"), echo.LastPayload)
	var back *trace.Outcome
	for _, oc := range tr.Outcomes() {
		if strings.Contains(oc.Last.Summary, "10.244.2.2.5353 > 10.244.1.2.40000") {
			back = &oc
		}
	}
	require.NotNil(t, back, "the echo came back")
	require.Equal(t, trace.Delivered, back.Action)
	require.Equal(t, "cka-w1/net/client eth0", back.Where)
	require.Contains(t, back.Last.Summary, "10.244.2.2.5353 > 10.244.1.2.40000: UDP, length 5, ttl 62")
	require.Equal(t, 1, sock.Received)
	require.NotEmpty(t, tr.Find(func(o *trace.Observation) bool {
		return o.Node == "cka-w2" && o.Action == trace.Encapsulated && strings.Contains(o.Detail, "to 192.168.122.21:8472")
	}))
}

func TestSameNodeWithoutEncapsulation(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	tr := &trace.Trace{}
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web1.IP, 40000, 80, 1, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	require.True(t, c.Established)
	require.Empty(t, tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Encapsulated }))
	require.Empty(t, tr.Find(func(o *trace.Observation) bool { return o.Node != "cka-w1" }), "nothing leaves cka-w1")
	require.Empty(t, tr.Find(func(o *trace.Observation) bool { return o.Stage == "route" && o.Netns == "host" }), "bridged, not routed")
}

func TestDFPacketOverOverlayMTUGetsFragNeeded(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	// A router-like static route on the outside machine sends pod traffic
	// to cka-w1, which must push it into flannel.1 (MTU 1450).
	require.NoError(t, r.Outside.Netns.AddRoute(datapath.RouteSpec{Dst: mp("10.244.0.0/16"), Via: ma("192.168.122.21")}))
	ping, err := packet.ICMPEchoDF(packet.IP{Src: r.Outside.IP, Dst: r.Web2.IP}, 9, 1, make([]byte, 1500-28))
	require.NoError(t, err)
	require.Len(t, ping, 1500)
	tr := &trace.Trace{}
	require.NoError(t, r.World.Send(r.Outside.Netns, ping, tr))
	require.NoError(t, r.World.Run())
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.Len(t, drops, 1)
	require.Equal(t, "cka-w1", drops[0].Node)
	require.Equal(t, "fragmentation needed and DF set", drops[0].Reason)
	oc := tr.Outcomes()
	last := oc[len(oc)-1]
	require.Equal(t, trace.Delivered, last.Action)
	require.Equal(t, "outside/host eth0", last.Where)
	require.Contains(t, last.Last.Summary, "192.168.122.21 > 192.168.122.100: ICMP need to frag (mtu 1450)")

	// A pod cannot even send it: its eth0 has the overlay MTU.
	big, err := packet.ICMPEchoDF(packet.IP{Src: r.Client.IP, Dst: r.Web2.IP}, 9, 2, make([]byte, 1500-28))
	require.NoError(t, err)
	tr = &trace.Trace{}
	require.NoError(t, r.World.Send(r.Client.Netns, big, tr))
	require.NoError(t, r.World.Run())
	require.Contains(t, tr.Outcomes()[0].Last.Detail, "Message too long")
	require.Equal(t, 1450, r.Client.Netns.Device("eth0").MTU())
}

func TestIPAMAndPodCIDRExhaustion(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.ClusterCIDR = mp("10.244.0.0/28")
	cfg.NodeCIDRMaskSize = 29
	c, err := sim.NewCluster(cfg)
	require.NoError(t, err)
	nic := func(ip string) []sim.NICSpec {
		return []sim.NICSpec{{Name: "eth0", Segment: "u", Addr: mp(ip)}}
	}
	_, err = c.AddNode(sim.NodeSpec{Name: "a", NICs: nic("192.168.0.1/24")})
	require.NoError(t, err)
	b, err := c.AddNode(sim.NodeSpec{Name: "b", NICs: nic("192.168.0.2/24")})
	require.NoError(t, err)
	require.Equal(t, "10.244.0.8/29", b.PodCIDR.String())
	_, err = c.AddNode(sim.NodeSpec{Name: "c", NICs: nic("192.168.0.3/24")})
	require.ErrorContains(t, err, "no remaining CIDRs left to allocate")

	for i := range 5 {
		p, err := c.AddPod(sim.PodSpec{Name: fmt.Sprint("p", i), Node: "a"})
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("10.244.0.%d", i+2), p.IP.String())
	}
	_, err = c.AddPod(sim.PodSpec{Name: "p5", Node: "a"})
	require.ErrorContains(t, err, "no IP addresses available in range set: 10.244.0.1-10.244.0.6")
	require.NoError(t, c.DeletePod("default", "p1"))
	p, err := c.AddPod(sim.PodSpec{Name: "p6", Node: "a"})
	require.NoError(t, err)
	require.Equal(t, "10.244.0.3", p.IP.String(), "the released address is the only one left")

	require.ErrorContains(t, b.SetPodCIDR(mp("10.244.0.0/29")), "may not change podCIDR")
}

func TestClusterValidation(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.ServiceCIDR = mp("10.244.128.0/20")
	_, err := sim.NewCluster(cfg)
	require.ErrorContains(t, err, "overlaps the pod network")
	cfg = sim.DefaultConfig()
	cfg.NodeCIDRMaskSize = 8
	_, err = sim.NewCluster(cfg)
	require.ErrorContains(t, err, "mask size")

	r, err := NewReference(1)
	require.NoError(t, err)
	_, err = r.AddPod(sim.PodSpec{Namespace: "net", Name: "two-nginx", Node: "cka-w2", Containers: []sim.Container{
		{Name: "a", Ports: []sim.ContainerPort{{ContainerPort: 80}}},
		{Name: "b", Ports: []sim.ContainerPort{{ContainerPort: 80}}},
	}})
	require.ErrorContains(t, err, "containers[b]: bind tcp port 80")
	require.ErrorContains(t, err, "address already in use")
	_, err = r.AddPod(sim.PodSpec{Name: "x", Node: "cka-w9"})
	require.ErrorContains(t, err, `node "cka-w9" does not exist`)
	_, err = r.AddNode(sim.NodeSpec{Name: "cka-w1", NICs: []sim.NICSpec{{Name: "eth0", Segment: "u", Addr: mp("1.1.1.1/24")}}})
	require.ErrorContains(t, err, "already exists")
	_, err = r.AddNode(sim.NodeSpec{Name: "n", NodeIP: ma("9.9.9.9"), NICs: []sim.NICSpec{{Name: "eth0", Segment: "u", Addr: mp("1.1.1.1/24")}}})
	require.ErrorContains(t, err, "not an address of this node")
}

func TestDuplicatePodCIDRReachesTheWrongPod(t *testing.T) {
	r, err := NewDuplicatePodCIDR(1)
	require.NoError(t, err)
	require.Equal(t, r.Client.IP, r.Web2.IP, "host-local on each node hands out the same first address")
	require.Equal(t, "10.244.1.2", r.Client.IP.String())

	// From cka-cp1, 10.244.1.2 (meant: net/client on cka-w1) lands in
	// net/web-2 on cka-w2: cka-cp1 routes the whole /24 to the last lease.
	echo, err := r.Web2.Netns.ListenUDP(7, true)
	require.NoError(t, err)
	ip, _ := packet.UDP(packet.IP{Src: r.Probe.IP, Dst: r.Client.IP}, 40000, 7, []byte("to client?"))
	tr := &trace.Trace{}
	require.NoError(t, r.World.Send(r.Probe.Netns, ip, tr))
	require.NoError(t, r.World.Run())
	require.Equal(t, 1, echo.Received, "delivered to web-2 on cka-w2, not to client on cka-w1")
	require.Empty(t, tr.Find(func(o *trace.Observation) bool { return o.Netns == "net/client" }))

	// 10.244.1.3 (net/web-1 on cka-w1) is sent to cka-w2, where nobody
	// answers ARP for it.
	ip, _ = packet.UDP(packet.IP{Src: r.Probe.IP, Dst: r.Web1.IP}, 40001, 80, nil)
	tr = &trace.Trace{}
	require.NoError(t, r.World.Send(r.Probe.Netns, ip, tr))
	require.NoError(t, r.World.Run())
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.NotEmpty(t, drops)
	require.Equal(t, "cka-w2", drops[0].Node)
	require.Equal(t, "neighbour unresolved", drops[0].Reason)
	require.Equal(t, "cni0", drops[0].Device)
}

func TestWrongNICEncapsulatesToOwnAddress(t *testing.T) {
	r, err := NewWrongNIC(1, false)
	require.NoError(t, err)
	for _, n := range r.Nodes() {
		require.Equal(t, "10.0.2.15", n.InternalIP.String(), n.Name+" registered its NAT address")
		require.Equal(t, "10.0.2.15", n.Annotations["flannel.alpha.coreos.com/public-ip"])
	}
	require.Contains(t, r.W1.Host.BridgeFDB("flannel.1"), "dst 10.0.2.15 self permanent")
	tr := &trace.Trace{}
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	require.False(t, c.Established)
	enc := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Encapsulated })
	require.NotEmpty(t, enc)
	require.Contains(t, enc[0].Detail, "to 10.0.2.15:8472")
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped && o.Packet == 1 })
	require.Len(t, drops, 1)
	d := drops[0]
	require.Equal(t, "cka-w1", d.Node, "the packet never leaves cka-w1: 10.0.2.15 is its own address")
	require.Equal(t, "flannel.1", d.Device)
	require.Equal(t, "not for this host", d.Reason)
	require.Contains(t, d.Detail, r.W2.Host.Device("flannel.1").MAC().String(), "the inner frame was for cka-w2's VTEP")
	require.Empty(t, tr.Find(func(o *trace.Observation) bool { return o.Node == "cka-w2" }))

	fixed, err := NewWrongNIC(1, true)
	require.NoError(t, err)
	require.Equal(t, "192.168.122.22", fixed.W2.InternalIP.String())
	c, err = fixed.Client.Netns.DialTCP(fixed.Client.IP, fixed.Web2.IP, 40000, 80, 1, nil)
	require.NoError(t, err)
	require.NoError(t, fixed.World.Run())
	require.True(t, c.Established, "--node-ip and --iface=eth1 fix it")
}

func TestNodeStateDumpsGolden(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1, nil)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	require.True(t, c.Established)
	var b bytes.Buffer
	for _, n := range r.Nodes() {
		h := n.Host
		fmt.Fprintf(&b, "### %s: ip -4 addr\n%s", n.Name, h.IPAddr())
		fmt.Fprintf(&b, "### %s: ip route\n%s", n.Name, h.IPRoute())
		fmt.Fprintf(&b, "### %s: ip neigh show dev flannel.1\n%s", n.Name, h.IPNeigh("flannel.1"))
		fmt.Fprintf(&b, "### %s: bridge fdb show dev flannel.1\n%s", n.Name, h.BridgeFDB("flannel.1"))
		fmt.Fprintf(&b, "### %s: ip -d link show flannel.1\n%s", n.Name, h.IPLink("flannel.1", true))
		fmt.Fprintf(&b, "### %s: ip neigh\n%s", n.Name, h.IPNeigh(""))
		fmt.Fprintf(&b, "### %s: bridge fdb show\n%s", n.Name, h.BridgeFDB(""))
	}
	fmt.Fprintf(&b, "### net/client: ip -4 addr\n%s### net/client: ip route\n%s", r.Client.Netns.IPAddr(), r.Client.Netns.IPRoute())
	golden.Check(t, "reference-state.txt", b.String())
}

func TestWalksAreDeterministic(t *testing.T) {
	run := func() (string, string) {
		r, err := NewReference(7)
		require.NoError(t, err)
		tr := &trace.Trace{Capture: true}
		_, err = r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1, tr)
		require.NoError(t, err)
		ping, _ := packet.ICMPEcho(packet.IP{Src: r.Client.IP, Dst: r.Web1.IP}, 1, 1, nil)
		require.NoError(t, r.World.Send(r.Client.Netns, ping, tr))
		require.NoError(t, r.World.Run())
		var j bytes.Buffer
		require.NoError(t, tr.WriteJSON(&j))
		return tr.Text(trace.Detailed), j.String()
	}
	t1, j1 := run()
	t2, j2 := run()
	require.Equal(t, t1, t2)
	require.Equal(t, j1, j2)
}

func TestExampleTraceGolden(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	tr := &trace.Trace{}
	_, err = r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1000, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	golden.Check(t, "cross-node-tcp.minimal.txt", tr.Text(trace.Minimal))
}

// TestMSSFollowsTheRouteMTU: behind flannel's 1450-byte MTU both ends
// advertise 1410 (MTU - 40), as dst_metric_advmss does, not 1460.
func TestMSSFollowsTheRouteMTU(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	tr := &trace.Trace{Capture: true}
	_, err = r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	mss := func(f []byte) uint16 {
		tcp := header.TCP(f[34:])
		opts := tcp[header.TCPMinimumSize:tcp.DataOffset()]
		require.GreaterOrEqual(t, len(opts), 4)
		require.Equal(t, byte(2), opts[0], "first option is MSS")
		return binary.BigEndian.Uint16(opts[2:4])
	}
	require.Equal(t, uint16(1410), mss(frameAt(t, tr, 1, "cka-w1", "net/client", "eth0", trace.Transmitted)), "SYN")
	var synack []byte
	for _, o := range tr.Obs {
		if o.Netns == "net/web-2" && o.Action == trace.Transmitted && strings.Contains(o.Summary, "Flags [S.]") {
			synack = o.Frame
		}
	}
	require.NotNil(t, synack)
	require.Equal(t, uint16(1410), mss(synack), "SYN-ACK")
}

// TestNetworkUnavailableNodeKeepsPodsPending: a node without a working CNI
// config carries node.kubernetes.io/network-unavailable; pod-network pods
// stay Pending, hostNetwork pods (like the CNI DaemonSet itself) still run.
func TestNetworkUnavailableNodeKeepsPodsPending(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	require.NoError(t, r.SetNetworkUnavailable(r.W2, true))
	_, err = r.AddPod(sim.PodSpec{Namespace: "net", Name: "stuck", Node: "cka-w2"})
	require.EqualError(t, err, "pod net/stuck: Pending: network is not ready: "+sim.NetworkNotReadyMessage)
	require.Nil(t, r.Pod("net", "stuck"))
	o, err := r.API.Get("Node", "", "cka-w2")
	require.NoError(t, err)
	no := o.(*corev1.Node)
	require.Equal(t, corev1.ConditionFalse, no.Status.Conditions[len(no.Status.Conditions)-1].Status, "Ready")
	require.Equal(t, sim.NetworkNotReadyMessage, no.Status.Conditions[len(no.Status.Conditions)-1].Message)
	require.Contains(t, no.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
	p, err := r.AddPod(sim.PodSpec{Namespace: "kube-flannel", Name: "kube-flannel-ds-x", Node: "cka-w2", HostNetwork: true})
	require.NoError(t, err)
	require.Equal(t, r.W2.InternalIP, p.IP, "a hostNetwork pod uses the node's address")
}
