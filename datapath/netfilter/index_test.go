package netfilter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// indexRules is a KUBE-SERVICES-like nat chain: 60 service-port rules
// (with a duplicated key, a jump that returns into the run, UDP, and a
// rule no index covers splitting the run in two), then a catch-all.
func indexRules() string {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:RET - [0:0]\n:SVC - [0:0]\n")
	b.WriteString("-A PREROUTING -j KUBE-SERVICES\n-A RET -j RETURN\n-A SVC -p udp -j DNAT --to-destination 10.0.2.2:5353\n")
	for i := 0; i < 60; i++ {
		target := "SVC"
		switch {
		case i%7 == 3:
			target = "RET" // returns: the walk goes on inside the run
		case i == 30:
			b.WriteString("-A KUBE-SERVICES -s 10.0.1.0/24 -d 10.96.0.30/32 -p udp -m udp --dport 53 -j SVC\n")
		}
		fmt.Fprintf(&b, "-A KUBE-SERVICES -d 10.96.0.%d/32 -p udp -m comment --comment \"svc %d\" -m udp --dport 53 -j %s\n", i%50, i, target)
		if i%10 == 5 {
			fmt.Fprintf(&b, "-A KUBE-SERVICES -d 10.96.0.%d/32 -p tcp -m comment --comment \"svc %d tcp\" -m tcp --dport 53 -j RET\n", i, i)
		}
	}
	b.WriteString("-A KUBE-SERVICES -d 10.96.0.0/16 -j RETURN\nCOMMIT\n")
	return b.String()
}

func TestRuleIndexCountsAndMatchesLikeTheLinearWalk(t *testing.T) {
	saved := minIndexRun
	minIndexRun = 1 << 30
	linear := newTopo(t, conntrack.Config{})
	linear.restore(t, indexRules())
	minIndexRun = saved
	indexed := newTopo(t, conntrack.Config{})
	indexed.restore(t, indexRules())
	runs := map[*indexRun]bool{}
	for _, r := range indexed.nf.Table(NAT).Chain("KUBE-SERVICES").Rules() {
		if r.run != nil {
			runs[r.run] = true
		}
	}
	require.Len(t, runs, 2, "the rules before and after the -s rule are indexed")

	var traces [2][]string
	for i, tp := range []*topo{linear, indexed} {
		_, _ = tp.server.ListenUDP(5353, false)
		for d := 0; d < 64; d++ {
			for _, proto := range []uint8{17, 6, 1} {
				dst := [4]byte{10, 96, 0, byte(d)}
				sport := uint16(20000 + d*4 + int(proto))
				var ip []byte
				switch proto {
				case 17:
					ip = udpPacket(ipClient, dst, sport, 53, []byte("q"))
				case 6:
					ip = tcpSYN(ipClient, dst, sport, 53)
				case 1:
					ip = icmpEcho(ipClient, dst)
				}
				tr := &trace.Trace{}
				send(t, tp.client, ip, tr)
				require.NoError(t, tp.e.Run())
				traces[i] = append(traces[i], tr.Text(trace.Minimal))
			}
		}
	}
	assert.Equal(t, linear.nf.Save(SaveOptions{Counters: true}), indexed.nf.Save(SaveOptions{Counters: true}), "iptables-save -c")
	assert.Equal(t, linear.nf.Evaluations, indexed.nf.Evaluations, "rules/packet counts every rule the kernel evaluates")
	assert.Equal(t, traces[0], traces[1])
	assert.Equal(t, len(linear.atServer.pkts), len(indexed.atServer.pkts))
	assert.Positive(t, len(indexed.atServer.pkts), "some packets were DNATed to the server")
}

func tcpSYN(src, dst [4]byte, sport, dport uint16) []byte {
	b := make([]byte, 40)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: 40, TTL: 64, Protocol: 6, SrcAddr: tcpip.AddrFrom4(src), DstAddr: tcpip.AddrFrom4(dst)})
	ip.SetChecksum(^ip.CalculateChecksum())
	tc := header.TCP(b[20:])
	tc.Encode(&header.TCPFields{SrcPort: sport, DstPort: dport, SeqNum: 1, DataOffset: 20, Flags: header.TCPFlagSyn, WindowSize: 64240})
	tc.SetChecksum(^l4sum(ip, header.TCPProtocolNumber))
	return b
}

func icmpEcho(src, dst [4]byte) []byte {
	b := make([]byte, 28)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: 28, TTL: 64, Protocol: 1, SrcAddr: tcpip.AddrFrom4(src), DstAddr: tcpip.AddrFrom4(dst)})
	ip.SetChecksum(^ip.CalculateChecksum())
	ic := header.ICMPv4(b[20:])
	ic.SetType(header.ICMPv4Echo)
	ic.SetIdent(7)
	ic.SetChecksum(^checksum.Checksum(ic, 0))
	return b
}
