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
	key flowKey
	gen uint64
	// stamp numbers the walk stored in the slot (Netfilter.stamps), so
	// the namespace fast path can tell it is still the one it recorded.
	stamp  uint64
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
func (s *hookStage) replay(c *evalCtx, k *flowKey) *flowSlot {
	if s.cache == nil {
		return nil
	}
	i := k.slot()
	sl := &s.cache[i]
	if !sl.valid || sl.gen != s.nf.gen || sl.key != *k {
		if sl = &s.cache[i^1]; !sl.valid || sl.gen != s.nf.gen || sl.key != *k {
			return nil
		}
	}
	s.repeat(sl, c.p, c.plen)
	return sl
}

// repeat does what the walk stored in sl did, for a packet of plen bytes.
func (s *hookStage) repeat(sl *flowSlot, p *datapath.Packet, plen uint64) {
	nf := s.nf
	nf.flowHits++
	nf.Evaluations += uint64(sl.evals)
	for _, k := range sl.ctrs[:sl.n] {
		k.add(plen)
	}
	if sl.policy {
		ch := s.t.builtins[s.hook]
		ch.Packets++
		ch.Bytes += plen
	}
	p.Mark = sl.mark
}

// store keeps the walk just recorded in c under k, if it may be replayed.
func (s *hookStage) store(c *evalCtx, k *flowKey, v verdict, evals uint64) *flowSlot {
	rec := &c.rec
	if rec.uncacheable || (v != vAccept && v != vContinue) || evals > 1<<31 {
		return nil
	}
	if s.cache == nil {
		s.cache = new([flowSlots]flowSlot)
	}
	// Two-way: a flow's two directions often meet at the same hook, and
	// must not evict each other. The older walk (or a stale one) goes.
	i := k.slot()
	sl := &s.cache[i]
	if o := &s.cache[i^1]; sl.valid && sl.gen == s.nf.gen && (!o.valid || o.gen != s.nf.gen || o.stamp < sl.stamp) {
		sl = o
	}
	s.nf.stamps++
	*sl = flowSlot{key: *k, gen: s.nf.gen, stamp: s.nf.stamps, valid: true, policy: rec.policy, n: uint8(rec.n),
		evals: uint32(evals), mark: c.p.Mark, ctrs: rec.ctrs}
	return sl
}

// classify sets the rule's cacheability: volatileMatch when evaluating it
// depends on more than the flow key (randomness, match state, the
// namespace's addresses), volatileTarget when its target does more than
// the replay repeats (NAT set-up; DROP and REJECT end the walk uncached
// anyway).
func (r *Rule) classify() {
	r.compile()
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

// The tables' part in the datapath's namespace fast path
// (datapath.FastStage). A table walk the flow cache holds is repeatable
// while its slot still holds that walk (same stamp) at the same ruleset
// generation: the fast path repeats it as a flow cache hit. An empty
// built-in chain with policy ACCEPT only counts the policy. A nat hook
// repeats the connection's rewrite for an established packet and nothing
// for one without a binding; a connection's first packet is not
// repeatable.

// ProcessFast is Process, reporting the walk as an effect the fast path
// can repeat when the flow cache holds it.
func (s *hookStage) ProcessFast(w *datapath.Walk, p *datapath.Packet) (datapath.Verdict, datapath.Effect, bool) {
	ch := s.t.builtins[s.hook]
	if len(ch.rules) == 0 && ch.Policy == Accept {
		plen := uint64(p.Len() - datapath.EthHdrLen)
		return s.Process(w, p), datapath.Effect{R: s, N: s.nf.gen, M: plen, B: true}, true
	}
	c := &s.nf.ctx
	if !c.init(s.nf, w, p, s.t, s.hook) {
		return datapath.VerdictContinue, datapath.Effect{}, false
	}
	k := c.flowKey()
	if sl := s.replay(c, &k); sl != nil {
		return datapath.VerdictContinue, datapath.Effect{R: s, Ref: sl, N: sl.stamp, M: c.plen}, true
	}
	c.rec.on = true
	evals := s.nf.Evaluations
	v := s.nf.runTable(c)
	sl := s.store(c, &k, v, s.nf.Evaluations-evals)
	plen := c.plen
	vd := s.nf.finish(c, v)
	if sl == nil {
		return vd, datapath.Effect{}, false
	}
	return vd, datapath.Effect{R: s, Ref: sl, N: sl.stamp, M: plen}, true
}

// Valid reports whether the recorded walk is still the table's answer.
func (s *hookStage) Valid(_ *datapath.Walk, fx *datapath.Effect) bool {
	if fx.B {
		return s.nf.gen == fx.N
	}
	sl := fx.Ref.(*flowSlot)
	return sl.valid && sl.stamp == fx.N && sl.gen == s.nf.gen
}

// Apply repeats the recorded walk.
func (s *hookStage) Apply(_ *datapath.Walk, p *datapath.Packet, fx *datapath.Effect) {
	if fx.B {
		ch := s.t.builtins[s.hook]
		ch.Packets++
		ch.Bytes += fx.M
		return
	}
	s.repeat(fx.Ref.(*flowSlot), p, fx.M)
}

// ProcessFast is Process, reporting the rewrite (or its absence) of a
// packet whose connection has its binding for the hook's manipulation as
// an effect the fast path can repeat (an unreplied connection's later
// packets are NEW, but no longer traverse the nat table).
func (s *natStage) ProcessFast(w *datapath.Walk, p *datapath.Packet) (datapath.Verdict, datapath.Effect, bool) {
	e, info := s.nf.ct.Get(p)
	switch {
	case e == nil:
		return s.Process(w, p), datapath.Effect{}, true
	case info == conntrack.New && !e.NATDone(s.manip), info == conntrack.Related, info == conntrack.RelatedReply:
		// The nat table's first traversal, or an ICMP error.
		return s.Process(w, p), datapath.Effect{}, false
	case e.Status&conntrack.StatusNATMask == 0:
		return s.Process(w, p), datapath.Effect{}, true
	}
	return s.Process(w, p), datapath.Effect{R: s, Ref: e, U: uint32(info)}, true
}

// Valid holds: the connection is checked by the conntrack stage that
// attached it, and a confirmed connection's bindings do not change.
func (s *natStage) Valid(*datapath.Walk, *datapath.Effect) bool { return true }

// Apply rewrites p with the connection's binding.
func (s *natStage) Apply(_ *datapath.Walk, p *datapath.Packet, fx *datapath.Effect) {
	fx.Ref.(*conntrack.Entry).ManipPacket(p, conntrack.CTInfo(fx.U), s.manip)
}
