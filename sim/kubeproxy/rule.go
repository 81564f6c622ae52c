package kubeproxy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// A rule is kept as the list of arguments in the order kube-proxy writes
// them, each argument knowing how iptables-save spells it. Rendering in
// kube-proxy's order gives the iptables-restore input; rendering in
// iptables-save's canonical order (-s, -d, -p, matches in order, -j) gives
// what the kernel hands back.

type partKind uint8

const (
	partSrc     partKind = iota // [!] -s addr
	partDst                     // [!] -d addr
	partProto                   // -m tcp -p tcp
	partPortOpt                 // --dport N, belongs to the protocol match
	partMatch                   // any other -m match with its options
	partTarget                  // -j TARGET [options]
)

type part struct {
	kind    partKind
	restore string // kube-proxy's spelling
	save    string // iptables-save's spelling (for partProto: the protocol)
	neg     bool
}

type rule struct {
	chain string
	parts []part
	// line is the restore line, once rendered (render).
	line string
}

func src(addr string, neg bool) part {
	return part{kind: partSrc, restore: addr, save: savePrefix(addr), neg: neg}
}

func dst(addr string, neg bool) part {
	return part{kind: partDst, restore: addr, save: savePrefix(addr), neg: neg}
}

func proto(p string) part { return part{kind: partProto, save: p} }

func dport(n int) part {
	s := "--dport " + strconv.Itoa(n)
	return part{kind: partPortOpt, restore: s, save: s}
}

// comment is `-m comment --comment C`. kube-proxy quotes C itself when it
// contains spaces; iptables-save always quotes.
func comment(c string) part {
	r := c
	if strings.ContainsAny(c, " \t") {
		r = `"` + c + `"`
	}
	return part{kind: partMatch, restore: "-m comment --comment " + r, save: "-m comment --comment " + quoteSave(c)}
}

func match(restore, save string) part { return part{kind: partMatch, restore: restore, save: save} }

func same(s string) part { return part{kind: partMatch, restore: s, save: s} }

func jump(target string) part {
	return part{kind: partTarget, restore: "-j " + target, save: "-j " + target}
}

func target(restore, save string) part {
	return part{kind: partTarget, restore: "-j " + restore, save: "-j " + save}
}

// reject is kube-proxy's `-j REJECT`; the kernel default reject type is
// icmp-port-unreachable and iptables-save prints it.
func reject() part { return target("REJECT", "REJECT --reject-with icmp-port-unreachable") }

