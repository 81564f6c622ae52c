package netfilter

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// capture keeps a copy of every IPv4 packet a device receives.
type capture struct{ pkts [][]byte }

func (c *capture) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	if p.EtherType() == 0x0800 {
		c.pkts = append(c.pkts, append([]byte(nil), p.Frame()[datapath.EthHdrLen:]...))
	}
	return datapath.VerdictContinue
}

func (c *capture) last(t *testing.T) header.IPv4 {
	t.Helper()
	require.NotEmpty(t, c.pkts, "nothing captured")
	return header.IPv4(c.pkts[len(c.pkts)-1])
}

// topo: client 10.0.1.2 -- (h1 10.0.1.1) host (h2 10.0.2.1) -- server 10.0.2.2.
// The host forwards and runs conntrack and iptables.
type topo struct {
	e                    *datapath.Engine
	client, host, server *datapath.Netns
	ct                   *conntrack.Table
	nf                   *Netfilter
	atClient, atServer   *capture
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func newTopo(t testing.TB, cfg conntrack.Config) *topo {
	t.Helper()
	e := datapath.NewEngine(7)
	tp := &topo{e: e, client: e.NewNetns("node", "client"), host: e.NewNetns("node", "host"), server: e.NewNetns("node", "server")}
	tp.host.Sysctl.IPForward = true
	c0, h1, err := tp.client.AddVeth("eth0", tp.host, "h1")
	require.NoError(t, err)
	h2, s0, err := tp.host.AddVeth("h2", tp.server, "eth0")
	require.NoError(t, err)
	for _, d := range []*datapath.Device{c0, h1, h2, s0} {
		d.SetUp(true)
	}
	require.NoError(t, tp.client.AddAddr("eth0", pfx("10.0.1.2/24")))
	require.NoError(t, tp.host.AddAddr("h1", pfx("10.0.1.1/24")))
	require.NoError(t, tp.host.AddAddr("h2", pfx("192.168.5.1/24"))) // not on the path: MASQUERADE must not pick it
	require.NoError(t, tp.host.AddAddr("h2", pfx("10.0.2.1/24")))
	require.NoError(t, tp.server.AddAddr("eth0", pfx("10.0.2.2/24")))
	require.NoError(t, tp.client.AddRoute(datapath.RouteSpec{Dst: pfx("0.0.0.0/0"), Via: netip.MustParseAddr("10.0.1.1")}))
	require.NoError(t, tp.server.AddRoute(datapath.RouteSpec{Dst: pfx("0.0.0.0/0"), Via: netip.MustParseAddr("10.0.2.1")}))
	tp.ct = conntrack.Install(tp.host, cfg)
	tp.nf = Install(tp.host, tp.ct)
	tp.atClient, tp.atServer = &capture{}, &capture{}
	c0.AddRxStage("cap", 0, tp.atClient)
	s0.AddRxStage("cap", 0, tp.atServer)
	return tp
}

func (tp *topo) restore(t testing.TB, s string) {
	t.Helper()
	require.NoError(t, tp.nf.Restore(s, RestoreOptions{}))
}

var (
	ipClient = [4]byte{10, 0, 1, 2}
	ipServer = [4]byte{10, 0, 2, 2}
	ipVIP    = [4]byte{10, 96, 0, 10}
	ipHostH2 = [4]byte{10, 0, 2, 1}
)

func l4sum(ip header.IPv4, proto tcpip.TransportProtocolNumber) uint16 {
	l4 := ip[ip.HeaderLength():ip.TotalLength()]
	x := header.PseudoHeaderChecksum(proto, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(l4)))
	return checksum.Checksum(l4, x)
}

func udpPacket(src, dst [4]byte, sport, dport uint16, payload []byte) []byte {
	n := 28 + len(payload)
	b := make([]byte, n)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(n), TTL: 64, Protocol: 17,
		SrcAddr: tcpip.AddrFrom4(src), DstAddr: tcpip.AddrFrom4(dst)})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(b[20:])
	u.Encode(&header.UDPFields{SrcPort: sport, DstPort: dport, Length: uint16(8 + len(payload))})
	copy(b[28:], payload)
	u.SetChecksum(^l4sum(ip, header.UDPProtocolNumber))
	return b
}

