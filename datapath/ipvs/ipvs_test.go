package ipvs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/require"
)

// topo: client 10.0.1.2 -- director (10.0.1.1, 10.0.2.1, 10.0.3.1; VIP
// 10.96.0.10 on kube-ipvs0) -- s1 10.0.2.2, s2 10.0.3.2, each listening
// on TCP 80.
type topo struct {
	e                   *datapath.Engine
	client, dir, s1, s2 *datapath.Netns
	ct                  *conntrack.Table
	v                   *IPVS
}

var (
	vip    = netip.MustParseAddr("10.96.0.10")
	s1Addr = netip.MustParseAddrPort("10.0.2.2:80")
	s2Addr = netip.MustParseAddrPort("10.0.3.2:80")
)

func newTopo(t testing.TB) *topo {
	t.Helper()
	e := datapath.NewEngine(3)
	tp := &topo{e: e, client: e.NewNetns("n", "client"), dir: e.NewNetns("n", "director"), s1: e.NewNetns("n", "s1"), s2: e.NewNetns("n", "s2")}
	tp.dir.Sysctl.IPForward = true
	link := func(a *datapath.Netns, an string, aa string, b *datapath.Netns, bn, ba string) {
		x, y, err := a.AddVeth(an, b, bn)
		require.NoError(t, err)
		x.SetUp(true)
		y.SetUp(true)
		require.NoError(t, a.AddAddr(an, netip.MustParsePrefix(aa)))
		require.NoError(t, b.AddAddr(bn, netip.MustParsePrefix(ba)))
	}
	link(tp.client, "eth0", "10.0.1.2/24", tp.dir, "h1", "10.0.1.1/24")
	link(tp.s1, "eth0", "10.0.2.2/24", tp.dir, "h2", "10.0.2.1/24")
	link(tp.s2, "eth0", "10.0.3.2/24", tp.dir, "h3", "10.0.3.1/24")
	for ns, gw := range map[*datapath.Netns]string{tp.client: "10.0.1.1", tp.s1: "10.0.2.1", tp.s2: "10.0.3.1"} {
		require.NoError(t, ns.AddRoute(datapath.RouteSpec{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr(gw)}))
	}
	for _, s := range []*datapath.Netns{tp.s1, tp.s2} {
		_, err := s.ListenTCP(80)
		require.NoError(t, err)
	}
	_, err := tp.dir.AddDummy("kube-ipvs0")
	require.NoError(t, err)
	require.NoError(t, tp.dir.AddAddr("kube-ipvs0", netip.PrefixFrom(vip, 32)))
	tp.ct = conntrack.Install(tp.dir, conntrack.Config{})
	tp.v = Install(tp.dir, tp.ct)
	tp.v.Conntrack, tp.v.ExpireNoDestConn = true, true // as kube-proxy sets them
	return tp
}

func (tp *topo) service(t testing.TB, spec ServiceSpec, dests ...netip.AddrPort) *Service {
	t.Helper()
	s, err := tp.v.AddService(spec)
	require.NoError(t, err)
	for _, d := range dests {
		require.NoError(t, tp.v.AddDest(s, d, 1))
	}
	return s
}

// dial opens a TCP connection from the client and reports which server
// got the SYN, after running the world.
func (tp *topo) dial(t testing.TB, sport uint16, tr *trace.Trace) (string, *datapath.TCPConn) {
	t.Helper()
	before1, before2 := tp.s1.TCPListener(80).SYNs, tp.s2.TCPListener(80).SYNs
	c, err := tp.client.DialTCP(netip.MustParseAddr("10.0.1.2"), vip, sport, 80, 1000, tr)
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())
	switch {
	case tp.s1.TCPListener(80).SYNs > before1:
		return "s1", c
	case tp.s2.TCPListener(80).SYNs > before2:
		return "s2", c
	}
	return "none", c
}

func TestRoundRobinHandshakeAndListings(t *testing.T) {
	tp := newTopo(t)
	tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "rr"}, s1Addr, s2Addr)
	var got []string
	for i := range 4 {
		who, c := tp.dial(t, uint16(40000+i), nil)
		require.True(t, c.Established, "the SYN-ACK came back from the VIP (ip_vs_out in FORWARD)")
		got = append(got, who)
	}
	// The kernel adds a destination at the head of the list: s2 first.
	require.Equal(t, []string{"s2", "s1", "s2", "s1"}, got)
	require.Equal(t, `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.10:80 rr
  -> 10.0.2.2:80                  Masq    1      2          0         
  -> 10.0.3.2:80                  Masq    1      2          0         
`, tp.v.List())
	conns := tp.v.ListConns()
	require.Contains(t, conns, "IPVS connection entries\npro expire state       source             virtual            destination\n")
	require.Contains(t, conns, "TCP 15:00  ESTABLISHED 10.0.1.2:40003     10.96.0.10:80      10.0.2.2:80\n")
	// conntrack saw the reply from the real server (vs/conntrack=1).
	require.Contains(t, tp.ct.Dump(), "src=10.0.1.2 dst=10.96.0.10 sport=40000 dport=80 src=10.0.3.2 dst=10.0.1.2 sport=80 dport=40000 [ASSURED]")
	// Timers run in virtual time.
	require.NoError(t, tp.e.Advance(10*time.Minute))
	require.Contains(t, tp.v.ListConns(), "TCP 05:00  ESTABLISHED 10.0.1.2:40003")
}

