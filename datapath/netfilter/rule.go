package netfilter

import (
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// Rule is one compiled rule (struct ipt_entry): the IP part, the matches
// in order, and the target. A rule holds no counters: they belong to the
// namespace (Chain.RuleCounters), so that a compiled rule is only what the
// rule text says.
type Rule struct {
	chain *Chain

	src, smsk, dst, dmsk uint32
	invSrc, invDst       bool
	in, out              string
	inWild, outWild      bool
	invIn, invOut        bool
	proto                uint8
	invProto             bool
	frag, invFrag        bool

	ms     []match
	target target
	// volatileMatch and volatileTarget keep walks through the rule out of
	// the flow cache (see classify).
	volatileMatch, volatileTarget bool
	// reads is the flow key fields the rule's result depends on.
	reads uint16
	// run is the indexed run of the chain this rule is in, or nil.
	run *indexRun
	// rest and eval are the rule compiled for evaluation (compile):
	// rest is set when the rule tests more than its source and
	// destination; eval holds its matches that can fail (ms without
	// comments, which always match).
	rest bool
	eval []match

	text string // "-A CHAIN ..." as iptables-save prints it
	line int    // line of the restore input it came from
}

// String returns the rule as iptables-save prints it, without counters.
func (r *Rule) String() string { return r.text }

// Chain returns the chain the rule is in. For a rule of a Shared ruleset
// that is the shared chain, which holds no namespace's counters: read
// them from the namespace's Table.Chain(name). (A rule a patched ruleset
// keeps from the one before is in both rulesets' chains of that name: it
// names the first's.)
func (r *Rule) Chain() *Chain { return r.chain }

// counter is a rule's or a policy's packet and byte count (struct
// xt_counters).
type counter struct{ packets, bytes uint64 }

// add counts one packet of plen bytes.
func (k *counter) add(plen uint64) {
	k.packets++
	k.bytes += plen
}

type targetKind uint8

const (
	tAccept targetKind = iota + 1
	tDrop
	tReturn
	tJump
	tGoto
	tReject
	tDNAT
	tSNAT
	tMasquerade
	tMark
	tLog
)

type target struct {
	kind       targetKind
	name       string // target or chain name
	chain      *Chain
	rejectCode uint8
	tcpReset   bool
	nat        conntrack.NATRange
	mark, mask uint32
	logPrefix  string
	logLevel   int
	logFlags   []string
	opts       string // saved option text
}

func ifaceMatch(d *datapath.Device, name string, wild bool) bool {
	if d == nil {
		return false
	}
	if wild {
		return len(d.Name) >= len(name) && d.Name[:len(name)] == name
	}
	return d.Name == name
}

// matches is ipt_do_table's ip_packet_match followed by the matches.
// runChain tests the addresses itself and calls matchRest.
func (r *Rule) matches(c *evalCtx) bool {
	if (c.src&r.smsk != r.src) != r.invSrc || (c.dst&r.dmsk != r.dst) != r.invDst {
		return false
	}
	return !r.rest || r.matchRest(c)
}

// matchRest is the rule's test past the addresses: the rest of the IP
// part, then the matches in order. A walk that evaluates a volatile match
// is not cached.
func (r *Rule) matchRest(c *evalCtx) bool {
	if r.in != "" && ifaceMatch(c.in, r.in, r.inWild) == r.invIn {
		return false
	}
	if r.out != "" && ifaceMatch(c.out, r.out, r.outWild) == r.invOut {
		return false
	}
	if r.proto != 0 && (c.proto == r.proto) == r.invProto {
		return false
	}
	if r.frag && c.frag == r.invFrag {
		return false
	}
	if r.volatileMatch && c.rec.on {
		c.rec.uncacheable = true
	}
	for _, m := range r.eval {
		if !m.match(c) {
			return false
		}
	}
	return true
}

// compile prepares r for evaluation (rest, eval). It runs when the rule
// is committed; a rule copied from a compiled one is compiled.
func (r *Rule) compile() {
	n := 0
	for _, m := range r.ms {
		if _, ok := m.(*commentMatch); !ok {
			n++
		}
	}
	r.eval = nil
	if n > 0 {
		r.eval = make([]match, 0, n)
		for _, m := range r.ms {
			if _, ok := m.(*commentMatch); !ok {
				r.eval = append(r.eval, m)
			}
		}
	}
	r.rest = r.in != "" || r.out != "" || r.proto != 0 || r.frag || r.eval != nil
}

// match is a compiled -m match.
type match interface {
	name() string
	// option parses one option; it returns false if the option is not
	// this match's.
	option(opt string, inv bool, a *args) (bool, error)
	// check validates the match once the whole rule is parsed.
	check(r *Rule) error
	save(b []byte) []byte
	match(c *evalCtx) bool
}

// portRange is a --sport/--dport value.
type portRange struct{ lo, hi uint16 }

func (p portRange) set() bool         { return p.lo != 0 || p.hi != 0xffff }
func (p portRange) has(v uint16) bool { return v >= p.lo && v <= p.hi }

// tcpMatch is -m tcp / -m udp (xt_tcpudp) and -m sctp (xt_sctp, ports
// only: --chunk-types is not modelled).
type tcpMatch struct {
	udp                bool
	sctp               bool
	sport, dport       portRange
	invSport, invDport bool
	flgMask, flgCmp    uint8
	invFlags           bool
	invOption          bool
	option8            uint8
}

func newTCPMatch(udp bool) *tcpMatch {
	return &tcpMatch{udp: udp, sport: portRange{0, 0xffff}, dport: portRange{0, 0xffff}}
}

func newSCTPMatch() *tcpMatch {
	return &tcpMatch{sctp: true, sport: portRange{0, 0xffff}, dport: portRange{0, 0xffff}}
}

func (m *tcpMatch) name() string {
	switch {
	case m.udp:
		return "udp"
	case m.sctp:
		return "sctp"
	}
	return "tcp"
}

func (m *tcpMatch) match(c *evalCtx) bool {
	if c.frag || !c.l4ok {
		return false
	}
	if m.sport.has(c.sport) == m.invSport || m.dport.has(c.dport) == m.invDport {
		return false
	}
	if m.flgMask != 0 && (c.tcpFlags&m.flgMask == m.flgCmp) == m.invFlags {
		return false
	}
	return true
}

// commentMatch is -m comment: it always matches.
type commentMatch struct{ text string }

func (m *commentMatch) name() string          { return "comment" }
func (m *commentMatch) match(c *evalCtx) bool { return true }

// icmpMatch is -m icmp --icmp-type.
type icmpMatch struct {
	typ            uint8
	codeLo, codeHi uint8
	inv            bool
	set            bool
}

func (m *icmpMatch) name() string { return "icmp" }
func (m *icmpMatch) match(c *evalCtx) bool {
	if c.frag || !c.l4ok {
		return false
	}
	ok := m.typ == 0xff || (c.icmpType == m.typ && c.icmpCode >= m.codeLo && c.icmpCode <= m.codeHi)
	return ok != m.inv
}

// statisticMatch is -m statistic --mode random|nth.
type statisticMatch struct {
	nth        bool
	prob       uint32 // probability * 2^31, as the kernel stores it
	every, pkt uint32 // every is stored minus one, as the kernel does
	inv        bool
	count      uint32
	haveMode   bool
	haveProb   bool
	haveEvery  bool
}

func (m *statisticMatch) name() string { return "statistic" }
func (m *statisticMatch) match(c *evalCtx) bool {
	if m.nth {
		if m.count == m.every {
			m.count = 0
		} else {
			m.count++
		}
		return (m.count == m.pkt) != m.inv
	}
	// (get_random_u32() & 0x7FFFFFFF) < probability
	return c.w.Chance(float64(m.prob)/(1<<31)) != m.inv
}

// markMatch is -m mark --mark value[/mask].
type markMatch struct {
	mark, mask uint32
	inv        bool
	set        bool
}

func (m *markMatch) name() string { return "mark" }
func (m *markMatch) match(c *evalCtx) bool {
	return (c.p.Mark&m.mask == m.mark) != m.inv
}

// Conntrack state bits for --ctstate (XT_CONNTRACK_STATE_*).
const (
	stInvalid     = 1 << 0
	stEstablished = 1 << 1 // XT_STATE_BIT(IP_CT_ESTABLISHED)
	stRelated     = 1 << 2
	stNew         = 1 << 3
	stUntracked   = 1 << 4
	stSNAT        = 1 << 5
	stDNAT        = 1 << 6
)

// conntrackMatch is -m conntrack --ctstate / --ctstatus.
type conntrackMatch struct {
	states, status      uint16
	invState, invStatus bool
	hasState, hasStatus bool
}

func (m *conntrackMatch) name() string { return "conntrack" }
func (m *conntrackMatch) match(c *evalCtx) bool {
	if m.hasState {
		var bit uint16
		if c.ct == nil {
			bit = stInvalid
		} else {
			switch c.ctinfo.Base() {
			case conntrack.New:
				bit = stNew
			case conntrack.Related:
				bit = stRelated
			default:
				bit = stEstablished
			}
			if c.ct.Status&conntrack.StatusSrcNAT != 0 {
				bit |= stSNAT
			}
			if c.ct.Status&conntrack.StatusDstNAT != 0 {
				bit |= stDNAT
			}
		}
		if (bit&m.states != 0) == m.invState {
			return false
		}
	}
	if m.hasStatus {
		if c.ct == nil {
			return false
		}
		if (uint16(c.ct.Status)&m.status != 0) == m.invStatus {
			return false
		}
	}
	return true
}

// Address types (RTN_*), as -m addrtype names them.
var rtnNames = []string{"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE"}

const (
	rtnUnicast   = 1
	rtnLocal     = 2
	rtnBroadcast = 3
	rtnMulticast = 5
)

// addrtypeMatch is -m addrtype (revision 1).
type addrtypeMatch struct {
	src, dst          uint16
	invSrc, invDst    bool
	limitIn, limitOut bool
}

func (m *addrtypeMatch) name() string { return "addrtype" }

// addrType is inet_dev_addr_type: broadcast and multicast by value, then
// the local table (an address of the namespace, or 127/8, is LOCAL; a
// subnet broadcast is BROADCAST), else UNICAST. With dev, a local address
// counts only if it is on dev.
func (m *addrtypeMatch) addrType(ns *datapath.Netns, a uint32, dev *datapath.Device, limit bool) int {
	if a == 0 || a == 0xffffffff {
		return rtnBroadcast
	}
	if a>>28 == 0xe {
		return rtnMulticast
	}
	if a>>24 == 127 {
		if !limit || (dev != nil && dev.Kind == datapath.KindLoopback) {
			return rtnLocal
		}
		return rtnUnicast
	}
	b := [4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}
	if ns.IsLocal(b) {
		if !limit {
			return rtnLocal
		}
		for _, ad := range ns.Addrs() {
			if ad.Dev == dev && ad.Prefix.Addr().As4() == b {
				return rtnLocal
			}
		}
		return rtnUnicast
	}
	if !limit {
		// The local table's broadcast routes, one map lookup (a node in
		// IPVS mode holds thousands of /32 Service addresses).
		if ns.IsBroadcast(b) {
			return rtnBroadcast
		}
		return rtnUnicast
	}
	for _, ad := range ns.Addrs() {
		bits := ad.Prefix.Bits()
		if bits >= 31 || (limit && ad.Dev != dev) {
			continue
		}
		p := ad.Prefix.Addr().As4()
		if be32(p[:])|^uint32(0)>>bits == a {
			return rtnBroadcast
		}
	}
	return rtnUnicast
}

func (m *addrtypeMatch) match(c *evalCtx) bool {
	var dev *datapath.Device
	if m.limitIn {
		dev = c.in
	} else if m.limitOut {
		dev = c.out
	}
	limit := m.limitIn || m.limitOut
	if m.src != 0 && (m.src&(1<<m.addrType(c.t.nf.ns, c.src, dev, limit)) != 0) == m.invSrc {
		return false
	}
	if m.dst != 0 && (m.dst&(1<<m.addrType(c.t.nf.ns, c.dst, dev, limit)) != 0) == m.invDst {
		return false
	}
	return true
}

// multiportMatch is -m multiport (revision 1) --sports/--dports/--ports.
type multiportMatch struct {
	flags uint8 // 1 source, 2 destination, 3 either
	ports []portRange
	inv   bool
}

func (m *multiportMatch) name() string { return "multiport" }
func (m *multiportMatch) match(c *evalCtx) bool {
	if c.frag || !c.l4ok || (c.proto != datapath.ProtoTCP && c.proto != datapath.ProtoUDP && c.proto != datapath.ProtoSCTP) {
		return false
	}
	for _, p := range m.ports {
		if (m.flags&1 != 0 && p.has(c.sport)) || (m.flags&2 != 0 && p.has(c.dport)) {
			return !m.inv
		}
	}
	return m.inv
}

// Recent check modes (XT_RECENT_*).
const (
	recentCheck  = 1 << 0
	recentSet    = 1 << 1
	recentUpdate = 1 << 2
	recentRemove = 1 << 3
	recentTTL    = 1 << 4
	recentReap   = 1 << 5
)

// ipPktListTot is xt_recent's ip_pkt_list_tot (stamps kept per address);
// ipListTot is ip_list_tot (addresses per list).
const (
	ipPktListTot = 20
	ipListTot    = 200
)

type recentEntry struct {
	addr    uint32
	stamps  [ipPktListTot]time.Duration
	n, idx  int
	lastUse uint64
}

// recentTable is one xt_recent list (/proc/net/xt_recent/NAME).
type recentTable struct {
	m   map[uint32]*recentEntry
	seq uint64
}

// recentMatch is -m recent (revision 1).
type recentMatch struct {
	mode    uint8
	seconds uint32
	hits    uint32
	name_   string
	mask    uint32
	dest    bool
	inv     bool
	table   *recentTable
	nf      *Netfilter
}

func (m *recentMatch) name() string { return "recent" }

func (t *recentTable) lru() *recentEntry {
	var o *recentEntry
	for _, e := range t.m {
		if o == nil || e.lastUse < o.lastUse {
			o = e
		}
	}
	return o
}

func (t *recentTable) update(e *recentEntry, now time.Duration) {
	e.idx %= ipPktListTot
	e.stamps[e.idx] = now
	e.idx++
	if e.idx > e.n {
		e.n = e.idx
	}
	t.seq++
	e.lastUse = t.seq
}

// match is recent_mt.
func (m *recentMatch) match(c *evalCtx) bool {
	t := m.table
	now := c.w.Now()
	a := c.src
	if m.dest {
		a = c.dst
	}
	a &= m.mask
	ret := m.inv
	e := t.m[a]
	if e == nil {
		if m.mode&recentSet == 0 {
			return ret
		}
		if len(t.m) >= ipListTot {
			delete(t.m, t.lru().addr)
		}
		e = &recentEntry{addr: a}
		t.m[a] = e
		t.update(e, now)
		return !ret
	}
	switch {
	case m.mode&recentSet != 0:
		ret = !ret
	case m.mode&recentRemove != 0:
		delete(t.m, a)
		return !ret
	case m.mode&(recentCheck|recentUpdate) != 0:
		since := now - time.Duration(m.seconds)*time.Second
		hits := uint32(0)
		for i := 0; i < e.n; i++ {
			if m.seconds != 0 && e.stamps[i] < since {
				continue
			}
			hits++
			if m.hits == 0 || hits >= m.hits {
				ret = !ret
				break
			}
		}
		if m.mode&recentReap != 0 {
			if o := t.lru(); o != nil && o != e && o.stamps[(o.idx+ipPktListTot-1)%ipPktListTot] < since {
				delete(t.m, o.addr)
			}
		}
	}
	if m.mode&recentSet != 0 || (m.mode&recentUpdate != 0 && ret) {
		t.update(e, now)
	}
	return ret
}