// checkChecksums verifies IPv4 and TCP/UDP checksums by full recomputation.
func checkChecksums(t *testing.T, ip header.IPv4) {
	t.Helper()
	require.Equal(t, uint16(0xffff), ip.CalculateChecksum(), "IPv4 header checksum")
	switch ip.Protocol() {
	case 17:
		if header.UDP(ip.Payload()).Checksum() != 0 {
			require.Equal(t, uint16(0xffff), l4sum(ip, header.UDPProtocolNumber), "UDP checksum")
		}
	case 6:
		require.Equal(t, uint16(0xffff), l4sum(ip, header.TCPProtocolNumber), "TCP checksum")
	case 1:
		require.Equal(t, uint16(0xffff), checksum.Checksum(ip[ip.HeaderLength():ip.TotalLength()], 0), "ICMP checksum")
	}
}

func send(t testing.TB, ns *datapath.Netns, ip []byte, tr *trace.Trace) {
	t.Helper()
	p, err := ns.Send(ip)
	require.NoError(t, err)
	p.Trace = tr
}

const dnatRules = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "kube-system/kube-dns:dns cluster IP" -m udp --dport 53 -j DNAT --to-destination 10.0.2.2:5353
COMMIT
`

func TestDNATFirstPacketAndUnDNATReply(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, dnatRules)
	srv, err := tp.server.ListenUDP(5353, true)
	require.NoError(t, err)
	cli, err := tp.client.ListenUDP(40000, false)
	require.NoError(t, err)

	tr := &trace.Trace{}
	send(t, tp.client, udpPacket(ipClient, ipVIP, 40000, 53, []byte("query")), tr)
	require.NoError(t, tp.e.Run())

	require.Equal(t, 1, srv.Received)
	atSrv := tp.atServer.last(t)
	assert.Equal(t, ipServer, [4]byte(atSrv.DestinationAddress().As4()), "DNAT rewrote the destination")
	assert.Equal(t, uint16(5353), header.UDP(atSrv.Payload()).DestinationPort())
	assert.Equal(t, ipClient, [4]byte(atSrv.SourceAddress().As4()), "no SNAT")
	checkChecksums(t, atSrv)

	require.Equal(t, 1, cli.Received, "the echo came back to the client")
	atCli := tp.atClient.last(t)
	assert.Equal(t, ipVIP, [4]byte(atCli.SourceAddress().As4()), "reply un-DNATed to the service IP")
	assert.Equal(t, uint16(53), header.UDP(atCli.Payload()).SourcePort())
	checkChecksums(t, atCli)

	assert.Equal(t, "udp      17 29 src=10.0.1.2 dst=10.96.0.10 sport=40000 dport=53 src=10.0.2.2 dst=10.0.1.2 sport=5353 dport=40000 mark=0 use=1\n",
		tp.ct.Dump())

	// The trace names the rule as iptables-save prints it and the rewrite.
	rule := `-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "kube-system/kube-dns:dns cluster IP" -m udp --dport 53 -j DNAT --to-destination 10.0.2.2:5353`
	m := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Matched && o.Stage == "nat/KUBE-SERVICES" })
	require.Len(t, m, 1)
	assert.Equal(t, rule, m[0].Detail)
	rw := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Rewritten })
	require.Len(t, rw, 2)
	assert.Equal(t, "nat/PREROUTING", rw[0].Stage)
	assert.Equal(t, "DNAT", rw[0].Detail)
	assert.Equal(t, "10.0.1.2:40000 > 10.96.0.10:53", rw[0].Before)
	assert.Equal(t, "10.0.1.2:40000 > 10.0.2.2:5353", rw[0].After)
	assert.Equal(t, "nat/POSTROUTING", rw[1].Stage)
	assert.Equal(t, "un-DNAT", rw[1].Detail)
	assert.Equal(t, "10.0.2.2:5353 > 10.0.1.2:40000", rw[1].Before)
	assert.Equal(t, "10.96.0.10:53 > 10.0.1.2:40000", rw[1].After)
}

func TestNATTableOnlyForFirstPacket(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, dnatRules)
	srv, _ := tp.server.ListenUDP(5353, false)
	for i := 0; i < 3; i++ {
		send(t, tp.client, udpPacket(ipClient, ipVIP, 40000, 53, []byte("q")), nil)
		require.NoError(t, tp.e.Run())
	}
	assert.Equal(t, 3, srv.Received, "later packets are translated from the conntrack entry")
	nat := tp.nf.Table(NAT)
	assert.Equal(t, uint64(1), pkts(nat.Chain("PREROUTING"), 0), "only the first packet traversed the nat table")
	assert.Equal(t, uint64(1), pkts(nat.Chain("KUBE-SERVICES"), 0))
	assert.Equal(t, uint64(1), nat.Chain("POSTROUTING").Packets, "POSTROUTING policy counted once (SNAT null binding)")
}

func TestMasqueradePicksOutDeviceAddress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rule   string
		random bool
	}{
		{"keep port", "-A POSTROUTING -o h2 -j MASQUERADE", false},
		{"random-fully", "-A POSTROUTING -s 10.0.1.0/24 -o h2 -j MASQUERADE --random-fully", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTopo(t, conntrack.Config{})
			tp.restore(t, "*nat\n"+tc.rule+"\nCOMMIT\n")
			_, _ = tp.server.ListenUDP(5353, true)
			cli, _ := tp.client.ListenUDP(40000, false)
			send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 5353, []byte("x")), nil)
			require.NoError(t, tp.e.Run())
			atSrv := tp.atServer.last(t)
			checkChecksums(t, atSrv)
			assert.Equal(t, ipHostH2, [4]byte(atSrv.SourceAddress().As4()), "source is h2's address on the next hop's subnet")
			sport := header.UDP(atSrv.Payload()).SourcePort()
			if tc.random {
				assert.GreaterOrEqual(t, sport, uint16(1024))
			} else {
				assert.Equal(t, uint16(40000), sport, "a unique source port is kept")
			}
			require.Equal(t, 1, cli.Received, "reply un-SNATed back to the client")
			atCli := tp.atClient.last(t)
			assert.Equal(t, ipClient, [4]byte(atCli.DestinationAddress().As4()))
			assert.Equal(t, uint16(40000), header.UDP(atCli.Payload()).DestinationPort())
			checkChecksums(t, atCli)
			es := tp.ct.List()
			require.Len(t, es, 1)
			assert.Equal(t, conntrack.StatusSrcNAT, es[0].Status&conntrack.StatusNATMask)
			assert.Equal(t, sport, es[0].Reply.Dport)
		})
	}
}

func TestRejectAnswersTheClient(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -d 10.0.2.2/32 -p udp -m comment --comment "default/empty:dns has no endpoints" -m udp --dport 9 -j REJECT
-A FORWARD -d 10.0.2.2/32 -p tcp -m tcp --dport 81 -j REJECT --reject-with tcp-reset
COMMIT
`)
	tr := &trace.Trace{}
	send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 9, []byte("x")), tr)
	require.NoError(t, tp.e.Run())
	require.Empty(t, tp.atServer.pkts)
	icmp := tp.atClient.last(t)
	checkChecksums(t, icmp)
	require.Equal(t, uint8(1), icmp.Protocol())
	ic := header.ICMPv4(icmp.Payload())
	assert.Equal(t, header.ICMPv4DstUnreachable, ic.Type())
	assert.Equal(t, header.ICMPv4PortUnreachable, ic.Code())
	assert.Equal(t, [4]byte{10, 0, 1, 1}, [4]byte(icmp.SourceAddress().As4()))
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.Len(t, drops, 1)
	assert.Equal(t, "filter/FORWARD", drops[0].Stage)
	assert.Equal(t, "netfilter REJECT", drops[0].Reason)
	assert.Equal(t, `-A FORWARD -d 10.0.2.2/32 -p udp -m comment --comment "default/empty:dns has no endpoints" -m udp --dport 9 -j REJECT --reject-with icmp-port-unreachable`, drops[0].Detail)
	assert.Equal(t, 0, tp.ct.Len(), "the rejected packet's connection was never confirmed")

	conn, err := tp.client.DialTCP(netip.AddrFrom4(ipClient), netip.AddrFrom4(ipServer), 40001, 81, 1000, nil)
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())
	assert.True(t, conn.Reset, "tcp-reset answers with a RST")
}

