package netfilter

import (
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flowCacheRules are rulesets whose established walks the flow cache
// replays (or, for the volatile ones, must not).
var flowCacheRules = []struct {
	name     string
	rules    string
	volatile bool // no walk may be replayed
}{
	{name: "kube-forward", rules: `*filter
:FORWARD ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`},
	{name: "return and policy", rules: `*filter
:FORWARD DROP [0:0]
:A - [0:0]
:B - [0:0]
-A FORWARD -j A
-A FORWARD -p udp -m multiport --dports 53,5353 -j ACCEPT
-A A -p udp -m udp --sport 5353 -j B
-A A -j RETURN
-A B -j RETURN
COMMIT
*mangle
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -p udp -m udp --dport 9999 -j ACCEPT
COMMIT
`},
	{name: "mark set and matched", rules: `*mangle
:FORWARD ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -j MARK --set-xmark 0x10/0x10
-A FORWARD -m mark --mark 0x10/0x10 -j MARK --set-xmark 0x20/0x20
-A POSTROUTING -m mark --mark 0x30/0x30 -j ACCEPT
-A POSTROUTING -m mark --mark 0x10/0x10 -j ACCEPT
COMMIT
`},
	{name: "statistic draws every packet", volatile: true, rules: `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m statistic --mode random --probability 0.50000000000 -j ACCEPT
-A FORWARD -m statistic --mode nth --every 3 --packet 0 -j ACCEPT
COMMIT
`},
	{name: "addrtype keyed by the address generation", rules: `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m addrtype --dst-type LOCAL -j ACCEPT
-A FORWARD -m addrtype --src-type UNICAST -j ACCEPT
COMMIT
`},
	{name: "addrtype limited to the in device reads its addresses", volatile: true, rules: `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m addrtype --dst-type LOCAL --limit-iface-in -j ACCEPT
COMMIT
`},
}

// exchange sends n UDP requests client -> server (answered by an echo
// socket), traced or not, and runs the engine after each.
func exchange(t *testing.T, tp *topo, n int, traced bool) {
	t.Helper()
	for i := 0; i < n; i++ {
		var tr *trace.Trace
		if traced {
			tr = &trace.Trace{}
		}
		send(t, tp.client, udpPacket(ipClient, ipServer, 40000, 5353, make([]byte, 10+i%3)), tr)
		require.NoError(t, tp.e.Run())
	}
}

func TestFlowCacheReplaysCountersExactly(t *testing.T) {
	for _, tc := range flowCacheRules {
		t.Run(tc.name, func(t *testing.T) {
			// cached walks the flow untraced (replayable); walked is traced,
			// so every packet runs the chains rule by rule.
			cached, walked := newTopo(t, conntrack.Config{}), newTopo(t, conntrack.Config{})
			for _, tp := range []*topo{cached, walked} {
				tp.restore(t, tc.rules)
				_, err := tp.server.ListenUDP(5353, true)
				require.NoError(t, err)
				_, err = tp.client.ListenUDP(40000, false)
				require.NoError(t, err)
			}
			exchange(t, cached, 20, false)
			exchange(t, walked, 20, true)
			want := walked.nf.Save(SaveOptions{Counters: true})
			assert.Equal(t, want, cached.nf.Save(SaveOptions{Counters: true}), "iptables-save -c")
			assert.Equal(t, walked.nf.Evaluations, cached.nf.Evaluations, "rules evaluated")
			assert.Equal(t, len(walked.atServer.pkts), len(cached.atServer.pkts))
			assert.Equal(t, len(walked.atClient.pkts), len(cached.atClient.pkts))
			assert.Equal(t, walked.e.Rand().Uint64(), cached.e.Rand().Uint64(), "same random draws")
			assert.Zero(t, walked.nf.flowHits, "traced walks never replay")
			if tc.volatile {
				assert.Zero(t, cached.nf.flowHits, "a volatile rule was replayed")
			} else {
				assert.Positive(t, cached.nf.flowHits, "nothing was replayed")
			}
		})
	}
}

func TestFlowCacheInvalidatedByRuleChange(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, flowCacheRules[0].rules)
	_, _ = tp.server.ListenUDP(5353, false)
	exchange(t, tp, 5, false)
	require.Len(t, tp.atServer.pkts, 5)
	hits := tp.nf.flowHits
	require.Positive(t, hits)

	// iptables -I KUBE-FORWARD: the next packet must meet the new rule.
	require.NoError(t, tp.nf.Exec(Filter, "-I", "KUBE-FORWARD", "-p", "udp", "-j", "DROP"))
	exchange(t, tp, 3, false)
	assert.Len(t, tp.atServer.pkts, 5, "dropped by the inserted rule")
	assert.Contains(t, tp.nf.Save(SaveOptions{Counters: true}), "[3:117] -A KUBE-FORWARD -p udp -j DROP\n")

	// iptables-restore back to the original rules: accepted again.
	tp.restore(t, flowCacheRules[0].rules)
	exchange(t, tp, 2, false)
	assert.Len(t, tp.atServer.pkts, 7)
	assert.Equal(t, hits+1, tp.nf.flowHits, "the first packet after the restore was walked, the second replayed")
}

