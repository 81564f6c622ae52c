// Package netfilter models iptables (the x_tables IPv4 engine) on a
// datapath.Netns: the raw, mangle, nat and filter tables with their
// built-in chains registered on the netfilter hooks at the kernel's
// priorities, user chains, policies, the matches and targets kube-proxy and
// the CNI plugins use, per-rule counters, and iptables-save /
// iptables-restore text that round-trips the way the real tools print it.
//
// Rules are parsed once into a compiled form (addresses as masked uint32,
// matches as small structs); evaluating them does not parse, format or
// allocate unless the packet is traced. Rules run in order, like the
// kernel's ipt_do_table, and every rule evaluation is counted so that a
// benchmark can report rules per packet.
//
// The backend modelled is iptables-nft (iptables 1.8.x "(nf_tables)"), the
// one Debian, Ubuntu and kubeadm nodes run behind the iptables name: the
// rule text and iptables-save output are the same as iptables-legacy's,
// but the ruleset is validated by nf_tables when it is loaded. Chains
// nested deeper than NFTJumpStackSize are refused then, with
// iptables-nft-restore's "RULE_APPEND failed (Too many links)", never
// dropped at walk time. Errors keep iptables-restore's
// "iptables-restore: line N failed" frame so they name the rule.
package netfilter

