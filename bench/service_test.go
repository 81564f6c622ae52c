package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
)

// serviceCluster is the reference cluster with extra ClusterIP Services in
// namespace "bench" (each with the two web pods as endpoints); they sort
// before net/web, so net/web's rule is the last one KUBE-SERVICES reaches.
func serviceCluster(b *testing.B, extra int) *scenarios.Reference {
	return modeCluster(b, kubeproxy.ModeIPTables, extra)
}

// BenchmarkClusterIPFirstPacket: a new connection's SYN from net/client to
// the net/web ClusterIP, DNATed on cka-w1 to net/web-2 on cka-w2: conntrack
// entry creation, the nat table walk, VXLAN. Reports rules evaluated per
// packet on cka-w1 (every table and chain the SYN traverses there).
func BenchmarkClusterIPFirstPacket(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			r := serviceCluster(b, n-1)
			nf := r.W1.Netfilter
			var evals uint64
			runFirstPackets(b, r, nil, func() { evals = nf.RulesEvaluated() }, func() {
				b.ReportMetric(float64(nf.RulesEvaluated()-evals)/float64(b.N), "rules/packet")
			})
		})
	}
}

// runFirstPackets times the first packet of new connections: SYNs from
// net/client to the net/web ClusterIP, 4,096 source ports, conntrack
// flushed (with flush, if not nil, outside the timed CPU) before a port is
// reused, each SYN taken off the wire at net/web-2's eth0 so that only its
// walk is measured. start runs just before the timer starts (to read the
// counters the caller reports), done after it stops.
func runFirstPackets(b *testing.B, r *scenarios.Reference, flush func(), start, done func()) {
	ip := func(sport uint16) []byte {
		p, err := packet.TCPSYN(packet.IP{Src: r.Client.IP, Dst: r.Web.ClusterIP()}, sport, 80, 1)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	// warm ARP and FDB state
	if _, err := r.Client.Netns.Send(ip(1)); err != nil {
		b.Fatal(err)
	}
	if err := r.World.Run(); err != nil {
		b.Fatal(err)
	}
	syns := make([][]byte, 4096)
	for i := range syns {
		syns[i] = ip(uint16(2 + i))
	}
	// web-2's eth0 takes the SYN off the wire: only the first packet's
	// walk is measured, not the SYN-ACK and the client's RST.
	got := &datapath.DropIf{Why: "benchmark: first packet only"}
	r.Web2.Netns.Device("eth0").AddRxStage("bench", 0, got)
	e := r.World.Engine
	start()
	b.ReportAllocs()
	b.ResetTimer()
	cpu, flushCPU := cpuTime(), time.Duration(0)
	for i := 0; i < b.N; i++ {
		if i%len(syns) == 0 && i > 0 {
			// Start a fresh conntrack state so every SYN is a new flow.
			b.StopTimer()
			t := cpuTime()
			r.W1.Conntrack.Flush()
			r.W2.Conntrack.Flush()
			if flush != nil {
				flush()
			}
			flushCPU += cpuTime() - t
			b.StartTimer()
		}
		p := e.Pool.Get()
		p.SetIPPacket(syns[i%len(syns)])
		r.Client.Netns.SendPacket(p)
		if err := e.Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu+flushCPU)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
	done()
	if got.Dropped != b.N {
		b.Fatalf("net/web-2 got %d of %d SYNs", got.Dropped, b.N)
	}
}

// BenchmarkClusterIPEstablished: a packet of an established connection to
// the net/web ClusterIP (conntrack hit, no nat table, un-DNAT by the
// entry), cross-node, tracing off.
func BenchmarkClusterIPEstablished(b *testing.B) { benchClusterIPEstablished(b, false) }

// BenchmarkClusterIPEstablishedTraced is the same walk with tracing on:
// every hop, rule match, rewrite and the encapsulation recorded.
func BenchmarkClusterIPEstablishedTraced(b *testing.B) { benchClusterIPEstablished(b, true) }

func benchClusterIPEstablished(b *testing.B, traced bool) {
	r := serviceCluster(b, 0)
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web.ClusterIP(), 40000, 80, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.World.Run(); err != nil {
		b.Fatal(err)
	}
	if !c.Established {
		b.Fatal("handshake failed")
	}
	// A bare ACK of the established flow: nothing answers it.
	ip, err := packet.TCP(packet.IP{Src: r.Client.IP, Dst: r.Web.ClusterIP()}, packet.TCPSegment{
		Sport: 40000, Dport: 80, Seq: 2, Ack: 1, Flags: packet.TCPFlags{ACK: true}})
	if err != nil {
		b.Fatal(err)
	}
	nf := r.W1.Netfilter
	l := r.Web2.Netns.TCPListener(80)
	before, evals := l.Segments, nf.RulesEvaluated()
	var tr *trace.Trace
	if traced {
		tr = &trace.Trace{}
	}
	runPackets(b, r.Client.Netns, ip, tr, func() {
		if l.Segments-before != b.N {
			b.Fatalf("net/web-2 got %d of %d segments", l.Segments-before, b.N)
		}
		b.ReportMetric(float64(nf.RulesEvaluated()-evals)/float64(b.N), "rules/packet")
	})
}
