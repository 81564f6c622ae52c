package datapath

import (
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

var (
	ipA    = [4]byte{10, 0, 0, 2}
	ipB    = [4]byte{10, 0, 0, 3}
	ipHost = [4]byte{10, 0, 0, 1}
)

func TestARPRequestAndReplyBytesOnTheWire(t *testing.T) {
	tp := newTopo(t)
	_, err := tp.b.ListenUDP(9, false)
	require.NoError(t, err)
	txA, rxA := &capture{}, &capture{}
	tp.a.Device("eth0").AddTxStage("cap", 0, txA)
	tp.a.Device("eth0").AddRxStage("cap", 0, rxA)
	_, err = tp.a.Send(udp(ipA, ipB, 5000, 9, 64, []byte("hi")))
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())

	macA, macB := tp.a.Device("eth0").mac, tp.b.Device("eth0").mac
	require.GreaterOrEqual(t, len(txA.frames), 2)
	req := txA.frames[0]
	want := make([]byte, 42)
	writeARP(want, 1, macA, ipA, BroadcastMAC, MAC{}, ipB)
	require.Equal(t, want, req, "first frame is a broadcast ARP request who-has 10.0.0.3 tell 10.0.0.2 with tha zero")
	require.Equal(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, req[0:6])
	require.Equal(t, []byte{0x08, 0x06}, req[12:14])

	// The reply comes back unicast from b (a's own request also returns
	// only on hairpin ports; these are not hairpin).
	var reply []byte
	for _, f := range rxA.frames {
		if f[12] == 0x08 && f[13] == 0x06 {
			reply = f
		}
	}
	require.NotNil(t, reply)
	writeARP(want, 2, macB, ipB, macA, macA, ipA)
	require.Equal(t, want, reply)

	// The queued datagram then leaves with the resolved MAC.
	data := txA.frames[1]
	require.Equal(t, macB[:], data[0:6])
	require.Equal(t, macA[:], data[6:12])
	s := tp.b.sockets.udp[9]
	require.Equal(t, 1, s.Received)

	neigh := tp.a.Neighbors()
	require.Len(t, neigh, 1)
	require.Equal(t, "10.0.0.3 dev eth0 lladdr "+macB.String()+" REACHABLE", neigh[0].String())
	// b learned a from the request: STALE, as neigh_event_ns leaves it.
	require.Equal(t, "10.0.0.2 dev eth0 lladdr "+macA.String()+" STALE", tp.b.Neighbors()[0].String())
	// Reachable entries become STALE after base_reachable_time.
	require.NoError(t, tp.e.Advance(ReachableTime+time.Second))
	require.Equal(t, NeighStale, tp.a.Neighbors()[0].State)
}

func TestBridgeLearningFloodingAndAgeing(t *testing.T) {
	tp := newTopo(t)
	tp.br.SetAgeingTime(300 * time.Second)
	txB := &capture{}
	tp.vb.AddTxStage("cap", 0, txB)
	macA := tp.a.Device("eth0").mac
	macB := tp.b.Device("eth0").mac

	// Unknown unicast from a is flooded to b's port, not up to the host.
	frame := make([]byte, 14+20)
	copy(frame[0:6], macB[:])
	copy(frame[6:12], macA[:])
	frame[12], frame[13] = 0x08, 0x00
	copy(frame[14:], ipv4(ipA, ipB, 253, 64, nil))
	tr := &trace.Trace{}
	p, err := tp.va.Inject(frame)
	require.NoError(t, err)
	p.Trace = tr
	require.NoError(t, tp.e.Run())
	require.Len(t, proto253(txB.frames), 1, "unknown unicast flooded to the other port")
	require.NotEmpty(t, tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Flooded }))
	fdb := tp.br.FDB(tp.e.Now())
	learned := false
	for _, e := range fdb {
		if e.MAC == macA {
			learned = true
			require.Equal(t, "veth-a", e.Port)
			require.False(t, e.Local)
		}
	}
	require.True(t, learned, "source MAC learned on ingress port")

	// b answers; now a's MAC is known so the frame is forwarded, not flooded.
	txA := &capture{}
	tp.va.AddTxStage("cap", 0, txA)
	back := make([]byte, len(frame))
	copy(back, frame)
	copy(back[0:6], macA[:])
	copy(back[6:12], macB[:])
	tr2 := &trace.Trace{}
	p, _ = tp.vb.Inject(back)
	p.Trace = tr2
	require.NoError(t, tp.e.Run())
	require.Len(t, proto253(txA.frames), 1)
	require.Empty(t, tr2.Find(func(o *trace.Observation) bool { return o.Action == trace.Flooded }))
	require.NotEmpty(t, tr2.Find(func(o *trace.Observation) bool { return o.Action == trace.Forwarded && o.Stage == "bridge" }))

	// After the ageing time without traffic from a, its entry is gone and
	// frames to it are flooded again.
	require.NoError(t, tp.e.Advance(301*time.Second))
	for _, e := range tp.br.FDB(tp.e.Now()) {
		require.NotEqual(t, macA, e.MAC, "aged out")
	}
	tr3 := &trace.Trace{}
	p, _ = tp.vb.Inject(back)
	p.Trace = tr3
	require.NoError(t, tp.e.Run())
	require.NotEmpty(t, tr3.Find(func(o *trace.Observation) bool { return o.Action == trace.Flooded }))
}