func TestCtstateStatefulForwarding(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, `*filter
:FORWARD DROP [0:0]
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -i h1 -o h2 -m conntrack --ctstate NEW -j ACCEPT
COMMIT
`)
	_, _ = tp.server.ListenUDP(5353, true)
	cli, _ := tp.client.ListenUDP(40000, false)
	_, _ = tp.client.ListenUDP(7000, false)
	send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 5353, nil), nil)
	require.NoError(t, tp.e.Run())
	assert.Equal(t, 1, cli.Received, "NEW out, ESTABLISHED back")
	fw := tp.nf.Table(Filter).Chain("FORWARD")
	assert.Equal(t, uint64(1), pkts(fw, 0), "the reply matched ESTABLISHED")
	assert.Equal(t, uint64(1), pkts(fw, 1), "the request matched NEW")

	tr := &trace.Trace{}
	send(t, tp.server, udpPacket(ipServer, ipClient, 6000, 7000, nil), tr)
	require.NoError(t, tp.e.Run())
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.Len(t, drops, 1)
	assert.Equal(t, "policy DROP", drops[0].Detail)
	assert.Equal(t, uint64(1), fw.Packets, "policy counter")
}

func TestConntrackTableFullDropsNewFlows(t *testing.T) {
	tp := newTopo(t, conntrack.Config{Max: 2})
	srv, _ := tp.server.ListenUDP(5353, false)
	tr := &trace.Trace{}
	for i := 0; i < 3; i++ {
		send(t, tp.client, udpPacket(ipClient, ipServer, uint16(40000+i), 5353, nil), tr)
	}
	require.NoError(t, tp.e.Run())
	assert.Equal(t, 2, srv.Received)
	assert.Equal(t, 2, tp.ct.Len())
	drops := tr.Find(func(o *trace.Observation) bool { return o.Action == trace.Dropped })
	require.Len(t, drops, 1)
	assert.Equal(t, "conntrack table full", drops[0].Reason)
	// Established flows still pass; after the UDP timeout there is room again.
	send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 5353, nil), nil)
	require.NoError(t, tp.e.Run())
	assert.Equal(t, 3, srv.Received)
	require.NoError(t, tp.e.Advance(31*time.Second))
	send(t, tp.client, udpPacket(ipClient, ipServer, 40002, 5353, nil), nil)
	require.NoError(t, tp.e.Run())
	assert.Equal(t, 4, srv.Received)
	assert.Equal(t, 1, tp.ct.Len())
}

