// Package bench holds the walk benchmarks: ns/packet and allocations for
// the hot paths named in DESIGN.md, measured with testing.B.
package bench

import (
	"syscall"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/packet"
)

// warm sends one packet so ARP and FDB state is in place, then returns the
// template for the steady-state packet.
func warm(b *testing.B, from *datapath.Netns, ip []byte) *datapath.Engine {
	b.Helper()
	if _, err := from.Send(ip); err != nil {
		b.Fatal(err)
	}
	e := from.Engine()
	if err := e.Run(); err != nil {
		b.Fatal(err)
	}
	return e
}

// cpuTime is the CPU time this process has used (user + system). On a
// machine shared with other work, wall-clock ns/op counts the time the
// benchmark waited for a core; cpu-ns/packet does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports cpu-ns/packet: CPU time since start over b.N.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/packet")
}

func runPackets(b *testing.B, from *datapath.Netns, ip []byte, tr *trace.Trace, check func()) {
	e := from.Engine()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		p := e.Pool.Get()
		p.SetIPPacket(ip)
		if tr != nil {
			tr.Reset()
			p.Trace = tr
		}
		from.SendPacket(p)
		if err := e.Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
	check()
}

func benchSameNodeUDP(b *testing.B, traced bool) {
	r, err := scenarios.NewReference(1)
	if err != nil {
		b.Fatal(err)
	}
	sink, err := r.Web1.Netns.ListenUDP(9000, false)
	if err != nil {
		b.Fatal(err)
	}
	ip, err := packet.UDP(packet.IP{Src: r.Client.IP, Dst: r.Web1.IP}, 40000, 9000, make([]byte, 64))
	if err != nil {
		b.Fatal(err)
	}
	warm(b, r.Client.Netns, ip)
	var tr *trace.Trace
	if traced {
		tr = &trace.Trace{}
	}
	before := sink.Received
	runPackets(b, r.Client.Netns, ip, tr, func() {
		if sink.Received-before != b.N {
			b.Fatalf("delivered %d of %d packets", sink.Received-before, b.N)
		}
	})
}

// BenchmarkSameNodePodToPodUDP: net/client -> net/web-1 on cka-w1, through
// eth0, the host veth, cni0 and web-1's veth, tracing off.
func BenchmarkSameNodePodToPodUDP(b *testing.B) { benchSameNodeUDP(b, false) }

// BenchmarkSameNodePodToPodUDPTraced is the same walk with tracing on.
func BenchmarkSameNodePodToPodUDPTraced(b *testing.B) { benchSameNodeUDP(b, true) }

// BenchmarkCrossNodePodToPodTCP: a TCP segment of an established connection
// from net/client on cka-w1 to net/web-2 on cka-w2: routed by cka-w1 into flannel.1, VXLAN-encapsulated,
// across the underlay, decapsulated and routed into cni0 on cka-w2.
func BenchmarkCrossNodePodToPodTCP(b *testing.B) {
	r, err := scenarios.NewReference(1)
	if err != nil {
		b.Fatal(err)
	}
	// A real handshake first, so conntrack on both nodes has seen a reply
	// and the segments below are ESTABLISHED, not NEW (an unreplied flow
	// stays NEW in the kernel and keeps matching --ctstate NEW rules).
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.World.Run(); err != nil || !c.Established {
		b.Fatal("handshake failed", err)
	}
	ip, err := packet.TCP(packet.IP{Src: r.Client.IP, Dst: r.Web2.IP}, packet.TCPSegment{
		Sport: 40000, Dport: 80, Seq: 2, Ack: 1, Flags: packet.TCPFlags{ACK: true}})
	if err != nil {
		b.Fatal(err)
	}
	w2 := r.W2.Host.Device("flannel.1")
	before := w2.Stats.RxPackets
	runPackets(b, r.Client.Netns, ip, nil, func() {
		if got := w2.Stats.RxPackets - before; got != uint64(b.N) {
			b.Fatalf("cka-w2 flannel.1 received %d of %d packets", got, b.N)
		}
	})
}

// BenchmarkCrossNodePodToPodUDPFrame is the kubewalk side of
// sim/export's TestKernelSideBySide: a UDP datagram from net/client to
// net/web-2 on cka-w2, written as a frame on the client's eth0
// (Device.Transmit) and counted by web-2's socket, two datagrams sent
// before timing (ARP, FDB, conntrack, the fast path's recordings).
func BenchmarkCrossNodePodToPodUDPFrame(b *testing.B) {
	r, err := scenarios.NewReference(1)
	if err != nil {
		b.Fatal(err)
	}
	sock, err := r.Web2.Netns.ListenUDP(9000, false)
	if err != nil {
		b.Fatal(err)
	}
	frame, err := r.ClientFrameToWeb2(9000)
	if err != nil {
		b.Fatal(err)
	}
	eth0 := r.Client.Netns.Device("eth0")
	e := r.World.Engine
	for range 2 {
		if err := eth0.Transmit(frame, nil); err != nil {
			b.Fatal(err)
		}
		if err := e.Run(); err != nil {
			b.Fatal(err)
		}
	}
	before := sock.Received
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := eth0.Transmit(frame, nil); err != nil {
			b.Fatal(err)
		}
		if err := e.Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
	if got := sock.Received - before; got != b.N {
		b.Fatalf("web-2 received %d of %d datagrams", got, b.N)
	}
}
