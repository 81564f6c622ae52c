package netfilter

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A Shared ruleset is one compiled copy of the user chains an
// iptables-restore --noflush input writes into a table, used by every
// namespace that loads the same input onto the same previous state: the
// thousands of nodes of a cluster whose kube-proxy writes the same
// KUBE-SERVICES, KUBE-SVC-* and KUBE-SEP-* chains. On the kernel each node
// holds its own copy; here they share the compiled rules, while each
// namespace keeps its own counters (iptables-save -c stays exact per rule
// per node) and its own chains (built-in chains, flannel's and the CNI
// plugins' chains, kube-proxy's jump rules).
//
// Loading a Shared ruleset (Netfilter.RestoreShared) is exactly
// Restore(input, --noflush --counters) on a namespace whose table holds
// Prev: the input's chains are declared (flushed) and filled, the chains
// Prev has and the input does not declare stay with their rules and
// counters, the namespace's own chains stay. Anything else — a namespace
// whose table is not on Prev, a jump from its own chains the kernel would
// refuse, an iptables command that writes a shared chain — first gives
// the namespace its own copy of the chains, then does what Restore does.
type Shared struct {
	table string
	// id identifies the ruleset; prev is the id of the one it follows (0
	// for none): holding ids, not pointers, lets old rulesets go.
	id, prev uint64
	// input is the text compiled (made by inputFn when first asked for,
	// for a ruleset compiled from chain lines: CompileSharedLines).
	input   string
	inputFn func() string
	// chains are the ruleset's chains by name (immutable once compiled).
	chains map[string]*Chain
	names  []string // sorted
	// declared are the chains the input declares (flushed and filled by
	// it); the others were carried from prev, with their rules and
	// counters.
	declared map[string]bool
	// loops is set when chains of the ruleset jump in a circle (refused
	// if a hook ever reaches them). Each chain holds its summary
	// (Chain.allowed, Chain.height).
	loops bool
	// covers memoizes Covers by ruleset id.
	covers map[uint64]bool
	// lines are the input's rule lines by chain (CompileSharedLike), nil
	// when the input is not only declarations and -A lines.
	lines map[string][]string
	// refs counts, by chain name, the rules of the ruleset that jump to
	// it (for patchShared to know that no chain it leaves as it is jumps
	// to a chain it replaces).
	refs map[string]int32
	// reused counts the chains copied from like, not parsed (for tests);
	// patched: compiled by patchShared.
	reused  int
	patched bool
	// lineage is how s differs from the ruleset it was patched from
	// (LoadShared's check that a chain an input leaves alone is the
	// same); verified and gone memoize that check by previous ruleset.
	lineage  *delta
	verified map[uint64]unsafe.Pointer
	gone     map[uint64][]string
	swapped  map[uint64]map[string]bool // swappedSince's memo
	// parsed is chainLines of input, when nothing changed it since
	// (a patched ruleset, or one with prev's chains).
	parsed *parsedInput
	// plans memoizes what planLoad found loading s onto a table, by
	// what it reads of the table (planKey): the thousands of nodes on
	// the same ruleset whose own chains have the same shape share one.
	plans map[planKey]*loadTemplate
}

// parsedInput is what chainLines makes of an input.
type parsedInput struct {
	lines   map[string][]string
	deleted map[string]bool
	simple  bool
}

// parsedAs returns s's parsed input when it is input, else nil.
func (s *Shared) parsedAs(input string) *parsedInput {
	if s == nil || s.parsed == nil || s.text() != input {
		return nil
	}
	return s.parsed
}

// sharedMark is what a chain of a Shared ruleset knows of the ruleset
// that made it: whether it had loops. (Not the ruleset itself: a chain
// outlives the rulesets it was compiled in, and would keep them alive.)
type sharedMark struct{ loops bool }

// delta is what one ruleset changed of the one it was patched from: the
// chains whose rules differ (new ones included) and the chains deleted.
// A ruleset compiled in full starts a lineage (no parent).
type delta struct {
	id      uint64
	changed []string
	// swapped are the chains whose compiled chain is another than the
	// parent's (changed, deleted, new, or copied with their jumps
	// rewritten): every other chain of the ruleset is the parent's very
	// chain.
	swapped []string
	parent  *delta
}

// maxLineage is how many rulesets back LoadShared looks for the previous
// one; older deltas are let go.
const maxLineage = 256

// Covers reports whether loading s onto a table whose shared chains are b
// (nil: none) is what restoring s's input there does: s was compiled
// after b, or s holds only the chains its input declares and those
// include every chain of b (b's chains are all flushed and refilled).
func (s *Shared) Covers(b *Shared) bool {
	if b == s || b.ident() == s.prev {
		return true // loading s again: the same input onto what it made
	}
	if len(s.names) != len(s.declared) {
		return false // s keeps chains of the ruleset it was compiled after
	}
	if b == nil {
		return true
	}
	if v, ok := s.covers[b.id]; ok {
		return v
	}
	v := true
	for _, name := range b.names {
		if !s.declared[name] {
			v = false
			break
		}
	}
	if s.covers == nil {
		s.covers = map[uint64]bool{}
	}
	s.covers[b.id] = v
	return v
}

// ErrNotShareable is returned by CompileShared for an input that writes
// built-in chains or holds rules whose evaluation keeps state in the
// namespace (recent, set, ipvs, statistic --mode nth matches, counters
// given in the input): such input is restored into each namespace.
var ErrNotShareable = errors.New("netfilter: input cannot be shared between namespaces")

// errDetach is what staging returns when a command writes a shared chain:
// the caller gives the namespace its own chains and runs the command again.
var errDetach = errors.New("netfilter: the command writes a shared chain")

// sharedIDs numbers the rulesets compiled (not on the walk: compiling is a
// control-plane step). A number is only an identity: atomic, because the
// worlds of a test suite's parallel tests compile on separate goroutines
// (TestWorldsOnSeparateGoroutines), and a number skipped is never reused.
var sharedIDs atomic.Uint64

// Input returns the iptables-restore input s was compiled from ("" for a
// nil s).
func (s *Shared) Input() string {
	if s == nil {
		return ""
	}
	return s.text()
}

// text is s's input, made when first asked for.
func (s *Shared) text() string {
	if s.inputFn != nil {
		s.input, s.inputFn = s.inputFn(), nil
	}
	return s.input
}

// ChainLines is an iptables-restore --noflush input for one table, as
// kube-proxy writes it (a table, chain declarations without counters,
// "-A" rules, "-X" deletions, COMMIT), given by its chains rather than
// its text: what CompileSharedLines compiles.
type ChainLines struct {
	// Lines are the "-A CHAIN ..." lines by chain, in input order;
	// Declared the chains declared (":CHAIN - [0:0]"), Deleted those
	// deleted ("-X CHAIN", after every rule of theirs).
	Lines             map[string][]string
	Declared, Deleted map[string]bool
	// Text makes the input's text, for when it is needed: a chain
	// compiled in full, an error naming its line, Input.
	Text func() string
}

// ParseChainLines returns input by its chains, as CompileSharedLike
// reads it; false when input holds more than kube-proxy writes (then only
// its text says all of it).
func ParseChainLines(input string) (ChainLines, bool) {
	lines, deleted, declared, simple := chainLines(input)
	return ChainLines{Lines: lines, Declared: declared, Deleted: deleted, Text: func() string { return input }}, simple
}

// CompileSharedLines is CompileSharedLike(table, prev, like, in.Text())
// without the text when the ruleset can be patched from prev (like is
// prev, and the chains in declares and writes anew are what differs):
// the chains are taken from in as they are, not written out and split
// again (kube-proxy's partial sync of an endpoint change writes ten
// thousand KUBE-SERVICES lines). The result, errors included, is
// CompileSharedLike's; the ruleset's Input is made when asked for.
func CompileSharedLines(table string, prev, like *Shared, in ChainLines) (*Shared, error) {
	if prev != nil && like == prev && prev.table == table && prev.lines != nil && !prev.loops {
		// Numbered as compileShared numbers them (a ruleset for the
		// text, then the one sameAs or patchShared makes).
		sharedIDs.Add(1)
		if v := sameAs(table, prev, like, "", in.Declared, in.Lines, in.Deleted, true); v != nil {
			v.id = sharedIDs.Add(1)
			v.lineage = extendLineage(v.id, v.lineage, nil, nil)
			v.parsed = &parsedInput{lines: in.Lines, deleted: in.Deleted, simple: true}
			v.inputFn = in.Text
			return v, nil
		}
		if v := patchShared(table, prev, "", in.Declared, in.Lines, in.Deleted); v != nil {
			v.parsed = &parsedInput{lines: in.Lines, deleted: in.Deleted, simple: true}
			v.inputFn = in.Text
			return v, nil
		}
		// (compileShared numbers it again: the number taken above is
		// skipped.)
	}
	return CompileSharedLike(table, prev, like, in.Text())
}

// Table returns the name of the table the ruleset is for.
func (s *Shared) Table() string { return s.table }

// CompileShared parses input (iptables-restore format, one table) into a
// ruleset for a table holding prev (nil for a table with none), as
// Restore(input, RestoreOptions{Noflush: true, Counters: true}) would leave
// it. Errors are Restore's, or ErrNotShareable.
func CompileShared(table string, prev *Shared, input string) (*Shared, error) {
	return CompileSharedLike(table, prev, nil, input)
}