func TestTCPStateProgressionAndTimeouts(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	_, err := tp.server.ListenTCP(80)
	require.NoError(t, err)
	conn, err := tp.client.DialTCP(netip.AddrFrom4(ipClient), netip.AddrFrom4(ipServer), 40000, 80, 1000, nil)
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())
	require.True(t, conn.Established)
	assert.Equal(t, "tcp      6 431999 ESTABLISHED src=10.0.1.2 dst=10.0.2.2 sport=40000 dport=80 src=10.0.2.2 dst=10.0.1.2 sport=80 dport=40000 [ASSURED] mark=0 use=1\n", tp.ct.Dump())
	require.NoError(t, tp.e.Advance(100*time.Second))
	assert.Contains(t, tp.ct.Dump(), " 431899 ESTABLISHED ")
	conn.Close(nil)
	require.NoError(t, tp.e.Run())
	// FIN from the client (FIN_WAIT), FIN|ACK from the server: LAST_ACK, 30 s.
	es := tp.ct.List()
	require.Len(t, es, 1)
	assert.Equal(t, conntrack.TCPLastAck, es[0].TCPState)
	assert.Equal(t, 30*time.Second, es[0].Timeout(tp.e.Now()))
	require.NoError(t, tp.e.Advance(31*time.Second))
	assert.Equal(t, 0, tp.ct.Len(), "expired in virtual time")

	// A SYN nobody answers stays SYN_SENT for 120 s.
	tp.server.Device("eth0").AddRxStage("blackhole", -1, datapath.StageFunc(func(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
		return datapath.DropVerdict(datapath.ReasonStage)
	}))
	_, err = tp.client.DialTCP(netip.AddrFrom4(ipClient), netip.AddrFrom4(ipServer), 40001, 80, 5000, nil)
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())
	es = tp.ct.List()
	require.Len(t, es, 1)
	assert.Equal(t, conntrack.TCPSynSent, es[0].TCPState)
	assert.Contains(t, tp.ct.Dump(), "tcp      6 120 SYN_SENT src=10.0.1.2 dst=10.0.2.2 sport=40001 dport=80 [UNREPLIED] src=10.0.2.2")
	require.NoError(t, tp.e.Advance(119*time.Second))
	assert.Equal(t, 1, tp.ct.Len())
	require.NoError(t, tp.e.Advance(2*time.Second))
	assert.Equal(t, 0, tp.ct.Len())
}