func TestBridgeHairpin(t *testing.T) {
	tp := newTopo(t)
	macA := tp.a.Device("eth0").mac
	// Learn a's MAC on veth-a, then send a frame to a's MAC in on veth-a.
	f := make([]byte, 14+20)
	copy(f[6:12], macA[:])
	f[0] = 0x02
	f[12], f[13] = 0x08, 0x00
	copy(f[14:], ipv4(ipA, ipB, 253, 64, nil))
	_, _ = tp.va.Inject(f)
	require.NoError(t, tp.e.Run())
	g := append([]byte(nil), f...)
	copy(g[0:6], macA[:])
	copy(g[6:12], []byte{0x02, 9, 9, 9, 9, 9})
	tr := &trace.Trace{}
	p, _ := tp.va.Inject(g)
	p.Trace = tr
	require.NoError(t, tp.e.Run())
	oc := tr.Outcomes()
	require.Equal(t, trace.Dropped, oc[0].Action)
	require.Equal(t, ReasonHairpin.String(), oc[0].Reason)

	tp.va.SetHairpin(true)
	txA := &capture{}
	tp.va.AddTxStage("cap", 0, txA)
	_, _ = tp.va.Inject(g)
	require.NoError(t, tp.e.Run())
	require.Len(t, proto253(txA.frames), 1, "hairpin on: sent back out the ingress port")
}

func TestTTLExpiryAnswersTimeExceeded(t *testing.T) {
	tp := newTopo(t)
	// The host has a route to 10.9.0.0/16 via b, so it forwards.
	require.NoError(t, tp.host.AddRoute(RouteSpec{Dst: pfx("10.9.0.0/16"), Via: addr("10.0.0.3")}))
	rxA := &capture{}
	tp.a.Device("eth0").AddRxStage("cap", 0, rxA)
	orig := udp(ipA, [4]byte{10, 9, 0, 1}, 5000, 33434, 1, []byte("traceroute"))
	tr := &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, orig, tr))
	require.NoError(t, tp.e.Run())
	var icmp []byte
	for _, f := range rxA.frames {
		if f[12] == 0x08 && f[14+9] == ProtoICMP {
			icmp = f[14:]
		}
	}
	require.NotNil(t, icmp, "time exceeded delivered to a")
	ip := header.IPv4(icmp)
	require.Equal(t, ipHost, [4]byte(ip[12:16]), "source is the router's address toward the sender")
	require.Equal(t, ipA, [4]byte(ip[16:20]))
	require.Equal(t, uint8(0xc0), ip[1], "TOS precedence internetwork control")
	require.Equal(t, uint8(64), ip.TTL())
	ic := header.ICMPv4(ip[20:])
	require.Equal(t, header.ICMPv4TimeExceeded, ic.Type())
	require.Equal(t, header.ICMPv4TTLExceeded, ic.Code())
	require.Equal(t, orig, []byte(ic[8:]), "the whole short original is quoted")
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.Len(t, drops, 1)
	require.Equal(t, "TTL exceeded", drops[0].Reason)
	require.Equal(t, "node", drops[0].Node)
}

func sendTraced(ns *Netns, ip []byte, tr *trace.Trace) error {
	p, err := ns.Send(ip)
	if err != nil {
		return err
	}
	p.Trace = tr
	return nil
}

