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
// The key holds the inputs a cacheable rule reads: addresses, protocol,
// ports, TCP flags, ICMP type and code, the fragment bit, the in and out
// devices, the conntrack state (present, ctinfo, status bits), the mark
// and, for addrtype, the namespace's address generation; the slot holds
// the ruleset generation, which every commit (iptables-restore, iptables
// -A/-D/-I/-F/-P/-N/-X) bumps. Like a megaflow, the key keeps only the
// fields some rule reachable from the hook's chain reads (reach): the
// first packets of connections from one client to one Service differ
// only in the source port, which kube-proxy's rules never read, and share
// one cached walk. Every rule the walk evaluated reads only fields in the
// key, so a packet with the same key evaluates each of them the same way.
// A walk that evaluates a rule whose result depends on more than that
// (statistic consumes randomness, recent and nth keep state, addrtype
// limited to a device reads its addresses) or that ends in DROP, REJECT
// or a NAT target is not cached. Traced packets never use the cache:
// their walk records an observation per rule. The nat table's walks are
// cached the same way: one that set up no binding is repeatable (the NAT
// core then sets up the null binding as after the walk).

// flowSlots is the number of entries per hook stage (direct-mapped).
const flowSlots = 16

// maxReplay is the most matched rules a cached walk may increment.
const maxReplay = 8

// flowKey is a walk's inputs packed into words (compared field by field
// inline: the struct compare was a call): addr is the source and
// destination, ports the source and destination port and the mark, l4
// the protocol, TCP flags, ICMP type and code, fragment bit, L4 header
// presence, conntrack presence and ctinfo, status the conntrack status
// bits, agen the namespace's address generation plus one when a rule
// reached reads the addresses (addrtype), else 0.
type flowKey struct {
	addr, ports, l4 uint64
	status, agen    uint64
	in, out         *datapath.Device
}

func (k *flowKey) equal(o *flowKey) bool {
	return k.addr == o.addr && k.ports == o.ports && k.l4 == o.l4 && k.status == o.status &&
		k.agen == o.agen && k.in == o.in && k.out == o.out
}

// Key fields a rule can read (Rule.reads); the protocol, the fragment
// bit, whether the L4 header is there and the mark are always keyed.
const (
	kSrc uint16 = 1 << iota
	kDst
	kSport
	kDport
	kTCPFlags
	kICMP
	kCTState  // whether tracked, ctinfo, the SNAT/DNAT status bits
	kCTStatus // every status bit
	kIn
	kOut
	kAddrs // the namespace's addresses
	kAll   = 1<<iota - 1
)

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

// keyWords are a key mask's fields as masks of the key's words (the
// protocol, the fragment and L4 header bits and the mark always).
type keyWords struct{ addr, ports, l4 uint64 }

func wordsOf(mask uint16) keyWords {
	w := keyWords{ports: 0xffffffff, l4: 0xff | 1<<32 | 1<<33}
	if mask&kSrc != 0 {
		w.addr |= 0xffffffff << 32
	}
	if mask&kDst != 0 {
		w.addr |= 0xffffffff
	}
	if mask&kSport != 0 {
		w.ports |= 0xffff << 48
	}
	if mask&kDport != 0 {
		w.ports |= 0xffff << 32
	}
	if mask&kTCPFlags != 0 {
		w.l4 |= 0xff << 8
	}
	if mask&kICMP != 0 {
		w.l4 |= 0xffff << 16
	}
	return w
}