// CompileSharedLike is CompileShared reusing the compiled rules of like
// (a ruleset compiled before, typically the previous sync's) for every
// chain whose rule lines in input are the same as in like's input, and
// those of prev for the chains input leaves as they are: only the chains
// that changed are parsed, so one endpoint change costs the chains it
// touches, as kube-proxy's partial sync does. A chain whose rules and
// whose jump targets (all the way down) are unchanged is the very chain
// of like or prev, not a copy: rulesets of successive syncs share their
// unchanged chains (each namespace still keeps its own counters).
func CompileSharedLike(table string, prev, like *Shared, input string) (*Shared, error) {
	if p := prev.parsedAs(input); p != nil && like == prev {
		// prev's own input again (a sync that changed no rule): the
		// lines are prev's, not parsed again.
		if v := sameAs(table, prev, like, input, prev.declared, p.lines, p.deleted, p.simple); v != nil {
			v.id, v.parsed = sharedIDs.Add(2), p // as compileShared numbers it
			v.lineage = extendLineage(v.id, v.lineage, nil, nil)
			return v, nil
		}
	}
	lines, deleted, declared, simple := chainLines(input)
	if like != nil && (like.table != table || !simple || like.lines == nil) {
		like = nil
	}
	s, err := compileShared(table, prev, like, input, lines, deleted, declared, simple)
	if err != nil && (like != nil || prev != nil) {
		// The exact error (its line) comes from the whole input, the
		// previous chains copied.
		return compileShared(table, prev, nil, input, lines, deleted, declared, simple)
	}
	return s, err
}

// chainLines groups the "-A CHAIN ..." lines of input by chain, in order,
// lists the chains it deletes ("-X CHAIN") and those it declares
// (":CHAIN ..."), and reports whether input holds nothing else than a
// table, chain declarations without counters, such rules and deletions
// and COMMIT (what kube-proxy writes), so that a chain's lines say all
// about it. Past a line that is not so, only the declarations are
// collected. One pass over the input.
func chainLines(input string) (lines map[string][]string, deleted, declared map[string]bool, simple bool) {
	lines, declared, simple = map[string][]string{}, map[string]bool{}, true
	for line := range strings.SplitSeq(input, "\n") {
		if len(line) > 1 && line[0] == ':' {
			name, _, _ := strings.Cut(line[1:], " ")
			declared[name] = true
		}
		if !simple {
			continue
		}
		switch {
		case line == "" || line == "COMMIT" || line[0] == '*':
		case line[0] == ':':
			if !strings.HasSuffix(line, " - [0:0]") {
				simple = false
			}
		case strings.HasPrefix(line, "-A "):
			name, _, _ := strings.Cut(line[3:], " ")
			lines[name] = append(lines[name], line)
		case strings.HasPrefix(line, "-X "):
			name := line[3:]
			if name == "" || strings.ContainsAny(name, " \t") || lines[name] != nil {
				simple = false
				continue
			}
			if deleted == nil {
				deleted = map[string]bool{}
			}
			deleted[name] = true
		default:
			simple = false
		}
	}
	return lines, deleted, declared, simple
}

// reusable returns, by name, the chains of prev and like that the ruleset
// compiled from input can hold as they are: a chain input does not declare
// (prev's, carried over), or one it declares with the same lines as in
// like's input (like's), provided every chain its rules jump to is the
// one reused under that name (so the jumps need no rewriting).
func reusable(prev, like *Shared, declared map[string]bool, lines map[string][]string, deleted map[string]bool) map[string]*Chain {
	cand := map[string]*Chain{}
	defer func() {
		for name := range deleted {
			delete(cand, name)
		}
	}()
	if prev != nil {
		for _, name := range prev.names {
			if !declared[name] {
				cand[name] = prev.chains[name]
			}
		}
	}
	if like != nil {
		for name := range declared {
			if lc := like.chains[name]; lc != nil && slices.Equal(like.lines[name], lines[name]) {
				cand[name] = lc
			}
		}
	}
	// One walk down the jumps, each chain decided once (the chains of a
	// loop are not kept: a loop is refused anyway, from the input).
	const visiting, kept, dropped = 1, 2, 3
	state := make(map[*Chain]uint8, len(cand))
	var keep func(c *Chain) bool
	keep = func(c *Chain) bool {
		switch state[c] {
		case kept:
			return true
		case visiting, dropped:
			return false
		}
		state[c] = visiting
		for _, r := range c.rules {
			if tc := r.target.chain; tc != nil && (cand[tc.Name] != tc || !keep(tc)) {
				state[c] = dropped
				return false
			}
		}
		state[c] = kept
		return true
	}
	for name, c := range cand {
		if !keep(c) {
			delete(cand, name)
		}
	}
	return cand
}

// sameAs returns, when input writes onto prev only chains prev has, with
// the lines prev's have (kube-proxy's partial sync after no change: the
// top-level chains written again), a ruleset with prev's very chains and
// summaries, whose input declares what input declares (those chains'
// counters start again from zero); else nil. Its id is the caller's to set.
func sameAs(table string, prev, like *Shared, input string, declared map[string]bool, lines map[string][]string, deleted map[string]bool, simple bool) *Shared {
	if prev == nil || like != prev || !simple || prev.lines == nil || prev.table != table || prev.loops || len(deleted) > 0 {
		return nil
	}
	for name := range declared {
		if prev.chains[name] == nil || !slices.Equal(prev.lines[name], lines[name]) {
			return nil
		}
	}
	for name := range lines {
		if !declared[name] {
			return nil // rules for a chain the input does not declare: restore's error
		}
	}
	return &Shared{table: table, prev: prev.id, input: input, declared: declared, chains: prev.chains, names: prev.names,
		lines: prev.lines, refs: prev.refs, reused: len(declared), lineage: prev.lineage}
}