func TestPortUnreachableAndRST(t *testing.T) {
	tp := newTopo(t)
	rxA := &capture{}
	tp.a.Device("eth0").AddRxStage("cap", 0, rxA)
	orig := udp(ipA, ipB, 5000, 53, 64, make([]byte, 600))
	tr := &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, orig, tr))
	require.NoError(t, tp.e.Run())
	var got header.IPv4
	for _, f := range rxA.frames {
		if f[12] == 0x08 && f[14+9] == ProtoICMP {
			got = header.IPv4(f[14:])
		}
	}
	require.NotNil(t, got)
	ic := header.ICMPv4(got[20:])
	require.Equal(t, header.ICMPv4DstUnreachable, ic.Type())
	require.Equal(t, header.ICMPv4PortUnreachable, ic.Code())
	require.Equal(t, ipB, [4]byte(got[12:16]), "source is the address the datagram was sent to")
	require.Equal(t, 576, int(got.TotalLength()), "quoted original is cut so the error fits 576 bytes")
	require.Equal(t, orig[:548], []byte(ic[8:]))
	oc := tr.Outcomes()
	require.Equal(t, trace.Dropped, oc[0].Action)
	require.Equal(t, "port unreachable", oc[0].Reason)

	// TCP SYN to a closed port: RST|ACK with ack = seq+1, seq 0.
	conn, err := tp.a.DialTCP(addr("10.0.0.2"), addr("10.0.0.3"), 40000, 81, 7, nil)
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())
	require.True(t, conn.Reset)
	var rst header.TCP
	for _, f := range rxA.frames {
		if f[12] == 0x08 && f[14+9] == ProtoTCP {
			rst = header.TCP(f[34:])
		}
	}
	require.Equal(t, header.TCPFlagRst|header.TCPFlagAck, rst.Flags())
	require.Equal(t, uint32(0), rst.SequenceNumber())
	require.Equal(t, uint32(8), rst.AckNumber())
}

func TestTCPHandshakeWithListener(t *testing.T) {
	tp := newTopo(t)
	l, err := tp.b.ListenTCP(80)
	require.NoError(t, err)
	_, err = tp.b.ListenTCP(80)
	var inUse *ErrAddrInUse
	require.ErrorAs(t, err, &inUse, "a second bind in the same namespace fails")
	c, err := tp.a.DialTCP(addr("10.0.0.2"), addr("10.0.0.3"), 40000, 80, 100, nil)
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())
	require.True(t, c.Established)
	require.Equal(t, 1, l.SYNs)
	c.Write([]byte("GET / HTTP/1.1\r\n\r\n"), nil)
	require.NoError(t, tp.e.Run())
	require.Equal(t, 18, l.Bytes)
	require.Equal(t, 1, c.AcksReceived)
	c.Close(nil)
	require.NoError(t, tp.e.Run())
	require.Equal(t, 1, l.FINs)
}

func TestNeighbourUnresolvedAfterProbes(t *testing.T) {
	tp := newTopo(t)
	txA := &capture{}
	tp.a.Device("eth0").AddTxStage("cap", 0, txA)
	tr := &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, udp(ipA, [4]byte{10, 0, 0, 99}, 1, 2, 64, nil), tr))
	require.NoError(t, tp.e.Run())
	arps := 0
	for _, f := range txA.frames {
		if f[12] == 0x08 && f[13] == 0x06 {
			arps++
		}
	}
	require.Equal(t, ARPProbes, arps, "mcast_solicit broadcast probes")
	require.Equal(t, time.Duration(ARPProbes)*ARPRetransTime, tp.e.Now())
	oc := tr.Outcomes()
	require.Equal(t, trace.Dropped, oc[0].Action)
	require.Equal(t, "neighbour unresolved", oc[0].Reason)
	require.Equal(t, "10.0.0.99 dev eth0 FAILED", tp.a.Neighbors()[0].String())
}

func TestForwardingOffAndNoRoute(t *testing.T) {
	tp := newTopo(t)
	tr := &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, udp(ipA, [4]byte{192, 0, 2, 1}, 1, 2, 64, nil), tr))
	require.NoError(t, tp.e.Run())
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.Equal(t, "no route to host", drops[0].Reason)
	require.Equal(t, "host", drops[0].Netns)

	tp.host.Sysctl.IPForward = false
	require.NoError(t, tp.host.AddRoute(RouteSpec{Dst: pfx("10.9.0.0/16"), Via: addr("10.0.0.3")}))
	tr = &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, udp(ipA, [4]byte{10, 9, 0, 1}, 1, 2, 64, nil), tr))
	require.NoError(t, tp.e.Run())
	drops = tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.Equal(t, "ip_forward is 0", drops[0].Reason)
}