func TestFlowCacheKeyedByMarkAndConntrackState(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, flowCacheRules[0].rules)
	_, _ = tp.server.ListenUDP(5353, false)
	// The first packet is NEW: KUBE-PROXY-FIREWALL is jumped to. Later
	// ones are ESTABLISHED only after a reply; without a reply they stay
	// NEW, so no ESTABLISHED rule may count them.
	exchange(t, tp, 4, false)
	saved := tp.nf.Save(SaveOptions{Counters: true})
	assert.Contains(t, saved, "[4:155] -A FORWARD -m conntrack --ctstate NEW")
	assert.Contains(t, saved, "[0:0] -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\"")
	// A marked packet of the same flow takes the mark rule.
	tp.host.Device("h1").AddRxStage("mark", 0, datapath.StageFunc(func(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
		p.Mark = 0x4000
		return datapath.VerdictContinue
	}))
	exchange(t, tp, 2, false)
	saved = tp.nf.Save(SaveOptions{Counters: true})
	assert.Contains(t, saved, "[2:77] -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT")
}

// activeHooks makes every hook of tp's host call its stages, as they did
// before empty chains were counted by the hook itself.
func activeHooks(tp *topo) {
	for h := datapath.Prerouting; h <= datapath.Postrouting; h++ {
		for _, e := range tp.host.HookStages(h) {
			tp.host.SetHookPassive(h, e.Name, nil, nil)
		}
	}
}

func TestEmptyChainsCountedByTheHook(t *testing.T) {
	for _, tc := range flowCacheRules {
		t.Run(tc.name, func(t *testing.T) {
			passive, called := newTopo(t, conntrack.Config{}), newTopo(t, conntrack.Config{})
			for _, tp := range []*topo{passive, called} {
				tp.restore(t, tc.rules)
				_, err := tp.server.ListenUDP(5353, true)
				require.NoError(t, err)
				_, err = tp.client.ListenUDP(40000, false)
				require.NoError(t, err)
			}
			activeHooks(called)
			exchange(t, passive, 7, false)
			exchange(t, called, 7, false)
			exchange(t, passive, 3, true)
			exchange(t, called, 3, true)
			assert.Equal(t, called.nf.Save(SaveOptions{Counters: true}), passive.nf.Save(SaveOptions{Counters: true}), "iptables-save -c")
			assert.Equal(t, called.nf.Evaluations, passive.nf.Evaluations)
			n := 0
			for h := datapath.Prerouting; h <= datapath.Postrouting; h++ {
				for _, e := range passive.host.HookStages(h) {
					if e.Passive() {
						n++
						c := passive.nf.Table(e.Name[len("iptables/"):]).Chain(h.String())
						require.NotNil(t, c, e.Name)
						assert.Empty(t, c.Rules(), "%s %s is passive with rules", e.Name, h)
					}
				}
			}
			assert.Positive(t, n, "no hook counts for an empty chain")
		})
	}
}

func TestChainLeavesAndRejoinsThePassiveHook(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	_, _ = tp.server.ListenUDP(5353, false)
	passive := func() bool {
		for _, e := range tp.host.HookStages(datapath.Forward) {
			if e.Name == "iptables/filter" {
				return e.Passive()
			}
		}
		t.Fatal("no filter stage at FORWARD")
		return false
	}
	require.True(t, passive(), "an empty FORWARD with policy ACCEPT")
	exchange(t, tp, 2, false)
	require.NoError(t, tp.nf.Exec(Filter, "-A", "FORWARD", "-p", "udp", "-j", "DROP"))
	assert.False(t, passive(), "a rule makes the stage run")
	exchange(t, tp, 1, false)
	assert.Len(t, tp.atServer.pkts, 2, "the rule dropped the third packet")
	require.NoError(t, tp.nf.Exec(Filter, "-F", "FORWARD"))
	require.NoError(t, tp.nf.Exec(Filter, "-P", "FORWARD", "DROP"))
	assert.False(t, passive(), "policy DROP makes the stage run")
	exchange(t, tp, 1, false)
	assert.Len(t, tp.atServer.pkts, 2, "dropped by the policy")
	require.NoError(t, tp.nf.Exec(Filter, "-P", "FORWARD", "ACCEPT"))
	assert.True(t, passive())
	exchange(t, tp, 1, false)
	assert.Len(t, tp.atServer.pkts, 3)
	saved := tp.nf.Save(SaveOptions{Counters: true})
	// Policy: two passive packets (IP lengths 38 and 39), none while the
	// rule dropped, one under policy DROP and one passive again (38 each).
	assert.Contains(t, saved, ":FORWARD ACCEPT [4:153]\n", "the policy counted the packets passive and active")
}
