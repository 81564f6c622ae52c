package bench

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// ipvsBenchCluster is serviceCluster with kube-proxy in mode. In IPVS mode the
// net/web virtual server on cka-w1 gets web-1 at weight 0 (`ipvsadm -e
// ... -w 0`), so that, as with the iptables Chooser, every first packet
// crosses to net/web-2 on cka-w2.
func ipvsBenchCluster(b *testing.B, mode kubeproxy.Mode, extra int) *scenarios.Reference {
	r := modeCluster(b, mode, extra)
	if px, ok := r.W1.Proxier.(*sim.IPVSProxier); ok {
		s := px.IPVS.Service(datapath.ProtoTCP, r.Web.ClusterIP(), 80)
		if err := px.IPVS.EditDest(s, netip.AddrPortFrom(r.Web1.IP, 80), 0); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// BenchmarkIPVSModeFirstPacket: the SYN of a new connection from
// net/client to the net/web ClusterIP, to net/web-2 on the other node, in
// each kube-proxy mode beside the others, at 10, 1,000 and 10,000
// Services. rules/packet counts iptables rules evaluated on cka-w1;
// lookups/packet counts IPVS service and connection table lookups there
// (IPVS mode). iptables mode's rules grow with the Services before net/web
// in KUBE-SERVICES; IPVS mode's stay flat (one hash lookup per ipset).
func BenchmarkIPVSModeFirstPacket(b *testing.B) {
	for _, mode := range []kubeproxy.Mode{kubeproxy.ModeIPTables, kubeproxy.ModeIPVS} {
		for _, n := range []int{10, 1000, 10000} {
			b.Run(fmt.Sprintf("mode=%s/services=%d", mode, n), func(b *testing.B) {
				r := ipvsBenchCluster(b, mode, n-1)
				nf := r.W1.Netfilter
				px, _ := r.W1.Proxier.(*sim.IPVSProxier)
				var flush func()
				if px != nil {
					flush = px.IPVS.FlushConns
				}
				var evals, lookups uint64
				runFirstPackets(b, r, flush, func() {
					evals = nf.RulesEvaluated()
					if px != nil {
						lookups = px.IPVS.Lookups
					}
				}, func() {
					b.ReportMetric(float64(nf.RulesEvaluated()-evals)/float64(b.N), "rules/packet")
					if px != nil {
						b.ReportMetric(float64(px.IPVS.Lookups-lookups)/float64(b.N), "lookups/packet")
					}
				})
			})
		}
	}
}