import (
	"slices"
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/ipset"
	"github.com/kubewalk/kubewalk/datapath/route"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

// Table names.
const (
	Raw    = "raw"
	Mangle = "mangle"
	NAT    = "nat"
	Filter = "filter"
)

// tableDefs lists each table's built-in chains (by hook) and the priority
// its hooks are registered at (iptable_raw, iptable_mangle, iptable_nat,
// iptable_filter).
var tableDefs = []struct {
	name  string
	hooks []datapath.Hook
}{
	{Raw, []datapath.Hook{datapath.Prerouting, datapath.Output}},
	{Mangle, []datapath.Hook{datapath.Prerouting, datapath.Input, datapath.Forward, datapath.Output, datapath.Postrouting}},
	{NAT, []datapath.Hook{datapath.Prerouting, datapath.Input, datapath.Output, datapath.Postrouting}},
	{Filter, []datapath.Hook{datapath.Input, datapath.Forward, datapath.Output}},
}

func hookPriority(table string, h datapath.Hook) int {
	switch table {
	case Raw:
		return datapath.PriorityRaw
	case Mangle:
		return datapath.PriorityMangle
	case NAT:
		if h == datapath.Prerouting || h == datapath.Output {
			return datapath.PriorityNATDst
		}
		return datapath.PriorityNATSrc
	}
	return datapath.PriorityFilter
}

// Verdict is a chain policy.
type Verdict uint8

// Policies a built-in chain can have.
const (
	Accept Verdict = iota
	DropPolicy
)

// String returns the policy as iptables-save prints it.
func (v Verdict) String() string {
	if v == DropPolicy {
		return "DROP"
	}
	return "ACCEPT"
}

// Chain is a built-in or user-defined chain of one namespace's table.
// Built-in chains have a policy and policy counters (how many packets fell
// off the end). The chain holds its rules' counters, one per rule in rule
// order, as the kernel keeps them per rule of the namespace's table.
type Chain struct {
	Name    string
	Builtin bool
	Hook    datapath.Hook // for built-in chains
	Policy  Verdict
	// Packets and Bytes count packets that took the policy.
	Packets, Bytes uint64
	rules          []*Rule
	// ctr holds rules[i]'s counters at ctr[i]; nil while every one is zero
	// (most of kube-proxy's chains never see a packet).
	ctr []counter
	// shared marks a chain of a Shared ruleset (its counters are then in
	// each namespace's view of it), with whether the ruleset that made
	// it had loops; view is, for a namespace's view, the shared chain it
	// shows.
	shared *sharedMark
	view   *Chain
	// reads is what the rules reachable from the chain read (key fields,
	// see reach), valid while readsGen is the namespace's ruleset
	// generation plus one; for a chain of a Shared ruleset, whose rules
	// and targets never change, once readsGen is set at all.
	reads    uint16
	readsGen uint64

	// For a chain of a Shared ruleset, its summary (summarized once
	// computed): allowed is the hooks from which every target the chain
	// reaches may be used (translate_table's check), height the most
	// nested jumps below it. It depends on the chain and those below it
	// only, the same in every ruleset holding the chain.
	allowed    uint8
	height     int
	summarized bool
}

// Rules returns the chain's rules in order. The slice must not be modified.
func (c *Chain) Rules() []*Rule { return c.rules }

// RuleCounters returns the packet and byte counters of the chain's i-th
// rule (0-based), what iptables-save -c prints before it. c must be a
// chain as Table.Chain or Table.Chains return it (a namespace's view of a
// shared chain holds the namespace's counters).
func (c *Chain) RuleCounters(i int) (packets, bytes uint64) {
	if c.ctr == nil {
		return 0, 0
	}
	return c.ctr[i].packets, c.ctr[i].bytes
}

// counter returns the counters of the chain's i-th rule, allocating the
// chain's counters when the first of its rules matches.
func (c *Chain) counter(i int) *counter {
	if c.ctr == nil {
		c.ctr = make([]counter, len(c.rules))
	}
	return &c.ctr[i]
}

// Table is one iptables table in a namespace.
type Table struct {
	Name string
	// chains are the namespace's own chains; base, when set, holds the
	// others (a Shared ruleset, no name in both), and views the
	// namespace's counters of base's chains.
	chains map[string]*Chain
	base   *Shared
	views  map[*Chain]*Chain
	// reach memoizes what LoadShared checks of the namespace's own
	// chains (nil once they change). (Beside chains, base and views:
	// a load of thousands of nodes' tables reads the four of them from
	// one cache line.)
	reach    *ownReach
	builtins [5]*Chain // by hook
	loaded   bool
	nf       *Netfilter
	// vmemo remembers the last views of shared chains the walk counted
	// a match in, while the ruleset generation is vgen (every change to
	// views bumps it), so that counting one is not a map lookup.
	vmemo [4]struct{ sc, v *Chain }
	vgen  uint64
	vnext uint8
}

// viewOf is t.view(sc) through vmemo.
func (t *Table) viewOf(sc *Chain) *Chain {
	if t.vgen != t.nf.gen {
		t.vmemo, t.vgen = [4]struct{ sc, v *Chain }{}, t.nf.gen
	}
	for i := range t.vmemo {
		if t.vmemo[i].sc == sc {
			return t.vmemo[i].v
		}
	}
	v := t.view(sc)
	t.vmemo[t.vnext&3] = struct{ sc, v *Chain }{sc, v}
	t.vnext++
	return v
}

// Chain returns the chain named name, or nil, its counters and its
// rules' as the walks so far left them (settled: Evaluations).
func (t *Table) Chain(name string) *Chain {
	t.nf.settle()
	if c := t.chains[name]; c != nil || t.base == nil {
		return c
	}
	if sc := t.base.chains[name]; sc != nil {
		return t.view(sc)
	}
	return nil
}

// Chains returns the chains in iptables-save order: built-in chains in hook
// order, then user chains sorted by name (libiptc keeps them sorted).
func (t *Table) Chains() []*Chain {
	t.nf.settle()
	cs := sortedChains(t.chains)
	if t.base == nil {
		return cs
	}
	for _, name := range t.base.names {
		cs = append(cs, t.view(t.base.chains[name]))
	}
	n := 0
	for n < len(cs) && cs[n].Builtin {
		n++
	}
	slices.SortFunc(cs[n:], func(a, b *Chain) int { return strings.Compare(a.Name, b.Name) })
	return cs
}

// newTable returns table name of nf with its built-in chains, or nil for
// an unknown name.
func newTable(nf *Netfilter, name string) *Table {
	for _, d := range tableDefs {
		if d.name != name {
			continue
		}
		t := &Table{Name: d.name, chains: map[string]*Chain{}, nf: nf}
		for _, h := range d.hooks {
			c := &Chain{Name: h.String(), Builtin: true, Hook: h}
			t.chains[c.Name] = c
			t.builtins[h] = c
		}
		return t
	}
	return nil
}

// Netfilter is the iptables state of one network namespace.
type Netfilter struct {
	ns     *datapath.Netns
	ct     *conntrack.Table
	tables map[string]*Table
	order  []string // tables in the order they were first loaded
	recent map[string]*recentTable
	sets   *ipset.Registry
	ipvs   IPVSLookup
	// Evaluations counts rules evaluated (matched or not) over all packets:
	// divide by packets for rules/packet. Like the rule and chain
	// counters, it may lag the fast path's replays, whose increments
	// the datapath defers (datapath.Flat.Defer): read it through
	// RulesEvaluated, or after Save, Table.Chain or Table.Chains (which
	// settle them) with no walk in between.
	Evaluations uint64
	ctx         evalCtx
	// gen is the ruleset generation: every commit bumps it, invalidating
	// the flow cache.
	gen uint64
	// flowHits counts walks replayed from the flow cache (for tests);
	// stamps numbers the walks stored in it.
	flowHits, stamps uint64
	// natLookups are the nat-type tables consulted at each hook, in
	// priority order; the entry with a nil lookup is iptable_nat itself.
	natLookups [5][]natLookup
	// checked memoizes Check: the rule text iptables-save prints for a
	// rule given as arguments, so that kube-proxy's jump rules, checked
	// at every full sync, are parsed once per namespace, or once for all
	// the namespaces sharing one CheckMemo (ShareChecks).
	checked map[string]checkedRule
	// edits counts the restores and commands that changed a table
	// (Edits).
	edits uint64
	// filterT and natT are tables[Filter] and tables[NAT], which
	// kube-proxy's syncs of thousands of nodes look up (no map probe).
	filterT, natT *Table
	// plans is LoadShared's scratch (empty between loads).
	plans []loadPlan
}

// checkedRule is what parsing one Check's arguments gave: the rule's
// text and the user chain it jumps to ("" for none).
type checkedRule struct{ text, target string }

// checkedMax bounds the Check memo.
const checkedMax = 64

// NATLookup is a nat-type table of another packet filter (an nftables nat
// base chain) sharing the kernel's NAT core with iptable_nat. The NAT core
// (nf_nat_inet_fn) consults every nat table registered on a hook in
// priority order, for the first packet of a connection, until one sets up
// a binding; only then, or after all, does it fall back to a null binding.
// NATLookup evaluates the table for p and manipulation m; a verdict other
// than Continue ends the hook (the lookup dropped or took the packet).
type NATLookup interface {
	NATLookup(w *datapath.Walk, p *datapath.Packet, m conntrack.Manip) datapath.Verdict
}

type natLookup struct {
	prio int
	name string
	l    NATLookup
}

// RegisterNAT adds l to the NAT core at hook h with priority prio, after
// the lookups registered with the same priority before it (as
// nf_hook_entries_grow orders them). name identifies it for UnregisterNAT.
func (nf *Netfilter) RegisterNAT(h datapath.Hook, prio int, name string, l NATLookup) {
	ls := nf.natLookups[h]
	i := len(ls)
	for j, x := range ls {
		if x.prio > prio {
			i = j
			break
		}
	}
	ls = append(ls, natLookup{})
	copy(ls[i+1:], ls[i:])
	ls[i] = natLookup{prio: prio, name: name, l: l}
	nf.natLookups[h] = ls
}

// UnregisterNAT removes the lookup registered at h as name.
func (nf *Netfilter) UnregisterNAT(h datapath.Hook, name string) {
	for i, x := range nf.natLookups[h] {
		if x.name == name && x.l != nil {
			nf.natLookups[h] = append(nf.natLookups[h][:i], nf.natLookups[h][i+1:]...)
			return
		}
	}
}

// Install creates the four tables on ns and registers their hooks at the
// kernel priorities (raw -300, mangle -150, nat -100 at PREROUTING and
// OUTPUT and +100 at INPUT and POSTROUTING, filter 0). NAT needs
// connection tracking: if ct is nil, Install installs a conntrack table
// with the default configuration first (as loading iptable_nat loads
// nf_conntrack). Do not pass nil if conntrack is already installed on ns.
func Install(ns *datapath.Netns, ct *conntrack.Table) *Netfilter {
	if ct == nil {
		ct = conntrack.Install(ns, conntrack.Config{})
	}
	nf := &Netfilter{ns: ns, ct: ct, tables: map[string]*Table{}, recent: map[string]*recentTable{}}
	for _, d := range tableDefs {
		t := newTable(nf, d.name)
		for _, h := range d.hooks {
			var s datapath.Stage
			if d.name == NAT {
				m := conntrack.ManipDst
				if h == datapath.Input || h == datapath.Postrouting {
					m = conntrack.ManipSrc
				}
				s = &natStage{tableHook: tableHook{nf: nf, t: t, hook: h}, manip: m}
				nf.natLookups[h] = []natLookup{{prio: hookPriority(d.name, h), name: "iptables"}}
			} else {
				s = &hookStage{tableHook{nf: nf, t: t, hook: h}}
			}
			ns.AddHookStage(h, "iptables/"+d.name, hookPriority(d.name, h), s)
		}
		nf.tables[d.name] = t
		switch d.name {
		case Filter:
			nf.filterT = t
		case NAT:
			nf.natT = t
		}
		nf.syncPassive(t)
	}
	return nf
}

// syncPassive makes the hooks of t whose built-in chain has no rules and
// policy ACCEPT count packets on the policy counter without calling the
// table's stage (what the stage would do, see hookStage.Process), and the
// others call it. Every change to t's chains (commit) must call it.
func (nf *Netfilter) syncPassive(t *Table) {
	if t.Name == NAT || nf.ns == nil {
		return // the nat stage sets up bindings even with no rules; a ruleset being compiled has no hooks
	}
	for h, c := range t.builtins {
		if c == nil {
			continue
		}
		if len(c.rules) == 0 && c.Policy == Accept {
			nf.ns.SetHookPassive(datapath.Hook(h), "iptables/"+t.Name, &c.Packets, &c.Bytes)
		} else {
			nf.ns.SetHookPassive(datapath.Hook(h), "iptables/"+t.Name, nil, nil)
		}
	}
}

// Netns returns the namespace.
func (nf *Netfilter) Netns() *datapath.Netns { return nf.ns }

// Conntrack returns the connection tracking table NAT uses.
func (nf *Netfilter) Conntrack() *conntrack.Table { return nf.ct }

// Table returns the table named name (raw, mangle, nat, filter) or nil.
func (nf *Netfilter) Table(name string) *Table {
	switch {
	case name == NAT && nf.natT != nil:
		return nf.natT
	case name == Filter && nf.filterT != nil:
		return nf.filterT
	}
	return nf.tables[name]
}

// verdict of a chain traversal.
type verdict uint8

const (
	vContinue verdict = iota // fell off the end or RETURN
	vAccept
	vDrop
	vReject
)

// evalCtx is what matches look at: the packet's headers parsed once per
// table traversal. It lives in the Netfilter so that passing it to match
// methods allocates nothing.
type evalCtx struct {
	w        *datapath.Walk
	p        *datapath.Packet
	t        *Table
	hook     datapath.Hook
	src, dst uint32
	proto    uint8
	frag     bool
	l4ok     bool // ports (or ICMP type) valid
	sport    uint16
	dport    uint16
	tcpFlags uint8
	icmpType uint8
	icmpCode uint8
	in, out  *datapath.Device
	ct       *conntrack.Entry
	ctinfo   conntrack.CTInfo
	plen     uint64
	nat      conntrack.Manip
	// set by the terminal rule
	rule *Rule
	// rec records the walk for the flow cache when rec.on is set.
	rec flowRec
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func (c *evalCtx) init(nf *Netfilter, w *datapath.Walk, p *datapath.Packet, t *Table, h datapath.Hook) bool {
	// Every field is set here, one by one: clearing the whole context
	// (the flow record's counter array with it) cost more than the
	// parsing. rec.ctrs holds nothing past rec.n.
	c.w, c.p, c.t, c.hook = w, p, t, h
	c.rule, c.nat = nil, 0
	c.rec.on, c.rec.uncacheable, c.rec.policy, c.rec.n = false, false, false, 0
	c.in, c.out, c.ct, c.ctinfo = nil, nil, nil, 0
	if p.Len() < datapath.EthHdrLen+20 || p.EtherType() != 0x0800 {
		return false
	}
	ip := p.IPv4()
	h4 := (*[20]byte)(ip)
	ihl := int(h4[0]&0xf) * 4
	tot := int(h4[2])<<8 | int(h4[3])
	if ihl < 20 || ihl > len(ip) {
		return false
	}
	if tot > len(ip) || tot < ihl {
		tot = len(ip)
	}
	c.src = uint32(h4[12])<<24 | uint32(h4[13])<<16 | uint32(h4[14])<<8 | uint32(h4[15])
	c.dst = uint32(h4[16])<<24 | uint32(h4[17])<<16 | uint32(h4[18])<<8 | uint32(h4[19])
	c.proto = h4[9]
	c.plen = uint64(tot)
	c.frag = (uint16(h4[6])<<8|uint16(h4[7]))&0x1fff != 0
	c.l4ok, c.sport, c.dport, c.tcpFlags, c.icmpType, c.icmpCode = false, 0, 0, 0, 0, 0
	if !c.frag {
		l4 := ip[ihl:tot]
		switch c.proto {
		case datapath.ProtoTCP:
			if len(l4) >= 20 {
				t := (*[20]byte)(l4)
				c.sport, c.dport = uint16(t[0])<<8|uint16(t[1]), uint16(t[2])<<8|uint16(t[3])
				c.tcpFlags = t[13]
				c.l4ok = true
			}
		case datapath.ProtoUDP:
			if len(l4) >= 8 {
				u := (*[8]byte)(l4)
				c.sport, c.dport = uint16(u[0])<<8|uint16(u[1]), uint16(u[2])<<8|uint16(u[3])
				c.l4ok = true
			}
		case datapath.ProtoICMP:
			if len(l4) >= 4 {
				c.icmpType, c.icmpCode = l4[0], l4[1]
				c.l4ok = true
			}
		case datapath.ProtoSCTP:
			if len(l4) >= 12 { // the common header (xt_sctp reads it whole)
				u := (*[12]byte)(l4)
				c.sport, c.dport = uint16(u[0])<<8|uint16(u[1]), uint16(u[2])<<8|uint16(u[3])
				c.l4ok = true
			}
		}
	}
	switch h {
	case datapath.Prerouting, datapath.Input:
		c.in = p.InDev
	case datapath.Forward:
		c.in, c.out = p.InDev, p.OutDev
	case datapath.Output, datapath.Postrouting:
		c.out = p.OutDev
		if h == datapath.Postrouting && !p.Local {
			c.in = p.InDev
		}
	}
	c.ct, c.ctinfo = nf.ct.Get(p)
	return true
}

// ipLen is what init takes as the packet's length (plen) and whether
// init accepts the packet at all.
func ipLen(p *datapath.Packet) (uint64, bool) {
	if p.Len() < datapath.EthHdrLen+20 || p.EtherType() != 0x0800 {
		return 0, false
	}
	ip := p.IPv4()
	ihl := int(ip[0]&0xf) * 4
	tot := int(ip[2])<<8 | int(ip[3])
	if ihl < 20 || ihl > len(ip) {
		return 0, false
	}
	if tot > len(ip) || tot < ihl {
		tot = len(ip)
	}
	return uint64(tot), true
}

// runTable is ipt_do_table for one hook: it runs the built-in chain and
// applies the policy when the packet falls off its end.
func (nf *Netfilter) runTable(c *evalCtx) verdict {
	ch := c.t.builtins[c.hook]
	v := nf.runChain(c, ch, 0)
	if v == vContinue {
		c.rec.policy = true
		ch.Packets++
		ch.Bytes += c.plen
		if ch.Policy == DropPolicy {
			c.rule = nil
			return vDrop
		}
		return vAccept
	}
	return v
}

func (nf *Netfilter) runChain(c *evalCtx, ch *Chain, depth int) verdict {
	if depth >= NFTJumpStackSize {
		return vDrop // cannot happen: loops and deeper nesting are refused at load time
	}
	rules := ch.rules
	for i := 0; i < len(rules); i++ {
		r := rules[i]
		if run := r.run; run != nil {
			// An indexed run: the rules before the next one that
			// matches are evaluated (and counted) without a match.
			j := run.next(c, i)
			nf.Evaluations += uint64(j - i)
			if j == run.end {
				i = j - 1
				continue
			}
			i, r = j, rules[j]
		}
		nf.Evaluations++
		// ip_packet_match's addresses inline (most rules fail there),
		// the rest only for rules that have more (see compile).
		if (c.src&r.smsk != r.src) != r.invSrc || (c.dst&r.dmsk != r.dst) != r.invDst {
			continue
		}
		if r.rest && !r.matchRest(c) {
			continue
		}
		var k *counter
		if ch.shared == nil {
			k = ch.counter(i)
		} else {
			k = c.t.viewOf(ch).counter(i)
		}
		k.add(c.plen)
		if c.rec.on {
			if r.volatileTarget || c.rec.n == maxReplay {
				c.rec.uncacheable = true
			} else {
				c.rec.ctrs[c.rec.n] = k
				c.rec.n++
			}
		}
		if c.p.Trace != nil {
			nf.observe(c, c.t.Name+"/"+ch.Name, trace.Matched, r.text)
		}
		tg := &r.target
		switch tg.kind {
		case tAccept:
			return vAccept
		case tDrop:
			c.rule = r
			return vDrop
		case tReject:
			c.rule = r
			return vReject
		case tReturn:
			return vContinue
		case tJump:
			if v := nf.runChain(c, tg.chain, depth+1); v != vContinue {
				return v
			}
		case tGoto:
			return nf.runChain(c, tg.chain, depth+1)
		case tMark:
			c.p.Mark = (c.p.Mark &^ tg.mask) ^ tg.mark
		case tLog:
			if c.p.Trace != nil {
				nf.observe(c, c.t.Name+"/"+ch.Name, trace.Note, "LOG "+tg.logPrefix)
			}
		case tDNAT, tSNAT:
			if c.ct != nil {
				c.ct.SetupNAT(c.w, tg.nat, c.nat)
			}
			return vAccept
		case tMasquerade:
			if !nf.masquerade(c, tg) {
				c.rule = r
				return vDrop
			}
			return vAccept
		}
	}
	return vContinue
}

// masquerade is nf_nat_masquerade_ipv4: SNAT to the address the out device
// would use toward the next hop (inet_select_addr), with the rule's port
// range and flags. It fails, dropping the packet, if no device has an
// address to use.
func (nf *Netfilter) masquerade(c *evalCtx, tg *target) bool {
	if c.ct == nil {
		return true
	}
	out := c.p.OutDev
	if out == nil {
		return false
	}
	// inet_select_addr(out, nexthop, RT_SCOPE_UNIVERSE): an address of
	// the out device in the next hop's subnet, else its first primary
	// address, else another device's; none at all drops ("ate my IP
	// address").
	src, ok := nf.ns.SelectAddr(out, c.p.NextHop, route.ScopeUniverse)
	if !ok {
		return false
	}
	r := tg.nat
	r.Flags |= conntrack.MapIPs
	r.MinIP, r.MaxIP = src, src
	c.ct.SetupNAT(c.w, r, conntrack.ManipSrc)
	return true
}

func (nf *Netfilter) observe(c *evalCtx, stage string, a trace.Action, detail string) {
	o := trace.Observation{Node: nf.ns.Node, Netns: nf.ns.Name, Stage: stage, Action: a,
		Summary: c.p.Summary(), Detail: detail}
	if c.in != nil {
		o.Device = c.in.Name
	} else if c.out != nil {
		o.Device = c.out.Name
	}
	c.w.Observe(c.p, o)
}

// finish turns a table verdict into a stage verdict: DROP and REJECT
// record the rule (or policy) as the drop detail, REJECT answers first.
func (nf *Netfilter) finish(c *evalCtx, v verdict) datapath.Verdict {
	switch v {
	case vDrop, vReject:
	default:
		return datapath.VerdictContinue
	}
	w, p, r, t, hook := c.w, c.p, c.rule, c.t, c.hook
	reason := datapath.ReasonNetfilterDrop
	if v == vReject {
		reason = datapath.ReasonNetfilterReject
		// The answer goes out through OUTPUT, re-entering netfilter; the
		// context is not used after this point.
		if r.target.tcpReset {
			nf.ns.SendTCPReset(w, p)
		} else {
			nf.ns.SendICMPError(w, p, 3, r.target.rejectCode)
		}
	}
	if p.Trace == nil {
		return datapath.DropVerdict(reason)
	}
	stage, detail := t.Name+"/"+t.builtins[hook].Name, "policy DROP"
	if r != nil {
		stage, detail = t.Name+"/"+r.chain.Name, r.text
	}
	o := trace.Observation{Node: nf.ns.Node, Netns: nf.ns.Name, Stage: stage, Action: trace.Dropped,
		Summary: p.Summary(), Detail: detail, Reason: reason.String()}
	w.Observe(p, o)
	p.Release()
	return datapath.VerdictStolen
}

// tableHook is one table's registration at one hook, with its flow cache.
type tableHook struct {
	nf   *Netfilter
	t    *Table
	hook datapath.Hook
	// cache is the flow cache (flowcache.go), allocated on first use;
	// mask is the key fields the rules reachable from the hook's chain
	// read, as of ruleset generation maskGen-1, and kw its keyWords.
	cache   *[flowSlots]flowSlot
	mask    uint16
	kw      keyWords
	maskGen uint64
}

// hookStage runs a table (raw, mangle, filter) at one hook.
type hookStage struct{ tableHook }

var _ datapath.Stage = (*hookStage)(nil)

// Process runs the table's built-in chain for the hook. With no rules and
// policy ACCEPT it only counts the packet on the policy; the hook does
// that without calling it then (syncPassive).
func (s *hookStage) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	if len(s.t.builtins[s.hook].rules) == 0 && s.t.builtins[s.hook].Policy == Accept {
		s.t.builtins[s.hook].Packets++
		s.t.builtins[s.hook].Bytes += uint64(p.Len() - datapath.EthHdrLen)
		return datapath.VerdictContinue
	}
	c := &s.nf.ctx
	if p.Trace != nil {
		if !c.init(s.nf, w, p, s.t, s.hook) {
			return datapath.VerdictContinue
		}
		return s.nf.finish(c, s.nf.runTable(c))
	}
	var k flowKey
	sl, plen, ok := s.lookup(p, &k)
	if !ok {
		return datapath.VerdictContinue
	}
	if sl != nil {
		s.repeat(sl, p, plen)
		return datapath.VerdictContinue
	}
	c.init(s.nf, w, p, s.t, s.hook)
	return s.nf.finish(c, s.walk(c, &k))
}

// natStage is iptable_nat's hook (nf_nat_ipv4_fn): RELATED ICMP errors are
// translated; the first packet of a connection (ctstate NEW) traverses the
// nat table once per manipulation type, and a null binding is set up if no
// rule set one; then the connection's bindings are applied to the packet.
type natStage struct {
	tableHook
	manip conntrack.Manip
}

var _ datapath.Stage = (*natStage)(nil)

// Process applies NAT to p.
func (s *natStage) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	nf := s.nf
	e, info := nf.ct.Get(p)
	if e == nil {
		return datapath.VerdictContinue
	}
	if (info == conntrack.Established || info == conntrack.EstablishedReply) && e.Status&conntrack.StatusNATMask == 0 {
		// Most packets: a connection of its own, neither NATed nor
		// new, which nf_nat_packet leaves as it is.
		return datapath.VerdictContinue
	}
	// The flow before any rewrite, formatted only if there is one.
	var before conntrack.Tuple
	if p.Trace != nil {
		before, _ = conntrack.TupleOf(p)
	}
	switch info {
	case conntrack.Related, conntrack.RelatedReply:
		if p.IPv4().Protocol() == datapath.ProtoICMP {
			if e.TranslateICMPError(p, info, s.manip) && p.Trace != nil {
				nf.rewritten(w, p, s, "ICMP error translated ("+s.manip.String()+")", before)
			}
			return datapath.VerdictContinue
		}
		fallthrough
	case conntrack.New:
		if !e.NATDone(s.manip) {
			ls := nf.natLookups[s.hook]
			for i := range ls {
				l := &ls[i]
				if e.NATDone(s.manip) {
					break
				}
				if l.l != nil {
					if v := l.l.NATLookup(w, p, s.manip); v.Code != datapath.Continue {
						return v
					}
					continue
				}
				if ch := s.t.builtins[s.hook]; len(ch.rules) == 0 && ch.Policy == Accept {
					// An empty chain: its policy counts the packet, as
					// runTable would after init.
					if n, ok := ipLen(p); ok {
						ch.Packets++
						ch.Bytes += n
					}
					continue
				}
				c := &nf.ctx
				if p.Trace != nil {
					if c.init(nf, w, p, s.t, s.hook) {
						c.nat = s.manip
						if v := nf.runTable(c); v == vDrop || v == vReject {
							return nf.finish(c, v)
						}
					}
					continue
				}
				// A walk that set up no binding (the flow cache holds
				// no other) is repeatable.
				var k flowKey
				if sl, plen, ok := s.lookup(p, &k); !ok {
					continue
				} else if sl != nil {
					s.repeat(sl, p, plen)
					continue
				}
				c.init(nf, w, p, s.t, s.hook)
				c.nat = s.manip
				if v := s.walk(c, &k); v == vDrop || v == vReject {
					return nf.finish(c, v)
				}
			}
			if !e.NATDone(s.manip) {
				e.NullBinding(w, s.manip)
			}
		}
	}
	// ManipPacket's own first test, made here too: most connections have
	// no binding, and the call is not inlined.
	if e.Status&conntrack.StatusNATMask != 0 && e.ManipPacket(p, info, s.manip) && p.Trace != nil {
		what := s.manip.String()
		if info.Reply() {
			what = "un-" + conntrack.Manip(1-s.manip).String()
		}
		nf.rewritten(w, p, s, what, before)
	}
	return datapath.VerdictContinue
}

func flowOf(p *datapath.Packet) string {
	t, _ := conntrack.TupleOf(p)
	return t.Flow()
}

func (nf *Netfilter) rewritten(w *datapath.Walk, p *datapath.Packet, s *natStage, what string, before conntrack.Tuple) {
	w.Observe(p, trace.Observation{Node: nf.ns.Node, Netns: nf.ns.Name, Stage: "nat/" + s.hook.String(),
		Action: trace.Rewritten, Summary: p.Summary(), Detail: what,
		Before: before.Flow(), After: flowOf(p)})
}

// RulesEvaluated returns Evaluations with every increment the fast
// path's replays deferred applied.
func (nf *Netfilter) RulesEvaluated() uint64 {
	nf.settle()
	return nf.Evaluations
}

// settle applies the counter increments the datapath's fast path
// deferred (datapath.Flat.Defer): the replays of table walks count the
// rules' and chains' packets and bytes, Evaluations and the flow cache's
// hits only when something reads or replaces them, which every exported
// way to do so does first (Save, Restore, Exec, RestoreShared,
// LoadShared, Table.Chain, Table.Chains, RulesEvaluated).
func (nf *Netfilter) settle() {
	if nf.ns != nil {
		nf.ns.Engine().SettleCounters()
	}
}