func compileShared(table string, prev, like *Shared, input string, lines map[string][]string, deleted, declared map[string]bool, simple bool) (*Shared, error) {
	if prev != nil && prev.table != table {
		return nil, errorf("shared ruleset for table %s used as the previous one of %s", prev.table, table)
	}
	nf := &Netfilter{tables: map[string]*Table{}, recent: map[string]*recentTable{}}
	t := newTable(nf, table)
	if t == nil {
		return nil, ErrNotShareable
	}
	nf.tables[table] = t
	s := &Shared{table: table, id: sharedIDs.Add(1), input: input, declared: declared}
	if prev != nil {
		s.prev = prev.id
	}
	if v := sameAs(table, prev, like, input, declared, lines, deleted, simple); v != nil {
		v.id = sharedIDs.Add(1)
		v.lineage = extendLineage(v.id, v.lineage, nil, nil)
		v.parsed = &parsedInput{lines: lines, deleted: deleted, simple: simple}
		return v, nil
	}
	if like == prev && simple {
		if v := patchShared(table, prev, input, declared, lines, deleted); v != nil {
			v.parsed = &parsedInput{lines: lines, deleted: deleted, simple: simple}
			return v, nil
		}
	}
	// Chains kept as they are (only when some ruleset before is given:
	// an exact error comes from a compile without).
	var reuse map[string]*Chain
	if like != nil || prev != nil {
		reuse = reusable(prev, like, declared, lines, deleted)
	}
	// The declared chains whose lines are like's but that jump to a chain
	// changed get copies of like's rules, jumping to this ruleset's.
	copied := map[string]*Chain{}
	if like != nil {
		for name := range declared {
			if lc := like.chains[name]; lc != nil && reuse[name] == nil && !deleted[name] && slices.Equal(like.lines[name], lines[name]) {
				copied[name] = lc
			}
		}
	}
	// The table as Prev leaves it: the chains the input declares exist
	// (it flushes them), the others are Prev's, jumping to the chains
	// with the same names here. A chain reused is held during the restore
	// by a stand-in of the same name, which its own afterwards replaces.
	stand := map[*Chain]*Chain{}
	if prev != nil {
		for _, name := range prev.names {
			c := &Chain{Name: name}
			if rc := reuse[name]; rc != nil {
				stand[c] = rc
			}
			t.chains[name] = c
		}
		for _, name := range prev.names {
			if declared[name] || reuse[name] != nil {
				continue
			}
			old, c := prev.chains[name], t.chains[name]
			c.rules = make([]*Rule, len(old.rules))
			for i, r := range old.rules {
				c.rules[i] = r.cloneInto(c, t.chains)
			}
			c.buildIndex()
		}
	}
	// The declared chains reused are not parsed: the input restored
	// leaves their rules out.
	if len(reuse) > 0 {
		var b strings.Builder
		for line := range strings.SplitSeq(input, "\n") {
			if strings.HasPrefix(line, "-A ") {
				name, _, _ := strings.Cut(line[3:], " ")
				if declared[name] && (reuse[name] != nil || copied[name] != nil) {
					continue
				}
			}
			b.WriteString(line)
			b.WriteByte('\n')
		}
		input = b.String()
	}
	if err := nf.Restore(input, RestoreOptions{Noflush: true, Counters: true}); err != nil {
		return nil, err
	}
	for name, rc := range reuse {
		c := t.chains[name]
		if c == nil || len(c.rules) > 0 {
			return nil, ErrNotShareable // cannot happen: declared or carried, and its lines left out
		}
		stand[c] = rc
	}
	for _, name := range slices.Sorted(maps.Keys(copied)) {
		lc, c := copied[name], t.chains[name]
		if c == nil || len(c.rules) > 0 {
			return nil, ErrNotShareable // cannot happen: declared, and its lines left out
		}
		c.rules = make([]*Rule, len(lc.rules))
		for i, r := range lc.rules {
			c.rules[i] = r.cloneInto(c, t.chains)
			if r.target.chain != nil && c.rules[i].target.chain == nil {
				return nil, ErrNotShareable // its target is not declared here
			}
		}
		c.buildIndex()
	}
	for name, c := range t.chains {
		if rc := stand[c]; rc != nil {
			t.chains[name] = rc
			continue
		}
		for _, r := range c.rules {
			if rc := stand[r.target.chain]; rc != nil {
				r.target.chain = rc
			}
		}
	}
	s.reused = len(reuse) + len(copied)
	if simple {
		s.lines = lines
		if prev != nil && prev.lines != nil {
			for _, name := range prev.names {
				if !declared[name] {
					s.lines[name] = prev.lines[name]
				}
			}
		}
	}
	if t.base != nil {
		return nil, ErrNotShareable
	}
	s.chains = make(map[string]*Chain, len(t.chains))
	for name, c := range t.chains {
		if c.Builtin {
			if len(c.rules) > 0 {
				return nil, ErrNotShareable
			}
			continue
		}
		if reuse[name] == nil {
			if c.ctr != nil {
				return nil, ErrNotShareable
			}
			for _, r := range c.rules {
				if !r.shareable() {
					return nil, ErrNotShareable
				}
			}
		}
		s.chains[name] = c
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	s.summarize(reuse)
	s.refs = refsOf(s)
	s.lineage = &delta{id: s.id}
	// A reused chain now belongs to s; its summary is the same in both,
	// its rules and targets being the same chains.
	mark := &sharedMark{loops: s.loops}
	for _, name := range s.names {
		s.chains[name].shared = mark
	}
	return s, nil
}

// cloneInto copies r into chain c, its jump target resolved by name in
// chains.
func (r *Rule) cloneInto(c *Chain, chains map[string]*Chain) *Rule {
	n := *r
	n.chain, n.run = c, nil
	if r.target.chain != nil {
		n.target.chain = chains[r.target.chain.Name]
	}
	return &n
}

// shareable reports whether evaluating r reads nothing but the packet,
// the walk and the evaluating namespace's tables (no state of its own).
func (r *Rule) shareable() bool {
	for _, m := range r.ms {
		switch m := m.(type) {
		case *tcpMatch, *commentMatch, *icmpMatch, *markMatch, *conntrackMatch, *multiportMatch, *addrtypeMatch, *physdevMatch:
		case *statisticMatch:
			if m.nth {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// summarize computes allowed and height for every chain; a reused chain
// keeps the summary of the ruleset it comes from (its rules and every
// chain below it are the same chains).
func (s *Shared) summarize(reuse map[string]*Chain) {
	state := make(map[*Chain]uint8, len(s.names))
	for _, c := range reuse {
		if o := c.shared; o != nil && !o.loops && c.summarized {
			state[c] = 2
		}
	}
	every := func(*Chain) bool { return true }
	for _, name := range s.names {
		if c := s.chains[name]; state[c] == 0 {
			s.summarizeChain(c, state, every)
		}
	}
}

// summarizeChain computes allowed and height for c, depth first: first for
// the chains it jumps to that are not summarized yet (state 0; 1 is on the
// way, a loop; 2 done) among those visit admits, the others keeping the
// summary they have.
func (s *Shared) summarizeChain(c *Chain, state map[*Chain]uint8, visit func(*Chain) bool) {
	const all = uint8(1<<(5) - 1)
	state[c] = 1
	mask, h := all, 0
	for _, r := range c.rules {
		if ok, restricted := hookLimitOf(r.target.kind); restricted {
			mask &= ok.mask
		}
		tc := r.target.chain
		if tc == nil {
			continue
		}
		if visit(tc) {
			switch state[tc] {
			case 1:
				s.loops = true
				continue
			case 0:
				s.summarizeChain(tc, state, visit)
			}
		}
		mask &= tc.allowed
		h = max(h, 1+tc.height)
	}
	c.allowed, c.height, c.summarized = mask, h, true
	state[c] = 2
}

// RestoreShared loads the shared rulesets, at most one per table, as
// Restore(input, RestoreOptions{Noflush: true, Counters: true}) of their
// inputs (in the order given) would: all or nothing, with Restore's
// errors.
func (nf *Netfilter) RestoreShared(sets ...*Shared) error {
	nf.settle()
	if err := nf.attach(sets); err != errDetach {
		return err
	}
	var input strings.Builder
	for _, s := range sets {
		if t := nf.tables[s.table]; t != nil {
			nf.detach(t)
		}
		input.WriteString(s.text())
	}
	return nf.Restore(input.String(), RestoreOptions{Noflush: true, Counters: true})
}

// attach is RestoreShared's fast path; errDetach means it cannot be taken.
func (nf *Netfilter) attach(sets []*Shared) error {
	type plan struct {
		t        *Table
		s        *Shared
		own      map[string]*Chain
		absorbed map[*Chain]bool
	}
	var plans []plan
	for _, s := range sets {
		t := nf.tables[s.table]
		if t == nil || !s.Covers(t.base) || s.loops || slices.ContainsFunc(plans, func(p plan) bool { return p.t == t }) {
			return errDetach
		}
		p := plan{t: t, s: s, own: make(map[string]*Chain, len(t.chains)), absorbed: map[*Chain]bool{}}
		for name, c := range t.chains {
			if s.chains[name] != nil {
				if c.Builtin {
					return errDetach
				}
				p.absorbed[c] = true
				continue
			}
			p.own[name] = c
		}
		resolve := func(c *Chain) *Chain {
			if c.shared != nil || p.absorbed[c] {
				return s.chains[c.Name]
			}
			return c
		}
		// A jump of the namespace's own to a chain s deletes: restore's
		// error, from the text.
		for _, c := range p.own {
			for _, r := range c.rules {
				if tc := r.target.chain; tc != nil && resolve(tc) == nil {
					return errDetach
				}
			}
		}
		// translate_table on the result: the hooks reaching each chain of
		// the namespace's own, and the shared chains they jump to.
		masks := map[*Chain]uint8{}
		var visit func(c *Chain, h uint8, depth int, on map[*Chain]bool) bool
		visit = func(c *Chain, h uint8, depth int, on map[*Chain]bool) bool {
			if c.shared != nil {
				return c.allowed&h == h && depth+c.height < NFTJumpStackSize
			}
			if on[c] || depth >= NFTJumpStackSize {
				return false
			}
			if masks[c]&h == h && !c.Builtin {
				return true // seen from this hook already (depth is checked per path below)
			}
			masks[c] |= h
			on[c] = true
			defer delete(on, c)
			for _, r := range c.rules {
				if ok, restricted := hookLimitOf(r.target.kind); restricted && masks[c]&^ok.mask != 0 {
					return false
				}
				if tc := r.target.chain; tc != nil && !visit(resolve(tc), h, depth+1, on) {
					return false
				}
			}
			return true
		}
		for h, b := range t.builtins {
			if b != nil && !visit(b, 1<<h, 0, map[*Chain]bool{}) {
				return errDetach
			}
		}
		if h := ownHeight(p.own, t, resolve, s); h >= NFTJumpStackSize {
			return errDetach
		}
		plans = append(plans, p)
	}
	for _, p := range plans {
		t, s := p.t, p.s
		// The chains carried from the previous ruleset keep their
		// counters; the declared ones start at zero.
		views := map[*Chain]*Chain{}
		for oc, v := range t.views {
			if v.ctr != nil && !s.declared[oc.Name] {
				nc := s.chains[oc.Name]
				views[nc] = &Chain{Name: nc.Name, rules: nc.rules, view: nc, ctr: v.ctr}
			}
		}
		for _, c := range p.own {
			for _, r := range c.rules {
				if tc := r.target.chain; tc != nil && (tc.shared != nil || p.absorbed[tc]) {
					r.target.chain = s.chains[tc.Name]
				}
			}
		}
		t.chains, t.base, t.views, t.reach = p.own, s, views, nil
		if !t.loaded {
			t.loaded = true
			nf.order = append(nf.order, t.Name)
		}
		nf.syncPassive(t) // built-in chains are the namespace's own; kept in step anyway
	}
	nf.gen++
	return nil
}

// ownHeight is the most nested jumps from a built-in chain through the
// namespace's own chains into the shared ones.
func ownHeight(own map[string]*Chain, t *Table, resolve func(*Chain) *Chain, s *Shared) int {
	h := map[*Chain]int{}
	var height func(c *Chain) int
	height = func(c *Chain) int {
		if c.shared != nil {
			return c.height
		}
		if v, ok := h[c]; ok {
			return v
		}
		h[c] = 0
		best := 0
		for _, r := range c.rules {
			if tc := r.target.chain; tc != nil {
				best = max(best, 1+height(resolve(tc)))
			}
		}
		h[c] = best
		return best
	}
	top := 0
	for _, b := range t.builtins {
		if b != nil {
			top = max(top, height(b))
		}
	}
	return top
}

// detach gives t its own copy of its shared chains, with their counters,
// so that a command may change them.
func (nf *Netfilter) detach(t *Table) {
	if t == nil || t.base == nil {
		return
	}
	s := t.base
	chains := make(map[string]*Chain, len(t.chains)+len(s.chains))
	for name, c := range t.chains {
		chains[name] = c
	}
	for _, name := range s.names {
		chains[name] = &Chain{Name: name}
	}
	for _, name := range s.names {
		sc, c := s.chains[name], chains[name]
		c.rules = make([]*Rule, len(sc.rules))
		for i, r := range sc.rules {
			c.rules[i] = r.cloneInto(c, chains)
		}
		if v := t.views[sc]; v != nil && v.ctr != nil {
			c.ctr = slices.Clone(v.ctr)
		}
		c.buildIndex()
	}
	for _, c := range t.chains {
		for _, r := range c.rules {
			if tc := r.target.chain; tc != nil && tc.shared != nil {
				r.target.chain = chains[tc.Name]
			}
		}
	}
	t.chains, t.base, t.views, t.reach = chains, nil, nil, nil
	nf.gen++
	nf.syncPassive(t)
}

// ident returns s's id, 0 for a nil s.
func (s *Shared) ident() uint64 {
	if s == nil {
		return 0
	}
	return s.id
}

// lookup returns the chain named name in t: its own, else the shared one.
func (t *Table) lookup(name string) *Chain {
	if c := t.chains[name]; c != nil {
		return c
	}
	if t.base != nil {
		return t.base.chains[name]
	}
	return nil
}

// view returns t's view of the shared chain sc: the same rules, t's
// counters.
func (t *Table) view(sc *Chain) *Chain {
	v := t.views[sc]
	if v == nil {
		if t.views == nil {
			t.views = map[*Chain]*Chain{}
		}
		v = &Chain{Name: sc.Name, rules: sc.rules, view: sc}
		t.views[sc] = v
	}
	return v
}

// Shared returns the shared ruleset t's chains are on, or nil.
func (t *Table) Shared() *Shared { return t.base }

// patchShared is compileShared for an input onto prev that declares a few
// chains anew and leaves the others as they are or writes them again the
// same (kube-proxy's partial sync): only the chains whose lines changed
// are parsed, the declared chains that jump to them (all the way up) are
// copied with their jumps rewritten, and the ruleset's bookkeeping is
// prev's with those chains replaced, so that the cost is that of the
// chains written, not of the table. It returns nil when the input is not
// of that kind (a chain left as it is jumps to one replaced) or restoring
// it fails: the caller then compiles it in full (for the exact error).
func patchShared(table string, prev *Shared, input string, declared map[string]bool, lines map[string][]string, deleted map[string]bool) *Shared {
	if prev == nil || prev.lines == nil || prev.refs == nil || prev.loops || prev.table != table {
		return nil
	}
	affected := map[string]bool{}
	// hit holds prev's chains affected: a rule of prev jumps to prev's
	// chain of the name it names, so a jump's target is tested without
	// reading the chain (thousands of KUBE-SERVICES' rules jump to as
	// many chains).
	hit := map[*Chain]bool{}
	isChanged := map[string]bool{}
	var changed []string
	for name := range declared {
		if deleted[name] {
			pc := prev.chains[name]
			if pc == nil {
				return nil // restore's error
			}
			affected[name], hit[pc] = true, true
			continue
		}
		if pc := prev.chains[name]; pc == nil || !slices.Equal(prev.lines[name], lines[name]) {
			changed = append(changed, name)
			affected[name], isChanged[name] = true, true
			if pc != nil {
				hit[pc] = true
			}
		}
	}
	for name := range lines {
		if !declared[name] || deleted[name] {
			return nil // rules for a chain the input does not declare, or deletes
		}
	}
	for name := range deleted {
		if !declared[name] {
			return nil // deleting a chain not flushed first
		}
	}
	slices.Sort(changed)
	// The declared chains written the same that jump to a chain replaced
	// are replaced too (their rules jump to the new chain), up to the
	// top; every jump to a chain replaced must come from one of them or
	// from a chain written anew.
	fromDeclared := map[string]int32{}
	for grew := true; grew; {
		grew = false
		clear(fromDeclared)
		for name := range declared {
			if isChanged[name] || deleted[name] {
				continue
			}
			pc := prev.chains[name]
			if pc == nil {
				continue
			}
			for _, r := range pc.rules {
				if tc := r.target.chain; tc != nil && hit[tc] {
					fromDeclared[tc.Name]++
					if !affected[name] {
						affected[name], hit[pc], grew = true, true, true
					}
				}
			}
		}
	}
	for name := range deleted {
		changed = append(changed, name) // for the count only
	}
	for _, name := range changed {
		if pc := prev.chains[name]; pc != nil {
			for _, r := range pc.rules {
				if tc := r.target.chain; tc != nil && hit[tc] {
					fromDeclared[tc.Name]++
				}
			}
		}
	}
	changed = changed[:len(changed)-len(deleted)]
	for name := range affected {
		if prev.refs[name] != fromDeclared[name] {
			return nil // a chain left as it is jumps to it
		}
	}
	// Parse the changed chains, the chains they name standing in for
	// prev's.
	nf := &Netfilter{tables: map[string]*Table{}, recent: map[string]*recentTable{}}
	t := newTable(nf, table)
	if t == nil {
		return nil
	}
	nf.tables[table] = t
	// The scratch input, by its lines (restoreLines): "*table", the
	// changed chains declared, their rules, "COMMIT", as the text
	// "*table\n:NAME - [0:0]\n...-A NAME ...\nCOMMIT\n" splits (its last,
	// empty line included), not written out and split again.
	n := 3 + len(changed)
	for _, name := range changed {
		n += len(lines[name])
	}
	scratch := make([]string, 0, n)
	scratch = append(scratch, "*"+table)
	for _, name := range changed {
		scratch = append(scratch, ":"+name+" - [0:0]")
	}
	for _, name := range changed {
		for _, line := range lines[name] {
			if strings.IndexByte(line, '\n') >= 0 {
				return nil // the text would split it: compiled in full
			}
			scratch = append(scratch, line)
			for tok := range strings.FieldsSeq(line) {
				if pc := prev.chains[tok]; pc != nil && !isChanged[tok] && !deleted[tok] && t.chains[tok] == nil {
					t.chains[tok] = &Chain{Name: tok}
				}
			}
		}
	}
	scratch = append(scratch, "COMMIT", "")
	if err := nf.restoreLines(scratch, RestoreOptions{Noflush: true, Counters: true}); err != nil || t.base != nil {
		return nil // errDetach included: the scratch table has no base
	}
	repl := make(map[string]*Chain, len(affected))
	for _, name := range changed {
		c := t.chains[name]
		if c == nil || c.Builtin || c.ctr != nil {
			return nil
		}
		for _, r := range c.rules {
			if !r.shareable() {
				return nil
			}
		}
		repl[name] = c
	}
	for name := range affected {
		if !isChanged[name] && !deleted[name] {
			repl[name] = &Chain{Name: name}
		}
	}
	resolve := func(name string) *Chain {
		if deleted[name] {
			return nil
		}
		if c := repl[name]; c != nil {
			return c
		}
		return prev.chains[name]
	}
	for name, c := range repl {
		if isChanged[name] {
			for _, r := range c.rules {
				if tc := r.target.chain; tc != nil && repl[tc.Name] != tc {
					// A stand-in (or the scratch table's own copy of it).
					if r.target.chain = resolve(tc.Name); r.target.chain == nil {
						return nil
					}
				}
			}
			continue
		}
		// The same rules in the same order: their index runs (positions
		// and keys) serve the copies as they are. A rule that jumps to
		// no chain affected is prev's very rule (a ruleset's rules are
		// never changed once compiled; its chain is prev's of the same
		// name): only the rules jumping to a chain replaced are copied
		// (one of KUBE-SERVICES' ten thousand when one Service's chain
		// changes).
		old := prev.chains[name]
		c.rules = slices.Clone(old.rules)
		n := 0
		for _, r := range old.rules {
			if tc := r.target.chain; tc != nil && hit[tc] {
				n++
			}
		}
		copies := make([]Rule, n)
		sharedRules.Add(int64(len(old.rules) - n))
		n = 0
		for i, r := range old.rules {
			tc := r.target.chain
			if tc == nil || !hit[tc] {
				continue
			}
			cp := &copies[n]
			n++
			*cp = *r
			cp.chain = c
			if cp.target.chain = resolve(tc.Name); cp.target.chain == nil {
				return nil // it jumps to a chain deleted: restore's error
			}
			c.rules[i] = cp
		}
	}
	s := &Shared{table: table, id: sharedIDs.Add(1), prev: prev.id, input: input, declared: declared}
	s.chains = maps.Clone(prev.chains)
	s.lines = maps.Clone(prev.lines)
	s.refs = maps.Clone(prev.refs)
	// A chain copied with its jumps rewritten jumps to the chains of the
	// same names: only the chains written anew or deleted change the
	// counts.
	for name := range affected {
		if !isChanged[name] && !deleted[name] {
			continue
		}
		if old := prev.chains[name]; old != nil {
			for _, r := range old.rules {
				if tc := r.target.chain; tc != nil {
					s.refs[tc.Name]--
				}
			}
		}
	}
	added := false
	for name := range deleted {
		delete(s.chains, name)
		delete(s.lines, name)
	}
	for name, c := range repl {
		if prev.chains[name] == nil {
			added = true
		}
		s.chains[name] = c
		if !isChanged[name] {
			continue
		}
		for _, r := range c.rules {
			if tc := r.target.chain; tc != nil {
				s.refs[tc.Name]++
			}
		}
	}
	for name := range affected {
		if s.refs[name] == 0 {
			delete(s.refs, name)
		}
	}
	for name := range declared {
		if !deleted[name] {
			s.lines[name] = lines[name]
		}
	}
	if added || len(deleted) > 0 {
		// prev's sorted names, the deleted ones taken out and the new
		// ones put in their places.
		s.names = slices.Clone(prev.names)
		for name := range deleted {
			if i, ok := slices.BinarySearch(s.names, name); ok {
				s.names = slices.Delete(s.names, i, i+1)
			}
		}
		// The new ones merged in one pass (not inserted one by one into
		// tens of thousands: a batch of Services adds thousands).
		var added []string
		for name := range repl {
			if prev.chains[name] == nil {
				added = append(added, name)
			}
		}
		if len(added) > 0 {
			slices.Sort(added)
			merged := make([]string, 0, len(s.names)+len(added))
			i := 0
			for _, name := range s.names {
				for i < len(added) && added[i] < name {
					merged = append(merged, added[i])
					i++
				}
				merged = append(merged, name)
			}
			s.names = append(merged, added[i:]...)
		}
	} else {
		s.names = prev.names
	}
	// Summaries: the chains not replaced keep theirs (nothing below them
	// changed).
	// The chains s made are marked as its own; the others keep the mark
	// of the ruleset that made them (one without loops: prev has none,
	// and nothing below them changed), so that patching costs the chains
	// replaced, not the ruleset's. The mark, new, tells the chains
	// replaced while they are summarized (no name looked up for each of
	// the ten thousand jumps of a chain copied); it says whether s loops
	// once they are.
	mark := &sharedMark{}
	for _, c := range repl {
		c.shared = mark
	}
	state := make(map[*Chain]uint8, len(repl))
	replaced := func(tc *Chain) bool { return tc.shared == mark }
	for _, name := range slices.Sorted(maps.Keys(repl)) {
		if c := repl[name]; state[c] == 0 {
			s.summarizeChain(c, state, replaced)
		}
	}
	mark.loops = s.loops
	s.reused, s.patched = len(s.names)-len(repl), true
	diff := slices.Clone(changed)
	for name := range deleted {
		diff = append(diff, name)
	}
	swapped := slices.Collect(maps.Keys(repl))
	for name := range deleted {
		swapped = append(swapped, name)
	}
	s.lineage = extendLineage(s.id, prev.lineage, diff, swapped)
	return s
}

// sharedRules counts the rules patchShared kept from the ruleset before
// in a chain it copied (for tests; atomic like templateLoads).
var sharedRules atomic.Int64

// extendLineage returns the delta of ruleset id, changing the chains
// named in changed of the one parent describes (nil: none known), and
// lets go of the deltas more than maxLineage back.
func extendLineage(id uint64, parent *delta, changed, swapped []string) *delta {
	for i, name := range changed {
		changed[i] = strings.Clone(name) // not a piece of the input
	}
	for i, name := range swapped {
		swapped[i] = strings.Clone(name)
	}
	d := &delta{id: id, changed: changed, swapped: swapped, parent: parent}
	l := d
	for i := 0; l != nil && i < maxLineage; i++ {
		l = l.parent
	}
	if l != nil {
		l.parent = nil
	}
	return d
}

// refsOf counts, by chain name, the rules of s that jump to it.
func refsOf(s *Shared) map[string]int32 {
	refs := map[string]int32{}
	for _, c := range s.chains {
		for _, r := range c.rules {
			if tc := r.target.chain; tc != nil {
				refs[tc.Name]++
			}
		}
	}
	return refs
}

// ChainNames returns the names of the ruleset's chains, sorted (the
// caller must not change the slice); none for a nil s.
func (s *Shared) ChainNames() []string {
	if s == nil {
		return nil
	}
	return s.names
}

// OwnChainNames returns the names of t's user chains that are its own,
// not its shared ruleset's, sorted: with Shared().ChainNames(), the
// chains iptables-save lists.
func (t *Table) OwnChainNames() []string { return t.OwnChainNamesWhere(nil) }

// OwnChainNamesWhere is OwnChainNames of the chains keep (nil: every one)
// says yes to: only those are collected and sorted.
func (t *Table) OwnChainNamesWhere(keep func(name string) bool) []string {
	var out []string
	if r := t.reach; r != nil && len(r.chains) == len(t.chains) {
		// The memoized checks' list of them (no chain read).
		for _, c := range r.chains {
			if !c.builtin && (keep == nil || keep(c.name)) {
				out = append(out, c.name)
			}
		}
		slices.Sort(out)
		return out
	}
	for name, c := range t.chains {
		if !c.Builtin && (keep == nil || keep(name)) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Declared says what an iptables-restore --noflush input for a shared
// ruleset does to a table (LoadShared): the chains it declares, flushing
// and writing them, and the chains it deletes.
type Declared struct {
	// All: it declares every chain of the ruleset (kube-proxy's full
	// sync); else it declares Chains (kube-proxy's partial sync: its
	// top-level chains and those of the Services changed). LoadShared
	// remembers the Chains it checked (by identity): a map given must
	// not change afterwards.
	All    bool
	Chains map[string]bool
	// Deleted are chains of the table that the ruleset does not hold,
	// declared and deleted (-X).
	Deleted []string
}

func (d *Declared) declares(name string) bool { return d.All || d.Chains[name] }

// ErrNotLoaded is LoadShared's answer when it cannot tell that loading
// the ruleset is what restoring its input would do on the table as it is
// (the table is on no ruleset s was patched from, or not on a recent
// one, or an input leaving a chain alone would keep different rules
// than s's, or the kernel would refuse the result): nothing was changed,
// and the caller restores the text, which does it (or gives the error).
var ErrNotLoaded = errors.New("netfilter: shared ruleset not loadable onto the table as it is")

// LoadShared loads s into its table as Restore(input, --noflush
// --counters) does of an input that writes s's chains, declaring those
// d declares and leaving the others, and deletes d.Deleted: the chains
// declared start with zero counters, the chains s holds and d does not
// declare keep theirs (they are unchanged since the ruleset the table is
// on: s's lineage says so), the chains of the table's previous ruleset
// that s does not hold and d does not delete stay as they are (as the
// namespace's own chains, counters included), and the namespace's own
// chains stay. The cost is that of the namespace's own chains and of the
// chains that changed, not of the ruleset. ErrNotLoaded when it cannot
// tell (nothing changed then).
func (nf *Netfilter) LoadShared(loads ...Load) error {
	nf.settle()
	// The plans in the namespace's scratch (none made per load), let go
	// of when done.
	plans := nf.plans[:0]
	defer func() { clear(plans); nf.plans = plans[:0] }()
	for i, l := range loads {
		for _, o := range loads[:i] {
			if o.Set.table == l.Set.table {
				return ErrNotLoaded
			}
		}
		plans = append(plans, loadPlan{})
		if err := nf.planLoad(&plans[len(plans)-1], l.Set, l.Declared); err != nil {
			return err
		}
	}
	for i := range plans {
		nf.commitLoad(&plans[i])
	}
	nf.gen++
	return nil
}

// Load is one table's part of LoadShared: the ruleset, and what the
// input it stands for declares.
type Load struct {
	Set      *Shared
	Declared *Declared
}

// loadPlan is what planLoad found loading s with d onto t takes, for
// commitLoad: the namespace's chains as they will be (own), the chains of
// the previous ruleset carried as its own, the reach of own, the chains
// s swapped since t's ruleset (sw, nil when not known) and those the
// input deletes (del).
type loadPlan struct {
	t            *Table
	s            *Shared
	d            *Declared
	own, carried map[string]*Chain
	reach        *ownReach
	sw, del      map[string]bool
	// old is how many of reach's jumps are those of t's reach (the own
	// chains' before the load; the others, the carried chains', are
	// resolved), -1 for a reach computed anew; same: no chain they jump
	// to outside own is swapped or deleted, so none changes target.
	old  int
	same bool
	// addOwn: own is t's chains, and the chains carried are added to
	// them at commit (a plan from a template: no map made per table);
	// slab is the template's, for the chains carried (nil: each made
	// on its own).
	addOwn bool
	slab   *carrySlab
	// byMoved: the plan is a template's with sw, and the jumps of t's
	// reach to retarget are those to a chain of moved (see
	// loadTemplate.moved).
	moved   []movedChain
	byMoved bool
}

// resolve returns the chain c (a chain of t or of its ruleset, as a jump
// names it now) stands for once the plan is committed: nil for a chain
// that will not exist.
func (p *loadPlan) resolve(c *Chain) *Chain {
	name := c.Name
	if c.shared == nil && p.t.chains[name] == c {
		if p.del[name] {
			return nil
		}
		if sc := p.s.chains[name]; sc != nil {
			return sc
		}
		return c
	}
	if sc := p.s.chains[name]; sc != nil {
		return sc
	}
	if cc := p.carried[name]; cc != nil {
		return cc
	}
	return nil
}

// planLoad checks loading s with d (LoadShared) and fills p with what
// makes it so.
func (nf *Netfilter) planLoad(p *loadPlan, s *Shared, d *Declared) error {
	t := nf.Table(s.table)
	if t == nil || s.loops {
		return ErrNotLoaded
	}
	p.t, p.s, p.d = t, s, d
	b := t.base
	if !d.All && (b == nil || !s.sameSince(b.id, d)) {
		return ErrNotLoaded
	}
	// What the checks below find depends on the table only through its
	// ruleset and the shape of its own chains (while the memoized reach
	// stands): a plan found for one table serves every table alike.
	var key planKey
	if r := t.reach; loadTemplates && r != nil && r.shape != nil && len(r.chains) == len(t.chains) && b != nil {
		key = planKey{base: b.id, shape: r.shape, all: d.All, chains: reflect.ValueOf(d.Chains).UnsafePointer(),
			del: unsafe.SliceData(d.Deleted), ndel: len(d.Deleted)}
		if tp := s.plans[key]; tp != nil {
			err := tp.apply(p)
			if checkTemplate != nil {
				// The full checks on the same table, for the test to
				// compare (they change nothing of it).
				full := loadPlan{}
				loadTemplates = false
				ferr := nf.planLoad(&full, s, d)
				loadTemplates = true
				checkTemplate(&full, p, ferr, err)
			}
			return err
		}
	}
	var del map[string]bool
	if len(d.Deleted) > 0 {
		del = make(map[string]bool, len(d.Deleted))
		for _, name := range d.Deleted {
			oc := t.chains[name]
			if s.chains[name] != nil || (oc != nil && oc.Builtin) || (oc == nil && (b == nil || b.chains[name] == nil)) {
				return ErrNotLoaded // restore's error, from the text
			}
			del[name] = true
		}
	}
	p.del = del
	// The namespace's own chains named like one of s are declared
	// (flushed and written as s's), or the input could not be s's.
	// (The names from the memoized checks when they stand: the node's
	// map is not walked.)
	ownChanged := false
	clash := func(name string, builtin bool) bool {
		if s.chains[name] != nil {
			if builtin || !d.declares(name) {
				return true
			}
			ownChanged = true
		} else if del[name] {
			ownChanged = true
		}
		return false
	}
	// When the memoized checks stand, no own chain is named like one of
	// the table's ruleset (a load leaves none), so only the chains s
	// swapped since and those deleted can clash (sw: nil when s's lineage
	// does not say).
	var sw map[string]bool
	if r := t.reach; r != nil && len(r.chains) == len(t.chains) && b != nil {
		sw = s.swappedSince(b.id)
	}
	p.sw = sw
	if sw != nil {
		for name := range sw {
			if oc := t.chains[name]; oc != nil && clash(name, oc.Builtin) {
				return ErrNotLoaded
			}
		}
		for name := range del {
			if oc := t.chains[name]; oc != nil && clash(name, oc.Builtin) {
				return ErrNotLoaded
			}
		}
	} else if r := t.reach; r != nil && len(r.chains) == len(t.chains) {
		for _, oc := range r.chains {
			if clash(oc.name, oc.builtin) {
				return ErrNotLoaded
			}
		}
	} else {
		for name, c := range t.chains {
			if clash(name, c.Builtin) {
				return ErrNotLoaded
			}
		}
	}
	// The chains of the previous ruleset that s does not hold and the
	// input does not delete stay: they become the namespace's own.
	var carried map[string]*Chain
	if b != nil && b != s {
		for _, name := range s.goneSince(b) {
			if !del[name] && t.chains[name] == nil {
				if carried == nil {
					carried = map[string]*Chain{}
				}
				carried[name] = &Chain{Name: name}
			}
		}
	}
	p.carried = carried
	// The namespace's chains as they will be, and translate_table's
	// checks on them (memoized while they stay as they are).
	own, rebuilt := t.chains, ownChanged || carried != nil
	if rebuilt {
		if ownChanged {
			own = make(map[string]*Chain, len(t.chains)+len(carried))
			for name, c := range t.chains {
				if s.chains[name] == nil && !del[name] {
					own[name] = c
				}
			}
		} else {
			// No own chain is named like one of s or deleted (a clash
			// would have said): every one stays.
			own = maps.Clone(t.chains)
		}
		for name, c := range carried {
			if !p.carry(c, b.chains[name]) {
				return ErrNotLoaded // it jumps to a chain deleted: restore's error
			}
			own[name] = c
		}
	}
	p.own = own
	reach, inc := t.reach, false
	if reach != nil && rebuilt && !ownChanged {
		reach = reach.withCarried(carried, own, p.resolve)
		inc = reach != nil
	} else if rebuilt {
		reach = nil
	}
	if reach == nil {
		var ok bool
		if reach, ok = reachOf(t, own, p.resolve); !ok {
			return ErrNotLoaded
		}
	}
	p.reach, p.old = reach, -1
	if reach == t.reach || inc {
		p.old = len(t.reach.jumps)
	}
	if checkReach != nil {
		checkReach(t, reach, inc, own, p.resolve)
	}
	fitSw, from := sw, 0
	switch {
	case reach == t.reach:
		from = len(reach.targets)
	case inc:
		from = len(t.reach.targets) // the targets of the chains carried are new
	default:
		fitSw = nil // a new reach: every target is checked
	}
	if !reach.fitsSince(s, own, fitSw, from) {
		return ErrNotLoaded
	}
	if p.old >= 0 && sw != nil {
		// Every jump of the own chains goes to an own chain (none is
		// deleted or named like one of s: a clash would have said) or
		// to one of t's reach's targets (none is carried: withCarried
		// would have said).
		p.same = true
		for _, name := range t.reach.targets {
			if sw[name] || del[name] {
				p.same = false
				break
			}
		}
	}
	if key.shape != nil && !ownChanged && p.old >= 0 && (reach == t.reach || reach.shape != nil) {
		// Remembered for the tables alike (see loadTemplate.apply).
		tp := &loadTemplate{del: del, sw: sw, same: p.same}
		if carried != nil {
			tp.carried = slices.Sorted(maps.Keys(carried))
			tp.shape = reach.shape
		}
		if s.plans == nil || len(s.plans) >= maxPlans {
			s.plans = map[planKey]*loadTemplate{}
		}
		s.plans[key] = tp
	}
	return nil
}

// loadTemplates turns planLoad's memo of plans on (a variable so that a
// test can compare the loads with and without it).
var loadTemplates = true

// movedLoads counts the commits that retargeted jumps by a template's
// moved chains (for tests; atomic like templateLoads).
var movedLoads atomic.Int64

// templateLoads counts the loads planned from a template (for tests;
// atomic, as namespaces of separate clusters may load on separate
// goroutines).
var templateLoads atomic.Int64

// checkTemplate, set by tests, is called with the plan planLoad's full
// checks make and the one a template made, for every load planned from
// a template, and their errors.
var checkTemplate func(full, fromTemplate *loadPlan, fullErr, err error)

// maxPlans bounds a ruleset's memo of plans.
const maxPlans = 64

// planKey is what planLoad reads of a table whose memoized reach
// stands, besides the ruleset loaded and the declaration: the ruleset
// it is on and the shape of its own chains (their names, whether
// built-in, the chains they jump to outside them and the hooks and
// depths from which those are reached). The declaration is keyed by
// identity (its map of chains and its list of chains deleted).
type planKey struct {
	base   uint64
	shape  *reachShape
	all    bool
	chains unsafe.Pointer
	del    *string
	ndel   int
}

// loadTemplate is what planLoad found for a planKey when it took a
// memoized reach (as it was, or with the chains carried added) and no
// own chain clashed: the chains deleted, the chains swapped, whether no
// jump of the own chains changes target (same), and the chains carried
// from the previous ruleset (sorted) with the shape of the reach they
// make. Every check passed.
type loadTemplate struct {
	del, sw map[string]bool
	same    bool
	carried []string
	shape   *reachShape
	// slab is where the tables the template serves get their chains
	// carried from.
	slab carrySlab
	// moved are the chains of the tables' ruleset that the load swaps or
	// deletes (sw and del), with the chain of the name in the ruleset
	// loaded (nil: none, resolved per table), so that commit finds the
	// jumps of the own chains to retarget by identity, not by name;
	// movedOK: made (at the template's first use, nil when sw is).
	moved   []movedChain
	movedOK bool
}

// movedChain is one of loadTemplate.moved: a chain of the ruleset a
// table is on (from) and the chain of its name in the ruleset loaded
// (to).
type movedChain struct{ from, to *Chain }

// movedOf lists the chains of b that s swapped since (sw) or that the
// input deletes (del), sorted by name, with their chains in s.
func movedOf(b, s *Shared, sw, del map[string]bool) []movedChain {
	names := make([]string, 0, len(sw)+len(del))
	for name := range sw {
		names = append(names, name)
	}
	for name := range del {
		if !sw[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	out := make([]movedChain, 0, len(names))
	for _, name := range names {
		if from := b.chains[name]; from != nil {
			out = append(out, movedChain{from: from, to: s.chains[name]})
		}
	}
	return out
}

// carrySlab hands out the chains carried and their rules from blocks
// shared by the tables a template serves: one allocation per block, not
// three per table and chain (the chains a change leaves behind are
// carried by thousands of nodes at once, and go at one cleanup). A
// chain's rule slices are capped at their length: appending to them
// (iptables -A on a chain carried) moves them out of the block.
type carrySlab struct {
	chains []Chain
	rules  []Rule
	ptrs   []*Rule
}

// Sizes of the blocks of a carrySlab; a chain with more rules than
// slabMaxRules gets its own.
const (
	slabChains   = 64
	slabRules    = 256
	slabMaxRules = 32
)

// chain returns a new chain named name.
func (sl *carrySlab) chain(name string) *Chain {
	if sl == nil {
		return &Chain{Name: name}
	}
	if len(sl.chains) == 0 {
		sl.chains = make([]Chain, slabChains)
	}
	c := &sl.chains[0]
	sl.chains = sl.chains[1:]
	c.Name = name
	return c
}

// ruleSlices returns a chain's slice of n rule pointers and its n rules,
// zeroed.
func (sl *carrySlab) ruleSlices(n int) ([]*Rule, []Rule) {
	if sl == nil || n > slabMaxRules {
		return make([]*Rule, n), make([]Rule, n)
	}
	if len(sl.rules) < n {
		sl.rules = make([]Rule, slabRules)
	}
	if len(sl.ptrs) < n {
		sl.ptrs = make([]*Rule, slabRules)
	}
	ptrs, rules := sl.ptrs[:n:n], sl.rules[:n:n]
	sl.ptrs, sl.rules = sl.ptrs[n:], sl.rules[n:]
	return ptrs, rules
}

// apply fills p (t, s and d set) as planLoad's checks would for a table
// of the template's key: only what is the table's own is made (the
// chains carried, with its counters; the map of its chains when it
// grows; the reach's jumps).
func (tp *loadTemplate) apply(p *loadPlan) error {
	t := p.t
	b := t.base
	p.del, p.sw, p.same = tp.del, tp.sw, tp.same
	own, reach := t.chains, t.reach
	if !tp.movedOK {
		tp.movedOK = true
		if tp.sw != nil {
			tp.moved = movedOf(b, p.s, tp.sw, tp.del)
		}
	}
	if tp.sw != nil {
		p.moved, p.byMoved = tp.moved, true
	}
	if tp.carried != nil {
		carried := make(map[string]*Chain, len(tp.carried))
		for _, name := range tp.carried {
			carried[name] = tp.slab.chain(name)
		}
		p.carried, p.addOwn, p.slab = carried, true, &tp.slab
		jumps := slices.Grow(slices.Clip(reach.jumps), 2*len(carried))
		for _, name := range tp.carried {
			c := carried[name]
			if !p.carry(c, b.chains[name]) {
				return ErrNotLoaded // (as planned: not reached)
			}
			for _, rl := range c.rules {
				if tc := rl.target.chain; tc != nil {
					jumps = append(jumps, ownJump{in: c, to: tc, r: rl})
				}
			}
		}
		sh := tp.shape
		reach = &ownReach{targets: sh.targets, reached: sh.reached, chains: sh.chains, shape: sh, jumps: jumps}
	}
	p.own, p.reach, p.old = own, reach, len(t.reach.jumps)
	templateLoads.Add(1)
	if checkReach != nil {
		checkReach(t, reach, tp.carried != nil, p.ownAfter(), p.resolve)
	}
	return nil
}

// ownAfter is the namespace's chains as p leaves them (for tests: a
// copy when the chains carried are added at commit).
func (p *loadPlan) ownAfter() map[string]*Chain {
	if !p.addOwn {
		return p.own
	}
	own := maps.Clone(p.own)
	maps.Copy(own, p.carried)
	return own
}

// carry makes c, a chain carried from the previous ruleset, a copy of
// its chain bc there with the namespace's counters, its jumps resolved;
// false when one jumps to a chain that will not exist.
func (p *loadPlan) carry(c, bc *Chain) bool {
	var copies []Rule
	c.rules, copies = p.slab.ruleSlices(len(bc.rules))
	for i, r := range bc.rules {
		n := &copies[i]
		*n = *r
		n.chain, n.run = c, nil
		if r.target.chain != nil {
			if n.target.chain = p.resolve(r.target.chain); n.target.chain == nil {
				return false
			}
		}
		c.rules[i] = n
	}
	if v := p.t.views[bc]; v != nil && v.ctr != nil {
		c.ctr = slices.Clone(v.ctr)
	}
	c.buildIndex()
	return true
}

// reachShape is the part of an ownReach that does not name the
// namespace's chains (targets, reached, chains), interned: reaches of
// equal shapes hold the same *reachShape.
type reachShape struct {
	targets []string
	reached []reached
	chains  []ownChain
}

// shapes interns reachShapes by their rendering (shapeKey); bounded by
// maxShapes (past it, started again: a shape met later is another).
var (
	shapesMu sync.Mutex
	shapes   map[string]*reachShape
)

const maxShapes = 4096

// intern makes r's targets, reached and chains those of the interned
// shape equal to them.
func (r *ownReach) intern() {
	var b strings.Builder
	for _, c := range r.chains {
		b.WriteString(c.name)
		if c.builtin {
			b.WriteByte('*')
		}
		b.WriteByte(' ')
	}
	b.WriteByte('|')
	for _, name := range r.targets {
		b.WriteString(name)
		b.WriteByte(' ')
	}
	b.WriteByte('|')
	for _, x := range r.reached {
		b.WriteString(x.name)
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(int(x.hooks)))
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(x.depth))
		b.WriteByte(' ')
	}
	key := b.String()
	shapesMu.Lock()
	defer shapesMu.Unlock()
	sh := shapes[key]
	if sh == nil {
		if shapes == nil || len(shapes) >= maxShapes {
			shapes = map[string]*reachShape{}
		}
		sh = &reachShape{targets: slices.Clip(r.targets), reached: slices.Clip(r.reached), chains: slices.Clip(r.chains)}
		shapes[key] = sh
	}
	r.targets, r.reached, r.chains, r.shape = sh.targets, sh.reached, sh.chains, sh
}

// commitLoad makes t's chains own, its ruleset s (LoadShared).
//
// With sw (the chains s swapped since the table's ruleset), a jump whose
// target is neither swapped nor deleted (del) keeps its target: it is
// the same chain in s.
func (nf *Netfilter) commitLoad(p *loadPlan) {
	t, s, d, reach, sw, del, carried := p.t, p.s, p.d, p.reach, p.sw, p.del, p.carried
	var views map[*Chain]*Chain
	for oc, v := range t.views {
		if v.ctr == nil || d.declares(oc.Name) {
			continue
		}
		if nc := s.chains[oc.Name]; nc != nil {
			if views == nil {
				views = map[*Chain]*Chain{}
			}
			views[nc] = &Chain{Name: nc.Name, rules: nc.rules, view: nc, ctr: v.ctr}
		}
	}
	jumps := reach.jumps
	if p.old >= 0 {
		jumps = jumps[:p.old] // the carried chains' are resolved
	}
	if !p.same && p.byMoved && p.old >= 0 {
		// The jumps of t's reach go to own chains or to chains of t's
		// ruleset (every load leaves them so). A template's own
		// chains are named like none of s's and none is deleted (a
		// clash would have made the plan without one): a jump to an
		// own chain keeps it; one to a chain of t's ruleset changes
		// target when the chain is one of moved.
		for i := range jumps {
			j := &jumps[i]
			if j.to.shared == nil {
				continue
			}
			for k := range p.moved {
				if m := &p.moved[k]; m.from == j.to {
					rc := m.to
					if rc == nil {
						rc = p.resolve(j.to) // a chain carried, or none
					}
					if rc != j.to {
						j.r.target.chain, j.to = rc, rc
					}
					break
				}
			}
		}
		movedLoads.Add(1)
	} else if !p.same {
		for i := range jumps {
			j := &jumps[i]
			if p.old < 0 && carried != nil && carried[j.in.Name] == j.in {
				continue // its targets are resolved
			}
			if sw != nil && !sw[j.to.Name] && !del[j.to.Name] {
				continue
			}
			if rc := p.resolve(j.to); rc != j.to {
				j.r.target.chain, j.to = rc, rc
			}
		}
	}
	if p.addOwn {
		for name, c := range carried {
			p.own[name] = c // (own is t.chains)
		}
	}
	t.chains, t.base, t.views, t.reach = p.own, s, views, reach
	if !t.loaded {
		t.loaded = true
		nf.order = append(nf.order, t.Name)
		nf.syncPassive(t)
	}
	if checkCommitted != nil {
		checkCommitted(t, sw != nil)
	}
	// Else the built-in chains, the namespace's own, are as they were
	// (a load rewrites their jumps' targets only): their hooks' passive
	// counting stays as it is.
}

// checkCommitted, set by tests, is called with every table a load
// committed (swapped: checked from the chains swapped since).
var checkCommitted func(t *Table, swapped bool)

// maxSwapped is the most chains swapped since a table's ruleset that
// LoadShared checks one by one; past it, checking the table's own chains
// costs less.
const maxSwapped = 64

// swappedSince returns the chains whose compiled chain in s is another
// than in the ruleset numbered base (one s descends from), memoized by
// base; nil when s's lineage does not reach base, or more than
// maxSwapped were swapped.
func (s *Shared) swappedSince(base uint64) map[string]bool {
	if m, ok := s.swapped[base]; ok {
		return m
	}
	out := map[string]bool{}
	found := false
	steps := 0
	for l := s.lineage; l != nil && steps <= maxLineage && len(out) <= maxSwapped; l, steps = l.parent, steps+1 {
		if l.id == base {
			found = true
			break
		}
		if len(l.swapped) > maxSwapped {
			break // (a delta of thousands: not walked per node)
		}
		for _, name := range l.swapped {
			out[name] = true
		}
	}
	if !found || len(out) > maxSwapped {
		out = nil
	}
	if s.swapped == nil || len(s.swapped) > 64 {
		s.swapped = map[uint64]map[string]bool{}
	}
	s.swapped[base] = out
	return out
}

// sameSince reports whether every chain of s whose rules differ from
// those of the ruleset numbered base (one s descends from) is declared
// by d, memoized by base for the set of chains (d.Chains) last asked.
func (s *Shared) sameSince(base uint64, d *Declared) bool {
	id := reflect.ValueOf(d.Chains).UnsafePointer()
	if v, ok := s.verified[base]; ok && v == id && id != nil {
		return true
	}
	steps := 0
	for l := s.lineage; l != nil; l = l.parent {
		if l.id == base {
			if s.verified == nil || len(s.verified) > 64 {
				s.verified = map[uint64]unsafe.Pointer{}
			}
			s.verified[base] = id
			return true
		}
		if steps++; steps > maxLineage {
			return false
		}
		for _, name := range l.changed {
			if s.chains[name] != nil && !d.declares(name) {
				return false
			}
		}
	}
	return false
}

// Gone returns, sorted, the chains of b that s does not hold (none for
// a nil b); the caller must not change the slice.
func (s *Shared) Gone(b *Shared) []string {
	if b == nil || b == s {
		return nil
	}
	return s.goneSince(b)
}

// goneSince returns, sorted, the chains of b that s does not hold,
// memoized by b: from s's lineage when s descends from b, else by
// comparing their chains.
func (s *Shared) goneSince(b *Shared) []string {
	if g, ok := s.gone[b.id]; ok {
		return g
	}
	var out []string
	// Find b in the lineage first: nothing is collected from a lineage
	// that does not reach it.
	var end *delta
	steps := 0
	for l := s.lineage; l != nil && steps <= maxLineage; l, steps = l.parent, steps+1 {
		if l.id == b.id {
			end = l
			break
		}
	}
	if end != nil {
		for l := s.lineage; l != end; l = l.parent {
			for _, name := range l.changed {
				if s.chains[name] == nil && b.chains[name] != nil {
					out = append(out, name)
				}
			}
		}
	} else {
		for _, name := range b.names {
			if s.chains[name] == nil {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if s.gone == nil || len(s.gone) > 64 {
		s.gone = map[uint64][]string{}
	}
	s.gone[b.id] = out
	return out
}

// ownReach is what the kernel's checks of a table (translate_table, the
// jump depth) find in a namespace's own chains: the chains not its own
// that their rules jump to, and those of them reached from a built-in
// chain, with the hooks and the most nested jumps from which.
//
// jumps are the own chains' rules that jump to a chain, each with the
// chain it jumps to (kept in step by commitLoad, the only writer of those
// targets while the memo stands): a load rewrites the jumps whose target
// it replaces, without reading the others' rules.
type ownReach struct {
	targets []string
	reached []reached
	jumps   []ownJump
	chains  []ownChain // every own chain, built-in or not
	// shape is targets, reached and chains interned (their slices are
	// shape's, shared by every reach of that shape: never written), nil
	// when not interned.
	shape *reachShape
}

// ownChain is one of ownReach's chains: its name, and whether it is a
// built-in chain.
type ownChain struct {
	name    string
	builtin bool
}

// ownJump is one of ownReach's jumps: rule r of the own chain in, which
// jumps to to.
type ownJump struct {
	in, to *Chain
	r      *Rule
}

type reached struct {
	name  string
	hooks uint8
	depth int
}

// reachOf computes ownReach for the own chains own of t, their jumps
// resolved by resolve (nil: a chain that will not exist); false when
// the own chains alone are refused (a loop, a target used from a hook it
// does not support, jumps nested too deep, a jump to no chain).
func reachOf(t *Table, own map[string]*Chain, resolve func(*Chain) *Chain) (*ownReach, bool) {
	out := &ownReach{}
	seen := map[string]int{}
	masks := map[*Chain]uint8{}
	depths := map[*Chain]int{}
	for name, c := range own {
		out.chains = append(out.chains, ownChain{name: name, builtin: c.Builtin})
		for _, r := range c.rules {
			if tc := r.target.chain; tc != nil {
				out.jumps = append(out.jumps, ownJump{in: c, to: tc, r: r})
				rc := resolve(tc)
				if rc == nil {
					return nil, false
				}
				if own[rc.Name] != rc && !slices.Contains(out.targets, rc.Name) {
					out.targets = append(out.targets, rc.Name)
				}
			}
		}
	}
	var visit func(c *Chain, h uint8, depth int, on map[*Chain]bool) bool
	visit = func(c *Chain, h uint8, depth int, on map[*Chain]bool) bool {
		if own[c.Name] != c {
			i, ok := seen[c.Name]
			if !ok {
				i = len(out.reached)
				seen[c.Name] = i
				out.reached = append(out.reached, reached{name: c.Name})
			}
			out.reached[i].hooks |= h
			out.reached[i].depth = max(out.reached[i].depth, depth)
			return true
		}
		if on[c] || depth >= NFTJumpStackSize {
			return false
		}
		if d, ok := depths[c]; ok && masks[c]&h == h && d >= depth {
			return true // seen from this hook at this depth or deeper
		}
		masks[c] |= h
		depths[c] = max(depths[c], depth)
		on[c] = true
		defer delete(on, c)
		for _, r := range c.rules {
			if ok, restricted := hookLimitOf(r.target.kind); restricted && masks[c]&^ok.mask != 0 {
				return false
			}
			if tc := r.target.chain; tc != nil && !visit(resolve(tc), h, depth+1, on) {
				return false
			}
		}
		return true
	}
	for h, b := range t.builtins {
		if b != nil && !visit(b, 1<<h, 0, map[*Chain]bool{}) {
			return nil, false
		}
	}
	// In an order of their own (not the map's), so that equal reaches
	// intern to one shape.
	slices.SortFunc(out.chains, func(a, b ownChain) int { return strings.Compare(a.name, b.name) })
	slices.Sort(out.targets)
	out.intern()
	return out, true
}

// withCarried is reachOf(t, own, resolve) when own is the chains r was
// computed for plus the chains carried, and no chain r knows jumps to a
// carried one: the carried chains are reached from no built-in chain (a
// shared chain jumps only to chains of its ruleset), so they add their
// names, their jumps and their targets, and nothing to what the hooks
// reach. nil when that does not hold (the caller computes it in full).
// A load that carries a stale chain (kube-proxy's large-cluster mode
// leaving it until the next cleanup) then costs the chains carried, not
// a walk of the namespace's chains.
func (r *ownReach) withCarried(carried, own map[string]*Chain, resolve func(*Chain) *Chain) *ownReach {
	if len(r.chains)+len(carried) != len(own) {
		return nil
	}
	// A jump to a chain not among the own ones goes to one of r's
	// targets (the carried chains are not own chains yet).
	for _, name := range r.targets {
		if carried[name] != nil {
			return nil
		}
	}
	out := &ownReach{
		targets: slices.Clone(r.targets),
		reached: r.reached, // never written: a new reach replaces it
		jumps:   slices.Clone(r.jumps),
		chains:  slices.Clone(r.chains),
	}
	for _, name := range slices.Sorted(maps.Keys(carried)) {
		c := carried[name]
		out.chains = append(out.chains, ownChain{name: name})
		for _, rl := range c.rules {
			tc := rl.target.chain
			if tc == nil {
				continue
			}
			out.jumps = append(out.jumps, ownJump{in: c, to: tc, r: rl})
			rc := resolve(tc)
			if rc == nil {
				return nil
			}
			if own[rc.Name] != rc && !slices.Contains(out.targets, rc.Name) {
				out.targets = append(out.targets, rc.Name)
			}
		}
	}
	out.intern()
	return out
}

// checkReach, set by tests, is called with every reach planLoad uses
// (inc: made by withCarried), to compare it with reachOf's.
var checkReach func(t *Table, r *ownReach, inc bool, own map[string]*Chain, resolve func(*Chain) *Chain)

// fitsSince reports whether the chains of s the own chains jump to exist
// (in s or among own) and accept being reached as they are. With sw (r
// fitted the table's ruleset but for its targets from on, and sw are the
// chains s swapped since), only those swapped and the targets from on
// are checked: the others are the chains r fitted.
func (r *ownReach) fitsSince(s *Shared, own map[string]*Chain, sw map[string]bool, from int) bool {
	for i, name := range r.targets {
		if sw != nil && !sw[name] && i < from {
			continue
		}
		if s.chains[name] == nil && own[name] == nil {
			return false
		}
	}
	for _, x := range r.reached {
		if sw != nil && !sw[x.name] {
			continue
		}
		c := s.chains[x.name]
		if c == nil || c.allowed&x.hooks != x.hooks || x.depth+c.height >= NFTJumpStackSize {
			return false
		}
	}
	return true
}

// Has reports whether the ruleset holds a chain named name.
func (s *Shared) Has(name string) bool { return s != nil && s.chains[name] != nil }
