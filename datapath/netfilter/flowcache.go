package netfilter

import (
	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// The flow cache is a per-hook memo of table traversals, in the spirit of
// the kernel's flow offload (nf_flow_table): once a packet's walk through a
// table's built-in chain is known, a later packet with the same inputs to
// every rule it evaluated gets the same walk replayed instead of re-run.
// Replay does everything the walk did that anyone can see: the same rule
// and policy counters are incremented (iptables-save -c stays exact per
// rule and per packet), Evaluations grows by the same count (rules/packet
// still reports what the kernel evaluates), and the mark ends the same.
//
// The key holds every input a cacheable rule reads: addresses, protocol,
// ports, TCP flags, ICMP type and code, the fragment bit, the in and out
// devices, the conntrack state (present, ctinfo, status bits) and the mark,
// plus the ruleset generation, which every commit (iptables-restore,
// iptables -A/-D/-I/-F/-P/-N/-X) bumps. A walk that evaluates a rule whose
// result depends on more than that (statistic consumes randomness, recent
// and nth keep state, addrtype reads the namespace's addresses) or that
// ends in DROP, REJECT or a NAT target is not cached. Traced packets never
// use the cache: their walk records an observation per rule.

// flowSlots is the number of entries per hook stage (direct-mapped).
const flowSlots = 16

// maxReplay is the most matched rules a cached walk may increment.
const maxReplay = 8

type flowKey struct {
	src, dst           uint32
	sport, dport       uint16
	proto, tcpFlags    uint8
	icmpType, icmpCode uint8
	frag, l4ok, hasCT  bool
	ctinfo             conntrack.CTInfo
	ctStatus           conntrack.Status
	mark               uint32
	in, out            *datapath.Device
}

type flowSlot struct {
	key    flowKey
	gen    uint64
	valid  bool
	policy bool // fell off the built-in chain (policy ACCEPT counted)
	n      uint8
	evals  uint32
	mark   uint32 // the mark after the walk
	ctrs   [maxReplay]*counter
}

// flowRec collects what one recorded walk did.
type flowRec struct {
	on, uncacheable, policy bool
	n                       int
	// ctrs are the counters of the rules that matched, in order.
	ctrs [maxReplay]*counter
}

func (c *evalCtx) flowKey() flowKey {
	k := flowKey{src: c.src, dst: c.dst, sport: c.sport, dport: c.dport, proto: c.proto, tcpFlags: c.tcpFlags,
		icmpType: c.icmpType, icmpCode: c.icmpCode, frag: c.frag, l4ok: c.l4ok, mark: c.p.Mark, in: c.in, out: c.out}
	if c.ct != nil {
		k.hasCT, k.ctinfo, k.ctStatus = true, c.ctinfo, c.ct.Status
	}
	return k
}

func (k *flowKey) slot() int {
	h := k.src*0x9e3779b1 ^ k.dst*0x85ebca6b ^ (uint32(k.sport)<<16 | uint32(k.dport)) ^ uint32(k.tcpFlags)<<8 ^ k.mark
	h ^= h >> 15
	h *= 0x2c1b3c6d
	return int(h >> (32 - 4))
}

// replay applies the cached walk for c's key, if there is one, and reports
// whether it did.
func (s *hookStage) replay(c *evalCtx, k *flowKey) bool {
	if s.cache == nil {
		return false
	}
	sl := &s.cache[k.slot()]
	if !sl.valid || sl.gen != s.nf.gen || sl.key != *k {
		return false
	}
	nf := s.nf
	nf.flowHits++
	nf.Evaluations += uint64(sl.evals)
	for _, k := range sl.ctrs[:sl.n] {
		k.add(c.plen)
	}
	if sl.policy {
		ch := s.t.builtins[s.hook]
		ch.Packets++
		ch.Bytes += c.plen
	}
	c.p.Mark = sl.mark
	return true
}

// store keeps the walk just recorded in c under k, if it may be replayed.
func (s *hookStage) store(c *evalCtx, k *flowKey, v verdict, evals uint64) {
	rec := &c.rec
	if rec.uncacheable || (v != vAccept && v != vContinue) || evals > 1<<31 {
		return
	}
	if s.cache == nil {
		s.cache = new([flowSlots]flowSlot)
	}
	sl := &s.cache[k.slot()]
	*sl = flowSlot{key: *k, gen: s.nf.gen, valid: true, policy: rec.policy, n: uint8(rec.n),
		evals: uint32(evals), mark: c.p.Mark, ctrs: rec.ctrs}
}

// classify sets the rule's cacheability: volatileMatch when evaluating it
// depends on more than the flow key (randomness, match state, the
// namespace's addresses), volatileTarget when its target does more than
// the replay repeats (NAT set-up; DROP and REJECT end the walk uncached
// anyway).
func (r *Rule) classify() {
	r.volatileMatch = false
	for _, m := range r.ms {
		switch m.(type) {
		case *tcpMatch, *commentMatch, *icmpMatch, *markMatch, *conntrackMatch, *multiportMatch:
		default:
			r.volatileMatch = true
		}
	}
	switch r.target.kind {
	case tAccept, tReturn, tJump, tGoto, tMark, tLog:
		r.volatileTarget = false
	default:
		r.volatileTarget = true
	}
}