// setKey sets k to c's key with only the fields in mask (the others
// zero; kw is mask's keyWords, which select the header fields without
// a test per field); filled in place, as returning it copied it twice.
func (c *evalCtx) setKey(k *flowKey, mask uint16, kw *keyWords) {
	l4 := uint64(c.proto) | uint64(c.tcpFlags)<<8 | uint64(c.icmpType)<<24 | uint64(c.icmpCode)<<16
	if c.frag {
		l4 |= 1 << 32
	}
	if c.l4ok {
		l4 |= 1 << 33
	}
	l4 &= kw.l4
	k.addr = (uint64(c.src)<<32 | uint64(c.dst)) & kw.addr
	k.ports = (uint64(c.sport)<<48 | uint64(c.dport)<<32 | uint64(c.p.Mark)) & kw.ports
	k.status, k.agen, k.in, k.out = 0, 0, nil, nil
	if mask&(kCTState|kCTStatus) != 0 && c.ct != nil {
		l4 |= 1<<34 | uint64(c.ctinfo)<<40
		k.status = uint64(c.ct.Status & conntrack.StatusNATMask)
		if mask&kCTStatus != 0 {
			k.status = uint64(c.ct.Status)
		}
	}
	k.l4 = l4
	if mask&kIn != 0 {
		k.in = c.in
	}
	if mask&kOut != 0 {
		k.out = c.out
	}
	if mask&kAddrs != 0 {
		k.agen = c.t.nf.ns.AddrGen() + 1
	}
}

// keyMask returns the key fields the rules reachable from the hook's
// built-in chain read (their keyWords in s.kw).
func (s *tableHook) keyMask() uint16 {
	if s.maskGen != s.nf.gen+1 {
		s.mask, s.maskGen = s.nf.reach(s.t.builtins[s.hook], 0), s.nf.gen+1
		s.kw = wordsOf(s.mask)
	}
	return s.mask
}

// reach returns what the rules reachable from ch read (their reads and
// those of the chains they jump to), memoized in the chain.
func (nf *Netfilter) reach(ch *Chain, depth int) uint16 {
	if ch.shared != nil {
		if ch.readsGen != 0 {
			return ch.reads
		}
	} else if ch.readsGen == nf.gen+1 {
		return ch.reads
	}
	if depth >= NFTJumpStackSize {
		return kAll // cannot happen: deeper nesting is refused at load time
	}
	var m uint16
	for _, r := range ch.rules {
		m |= r.reads
		if tg := &r.target; (tg.kind == tJump || tg.kind == tGoto) && tg.chain != nil && m != kAll {
			m |= nf.reach(tg.chain, depth+1)
		}
	}
	ch.reads, ch.readsGen = m, nf.gen+1
	return m
}

// run is the table's walk for c through the flow cache: a cached walk is
// repeated, else the walk is run and kept if it may be repeated.
func (s *tableHook) run(c *evalCtx) verdict {
	var k flowKey
	c.setKey(&k, s.keyMask(), &s.kw)
	if s.replay(c, &k) != nil {
		return vAccept
	}
	c.rec.on = true
	evals := s.nf.Evaluations
	v := s.nf.runTable(c)
	s.store(c, &k, v, s.nf.Evaluations-evals)
	return v
}

func (k *flowKey) slot() int {
	h := uint32(k.addr>>32)*0x9e3779b1 ^ uint32(k.addr)*0x85ebca6b ^ uint32(k.ports>>32) ^ uint32(k.l4>>8)<<8 ^ uint32(k.ports)
	h ^= h >> 15
	h *= 0x2c1b3c6d
	return int(h >> (32 - 4))
}

// replay applies the cached walk for c's key, if there is one, and reports
// whether it did.
func (s *tableHook) replay(c *evalCtx, k *flowKey) *flowSlot {
	if s.cache == nil {
		return nil
	}
	i := k.slot()
	sl := &s.cache[i]
	if !sl.valid || sl.gen != s.nf.gen || !sl.key.equal(k) {
		if sl = &s.cache[i^1]; !sl.valid || sl.gen != s.nf.gen || !sl.key.equal(k) {
			return nil
		}
	}
	s.repeat(sl, c.p, c.plen)
	return sl
}

// repeat does what the walk stored in sl did, for a packet of plen bytes.
func (s *tableHook) repeat(sl *flowSlot, p *datapath.Packet, plen uint64) {
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
func (s *tableHook) store(c *evalCtx, k *flowKey, v verdict, evals uint64) *flowSlot {
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
		evals: uint32(evals), mark: c.p.Mark}
	copy(sl.ctrs[:], rec.ctrs[:rec.n])
	return sl
}

