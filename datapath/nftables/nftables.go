// Package nftables models the kernel's nf_tables engine on a datapath.Netns,
// beside the iptables engine (datapath/netfilter) and sharing its
// connection tracking and hooks: tables per family, base chains registered
// on a hook at their priority, regular chains, rules made of the
// expressions and statements kube-proxy's nftables mode uses, named and
// anonymous sets, maps and verdict maps with concatenated keys, dynamic
// sets with timeouts, `nft -f` transactions and `nft list` output.
//
// # What is modelled
//
//   - Families: only "ip" (IPv4), as kubewalk's datapath is IPv4.
//   - Base chains of type filter run as hook stages at their priority,
//     in ascending priority with the iptables tables (iptables' filter at
//     0, nat at -100/100, mangle -150, raw -300). Base chains of type nat
//     join the kernel's NAT core with iptable_nat (see
//     netfilter.NATLookup): they see only the first packet of a
//     connection, and a binding set by one nat table ends the lookup.
//   - Matches: ip saddr/daddr/protocol, tcp/udp/th sport/dport, meta
//     l4proto, meta mark (also written "mark") with `& mask`, ct state,
//     fib saddr/daddr type, values, prefixes, anonymous sets, named sets
//     (@name), concatenations (a . b . c), vmap lookups in named or
//     anonymous verdict maps, and `numgen random mod N vmap { ... }`.
//   - Statements: accept, drop, return, jump, goto, continue, reject,
//     counter, meta mark set (| ^ & or a value), dnat to / snat to,
//     masquerade [fully-random] [random], update @set { ip saddr },
//     and rule comments.
//   - numgen random draws from the World's random source through
//     Walk.Chance, so explore mode enumerates its branches (element i of
//     N is taken with probability 1/(N-i) after the earlier ones were not:
//     uniform, like the kernel's reciprocal scale of a random u32).
//   - Transactions (NFTables.Apply, `nft -f`) are atomic: the commands run
//     against a copy of the ruleset; if any fails, nft's errors are
//     returned (file, line, columns, message, in nft's layout) and nothing
//     changes.
//
// # Costs
//
// Rules run in order like the kernel's nft_do_chain; set and map lookups
// are hash lookups (the kernel's nft_set_hash), so a packet to the Nth
// Service costs the same as one to the first. Evaluations counts every
// expression evaluated, for a benchmark's expressions/packet.
//
// # Not modelled
//
// Other families (inet, ip6, arp, bridge, netdev), flowtables, stateful
// objects, quotas, limits, log, sets with intervals declared by name
// (anonymous prefix sets are supported), element timeouts other than
// dynamic-set updates, rule handles in listings (`-a`), and nft's
// "did you mean" suggestions after "No such file or directory".
package nftables

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/netfilter"
)

// NFTables is the nf_tables state of one network namespace.
type NFTables struct {
	ns     *datapath.Netns
	ct     *conntrack.Table
	nf     *netfilter.Netfilter
	tables []*Table
	// Evaluations counts expressions evaluated over all packets (divide
	// by packets for expressions/packet); Rules counts rules entered.
	Evaluations, Rules uint64
	ctx                ctx
	registered         []hookReg
}

type hookReg struct {
	hook datapath.Hook
	name string
	nat  bool
}

// Install gives ns an empty nf_tables ruleset that shares nf's connection
// tracking and NAT core. When nf is nil it installs the iptables tables
// (and conntrack) first, as loading nf_nat does.
func Install(ns *datapath.Netns, nf *netfilter.Netfilter) *NFTables {
	if nf == nil {
		nf = netfilter.Install(ns, nil)
	}
	return &NFTables{ns: ns, ct: nf.Conntrack(), nf: nf}
}

// Netns returns the namespace.
func (n *NFTables) Netns() *datapath.Netns { return n.ns }

// Tables returns the tables in creation order.
func (n *NFTables) Tables() []*Table { return n.tables }

// Table returns the table family/name, or nil.
func (n *NFTables) Table(family, name string) *Table {
	for _, t := range n.tables {
		if t.Family == family && t.Name == name {
			return t
		}
	}
	return nil
}

// Table is an nftables table.
type Table struct {
	Family, Name string
	Comment      string
	chains       []*Chain
	sets         []*Set
	byName       map[string]*Chain // index of chains
}

func (t *Table) addChain(c *Chain) {
	t.chains = append(t.chains, c)
	if t.byName == nil {
		t.byName = map[string]*Chain{}
	}
	t.byName[c.Name] = c
}

func (t *Table) deleteChain(c *Chain) {
	t.chains = slices.DeleteFunc(t.chains, func(x *Chain) bool { return x == c })
	delete(t.byName, c.Name)
}

// Chains returns the chains in creation order.
func (t *Table) Chains() []*Chain { return t.chains }

// Sets returns the named sets and maps in creation order.
func (t *Table) Sets() []*Set { return t.sets }

// Chain returns the chain named name, or nil.
func (t *Table) Chain(name string) *Chain { return t.byName[name] }