func TestMalformedFramesAreDroppedWithTypedReason(t *testing.T) {
	tp := newTopo(t)
	macB := tp.b.Device("eth0").mac
	good := udp([4]byte{10, 0, 0, 2}, ipB, 1, 9, 64, []byte("x"))
	mk := func(mut func(ip []byte) []byte) []byte {
		ip := mut(append([]byte(nil), good...))
		f := make([]byte, 14+len(ip))
		copy(f[0:6], macB[:])
		f[6] = 0x02
		f[12], f[13] = 0x08, 0x00
		copy(f[14:], ip)
		return f
	}
	cases := []struct {
		name, want string
		frame      []byte
	}{
		{"bad header checksum", "bad header checksum", mk(func(ip []byte) []byte { ip[10] ^= 0xff; return ip })},
		{"version 6", "version 6 is not 4", mk(func(ip []byte) []byte { ip[0] = 0x65; return ip })},
		{"ihl 4", "header length 16 below 20", mk(func(ip []byte) []byte { ip[0] = 0x44; return ip })},
		{"total length too big", "total length", mk(func(ip []byte) []byte { ip[3] += 50; fixCsum(ip); return ip })},
		{"truncated header", "shorter than 20 bytes", mk(func(ip []byte) []byte { return ip[:12] })},
		{"bad udp checksum", "malformed udp frame: bad checksum", mk(func(ip []byte) []byte { ip[len(ip)-1] ^= 1; return ip })},
		{"short ethernet", "shorter than 14 bytes", []byte{1, 2, 3}},
		{"bad arp", "malformed arp frame", append(append(append([]byte{}, macB[:]...), 2, 0, 0, 0, 0, 1, 0x08, 0x06), make([]byte, 10)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := &trace.Trace{}
			p, err := tp.b.Device("eth0").Inject(tc.frame)
			require.NoError(t, err)
			p.Trace = tr
			require.NoError(t, tp.e.Run())
			oc := tr.Outcomes()
			require.Len(t, oc, 1)
			require.Equal(t, trace.Dropped, oc[0].Action)
			require.Equal(t, "malformed", oc[0].Reason)
			require.Contains(t, oc[0].Last.Detail, tc.want)
		})
	}
	_, err := ValidateIPv4([]byte{0x45})
	var fe *FrameError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "ipv4", fe.Layer)
}

func fixCsum(ip []byte) {
	ip[10], ip[11] = 0, 0
	c := header.IPv4(ip[:20]).CalculateChecksum()
	ip[10], ip[11] = byte(^c>>8), byte(^c)
}

func TestEchoReplyAndDeterminism(t *testing.T) {
	run := func() string {
		tp := newTopo(t)
		ic := make([]byte, 8+4)
		ic[0] = 8
		ic[4], ic[5], ic[6], ic[7] = 0, 7, 0, 1
		copy(ic[8:], "ping")
		c := ^checksumOf(ic)
		ic[2], ic[3] = byte(c>>8), byte(c)
		tr := &trace.Trace{}
		require.NoError(t, sendTraced(tp.a, ipv4(ipA, ipB, ProtoICMP, 64, ic), tr))
		require.NoError(t, tp.e.Run())
		oc := tr.Outcomes()
		last := oc[len(oc)-1]
		require.Equal(t, trace.Delivered, last.Action)
		require.Equal(t, "a", last.Last.Netns)
		require.Contains(t, last.Last.Summary, "ICMP echo reply, id 7, seq 1")
		return tr.Text(trace.Detailed)
	}
	require.Equal(t, run(), run(), "same seed, same inputs: byte-identical trace")
}

