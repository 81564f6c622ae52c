package nftables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// vcode is a verdict code.
type vcode uint8

const (
	vNone vcode = iota // no verdict: next expression / rule
	vAccept
	vDrop
	vReject
	vReturn
	vJump
	vGoto
	vContinue
	vBreak // the rule does not match
)

// verdictVal is a verdict with its chain for jump and goto.
type verdictVal struct {
	code  vcode
	chain *Chain
	name  string
}

func (v verdictVal) String() string {
	switch v.code {
	case vAccept:
		return "accept"
	case vDrop:
		return "drop"
	case vReturn:
		return "return"
	case vContinue:
		return "continue"
	case vJump:
		return "jump " + v.name
	case vGoto:
		return "goto " + v.name
	}
	return "?"
}

// ctx is what expressions look at: the packet's headers parsed once per
// base chain.
type ctx struct {
	n        *NFTables
	w        *datapath.Walk
	p        *datapath.Packet
	hook     datapath.Hook
	src, dst uint32
	proto    uint8
	l4ok     bool
	sport    uint16
	dport    uint16
	plen     uint64
	ct       *conntrack.Entry
	ctinfo   conntrack.CTInfo
	nat      bool
	manip    conntrack.Manip
	verdict  verdictVal
	key      [16]byte
	// set by the terminal rule, for drop observations
	rule *Rule
	// chosen records the map element a lookup chose, for traces.
	chosen string
}