func TestICMPErrorIsRelatedAndTranslated(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, dnatRules)
	tp.restore(t, `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m conntrack --ctstate RELATED -j ACCEPT
COMMIT
`)
	// Nothing listens on 5353: the server answers port unreachable about
	// 10.0.1.2:40000 > 10.0.2.2:5353.
	orig := udpPacket(ipClient, ipVIP, 40000, 53, []byte("query"))
	send(t, tp.client, orig, nil)
	require.NoError(t, tp.e.Run())
	assert.Equal(t, uint64(1), pkts(tp.nf.Table(Filter).Chain("FORWARD"), 0), "the ICMP error was RELATED")
	icmp := tp.atClient.last(t)
	require.Equal(t, uint8(1), icmp.Protocol())
	checkChecksums(t, icmp)
	assert.Equal(t, ipVIP, [4]byte(icmp.SourceAddress().As4()), "outer source translated like a reply")
	inner := header.IPv4(icmp.Payload()[8:])
	assert.Equal(t, uint16(0xffff), inner.CalculateChecksum(), "quoted header checksum fixed")
	assert.Equal(t, ipVIP, [4]byte(inner.DestinationAddress().As4()), "quoted destination is what the client sent")
	assert.Equal(t, uint16(53), header.UDP(inner.Payload()).DestinationPort())
	assert.Equal(t, ipClient, [4]byte(inner.SourceAddress().As4()))
	assert.Equal(t, uint16(40000), header.UDP(inner.Payload()).SourcePort())
	assert.Equal(t, uint8(63), inner.TTL(), "quoted as the server received it, after the host's TTL decrement")
}

