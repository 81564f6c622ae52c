package bench

import (
	"fmt"
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
)

// modeCluster is serviceCluster with kube-proxy in mode.
func modeCluster(b *testing.B, mode kubeproxy.Mode, extra int) *scenarios.Reference {
	r, err := scenarios.NewReferenceMode(1, mode)
	if err != nil {
		b.Fatal(err)
	}
	specs := make([]sim.ServiceSpec, extra)
	for i := range specs {
		specs[i] = sim.ServiceSpec{Selector: map[string]string{"app": "web"}, Service: kubeproxy.Service{
			Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i),
			Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}}
	}
	if extra > 0 {
		if _, err := r.AddServices(specs); err != nil {
			b.Fatal(err)
		}
	}
	// Every first packet goes to the endpoint on cka-w2 (cross-node): the
	// last statistic rule in iptables mode, numgen value 1 in nftables mode.
	r.World.Walk().Chooser = func(float64) bool { return false }
	return r
}

// BenchmarkServiceModesFirstPacket is BenchmarkClusterIPFirstPacket in each
// kube-proxy mode, side by side: the SYN from net/client to net/web's
// ClusterIP with 10, 1,000 and 10,000 Services. rules/packet counts the
// iptables rules and nftables rules cka-w1 evaluated for the SYN (flannel's
// iptables rules are there in both modes); exprs/packet counts nftables
// expressions. iptables mode walks KUBE-SERVICES in order, so its cost grows
// with the Services; nftables mode looks the destination up in the
// service-ips verdict map, so it stays flat.
func BenchmarkServiceModesFirstPacket(b *testing.B) {
	for _, mode := range []kubeproxy.Mode{kubeproxy.ModeIPTables, kubeproxy.ModeNFTables} {
		for _, n := range []int{10, 1000, 10000} {
			b.Run(fmt.Sprintf("mode=%s/services=%d", mode, n), func(b *testing.B) {
				r := modeCluster(b, mode, n-1)
				nf, nft := r.W1.Netfilter, r.W1.NFTables
				var rules, exprs uint64
				runFirstPackets(b, r, nil, func() { rules, exprs = nf.RulesEvaluated()+nft.Rules, nft.Evaluations }, func() {
					b.ReportMetric(float64(nf.RulesEvaluated()+nft.Rules-rules)/float64(b.N), "rules/packet")
					b.ReportMetric(float64(nft.Evaluations-exprs)/float64(b.N), "exprs/packet")
				})
			})
		}
	}
}

// BenchmarkServiceModesEstablished: an established connection's packet in
// each mode (conntrack hit; neither nat table is consulted).
func BenchmarkServiceModesEstablished(b *testing.B) {
	for _, mode := range []kubeproxy.Mode{kubeproxy.ModeIPTables, kubeproxy.ModeNFTables} {
		b.Run("mode="+string(mode), func(b *testing.B) {
			r := modeCluster(b, mode, 0)
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
			ip, err := packet.TCP(packet.IP{Src: r.Client.IP, Dst: r.Web.ClusterIP()}, packet.TCPSegment{
				Sport: 40000, Dport: 80, Seq: 2, Ack: 1, Flags: packet.TCPFlags{ACK: true}})
			if err != nil {
				b.Fatal(err)
			}
			nf, nft := r.W1.Netfilter, r.W1.NFTables
			l := r.Web2.Netns.TCPListener(80)
			before, rules, exprs := l.Segments, nf.RulesEvaluated()+nft.Rules, nft.Evaluations
			runPackets(b, r.Client.Netns, ip, nil, func() {
				if l.Segments-before != b.N {
					b.Fatalf("net/web-2 got %d of %d segments", l.Segments-before, b.N)
				}
				b.ReportMetric(float64(nf.RulesEvaluated()+nft.Rules-rules)/float64(b.N), "rules/packet")
				b.ReportMetric(float64(nft.Evaluations-exprs)/float64(b.N), "exprs/packet")
			})
		})
	}
}