func TestTraceNamesVirtualAndRealServer(t *testing.T) {
	tp := newTopo(t)
	tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "rr"}, s1Addr)
	tr := &trace.Trace{}
	tp.dial(t, 40000, tr)
	var details []string
	for _, o := range tr.Obs {
		if o.Stage == StageIn || o.Stage == StageOut {
			details = append(details, o.Stage+" "+o.Action.String()+" "+o.Detail)
		}
	}
	require.Equal(t, []string{
		"ipvs matched TCP  10.96.0.10:80 rr -> 10.0.2.2:80 Masq weight 1 (scheduled by rr, new connection 10.0.1.2:40000)",
		"ipvs rewritten ip_vs_nat_xmit: 10.96.0.10:80 -> 10.0.2.2:80",
		"ipvs-reply rewritten ip_vs_out: reply from 10.0.2.2:80 as 10.96.0.10:80",
		"ipvs rewritten ip_vs_nat_xmit: 10.96.0.10:80 -> 10.0.2.2:80",
	}, details)
}

func TestNoDestinationSendsPortUnreachable(t *testing.T) {
	tp := newTopo(t)
	tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "rr"})
	tr := &trace.Trace{}
	_, _ = tp.dial(t, 40000, tr)
	var sawICMP, dropped bool
	for _, o := range tr.Obs {
		if o.Action == trace.Dropped && o.Reason == datapath.ReasonNetfilterReject.String() {
			dropped = true
		}
		if o.Netns == "client" && o.Action == trace.Delivered && o.Summary == "10.96.0.10 > 10.0.1.2: ICMP port unreachable, ttl 64" {
			sawICMP = true
		}
	}
	require.True(t, dropped, tr.Text(trace.Summary))
	require.True(t, sawICMP, tr.Text(trace.Summary))
}

func TestPersistenceKeepsTheClientOnOneServer(t *testing.T) {
	tp := newTopo(t)
	tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "rr", Persistent: true, Timeout: 10800}, s1Addr, s2Addr)
	first, _ := tp.dial(t, 40000, nil)
	for i := 1; i < 4; i++ {
		who, _ := tp.dial(t, uint16(40000+i), nil)
		require.Equal(t, first, who)
	}
	require.Contains(t, tp.v.List(), "TCP  10.96.0.10:80 rr persistent 10800\n")
	require.Contains(t, tp.v.ListConns(), "TCP 180:00 NONE        10.0.1.2:0         10.96.0.10:80      10.0.3.2:80\n")
}

func TestSchedulers(t *testing.T) {
	for _, tc := range []struct {
		sched          string
		w1, w2         int
		wantS1, wantS2 int
	}{
		{"rr", 1, 1, 3, 3},
		{"wrr", 2, 1, 4, 2},
		{"wrr", 1, 0, 6, 0},
		{"lc", 1, 1, 3, 3},
		{"wlc", 1, 2, 2, 4},
		{"sed", 1, 2, 2, 4},
		{"nq", 1, 1, 3, 3},
		{"sh", 1, 1, -1, -1}, // one client: all on one server
		{"dh", 1, 1, -1, -1},
	} {
		t.Run(tc.sched, func(t *testing.T) {
			tp := newTopo(t)
			s := tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: tc.sched})
			require.NoError(t, tp.v.AddDest(s, s2Addr, tc.w2))
			require.NoError(t, tp.v.AddDest(s, s1Addr, tc.w1))
			n := map[string]int{}
			for i := range 6 {
				who, _ := tp.dial(t, uint16(40000+i), nil)
				n[who]++
			}
			if tc.wantS1 < 0 {
				require.Len(t, n, 1, "%v", n)
				return
			}
			require.Equal(t, map[string]int{"s1": tc.wantS1, "s2": tc.wantS2}, clean(n), "%v", n)
		})
	}
}

func clean(m map[string]int) map[string]int {
	out := map[string]int{"s1": m["s1"], "s2": m["s2"]}
	return out
}

func TestConfigurationErrors(t *testing.T) {
	tp := newTopo(t)
	_, err := tp.v.AddService(ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "mh"})
	require.EqualError(t, err, "Scheduler not found")
	s := tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "rr"}, s1Addr)
	_, err = tp.v.AddService(ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80})
	require.EqualError(t, err, "Service already exists")
	require.EqualError(t, tp.v.AddDest(s, s1Addr, 1), "Destination already exists")
	require.EqualError(t, tp.v.DeleteDest(s, s2Addr), "No such destination")
	require.EqualError(t, tp.v.DeleteService(datapath.ProtoUDP, vip, 80), "No such service")
}

func TestRemovedDestinationExpiresItsConnection(t *testing.T) {
	tp := newTopo(t)
	s := tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "rr"}, s1Addr)
	_, c := tp.dial(t, 40000, nil)
	require.NoError(t, tp.v.DeleteDest(s, s1Addr))
	seg := tp.s1.TCPListener(80).Segments
	c.Write([]byte("x"), nil)
	require.NoError(t, tp.e.Run())
	require.Equal(t, seg, tp.s1.TCPListener(80).Segments, "expire_nodest_conn drops the packet")
	require.NotContains(t, tp.v.ListConns(), "10.0.1.2:40000")
}

func TestEstablishedPacketAllocatesNothing(t *testing.T) {
	tp := newTopo(t)
	tp.service(t, ServiceSpec{Proto: datapath.ProtoTCP, Addr: vip, Port: 80, Scheduler: "rr"}, s1Addr)
	_, c := tp.dial(t, 40000, nil)
	c.Write([]byte("warm"), nil)
	require.NoError(t, tp.e.Run())
	allocs := testing.AllocsPerRun(50, func() {
		c.Write([]byte("x"), nil)
		_ = tp.e.Run()
	})
	require.Zero(t, allocs)
}