func TestStatisticDistributionWithFixedSeed(t *testing.T) {
	run := func() (uint64, uint64) {
		tp := newTopo(t, conntrack.Config{})
		tp.restore(t, `*nat
:KUBE-SVC-X - [0:0]
:KUBE-SEP-A - [0:0]
:KUBE-SEP-B - [0:0]
-A PREROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-X
-A KUBE-SEP-A -p udp -m udp -j DNAT --to-destination 10.0.2.2:5001
-A KUBE-SEP-B -p udp -m udp -j DNAT --to-destination 10.0.2.2:5002
-A KUBE-SVC-X -m comment --comment "ns/svc:dns -> 10.0.2.2:5001" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-A
-A KUBE-SVC-X -m comment --comment "ns/svc:dns -> 10.0.2.2:5002" -j KUBE-SEP-B
COMMIT
`)
		a, _ := tp.server.ListenUDP(5001, false)
		b, _ := tp.server.ListenUDP(5002, false)
		for i := 0; i < 1000; i++ {
			send(t, tp.client, udpPacket(ipClient, ipVIP, uint16(20000+i), 53, nil), nil)
			require.NoError(t, tp.e.Run())
		}
		require.Equal(t, 1000, a.Received+b.Received)
		svc := tp.nf.Table(NAT).Chain("KUBE-SVC-X")
		assert.Equal(t, uint64(1000), pkts(svc, 0)+pkts(svc, 1))
		return uint64(a.Received), uint64(b.Received)
	}
	a1, b1 := run()
	assert.InDelta(t, 500, a1, 60)
	assert.InDelta(t, 500, b1, 60)
	a2, b2 := run()
	assert.Equal(t, [2]uint64{a1, b1}, [2]uint64{a2, b2}, "same seed, same choices")
}

func TestSessionAffinityWithRecent(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, `*nat
:KUBE-SVC-X - [0:0]
:KUBE-SEP-A - [0:0]
:KUBE-SEP-B - [0:0]
-A PREROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-X
-A KUBE-SEP-A -p udp -m recent --set --name KUBE-SEP-A --mask 255.255.255.255 --rsource -m udp -j DNAT --to-destination 10.0.2.2:5001
-A KUBE-SEP-B -p udp -m recent --set --name KUBE-SEP-B --mask 255.255.255.255 --rsource -m udp -j DNAT --to-destination 10.0.2.2:5002
-A KUBE-SVC-X -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-A --mask 255.255.255.255 --rsource -j KUBE-SEP-A
-A KUBE-SVC-X -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-B --mask 255.255.255.255 --rsource -j KUBE-SEP-B
-A KUBE-SVC-X -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A
-A KUBE-SVC-X -j KUBE-SEP-B
COMMIT
`)
	a, _ := tp.server.ListenUDP(5001, false)
	b, _ := tp.server.ListenUDP(5002, false)
	for i := 0; i < 50; i++ {
		send(t, tp.client, udpPacket(ipClient, ipVIP, uint16(20000+i), 53, nil), nil)
		require.NoError(t, tp.e.Run())
	}
	assert.True(t, a.Received == 50 || b.Received == 50, "every flow from one client sticks to one endpoint: %d/%d", a.Received, b.Received)
}

func TestCountersAndSaveWithCounters(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -p udp -m udp --dport 5353 -j ACCEPT\nCOMMIT\n")
	_, _ = tp.server.ListenUDP(5353, false)
	for i := 0; i < 2; i++ {
		send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 5353, make([]byte, 72)), nil)
	}
	require.NoError(t, tp.e.Run())
	assert.Equal(t, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n[2:200] -A FORWARD -p udp -m udp --dport 5353 -j ACCEPT\nCOMMIT\n",
		tp.nf.Save(SaveOptions{Counters: true}))
	assert.Positive(t, tp.nf.Evaluations)
	// iptables-restore -c takes them back.
	nf2 := newNF(t)
	require.NoError(t, nf2.Restore(tp.nf.Save(SaveOptions{Counters: true}), RestoreOptions{Counters: true}))
	assert.Equal(t, tp.nf.Save(SaveOptions{Counters: true}), nf2.Save(SaveOptions{Counters: true}))
}

func TestMarkTargets(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, `*nat
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -d 10.0.2.2/32 -j KUBE-MARK-MASQ
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
COMMIT
`)
	_, _ = tp.server.ListenUDP(5353, false)
	var mark uint32 = 1
	tp.server.Device("eth0").AddRxStage("mark", -1, datapath.StageFunc(func(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
		mark = p.Mark
		return datapath.VerdictContinue
	}))
	send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 5353, nil), nil)
	require.NoError(t, tp.e.Run())
	assert.Equal(t, ipHostH2, [4]byte(tp.atServer.last(t).SourceAddress().As4()), "masqueraded")
	assert.Equal(t, uint32(0), mark, "the masquerade bit was cleared again by --xor-mark")
	saved := tp.nf.Save(SaveOptions{Tables: []string{NAT}})
	assert.Contains(t, saved, "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n")
	assert.Contains(t, saved, "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n")
	assert.Contains(t, saved, "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n")
}

