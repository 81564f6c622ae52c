package netfilter

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func tcpPacket(src, dst [4]byte, sport, dport uint16, flags header.TCPFlags) []byte {
	b := make([]byte, 40)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: 40, TTL: 64, Protocol: 6,
		SrcAddr: tcpip.AddrFrom4(src), DstAddr: tcpip.AddrFrom4(dst)})
	ip.SetChecksum(^ip.CalculateChecksum())
	tc := header.TCP(b[20:])
	tc.Encode(&header.TCPFields{SrcPort: sport, DstPort: dport, SeqNum: 1, DataOffset: 20, Flags: flags, WindowSize: 1000})
	tc.SetChecksum(^l4sum(ip, header.TCPProtocolNumber))
	return b
}

// megaflowLines are rule lines the random rulesets are drawn from, by
// chain: every field a key may leave out or keep is read by some, and
// some are volatile.
var megaflowLines = map[string][]string{
	"filter FORWARD": {
		"-m conntrack --ctstate NEW -j A",
		"-p udp -m udp --dport 53 -j ACCEPT",
		"-p udp -m udp --dport 9999 -j DROP",
		"-s 10.0.1.0/24 -d 10.0.2.2/32 -j B",
		"-p udp -m multiport --sports 40001,40003 -j B",
		"-m addrtype --dst-type LOCAL -j ACCEPT",
		"-m addrtype --src-type UNICAST -j A",
		"-m statistic --mode random --probability 0.50000000000 -j B",
		"-i h1 -o h2 -j A",
		"-p tcp -m tcp --tcp-flags SYN,ACK SYN -j B",
		"-m mark --mark 0x8/0x8 -j RETURN",
		"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"-m conntrack --ctstatus SEEN_REPLY -j B",
	},
	"filter A": {
		"-p tcp -m tcp --sport 40000:40002 -j B",
		"-p udp -m udp --sport 40004 -j MARK --set-xmark 0x8/0x8",
		"-m mark --mark 0x8/0x8 -j RETURN",
		"-p udp -m udp --dport 5353 -j B",
		"-j MARK --set-xmark 0x10/0x10",
	},
	"filter B": {
		"-m mark --mark 0x10/0x10 -j RETURN",
		"-p udp -m udp --sport 40002 -j ACCEPT",
		"-d 10.0.2.0/24 -j LOG --log-prefix b",
		"-p icmp -m icmp --icmp-type 8 -j ACCEPT",
	},
	"nat POSTROUTING": {
		"-p udp -m udp --sport 40005 -j MASQUERADE",
		"-s 10.0.1.0/24 -d 10.0.2.0/24 -j RETURN",
		"-m mark --mark 0x8/0x8 -j ACCEPT",
		"-p tcp -m tcp --dport 81 -j SNAT --to-source 10.0.2.1",
		"-m addrtype --dst-type LOCAL -j ACCEPT",
		"-o h2 -j NATB",
	},
	"mangle PREROUTING": {
		"-p udp -m udp --dport 9999 -j ACCEPT",
		"-m mark --mark 0x8/0x8 -j MARK --set-xmark 0x20/0x20",
	},
	"nat NATB": {
		"-m mark --mark 0x10/0x10 -j RETURN",
		"-p udp -m udp --dport 5353 -j ACCEPT",
	},
}