func (c *ctx) init(n *NFTables, w *datapath.Walk, p *datapath.Packet, h datapath.Hook) bool {
	*c = ctx{n: n, w: w, p: p, hook: h}
	if p.Len() < datapath.EthHdrLen+20 || p.EtherType() != 0x0800 {
		return false
	}
	ip := p.IPv4()
	ihl := int(ip[0]&0xf) * 4
	tot := int(ip[2])<<8 | int(ip[3])
	if ihl < 20 || ihl > len(ip) {
		return false
	}
	if tot > len(ip) || tot < ihl {
		tot = len(ip)
	}
	c.src, c.dst = be32(ip[12:16]), be32(ip[16:20])
	c.proto = ip[9]
	c.plen = uint64(tot)
	frag := (uint16(ip[6])<<8|uint16(ip[7]))&0x1fff != 0
	l4 := ip[ihl:tot]
	if !frag && (c.proto == datapath.ProtoTCP || c.proto == datapath.ProtoUDP || c.proto == 132) && len(l4) >= 4 {
		c.sport, c.dport = uint16(l4[0])<<8|uint16(l4[1]), uint16(l4[2])<<8|uint16(l4[3])
		c.l4ok = true
	}
	if n.ct != nil {
		c.ct, c.ctinfo = n.ct.Get(p)
	}
	return true
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// expr is one expression of a rule. eval returns false when the rule stops
// matching (NFT_BREAK); statements set c.verdict.
type expr interface {
	eval(c *ctx) bool
	String() string
}

// sel is a payload, meta, ct, fib or numgen selector: what a comparison
// or lookup reads.
type sel uint8

const (
	sIPSaddr sel = iota + 1
	sIPDaddr
	sIPProto
	sL4Proto
	sTHSport
	sTHDport
	sTCPSport
	sTCPDport
	sUDPSport
	sUDPDport
	sMark
	sCTState
	sFibSaddr
	sFibDaddr
)

var selNames = [...]string{sIPSaddr: "ip saddr", sIPDaddr: "ip daddr", sIPProto: "ip protocol", sL4Proto: "meta l4proto",
	sTHSport: "th sport", sTHDport: "th dport", sTCPSport: "tcp sport", sTCPDport: "tcp dport", sUDPSport: "udp sport",
	sUDPDport: "udp dport", sMark: "meta mark", sCTState: "ct state", sFibSaddr: "fib saddr type", sFibDaddr: "fib daddr type"}

func (s sel) String() string { return selNames[s] }

func (s sel) dtype() dtype {
	switch s {
	case sIPSaddr, sIPDaddr:
		return tIPv4
	case sIPProto, sL4Proto:
		return tProto
	case sTHSport, sTHDport, sTCPSport, sTCPDport, sUDPSport, sUDPDport:
		return tService
	case sMark:
		return tMark
	case sCTState:
		return tCTState
	case sFibSaddr, sFibDaddr:
		return tFibAddr
	}
	return tInvalid
}

// ct state bits (NF_CT_STATE_*_BIT).
const (
	ctInvalid     = 1
	ctEstablished = 2
	ctRelated     = 4
	ctNew         = 8
	ctUntracked   = 64
)

var ctStateNames = []struct {
	bit  uint32
	name string
}{{ctInvalid, "invalid"}, {ctEstablished, "established"}, {ctRelated, "related"}, {ctNew, "new"}, {ctUntracked, "untracked"}}

// fib address types (RTN_*).
const (
	rtnUnicast = 1
	rtnLocal   = 2
)

// get reads a selector; ok is false when the packet has no such field
// (no transport header for a port).
func (c *ctx) get(s sel) (uint32, bool) {
	switch s {
	case sIPSaddr:
		return c.src, true
	case sIPDaddr:
		return c.dst, true
	case sIPProto, sL4Proto:
		return uint32(c.proto), true
	case sTHSport:
		return uint32(c.sport), c.l4ok
	case sTHDport:
		return uint32(c.dport), c.l4ok
	case sTCPSport:
		return uint32(c.sport), c.l4ok && c.proto == datapath.ProtoTCP
	case sTCPDport:
		return uint32(c.dport), c.l4ok && c.proto == datapath.ProtoTCP
	case sUDPSport:
		return uint32(c.sport), c.l4ok && c.proto == datapath.ProtoUDP
	case sUDPDport:
		return uint32(c.dport), c.l4ok && c.proto == datapath.ProtoUDP
	case sMark:
		return c.p.Mark, true
	case sCTState:
		if c.ct == nil {
			return ctInvalid, true
		}
		switch c.ctinfo.Base() {
		case conntrack.New:
			return ctNew, true
		case conntrack.Related:
			return ctRelated, true
		}
		return ctEstablished, true
	case sFibSaddr, sFibDaddr:
		a := c.src
		if s == sFibDaddr {
			a = c.dst
		}
		if c.n.ns.IsLocal([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}) {
			return rtnLocal, true
		}
		return rtnUnicast, true
	}
	return 0, false
}

// formatValue prints a value of type t as nft lists it.
func formatValue(t dtype, v uint32) string {
	switch t {
	case tIPv4:
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
	case tProto:
		switch v {
		case 6:
			return "tcp"
		case 17:
			return "udp"
		case 1:
			return "icmp"
		case 132:
			return "sctp"
		}
		return strconv.Itoa(int(v))
	case tMark:
		return fmt.Sprintf("0x%08x", v)
	case tCTState:
		var names []string
		for _, s := range ctStateNames {
			if v&s.bit != 0 {
				names = append(names, s.name)
			}
		}
		return strings.Join(names, ",")
	case tFibAddr:
		if v == rtnLocal {
			return "local"
		}
		return "unicast"
	}
	return strconv.Itoa(int(v))
}

// cmp is `sel [& mask] [op] value` or `sel [!=] prefix`.
type cmp struct {
	s      sel
	neg    bool
	mask   uint32 // applied before comparing (prefix mask or & mask)
	binop  bool   // printed as `sel & mask == value`
	val    uint32
	prefix int // > 0: printed as value/prefix
	bitset bool
}

func (e *cmp) eval(c *ctx) bool {
	c.n.Evaluations++
	v, ok := c.get(e.s)
	if !ok {
		return false
	}
	var m bool
	if e.bitset {
		m = v&e.val != 0
	} else {
		m = v&e.mask == e.val
	}
	return m != e.neg
}

func (e *cmp) String() string {
	t := e.s.dtype()
	val := formatValue(t, e.val)
	if e.prefix > 0 {
		val += "/" + strconv.Itoa(e.prefix)
	}
	var b strings.Builder
	b.WriteString(e.s.String())
	if e.binop {
		b.WriteString(" & " + formatValue(t, e.mask))
		if e.neg {
			b.WriteString(" != ")
		} else {
			b.WriteString(" == ")
		}
		b.WriteString(val)
		return b.String()
	}
	if e.neg {
		b.WriteString(" !=")
	}
	b.WriteString(" " + val)
	return b.String()
}

// lookup is `sels [!=] @set` or `sels [!=] { ... }`.
type lookup struct {
	sels []sel
	neg  bool
	set  *Set
	name string
}

// selWidth is each selector's key width in bytes (its dtype's width),
// looked up once per selector instead of through two switches.
var selWidth = func() (w [sFibDaddr + 1]uint8) {
	for s := range w {
		w[s] = uint8(sel(s).dtype().width())
	}
	return w
}()

func (c *ctx) buildKey(sels []sel) ([]byte, bool) {
	n := 0
	for _, s := range sels {
		v, ok := c.get(s)
		if !ok {
			return nil, false
		}
		var w int
		if int(s) < len(selWidth) {
			w = int(selWidth[s])
		} else {
			w = s.dtype().width()
		}
		switch w {
		case 1:
			c.key[n] = byte(v)
			n++
		case 2:
			c.key[n], c.key[n+1] = byte(v>>8), byte(v)
			n += 2
		default:
			c.key[n], c.key[n+1], c.key[n+2], c.key[n+3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
			n += 4
		}
	}
	return c.key[:n], true
}

func (s *Set) find(c *ctx, key []byte) *Element {
	if s.interval {
		if len(key) != 4 {
			return nil
		}
		v := be32(key)
		for _, e := range s.prefixes {
			if v >= e.lo && v <= e.hi {
				return e
			}
		}
		return nil
	}
	e := s.elems[string(key)]
	if e != nil && e.expires != 0 && c.w != nil && c.w.Now() >= e.expires {
		return nil
	}
	return e
}

func (e *lookup) eval(c *ctx) bool {
	c.n.Evaluations++
	k, ok := c.buildKey(e.sels)
	if !ok {
		return false
	}
	return (e.set.find(c, k) != nil) != e.neg
}

func selsString(sels []sel) string {
	var p []string
	for _, s := range sels {
		p = append(p, s.String())
	}
	return strings.Join(p, " . ")
}

func (e *lookup) String() string {
	op := " "
	if e.neg {
		op = " != "
	}
	if e.set.anonymous {
		return selsString(e.sels) + op + e.set.inline()
	}
	return selsString(e.sels) + op + "@" + e.name
}

// vmap is `sels vmap @map` or `sels vmap { k : verdict, ... }`.
type vmap struct {
	sels []sel
	set  *Set
	name string
}

func (e *vmap) eval(c *ctx) bool {
	c.n.Evaluations++
	k, ok := c.buildKey(e.sels)
	if !ok {
		return false
	}
	el := e.set.find(c, k)
	if el == nil {
		return false
	}
	c.verdict = el.verdict
	if c.p.Trace != nil {
		c.chosen = "@" + e.name + " element " + el.keyText + " : " + el.verdict.String()
		if e.set.anonymous {
			c.chosen = "element " + el.keyText + " : " + el.verdict.String()
		}
	}
	return true
}

func (e *vmap) String() string {
	if e.set.anonymous {
		return selsString(e.sels) + " vmap " + e.set.inline()
	}
	return selsString(e.sels) + " vmap @" + e.name
}

// numgen is `numgen random mod N vmap { 0 : ..., ... }`.
type numgen struct {
	mod uint32
	set *Set
}

func (e *numgen) eval(c *ctx) bool {
	c.n.Evaluations++
	n := e.mod
	v := n - 1
	for i := uint32(0); i+1 < n; i++ {
		if c.w.Chance(1 / float64(n-i)) {
			v = i
			break
		}
	}
	k := c.key[:4]
	k[0], k[1], k[2], k[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	el := e.set.find(c, k)
	if el == nil {
		return false
	}
	c.verdict = el.verdict
	if c.p.Trace != nil {
		c.chosen = fmt.Sprintf("numgen random mod %d = %d : %s", n, v, el.verdict)
	}
	return true
}

func (e *numgen) String() string {
	return "numgen random mod " + strconv.Itoa(int(e.mod)) + " vmap " + e.set.inline()
}

// verdictStmt is accept, drop, return, continue, jump and goto.
type verdictStmt struct{ v verdictVal }

func (e *verdictStmt) eval(c *ctx) bool {
	c.n.Evaluations++
	c.verdict = e.v
	return true
}

func (e *verdictStmt) String() string { return e.v.String() }

// reject answers with ICMP port unreachable (the ip family's default) or
// the given ICMP code.
type reject struct {
	code uint8
	text string
}

func (e *reject) eval(c *ctx) bool {
	c.n.Evaluations++
	c.verdict = verdictVal{code: vReject}
	return true
}

func (e *reject) String() string { return e.text }

type counter struct{ packets, bytes uint64 }

func (e *counter) eval(c *ctx) bool {
	c.n.Evaluations++
	e.packets++
	e.bytes += c.plen
	return true
}

func (e *counter) String() string {
	return "counter packets " + strconv.FormatUint(e.packets, 10) + " bytes " + strconv.FormatUint(e.bytes, 10)
}

// markSet is `meta mark set meta mark | v`, `^ v`, `& v` or `set v`.
type markSet struct {
	op  byte // '|', '^', '&', '='
	val uint32
}

func (e *markSet) eval(c *ctx) bool {
	c.n.Evaluations++
	switch e.op {
	case '|':
		c.p.Mark |= e.val
	case '^':
		c.p.Mark ^= e.val
	case '&':
		c.p.Mark &= e.val
	default:
		c.p.Mark = e.val
	}
	return true
}

func (e *markSet) String() string {
	if e.op == '=' {
		return "meta mark set " + formatValue(tMark, e.val)
	}
	return "meta mark set meta mark " + string(e.op) + " " + formatValue(tMark, e.val)
}

// nat is dnat to, snat to and masquerade. They end the rule with accept.
type nat struct {
	kind  string // "dnat", "snat", "masquerade"
	addr  [4]byte
	port  uint16
	flags conntrack.NATFlags
	text  string
}

func (e *nat) eval(c *ctx) bool {
	c.n.Evaluations++
	if !c.nat || c.ct == nil {
		c.verdict = verdictVal{code: vAccept}
		return true
	}
	r := conntrack.NATRange{Flags: e.flags}
	manip := conntrack.ManipDst
	switch e.kind {
	case "dnat", "snat":
		r.Flags |= conntrack.MapIPs
		r.MinIP, r.MaxIP = e.addr, e.addr
		if e.port != 0 {
			r.Flags |= conntrack.ProtoSpecified
			r.MinPort, r.MaxPort = e.port, e.port
		}
		if e.kind == "snat" {
			manip = conntrack.ManipSrc
		}
	case "masquerade":
		manip = conntrack.ManipSrc
		src, ok := c.n.masqueradeSource(c.p)
		if !ok {
			c.verdict = verdictVal{code: vDrop}
			return true
		}
		r.Flags |= conntrack.MapIPs
		r.MinIP, r.MaxIP = src, src
	}
	if manip == c.manip {
		c.ct.SetupNAT(c.w, r, manip)
	}
	c.verdict = verdictVal{code: vAccept}
	return true
}

func (e *nat) String() string { return e.text }

// masqueradeSource is inet_select_addr for the out device toward the next
// hop, as nf_nat_masquerade_ipv4 chooses it.
func (n *NFTables) masqueradeSource(p *datapath.Packet) ([4]byte, bool) {
	out := p.OutDev
	if out == nil {
		return [4]byte{}, false
	}
	nh := be32(p.NextHop[:])
	var first [4]byte
	have := false
	for _, a := range n.ns.Addrs() {
		if a.Dev != out || !a.Prefix.Addr().Is4() {
			continue
		}
		a4 := a.Prefix.Addr().As4()
		if !have {
			first, have = a4, true
		}
		bits := a.Prefix.Bits()
		mask := uint32(0)
		if bits > 0 {
			mask = ^uint32(0) << (32 - bits)
		}
		if be32(a4[:])&mask == nh&mask {
			return a4, true
		}
	}
	return first, have
}

// update is `update @set { ip saddr }`: add or refresh the key with the
// set's timeout.
type update struct {
	sels []sel
	set  *Set
	name string
}

func (e *update) eval(c *ctx) bool {
	c.n.Evaluations++
	k, ok := c.buildKey(e.sels)
	if !ok {
		return true
	}
	var exp time.Duration
	if e.set.Timeout > 0 && c.w != nil {
		exp = c.w.Now() + e.set.Timeout
	}
	if el := e.set.elems[string(k)]; el != nil {
		el.expires = exp
		return true
	}
	if e.set.Size > 0 && len(e.set.elems) >= e.set.Size {
		return true
	}
	kt := keyText(e.set.Key, k)
	e.set.elems[string(k)] = &Element{key: append([]byte(nil), k...), keyText: kt, expires: exp}
	return true
}

func (e *update) String() string {
	return "update @" + e.name + " { " + selsString(e.sels) + " }"
}

// keyText prints a raw key of types ts.
func keyText(ts []dtype, k []byte) string {
	var parts []string
	for _, t := range ts {
		w := t.width()
		if len(k) < w {
			break
		}
		var v uint32
		for i := 0; i < w; i++ {
			v = v<<8 | uint32(k[i])
		}
		k = k[w:]
		parts = append(parts, formatValue(t, v))
	}
	return strings.Join(parts, " . ")
}

// inline prints an anonymous set or map: one element without braces for
// a single-value set, else `{ a, b }`.
func (s *Set) inline() string {
	els := s.anonElems()
	if !s.Map && len(els) == 1 {
		return els[0]
	}
	return "{ " + strings.Join(els, ", ") + " }"
}

func (s *Set) anonElems() []string {
	var out []string
	for _, e := range s.Elements() {
		out = append(out, e.text(s))
	}
	return out
}

func (e *Element) text(s *Set) string {
	t := e.keyText
	if e.Comment != "" {
		t += " comment " + quote(e.Comment)
	}
	if s.Map {
		t += " : " + e.verdict.String()
	}
	return t
}