func checksumOf(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func TestConfigErrors(t *testing.T) {
	e := NewEngine(1)
	ns := e.NewNetns("n", "host")
	_, err := ns.AddBridge("br0")
	require.NoError(t, err)
	_, err = ns.AddBridge("br0")
	require.ErrorContains(t, err, "File exists")
	_, err = ns.AddBridge("this-name-is-far-too-long")
	require.ErrorContains(t, err, "IFNAMSIZ")
	require.ErrorContains(t, ns.SetMaster("nope", "br0"), "Cannot find device")
	require.EqualError(t, ns.AddRoute(RouteSpec{Dst: pfx("10.1.0.0/16"), Via: addr("10.2.0.1")}), "add route 10.1.0.0/16: Error: Nexthop has invalid gateway.")
	require.EqualError(t, ns.AddRoute(RouteSpec{Dst: pfx("10.1.0.0/16"), Dev: "eth9"}), `add route 10.1.0.0/16: Cannot find device "eth9"`)
	require.ErrorContains(t, ns.AddRoute(RouteSpec{Dst: pfx("10.1.0.1/16"), Dev: "br0"}), "Invalid prefix")
	_, err = ns.AddNIC("eth0", BroadcastMAC, 1500)
	require.ErrorContains(t, err, "not a unicast address")
	_, err = ns.AddVXLAN("vx", VXLANConfig{VNI: 0, Port: 8472, Local: addr("1.2.3.4")})
	require.ErrorContains(t, err, "VNI 0 out of range")
	require.ErrorContains(t, ns.SetMTU("br0", 20), "out of range")
}

func TestEventLimitStopsLoops(t *testing.T) {
	e := NewEngine(1)
	e.MaxEvents = 100
	ns := e.NewNetns("n", "host")
	a, b, err := ns.AddVeth("a", ns, "b")
	require.NoError(t, err)
	a.SetUp(true)
	b.SetUp(true)
	// A stage that bounces every frame straight back forms a loop.
	a.AddRxStage("bounce", 0, StageFunc(func(w *Walk, p *Packet) Verdict { a.transmit(w, p); return VerdictStolen }))
	b.AddRxStage("bounce", 0, StageFunc(func(w *Walk, p *Packet) Verdict { b.transmit(w, p); return VerdictStolen }))
	_, err = a.Inject(make([]byte, 60))
	require.NoError(t, err)
	var lim *ErrEventLimit
	require.ErrorAs(t, e.Run(), &lim)
}

func proto253(frames [][]byte) [][]byte {
	var out [][]byte
	for _, f := range frames {
		if len(f) >= 34 && f[12] == 0x08 && f[13] == 0 && f[14+9] == 253 {
			out = append(out, f)
		}
	}
	return out
}

func TestSendRejectsWhatNoSocketCouldSend(t *testing.T) {
	tp := newTopo(t)
	bad := udp(ipA, ipB, 1, 9, 64, []byte("x"))
	bad[len(bad)-1] ^= 0xff
	_, err := tp.a.Send(bad)
	var fe *FrameError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "udp", fe.Layer)
	_, err = tp.a.Send([]byte{0x45, 0, 0, 10})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "ipv4", fe.Layer)
}

func TestSendPacketWithABrokenHeaderIsDroppedNotAPanic(t *testing.T) {
	tp := newTopo(t)
	p := tp.e.Pool.Get()
	p.SetIPPacket([]byte{0x45, 0, 0, 40, 0, 0, 0, 0, 64, 17}) // 10 bytes, claims 40
	tr := &trace.Trace{}
	p.Trace = tr
	tp.a.SendPacket(p)
	require.NoError(t, tp.e.Run())
	oc := tr.Outcomes()
	require.Equal(t, trace.Dropped, oc[0].Action)
	require.Equal(t, "malformed", oc[0].Reason)
}

// TestUDPSocketClosedAndBoundAgainGetsTheNextDatagram: a datagram goes to
// the socket bound to its port now, not to the one the last lookup found.
func TestUDPSocketClosedAndBoundAgainGetsTheNextDatagram(t *testing.T) {
	tp := newTopo(t)
	first, err := tp.b.ListenUDP(9, false)
	require.NoError(t, err)
	send := func() {
		_, err := tp.a.Send(udp(ipA, ipB, 5000, 9, 64, []byte("hi")))
		require.NoError(t, err)
		require.NoError(t, tp.e.Run())
	}
	send()
	require.Equal(t, 1, first.Received)
	tp.b.CloseUDP(9)
	require.Nil(t, tp.b.UDPSocket(9))
	second, err := tp.b.ListenUDP(9, false)
	require.NoError(t, err)
	send()
	require.Equal(t, [2]int{1, 1}, [2]int{first.Received, second.Received})
	require.Same(t, second, tp.b.UDPSocket(9))

	l, err := tp.b.ListenTCP(80)
	require.NoError(t, err)
	require.Same(t, l, tp.b.TCPListener(80))
	tp.b.CloseTCP(80)
	require.Nil(t, tp.b.TCPListener(80), "closed")
	l2, err := tp.b.ListenTCP(80)
	require.NoError(t, err)
	require.Same(t, l2, tp.b.TCPListener(80))
}