// megaflowRules draws a ruleset: each chain gets a random selection of its
// lines in random order.
func megaflowRules(rng *rand.Rand) string {
	var b strings.Builder
	for _, table := range []string{"mangle", "filter", "nat"} {
		fmt.Fprintf(&b, "*%s\n", table)
		var chains []string
		switch table {
		case "mangle":
			// Always an addrtype rule before routing, where the address
			// added mid-way turns the server's address LOCAL.
			b.WriteString(":PREROUTING ACCEPT [0:0]\n-A PREROUTING -m addrtype --dst-type LOCAL -j MARK --set-xmark 0x40/0x40\n")
			chains = []string{"PREROUTING"}
		case "filter":
			b.WriteString(":FORWARD ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n")
			chains = []string{"FORWARD", "A", "B"}
		default:
			b.WriteString(":POSTROUTING ACCEPT [0:0]\n:NATB - [0:0]\n")
			chains = []string{"POSTROUTING", "NATB"}
		}
		for _, ch := range chains {
			lines := megaflowLines[table+" "+ch]
			for _, i := range rng.Perm(len(lines)) {
				if rng.IntN(3) > 0 {
					fmt.Fprintf(&b, "-A %s %s\n", ch, lines[i])
				}
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// TestMegaflowMatchesTheWalk is the property the flow cache rests on: for
// random rulesets and traffic (new and repeated flows, TCP and UDP,
// marked and not, replies, an address added mid-way), walks through the
// cache (keyed only by the fields the rules read) leave exactly what
// walking every packet rule by rule (traced, never cached) leaves:
// counters per rule and policy, rules evaluated, packets delivered, the
// random draws.
func TestMegaflowMatchesTheWalk(t *testing.T) {
	hitsAcross := 0
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		rules := megaflowRules(rng)
		type ev struct {
			sport, dport uint16
			tcp, mark    bool
			addAddr      bool
		}
		evs := make([]ev, 80)
		for i := range evs {
			evs[i] = ev{sport: 40000 + uint16(rng.IntN(6)), dport: []uint16{53, 5353, 9999, 80, 81}[rng.IntN(5)],
				tcp: rng.IntN(3) == 0, mark: rng.IntN(4) == 0, addAddr: i == 50}
		}
		var tps [2]*topo
		for j := range tps {
			tp := newTopo(t, conntrack.Config{})
			tp.restore(t, rules)
			_, err := tp.server.ListenUDP(5353, true)
			require.NoError(t, err)
			_, err = tp.client.ListenUDP(40000, false)
			require.NoError(t, err)
			marking := false
			tp.host.Device("h1").AddRxStage("mark", 0, datapath.StageFunc(func(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
				if marking {
					p.Mark = 0x8
				}
				return datapath.VerdictContinue
			}))
			for _, e := range evs {
				if e.addAddr {
					// The server's address becomes the host's too: addrtype
					// answers LOCAL for it from now on.
					require.NoError(t, tp.host.AddAddr("h1", pfx("10.0.2.2/32")))
				}
				var tr *trace.Trace
				if j == 1 {
					tr = &trace.Trace{}
				}
				marking = e.mark
				ip := udpPacket(ipClient, ipServer, e.sport, e.dport, []byte("ping"))
				if e.tcp {
					ip = tcpPacket(ipClient, ipServer, e.sport, e.dport, header.TCPFlagSyn)
				}
				send(t, tp.client, ip, tr)
				require.NoError(t, tp.e.Run())
			}
			tps[j] = tp
		}
		cached, walked := tps[0], tps[1]
		require.Equal(t, walked.nf.Save(SaveOptions{Counters: true}), cached.nf.Save(SaveOptions{Counters: true}), "seed %d: iptables-save -c\n%s", seed, rules)
		require.Equal(t, walked.nf.Evaluations, cached.nf.Evaluations, "seed %d: rules evaluated", seed)
		require.Equal(t, len(walked.atServer.pkts), len(cached.atServer.pkts), "seed %d", seed)
		require.Equal(t, len(walked.atClient.pkts), len(cached.atClient.pkts), "seed %d", seed)
		require.Equal(t, walked.ct.Dump(), cached.ct.Dump(), "seed %d", seed)
		require.Equal(t, walked.e.Rand().Uint64(), cached.e.Rand().Uint64(), "seed %d: same random draws", seed)
		require.Zero(t, walked.nf.flowHits)
		if cached.nf.flowHits > 0 {
			hitsAcross++
		}
	}
	assert.Greater(t, hitsAcross, 20, "most rulesets have walks replayed")
}

// TestMegaflowSharesOneWalkAcrossSourcePorts: the first packets of new
// connections that differ only in a field no rule reads (the source
// port) replay one cached walk of the filter table, while a rule reading
// it keeps them apart. (The empty nat chains' walks and the server's ICMP
// errors are replayed in both cases.)
func TestMegaflowSharesOneWalkAcrossSourcePorts(t *testing.T) {
	hits := func(rules string) uint64 {
		tp := newTopo(t, conntrack.Config{})
		tp.restore(t, rules)
		for i := range 10 {
			send(t, tp.client, udpPacket(ipClient, ipServer, 41000+uint16(i), 5353, nil), nil)
			require.NoError(t, tp.e.Run())
		}
		assert.Len(t, tp.atServer.pkts, 10)
		assert.Equal(t, 10, tp.ct.Len(), "ten connections")
		return tp.nf.flowHits
	}
	unread := hits(flowCacheRules[0].rules)
	read := hits(`*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -p udp -m udp --sport 40005 -j DROP
COMMIT
`)
	assert.Equal(t, read+9, unread, "the nine SYN-like first packets after the first replay the filter walk")
}