// classify sets the rule's cacheability: volatileMatch when evaluating it
// depends on more than the flow key (randomness, match state, a device's
// addresses), volatileTarget when its target does more than the replay
// repeats (NAT set-up; DROP and REJECT end the walk uncached anyway); and
// reads, the key fields its result depends on. A volatile match adds
// nothing to reads: a walk that evaluates it is not cached, and one that
// does not has the rule fail on its IP part, whose fields reads holds.
func (r *Rule) classify() {
	r.compile()
	r.volatileMatch = false
	var k uint16
	if r.smsk != 0 {
		k |= kSrc
	}
	if r.dmsk != 0 {
		k |= kDst
	}
	if r.in != "" {
		k |= kIn
	}
	if r.out != "" {
		k |= kOut
	}
	for _, m := range r.ms {
		switch m := m.(type) {
		case *commentMatch, *markMatch:
		case *tcpMatch:
			if m.sport.set() {
				k |= kSport
			}
			if m.dport.set() {
				k |= kDport
			}
			if m.flgMask != 0 {
				k |= kTCPFlags
			}
		case *icmpMatch:
			if m.typ != 0xff {
				k |= kICMP
			}
		case *conntrackMatch:
			if m.hasState {
				k |= kCTState
			}
			if m.hasStatus {
				k |= kCTState | kCTStatus
			}
		case *multiportMatch:
			if m.flags&1 != 0 {
				k |= kSport
			}
			if m.flags&2 != 0 {
				k |= kDport
			}
		case *addrtypeMatch:
			if m.limitIn || m.limitOut {
				r.volatileMatch = true // a device's addresses
				continue
			}
			if m.src != 0 {
				k |= kSrc | kAddrs
			}
			if m.dst != 0 {
				k |= kDst | kAddrs
			}
		default:
			r.volatileMatch = true
		}
	}
	r.reads = k
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
	var k flowKey
	c.setKey(&k, s.keyMask(), &s.kw)
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
	return sl.valid && sl.stamp == fx.N && sl.gen == s.nf.gen && (sl.key.agen == 0 || sl.key.agen == s.nf.ns.AddrGen()+1)
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

// Flatten hands the fast path what Apply repeats: the recorded walk's
// counter increments (the policy's, the matched rules', Evaluations and
// the flow cache's hit count), the mark it leaves, and one check, the
// ruleset generation. That is what decides the walk besides the key, which
// the fast path's own key and configuration generation cover (the
// addresses an addrtype rule reads included: every change of them bumps
// that generation), so the repetition stays exact even when the flow
// cache's slot is later given to another flow. The increments are
// deferred (datapath.Flat.Defer): every way out of the package to read
// or replace these counters settles them first (settle).
func (s *hookStage) Flatten(fx *datapath.Effect, f *datapath.Flat) bool {
	nf := s.nf
	if !s.Valid(nil, fx) {
		return false
	}
	if fx.B {
		ch := s.t.builtins[s.hook]
		f.Check(&nf.gen, fx.N)
		f.Defer(&ch.Packets, 1, &ch.Bytes, fx.M)
		return true
	}
	sl := fx.Ref.(*flowSlot)
	f.Check(&nf.gen, sl.gen)
	f.Defer(&nf.Evaluations, uint64(sl.evals), &nf.flowHits, 1)
	for _, k := range sl.ctrs[:sl.n] {
		f.Defer(&k.packets, 1, &k.bytes, fx.M)
	}
	if sl.policy {
		ch := s.t.builtins[s.hook]
		f.Defer(&ch.Packets, 1, &ch.Bytes, fx.M)
	}
	f.SetMark(sl.mark)
	return true
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

// AlwaysValid tells the fast path not to ask Valid (datapath.AlwaysValid).
func (s *natStage) AlwaysValid() {}

// Apply rewrites p with the connection's binding.
func (s *natStage) Apply(_ *datapath.Walk, p *datapath.Packet, fx *datapath.Effect) {
	fx.Ref.(*conntrack.Entry).ManipPacket(p, conntrack.CTInfo(fx.U), s.manip)
}