func TestEstablishedHotPathDoesNotAllocate(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m conntrack --ctstate INVALID -j DROP
-A FORWARD -s 10.9.0.0/16 -p tcp -m tcp --dport 22 -j DROP
-A FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`)
	_, _ = tp.server.ListenUDP(5353, true)
	_, _ = tp.client.ListenUDP(40000, false)
	pkt := udpPacket(ipClient, ipServer, 40000, 5353, make([]byte, 32))
	send(t, tp.client, pkt, nil)
	require.NoError(t, tp.e.Run())
	require.Equal(t, 1, tp.ct.Len())

	// Run the host's hooks for a forwarded packet directly, as ip_forward
	// does: PREROUTING, FORWARD, POSTROUTING.
	var stages []datapath.HookEntry
	for _, h := range []datapath.Hook{datapath.Prerouting, datapath.Forward, datapath.Postrouting} {
		stages = append(stages, tp.host.HookStages(h)...)
	}
	w := tp.e.Walk()
	in := tp.host.Device("h1")
	out := tp.host.Device("h2")
	before := tp.nf.Evaluations
	allocs := testing.AllocsPerRun(200, func() {
		p := tp.e.Pool.Get()
		p.SetIPPacket(pkt)
		p.InDev, p.OutDev = in, out
		for _, s := range stages {
			if v := s.Stage.Process(w, p); v.Code != datapath.Continue {
				t.Fatalf("stage %s: verdict %v", s.Name, v)
			}
		}
		p.Release()
	})
	assert.Zero(t, allocs)
	assert.Equal(t, uint64(4*201), tp.nf.Evaluations-before, "4 rules evaluated per packet")
}

func TestNoflushKeepsOtherChainsAndCounters(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, `*filter
:FORWARD ACCEPT [0:0]
:KUBE-A - [0:0]
:KUBE-B - [0:0]
-A FORWARD -j KUBE-A
-A FORWARD -j KUBE-B
-A KUBE-A -p udp -m udp --dport 5353 -j ACCEPT
-A KUBE-B -p udp -j ACCEPT
COMMIT
`)
	_, _ = tp.server.ListenUDP(5353, false)
	send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 5353, nil), nil)
	require.NoError(t, tp.e.Run())
	require.NoError(t, tp.nf.Restore("*filter\n:KUBE-B - [0:0]\n-A KUBE-B -p tcp -j ACCEPT\nCOMMIT\n", RestoreOptions{Noflush: true}))
	saved := tp.nf.Save(SaveOptions{Counters: true})
	assert.Contains(t, saved, "[1:28] -A KUBE-A -p udp -m udp --dport 5353 -j ACCEPT\n", "untouched chain keeps rules and counters")
	assert.Contains(t, saved, "[0:0] -A KUBE-B -p tcp -j ACCEPT\n", "declared chain was flushed and refilled")
	assert.NotContains(t, saved, "-A KUBE-B -p udp")
	// Without --noflush the table is replaced.
	require.NoError(t, tp.nf.Restore("*filter\n:KUBE-C - [0:0]\nCOMMIT\n", RestoreOptions{}))
	assert.Equal(t, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-C - [0:0]\nCOMMIT\n", tp.nf.Save(SaveOptions{}))
}

func TestExecAndCheck(t *testing.T) {
	nf := newNF(t)
	require.NoError(t, nf.Exec(NAT, "-N", "CNI-HOSTPORT-DNAT"))
	require.NoError(t, nf.Exec(NAT, "-A", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT"))
	ok, err := nf.Check(NAT, "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT")
	require.NoError(t, err)
	assert.True(t, ok)
	err = nf.Exec(NAT, "-X", "CNI-HOSTPORT-DNAT")
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Msg, "Too many links")
	assert.True(t, strings.HasPrefix(nf.Save(SaveOptions{}), "*nat\n"))
}

// TestMasqueradeOutOfDeviceWithoutAddress: MASQUERADE out a device with no
// address takes another device's (inet_select_addr's fallback), as Linux
// 6.18 does in a namespace (checked with conntrack -L: reply dst 10.0.1.1);
// before, the packet was dropped.
func TestMasqueradeOutOfDeviceWithoutAddress(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	far := tp.e.NewNetns("node", "far")
	h3, f0, err := tp.host.AddVeth("h3", far, "eth0")
	require.NoError(t, err)
	h3.SetUp(true)
	f0.SetUp(true)
	require.NoError(t, far.AddAddr("eth0", pfx("10.0.3.2/24")))
	require.NoError(t, far.AddRoute(datapath.RouteSpec{Dst: pfx("0.0.0.0/0"), Dev: "eth0"}))
	require.NoError(t, tp.host.AddRoute(datapath.RouteSpec{Dst: pfx("10.0.3.0/24"), Dev: "h3"}))
	tp.restore(t, "*nat\n-A POSTROUTING -o h3 -j MASQUERADE\nCOMMIT\n")
	srv, err := far.ListenUDP(9, false)
	require.NoError(t, err)
	send(t, tp.client, udpPacket(ipClient, [4]byte{10, 0, 3, 2}, 40000, 9, []byte("x")), nil)
	require.NoError(t, tp.e.Run())
	require.Equal(t, 1, srv.Received)
	es := tp.ct.List()
	require.Len(t, es, 1)
	require.Equal(t, [4]byte{10, 0, 1, 1}, es[0].Reply.Dst, "h1's address, the first device with one")
}

// pkts is the packet counter of ch's i-th rule.
func pkts(ch *Chain, i int) uint64 {
	p, _ := ch.RuleCounters(i)
	return p
}

// Check's memo answers as parsing the arguments again would, through
// rules added and deleted and the jump target deleted and made again;
// a rule naming an ipset is not memoized.
func TestCheckMemoAnswersAsParsing(t *testing.T) {
	nf := newNF(t)
	jump := []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}
	steps := []struct {
		name string
		do   func() error
	}{
		{"no target chain", func() error { return nil }},
		{"target made", func() error { return nf.Exec(NAT, "-N", "KUBE-SERVICES") }},
		{"rule inserted", func() error { return nf.Exec(NAT, append([]string{"-I", "OUTPUT"}, jump...)...) }},
		{"rule deleted", func() error { return nf.Exec(NAT, append([]string{"-D", "OUTPUT"}, jump...)...) }},
		{"target deleted", func() error { return nf.Exec(NAT, "-X", "KUBE-SERVICES") }},
		{"target made again", func() error { return nf.Exec(NAT, "-N", "KUBE-SERVICES") }},
		{"rule appended", func() error { return nf.Exec(NAT, append([]string{"-A", "OUTPUT"}, jump...)...) }},
	}
	answer := func(args []string) string {
		ok, err := nf.Check(NAT, "OUTPUT", args...)
		return fmt.Sprint(ok, err)
	}
	key := NAT + "\x00OUTPUT\x00" + strings.Join(jump, "\x00")
	hits := 0
	for _, st := range steps {
		require.NoError(t, st.do(), st.name)
		// The memo left by the step before, then a fresh parse.
		if _, ok := nf.checked[key]; ok {
			hits++
		}
		got := answer(jump)
		nf.checked = nil
		assert.Equal(t, answer(jump), got, "%s: memoized answer", st.name)
	}
	assert.Positive(t, hits, "the memo was used")
	set := []string{"-m", "set", "--match-set", "KUBE-CLUSTER-IP", "dst,dst", "-j", "ACCEPT"}
	_ = answer(set)
	assert.NotContains(t, nf.checked, NAT+"\x00OUTPUT\x00"+strings.Join(set, "\x00"), "a rule naming an ipset is parsed every time")
}