// Set returns the named set or map, or nil.
func (t *Table) Set(name string) *Set {
	for _, s := range t.sets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Chain is a base chain (Type set: attached to Hook at Priority) or a
// regular chain.
type Chain struct {
	Name    string
	Comment string
	// Type is "filter" or "nat" for a base chain, "" for a regular chain.
	Type     string
	Hook     datapath.Hook
	Priority int
	// PolicyDrop is `policy drop`; base chains accept by default.
	PolicyDrop bool
	rules      []*Rule
	table      *Table
}

// Base reports whether the chain is attached to a hook.
func (c *Chain) Base() bool { return c.Type != "" }

// Rules returns the chain's rules in order.
func (c *Chain) Rules() []*Rule { return c.rules }

// Rule is one rule: expressions evaluated left to right.
type Rule struct {
	exprs   []expr
	Comment string
	chain   *Chain
	counter *counter
}

// Chain returns the chain holding the rule.
func (r *Rule) Chain() *Chain { return r.chain }

// String is the rule as `nft list` prints it.
func (r *Rule) String() string { return r.text(true) }

func (r *Rule) text(counters bool) string {
	var parts []string
	for _, e := range r.exprs {
		if c, ok := e.(*counter); ok && !counters {
			_ = c
			parts = append(parts, "counter")
			continue
		}
		parts = append(parts, e.String())
	}
	s := strings.Join(parts, " ")
	if r.Comment != "" {
		s += " comment " + quote(r.Comment)
	}
	return s
}

// dtype is an nft data type of a set key or a concatenation component.
type dtype uint8

const (
	tInvalid dtype = iota
	tIPv4
	tProto
	tService
	tMark
	tInteger
	tVerdict
	tCTState
	tFibAddr
)

var dtypeNames = map[string]dtype{"ipv4_addr": tIPv4, "inet_proto": tProto, "inet_service": tService, "mark": tMark, "integer": tInteger, "verdict": tVerdict}

func (t dtype) String() string {
	for k, v := range dtypeNames {
		if v == t {
			return k
		}
	}
	return "invalid"
}

func (t dtype) width() int {
	switch t {
	case tIPv4, tMark, tInteger:
		return 4
	case tProto:
		return 1
	case tService:
		return 2
	}
	return 4
}

// Set is a named or anonymous set, or a map (Data set).
type Set struct {
	Name string
	// Key is the key type, one entry per concatenated component.
	Key []dtype
	// Map: elements carry data; VerdictMap: the data is a verdict.
	Map        bool
	Flags      []string
	Timeout    time.Duration
	Size       int
	Comment    string
	anonymous  bool
	interval   bool
	elems      map[string]*Element
	prefixes   []*Element // interval elements (anonymous sets), in input order
	dynamic    bool
	hasTimeout bool
}

// Element is a set or map element.
type Element struct {
	key     []byte
	keyText string
	Comment string
	// prefix elements of interval sets
	lo, hi  uint32
	verdict verdictVal
	expires time.Duration // dynamic sets: 0 never
}

// Key is the element's key as nft prints it.
func (e *Element) Key() string { return e.keyText }

// Elements returns the elements sorted by key.
func (s *Set) Elements() []*Element {
	var out []*Element
	for _, e := range s.elems {
		out = append(out, e)
	}
	out = append(out, s.prefixes...)
	slices.SortFunc(out, func(a, b *Element) int {
		if c := strings.Compare(string(a.key), string(b.key)); c != 0 {
			return c
		}
		return int(a.lo) - int(b.lo)
	})
	return out
}

func (s *Set) clone() *Set {
	c := *s
	c.elems = make(map[string]*Element, len(s.elems))
	for k, e := range s.elems {
		ec := *e
		c.elems[k] = &ec
	}
	c.prefixes = slices.Clone(s.prefixes)
	c.Flags = slices.Clone(s.Flags)
	return &c
}

func (t *Table) clone() *Table {
	c := *t
	c.chains = nil
	c.sets = nil
	c.byName = nil
	for _, s := range t.sets {
		c.sets = append(c.sets, s.clone())
	}
	for _, ch := range t.chains {
		cc := *ch
		cc.rules = slices.Clone(ch.rules)
		cc.table = &c
		c.addChain(&cc)
	}
	return &c
}

func quote(s string) string { return "\"" + s + "\"" }

// hookNames are nft's hook keywords.
var hookNames = map[string]datapath.Hook{"prerouting": datapath.Prerouting, "input": datapath.Input,
	"forward": datapath.Forward, "output": datapath.Output, "postrouting": datapath.Postrouting}

func hookName(h datapath.Hook) string {
	for k, v := range hookNames {
		if v == h {
			return k
		}
	}
	return "?"
}

// namedPriorities are nft's standard priority names for the ip family
// (nft 1.0.6 std_prio_table): dstnat only at prerouting, srcnat only at
// postrouting.
var namedPriorities = []struct {
	name  string
	val   int
	hooks []datapath.Hook
}{
	{"raw", -300, nil},
	{"mangle", -150, nil},
	{"dstnat", -100, []datapath.Hook{datapath.Prerouting}},
	{"filter", 0, nil},
	{"security", 50, nil},
	{"srcnat", 100, []datapath.Hook{datapath.Postrouting}},
}

// priorityString prints a base chain priority as nft 1.0.6 lists it: a
// standard name valid at the hook, with an offset of at most 10, else the
// number.
func priorityString(h datapath.Hook, p int) string {
	for _, np := range namedPriorities {
		if np.hooks != nil && !slices.Contains(np.hooks, h) {
			continue
		}
		off := p - np.val
		switch {
		case off == 0:
			return np.name
		case off > 0 && off <= 10:
			return np.name + " + " + strconv.Itoa(off)
		case off < 0 && off >= -10:
			return np.name + " - " + strconv.Itoa(-off)
		}
	}
	return strconv.Itoa(p)
}