// quoteSave mirrors xtables_save_string: always double-quoted, with '"'
// and '\' escaped.
func quoteSave(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// savePrefix turns an address or CIDR into the masked prefix iptables-save
// prints (a bare address gets /32).
func savePrefix(a string) string {
	if strings.Contains(a, "/") {
		return a
	}
	return a + "/32"
}

// probabilityRestore is kube-proxy's spelling of 1/n.
func probabilityRestore(n int) string {
	return fmt.Sprintf("%0.10f", 1.0/float64(n))
}

// probabilitySave converts kube-proxy's probability string the way
// libxt_statistic does: the kernel keeps lround(p * 2^31) and iptables-save
// prints it back divided by 2^31 with 11 decimals.
func probabilitySave(restore string) string {
	p, err := strconv.ParseFloat(restore, 64)
	if err != nil {
		return restore
	}
	v := uint32(math.Round(p * 0x80000000))
	return fmt.Sprintf("%.11f", float64(v)/0x80000000)
}

func statistic(n int) part {
	r := probabilityRestore(n)
	return match("-m statistic --mode random --probability "+r, "-m statistic --mode random --probability "+probabilitySave(r))
}

// restoreLen is the length of r's restore line (restoreLine).
func (r *rule) restoreLen() int {
	n := 3 + len(r.chain)
	for _, p := range r.parts {
		n++
		switch p.kind {
		case partSrc, partDst:
			if p.neg {
				n += 2
			}
			n += 3 + len(p.restore)
		case partProto:
			n += 7 + 2*len(p.save)
		default:
			n += len(p.restore)
		}
	}
	return n
}

func (r *rule) restoreLine() string {
	if r.line != "" {
		return r.line
	}
	var b strings.Builder
	b.Grow(r.restoreLen()) // one allocation
	b.WriteString("-A ")
	b.WriteString(r.chain)
	for _, p := range r.parts {
		b.WriteByte(' ')
		switch p.kind {
		case partSrc:
			if p.neg {
				b.WriteString("! ")
			}
			b.WriteString("-s ")
			b.WriteString(p.restore)
		case partDst:
			if p.neg {
				b.WriteString("! ")
			}
			b.WriteString("-d ")
			b.WriteString(p.restore)
		case partProto:
			b.WriteString("-m ")
			b.WriteString(p.save)
			b.WriteString(" -p ")
			b.WriteString(p.save)
		default:
			b.WriteString(p.restore)
		}
	}
	return b.String()
}

func (r *rule) saveLine() string {
	var b strings.Builder
	b.WriteString("-A ")
	b.WriteString(r.chain)
	for _, k := range []partKind{partSrc, partDst} {
		for _, p := range r.parts {
			if p.kind != k {
				continue
			}
			if p.neg {
				b.WriteString(" !")
			}
			if k == partSrc {
				b.WriteString(" -s ")
			} else {
				b.WriteString(" -d ")
			}
			b.WriteString(p.save)
		}
	}
	var portOpts []string
	for _, p := range r.parts {
		if p.kind == partProto {
			b.WriteString(" -p " + p.save)
		}
		if p.kind == partPortOpt {
			portOpts = append(portOpts, p.save)
		}
	}
	for _, p := range r.parts {
		switch p.kind {
		case partProto:
			b.WriteString(" -m " + p.save)
			for _, o := range portOpts {
				b.WriteString(" " + o)
			}
		case partMatch:
			b.WriteString(" " + p.save)
		}
	}
	for _, p := range r.parts {
		if p.kind == partTarget {
			b.WriteString(" " + p.save)
		}
	}
	return b.String()
}

// table accumulates one table's chains and rules in kube-proxy's write order.
type table struct {
	name     string
	builtins []string
	chains   []string // declared user chains, in write order
	ensured  []string // chains created with iptables -N (jump targets, canary)
	declared map[string]bool
	rules    []rule
	// tail is where the rules after the service ports' start.
	tail int
	// text memoizes restore() (a finished table does not change).
	text string
}

func newTable(name string, builtins ...string) *table {
	return &table{name: name, builtins: builtins, declared: map[string]bool{}}
}

func (t *table) chain(name string) {
	if t.declared == nil {
		// A port's fragment: its few chains are looked through.
		if !slices.Contains(t.chains, name) {
			t.chains = append(t.chains, name)
		}
		return
	}
	if !t.declared[name] {
		t.declared[name] = true
		t.chains = append(t.chains, name)
	}
}

// ensure records a chain created outside iptables-restore (iptables -N).
func (t *table) ensure(name string) {
	if !slices.Contains(t.ensured, name) {
		t.ensured = append(t.ensured, name)
	}
}

func (t *table) add(chain string, parts ...part) {
	t.rules = append(t.rules, rule{chain: chain, parts: parts})
}

// save renders the table as iptables-save prints it: built-in chains with
// policy ACCEPT, user chains sorted by name, then each chain's rules
// (built-ins first in their fixed order, then user chains sorted).
func (t *table) save(jumps []jumpRule) string {
	var b strings.Builder
	b.WriteString("*" + t.name + "\n")
	for _, c := range t.builtins {
		b.WriteString(":" + c + " ACCEPT [0:0]\n")
	}
	users := append(slices.Clone(t.chains), t.ensured...)
	slices.Sort(users)
	users = slices.Compact(users)
	for _, c := range users {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	byChain := map[string][]string{}
	for _, j := range jumps {
		if j.table == t.name {
			byChain[j.chain] = append(byChain[j.chain], j.saveLine())
		}
	}
	// Jumps were inserted with -I (prepend), so the last one ensured is first.
	for c, lines := range byChain {
		for i, k := 0, len(lines)-1; i < k; i, k = i+1, k-1 {
			lines[i], lines[k] = lines[k], lines[i]
		}
		byChain[c] = lines
	}
	for _, r := range t.rules {
		byChain[r.chain] = append(byChain[r.chain], r.saveLine())
	}
	for _, c := range append(append([]string(nil), t.builtins...), users...) {
		for _, l := range byChain[c] {
			b.WriteString(l + "\n")
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// render renders every rule's restore line once, for the tables whose
// rules are written again at later syncs (portFrag).
func (t *table) render() {
	for i := range t.rules {
		t.rules[i].line = t.rules[i].restoreLine()
	}
}

// restore renders the table the way kube-proxy writes it into
// iptables-restore: chain lines, then rules, in write order.
func (t *table) restore() string {
	if t.text == "" {
		t.text = t.restoreDeleting(nil)
	}
	return t.text
}

// restoreDeleting is restore, deleting the chains stale: kube-proxy
// writes their declarations after the others and `-X` for each after the
// service ports' rules.
func (t *table) restoreDeleting(stale []string) string {
	var b strings.Builder
	n := 0
	for i := range t.rules {
		n += len(t.rules[i].line) + 1
	}
	b.Grow(n + 64*len(t.chains))
	b.WriteString("*" + t.name + "\n")
	for _, c := range t.chains {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, c := range stale {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	tail := min(t.tail, len(t.rules))
	if len(stale) == 0 {
		tail = len(t.rules)
	}
	for i := range t.rules[:tail] {
		b.WriteString(t.rules[i].restoreLine())
		b.WriteByte('\n')
	}
	for _, c := range stale {
		b.WriteString("-X " + c + "\n")
	}
	for i := tail; i < len(t.rules); i++ {
		b.WriteString(t.rules[i].restoreLine())
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// chainLines is restoreDeleting(stale) by its chains (ChainLinesTable).
func (t *table) chainLines(stale []string) (lines map[string][]string, declared, deleted map[string]bool, ok bool) {
	declared = make(map[string]bool, len(t.chains)+len(stale))
	for _, c := range t.chains {
		declared[c] = true
	}
	for _, c := range stale {
		declared[c] = true
	}
	lines = make(map[string][]string, len(t.chains))
	tail := min(t.tail, len(t.rules))
	if len(stale) == 0 {
		tail = len(t.rules)
	}
	for i := range t.rules[:tail] {
		r := &t.rules[i]
		lines[r.chain] = append(lines[r.chain], r.restoreLine())
	}
	if len(stale) > 0 {
		deleted = make(map[string]bool, len(stale))
		for _, c := range stale {
			if lines[c] != nil || c == "" {
				return nil, nil, nil, false // -X after its rules
			}
			deleted[c] = true
		}
	}
	for i := tail; i < len(t.rules); i++ {
		r := &t.rules[i]
		lines[r.chain] = append(lines[r.chain], r.restoreLine())
	}
	return lines, declared, deleted, true
}

// jumpRule is one rule kube-proxy ensures with `iptables -t T -I CHAIN ...`
// in a built-in chain, outside iptables-restore.
type jumpRule struct {
	table, chain, dst string
	ctNew             bool
	comment           string
}

func (j jumpRule) args() []string {
	var a []string
	if j.ctNew {
		a = append(a, "-m", "conntrack", "--ctstate", "NEW")
	}
	if j.comment != "" {
		a = append(a, "-m", "comment", "--comment", j.comment)
	}
	return append(a, "-j", j.dst)
}

func (j jumpRule) saveLine() string {
	s := "-A " + j.chain
	if j.ctNew {
		s += " -m conntrack --ctstate NEW"
	}
	if j.comment != "" {
		s += " -m comment --comment " + quoteSave(j.comment)
	}
	return s + " -j " + j.dst
}
