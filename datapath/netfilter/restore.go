package netfilter

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/kubewalk/kubewalk/datapath"
)

// ParseError is an iptables-restore failure: the 1-based line of the input
// (0 for a command given to Exec), its text, and what is wrong with it.
// When Restore returns one, nothing was changed.
type ParseError struct {
	Line int
	Text string
	Msg  string
	// Lines, for a ruleset the kernel refused as a whole (chains nested
	// deeper than NFTJumpStackSize), lists every input line whose rule
	// iptables-nft-restore reports as failed; Line is the first.
	Lines []int
}

// Error formats the error like iptables-restore, with the line and its text.
func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "iptables: " + e.Msg + ": " + e.Text
	}
	return "iptables-restore: line " + strconv.Itoa(e.Line) + " failed: " + e.Msg + ": " + e.Text
}

// RestoreOptions are iptables-restore's flags.
type RestoreOptions struct {
	// Noflush (--noflush) keeps the rules and chains of the tables that are
	// not mentioned; a declared chain (":NAME - [0:0]") that exists is
	// flushed, and built-in chains are left alone. Without it, each table
	// in the input is flushed and its user chains deleted first.
	Noflush bool
	// Counters (-c) sets rule and policy counters from the input.
	Counters bool
}

// staged is a table being rebuilt by a restore: the chains it will have
// and their rules. Live chains are not touched until commit.
type staged struct {
	t      *Table
	chains map[string]*Chain
	// live: chains is the table's own map (a --noflush restore or a
	// command that has not created or deleted a chain yet), copied before
	// the first change (ownChains) so that a failed restore leaves the
	// table as it was.
	live bool
	// rules holds the rules of the chains this restore changed; the
	// others keep their live rules (rulesOf). owned marks the slices this
	// restore allocated, which it may modify in place.
	rules  map[*Chain][]*Rule
	owned  map[*Chain]bool
	policy map[*Chain]Verdict
	pcount map[*Chain][2]uint64
	opts   RestoreOptions
	// added holds the rules this restore appended or inserted, in input
	// order, for the jump-depth check.
	added []*Rule
	// ctr holds the counters the input gave rules ("[p:b] -A ..." or
	// -c P B) under --counters.
	ctr map[*Rule]counter
	// memo is Check's memo when the restore is one command (exec): a
	// rule parsed from arguments Check parsed before in the same table
	// and chain takes the text memoized (its parse succeeded, so it is
	// the rule Check parsed).
	memo map[string]checkedRule
	// text is the scratch the rules parsed save their texts in
	// (ruleParser.buf).
	text []byte
	// args is the scratch the rules parsed read their words from
	// (ruleParser.args).
	args args
}

func (nf *Netfilter) stage(t *Table, opts RestoreOptions) *staged {
	// A built-in chain keeps its policy unless the input sets one
	// (commit).
	// policy and pcount are made by the first line that sets
	// them (most commands set none).
	st := &staged{t: t, rules: map[*Chain][]*Rule{}, owned: map[*Chain]bool{}, opts: opts}
	if opts.Noflush {
		st.chains, st.live = t.chains, true
		return st
	}
	st.chains = make(map[string]*Chain, len(t.builtins))
	for n, c := range t.chains {
		if c.Builtin {
			st.chains[n] = c
			st.rules[c] = nil // flushed
		}
	}
	return st
}

// ownChains makes st.chains a map of the restore's own before a chain
// is created or deleted.
func (st *staged) ownChains() {
	if st.live {
		st.chains, st.live = maps.Clone(st.chains), false
	}
}

// rulesOf returns the rules c will have: those staged for it, else (with
// --noflush) its live rules. The slice must not be modified.
func (st *staged) rulesOf(c *Chain) []*Rule {
	if rs, ok := st.rules[c]; ok {
		return rs
	}
	if st.opts.Noflush {
		return c.rules
	}
	return nil
}

// mutable returns c's staged rules in a slice this restore owns, copying
// the live ones the first time, so that appending a rule costs O(1) and
// not a copy of the chain (KUBE-SERVICES holds a rule per service port).
func (st *staged) mutable(c *Chain) []*Rule {
	if st.owned[c] {
		return st.rules[c]
	}
	old := st.rulesOf(c)
	rs := make([]*Rule, len(old), len(old)+8)
	copy(rs, old)
	st.rules[c], st.owned[c] = rs, true
	return rs
}

func (st *staged) setPolicy(c *Chain, v Verdict) {
	if st.policy == nil {
		st.policy = map[*Chain]Verdict{}
	}
	st.policy[c] = v
}

func (st *staged) setRules(c *Chain, rs []*Rule) {
	st.rules[c] = rs
	st.owned[c] = false
}

// refs counts, per chain, the staged rules that jump or go to it.
func (st *staged) refs() map[*Chain]int {
	refs := map[*Chain]int{}
	for _, c := range st.chains {
		for _, r := range st.rulesOf(c) {
			if r.target.chain != nil {
				refs[r.target.chain]++
			}
		}
	}
	return refs
}

// chain returns the chain name for a command that changes it; a shared
// chain (Shared) cannot be changed in place: errDetach.
func (st *staged) chain(name string) (*Chain, error) {
	c := st.chains[name]
	if c == nil && st.t.base != nil && st.t.base.chains[name] != nil {
		return nil, errDetach
	}
	if c == nil {
		return nil, errorf("chain `%s' does not exist (No chain/target/match by that name)", name)
	}
	return c, nil
}

func (st *staged) newChain(name string) error {
	if err := validChainName(name); err != nil {
		return err
	}
	if st.chains[name] != nil || (st.t.base != nil && st.t.base.chains[name] != nil) {
		return errorf("chain `%s' already exists", name)
	}
	c := &Chain{Name: name}
	st.ownChains()
	st.chains[name] = c
	st.rules[c] = nil
	return nil
}

func (st *staged) parseRule(nf *Netfilter, c *Chain, words []string) (*Rule, error) {
	rp := ruleParser{nf: nf, table: st.t.Name, chain: c, chains: st.chains, base: st.t.base, buf: &st.text, args: &st.args}
	if st.memo != nil {
		if m, ok := st.memo[checkKey(st.t.Name, c.Name, words)]; ok {
			rp.text, rp.known = m.text, true
		}
	}
	r, counters, err := rp.parse(words)
	if err != nil {
		return nil, err
	}
	if st.opts.Counters && counters != nil && (counters[0] != 0 || counters[1] != 0) {
		if st.ctr == nil {
			st.ctr = map[*Rule]counter{}
		}
		st.ctr[r] = counter{counters[0], counters[1]}
	}
	return r, nil
}

func parseVerdict(s string) (Verdict, bool) {
	switch s {
	case "ACCEPT":
		return Accept, true
	case "DROP":
		return DropPolicy, true
	}
	return 0, false
}

// command applies one restore line (already split into words) to st.
func (nf *Netfilter) command(st *staged, words []string, line int) error {
	var pc []uint64
	if strings.HasPrefix(words[0], "[") {
		// "[packets:bytes] -A ...": counters of iptables-save -c.
		p, b, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(words[0], "["), "]"), ":")
		pv, ok1 := parseUint(p, 64)
		bv, ok2 := parseUint(b, 64)
		if !ok || !ok1 || !ok2 || !strings.HasSuffix(words[0], "]") {
			return errorf("Bad line: need ]")
		}
		pc = []uint64{pv, bv}
		words = words[1:]
		if len(words) == 0 {
			return errorf("no command after counters")
		}
	}
	cmd := words[0]
	rest := words[1:]
	need := func() (*Chain, error) {
		if len(rest) == 0 {
			return nil, errorf("option \"%s\" requires an argument", cmd)
		}
		return st.chain(rest[0])
	}
	switch cmd {
	case "-A", "--append", "-I", "--insert":
		c, err := need()
		if err != nil {
			return err
		}
		spec := rest[1:]
		pos := -1
		if cmd == "-I" || cmd == "--insert" {
			pos = 0
			if len(spec) > 0 {
				if n, err := strconv.Atoi(spec[0]); err == nil {
					if n < 1 || n > len(st.rulesOf(c))+1 {
						return errorf("Index of insertion too big")
					}
					pos = n - 1
					spec = spec[1:]
				}
			}
		}
		if pc != nil {
			spec = append(append([]string{}, spec...), "-c", strconv.FormatUint(pc[0], 10), strconv.FormatUint(pc[1], 10))
		}
		r, err := st.parseRule(nf, c, spec)
		if err != nil {
			return err
		}
		r.line = line
		st.added = append(st.added, r)
		rs := append(st.mutable(c), r)
		if pos >= 0 {
			copy(rs[pos+1:], rs[pos:])
			rs[pos] = r
		}
		st.rules[c] = rs
	case "-D", "--delete":
		c, err := need()
		if err != nil {
			return err
		}
		old := st.rulesOf(c)
		idx := -1
		if len(rest) == 2 {
			if n, err := strconv.Atoi(rest[1]); err == nil {
				if n < 1 || n > len(old) {
					return errorf("Index of deletion too big")
				}
				idx = n - 1
			}
		}
		if idx < 0 {
			r, err := st.parseRule(nf, c, rest[1:])
			if err != nil {
				return err
			}
			for i, o := range old {
				if o.text == r.text {
					idx = i
					break
				}
			}
			if idx < 0 {
				return errorf("Bad rule (does a matching rule exist in that chain?)")
			}
		}
		rs := st.mutable(c)
		st.rules[c] = append(rs[:idx], rs[idx+1:]...)
	case "-N", "--new-chain":
		if len(rest) != 1 {
			return errorf("-N requires one chain name")
		}
		return st.newChain(rest[0])
	case "-F", "--flush":
		if len(rest) == 0 && st.t.base != nil {
			return errDetach
		}
		if len(rest) == 0 {
			for _, c := range st.chains {
				st.setRules(c, nil)
			}
			return nil
		}
		c, err := need()
		if err != nil {
			return err
		}
		st.setRules(c, nil)
	case "-X", "--delete-chain":
		var del []*Chain
		if len(rest) == 0 && st.t.base != nil {
			return errDetach
		}
		if len(rest) == 0 {
			for _, c := range sortedChains(st.chains) {
				if !c.Builtin {
					del = append(del, c)
				}
			}
		} else {
			c, err := need()
			if err != nil {
				return err
			}
			if c.Builtin {
				return errorf("Can't delete built-in chain `%s'", c.Name)
			}
			del = append(del, c)
		}
		for _, c := range del {
			if len(st.rulesOf(c)) > 0 {
				return errorf("chain `%s' is not empty (Directory not empty)", c.Name)
			}
		}
		refs := st.refs()
		for _, c := range del {
			if refs[c] > 0 {
				return errorf("chain `%s' is referenced by a rule (Too many links)", c.Name)
			}
			st.ownChains()
			delete(st.chains, c.Name)
			delete(st.rules, c)
			delete(st.owned, c)
		}
	case "-P", "--policy":
		c, err := need()
		if err != nil {
			return err
		}
		if len(rest) != 2 {
			return errorf("-P requires a chain and a policy")
		}
		v, ok := parseVerdict(rest[1])
		if !ok || !c.Builtin {
			return errorf("Bad built-in chain name or policy `%s'", rest[1])
		}
		st.setPolicy(c, v)
	case "-Z", "--zero":
		// Counters are zeroed at commit time only for the named chains; the
		// model zeroes them immediately, which is not observable during a
		// restore.
		return errorf("-Z is not supported in restore input")
	default:
		return errorf("unknown command `%s'", cmd)
	}
	return nil
}

// declare handles ":NAME POLICY [packets:bytes]".
func (nf *Netfilter) declare(st *staged, words []string) error {
	name := strings.TrimPrefix(words[0], ":")
	if len(words) < 2 {
		return errorf("Bad chain declaration, need name and policy")
	}
	policy := words[1]
	var cnt []uint64
	if len(words) >= 3 {
		s := words[2]
		if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
			return errorf("invalid counters `%s'", s)
		}
		p, b, ok := strings.Cut(s[1:len(s)-1], ":")
		pv, ok1 := parseUint(p, 64)
		bv, ok2 := parseUint(b, 64)
		if !ok || !ok1 || !ok2 {
			return errorf("invalid counters `%s'", s)
		}
		cnt = []uint64{pv, bv}
	}
	if len(words) > 3 {
		return errorf("Bad chain declaration: trailing words")
	}
	c := st.chains[name]
	if c == nil && st.t.base != nil && st.t.base.chains[name] != nil {
		return errDetach
	}
	builtin := c != nil && c.Builtin
	if !builtin {
		if st.t.builtinByName(name) {
			// a built-in chain of this table is always present
			return errorf("Bad built-in chain name `%s'", name)
		}
		switch {
		case c != nil && st.opts.Noflush:
			st.setRules(c, nil) // --noflush: an existing chain is flushed
		case c != nil:
			return errorf("error creating chain '%s':File exists", name)
		default:
			if err := st.newChain(name); err != nil {
				return err
			}
		}
		if policy != "-" {
			return errorf("Can't set policy `%s' on `%s': Bad built-in chain name", policy, name)
		}
	} else if policy != "-" {
		v, ok := parseVerdict(policy)
		if !ok {
			return errorf("Can't set policy `%s' on `%s': Bad policy name", policy, name)
		}
		st.setPolicy(c, v)
		if st.opts.Counters && cnt != nil {
			if st.pcount == nil {
				st.pcount = map[*Chain][2]uint64{}
			}
			st.pcount[c] = [2]uint64{cnt[0], cnt[1]}
		}
	}
	return nil
}

func (t *Table) builtinByName(name string) bool {
	for _, d := range tableDefs {
		if d.name != t.Name {
			continue
		}
		for _, h := range d.hooks {
			if h.String() == name {
				return true
			}
		}
	}
	return false
}

// hookLimit is the hooks a target may be used from (the kernel's
// xt_target hooks mask), hooks naming them as iptables' error does.
type hookLimit struct {
	mask  uint8
	hooks string
}

// hookOK holds, by target kind, the targets usable from some hooks only
// (an array: summarizing a chain of ten thousand rules looks each up).
var hookOK = [256]hookLimit{
	tDNAT:       {1<<datapath.Prerouting | 1<<datapath.Output, "PREROUTING/OUTPUT"},
	tSNAT:       {1<<datapath.Postrouting | 1<<datapath.Input, "INPUT/POSTROUTING"},
	tMasquerade: {1 << datapath.Postrouting, "POSTROUTING"},
	tReject:     {1<<datapath.Input | 1<<datapath.Forward | 1<<datapath.Output, "INPUT/FORWARD/OUTPUT"},
}

// hookLimitOf returns the hooks target kind k may be used from; false
// when it may be used from any.
func hookLimitOf(k targetKind) (hookLimit, bool) {
	l := hookOK[k]
	return l, l.hooks != ""
}

func hookNames(m uint8) string {
	var s []string
	for h := datapath.Prerouting; h <= datapath.Postrouting; h++ {
		if m&(1<<h) != 0 {
			s = append(s, h.String())
		}
	}
	return strings.Join(s, "/")
}

// NFTJumpStackSize is the kernel's NFT_JUMP_STACK_SIZE (net/netfilter
// nf_tables): a chain may be entered through at most 15 nested jumps or
// gotos from a base chain; nft_chain_validate refuses a chain at level 16
// with EMLINK ("Too many links"), when the ruleset is loaded.
const NFTJumpStackSize = 16

// jumpHeight is the largest number of nested jumps below each chain,
// counting only rules for which use returns true. The graph has no loops
// (validate runs first).
func (st *staged) jumpHeight(use func(*Rule) bool) map[*Chain]int {
	h := map[*Chain]int{}
	var visit func(c *Chain) int
	visit = func(c *Chain) int {
		if v, ok := h[c]; ok {
			return v
		}
		if c.shared != nil {
			return c.height // a shared chain's rules are not this restore's
		}
		h[c] = 0
		best := 0
		for _, r := range st.rulesOf(c) {
			if tc := r.target.chain; tc != nil && use(r) {
				best = max(best, 1+visit(tc))
			}
		}
		h[c] = best
		return best
	}
	for _, b := range st.t.builtins {
		if b != nil {
			visit(b)
		}
	}
	return h
}

// tooDeep reports whether a base chain of the table reaches a chain at
// level NFTJumpStackSize.
func (st *staged) tooDeep(use func(*Rule) bool) bool {
	h := st.jumpHeight(use)
	for _, b := range st.t.builtins {
		if b != nil && h[b] >= NFTJumpStackSize {
			return true
		}
	}
	return false
}

// checkDepth is the nf_tables validation iptables-nft's batch gets: after
// each rule added, the whole table is validated, so the first rule that
// makes a chain reachable at level 16 and every rule added after it fail
// with "RULE_APPEND failed (Too many links)". It returns the first
// refused rule and the lines of all of them, or nil.
func (st *staged) checkDepth() (*Rule, []int) {
	all := func(*Rule) bool { return true }
	if !st.tooDeep(all) {
		return nil, nil
	}
	idx := make(map[*Rule]int, len(st.added))
	for i, r := range st.added {
		idx[r] = i
	}
	// Depth only grows as rules are added: find the first prefix of the
	// added rules that is too deep.
	k := sort.Search(len(st.added), func(k int) bool {
		return st.tooDeep(func(r *Rule) bool { i, ok := idx[r]; return !ok || i <= k })
	})
	if k == len(st.added) {
		// Too deep without any rule of this restore (--noflush onto a
		// table already at the limit cannot happen: it was checked).
		return nil, nil
	}
	var lines []int
	for _, r := range st.added[k:] {
		lines = append(lines, r.line)
	}
	return st.added[k], lines
}

func depthMsg(r *Rule) string {
	return "RULE_APPEND failed (Too many links): rule in chain " + r.chain.Name
}

// validate is what the kernel checks when a table is replaced
// (translate_table): no loops among chains, and every target used only
// from hooks it supports. It computes each chain's hook mask.
func (st *staged) validate() (*Rule, error) {
	sc := validateScratch.Get().(*validation)
	defer func() {
		if len(sc.masks) > 256 {
			return // a large table's: clearing it would cost the next small one
		}
		clear(sc.masks)
		clear(sc.state)
		clear(sc.reached)
		sc.reached = sc.reached[:0]
		validateScratch.Put(sc)
	}()
	masks := sc.masks
	reached := sc.reached // masks' chains, in the order first reached
	state := sc.state     // per hook: 1 visiting, 2 done
	defer func() { sc.reached = reached }()
	for h := datapath.Prerouting; h <= datapath.Postrouting; h++ {
		b := st.t.builtins[h]
		if b == nil {
			continue
		}
		clear(state)
		var visit func(c *Chain) (*Rule, error)
		visit = func(c *Chain) (*Rule, error) {
			state[c] = 1
			if masks[c] == 0 {
				reached = append(reached, c)
			}
			masks[c] |= 1 << h
			if c.shared != nil {
				// A shared chain reaches only shared chains: its summary
				// says whether the kernel would accept it from these
				// hooks; if not, the caller restores the namespace's own
				// copy for the exact error.
				state[c] = 2
				if c.shared.loops || masks[c]&^c.allowed != 0 {
					return nil, errDetach
				}
				return nil, nil
			}
			for _, r := range st.rulesOf(c) {
				tc := r.target.chain
				if tc == nil {
					continue
				}
				switch state[tc] {
				case 1:
					return r, errorf("loop detected: chain `%s' jumps back to `%s' (Too many levels of symbolic links)", c.Name, tc.Name)
				case 0:
					if rr, err := visit(tc); err != nil {
						return rr, err
					}
				}
			}
			state[c] = 2
			return nil, nil
		}
		if r, err := visit(b); err != nil {
			return r, err
		}
	}
	// In chain-name order, so that with several offending rules the same
	// one is reported every time; the names are sorted only when there is
	// one.
	if !st.misused(reached, masks) {
		return nil, nil
	}
	for _, name := range slices.Sorted(maps.Keys(st.chains)) {
		c := st.chains[name]
		for _, r := range st.rulesOf(c) {
			if ok, restricted := hookLimitOf(r.target.kind); restricted && masks[c]&^ok.mask != 0 {
				return r, errorf("%s target: used from hooks %s, but only usable from %s", r.target.name, hookNames(masks[c]), ok.hooks)
			}
		}
	}
	return nil, nil
}

// validation is validate's working state, kept between commands (a
// node's flannel and kube-proxy commands each validate their table).
type validation struct {
	masks, state map[*Chain]uint8
	reached      []*Chain
}

var validateScratch = sync.Pool{New: func() any {
	return &validation{masks: map[*Chain]uint8{}, state: map[*Chain]uint8{}}
}}

// misused reports whether a rule of the staged chains uses a target from
// a hook it is not usable from (what validate reports, in no particular
// order). Only the chains reached from a hook (reached, with their hook
// masks) can.
func (st *staged) misused(reached []*Chain, masks map[*Chain]uint8) bool {
	for _, c := range reached {
		if st.chains[c.Name] != c {
			continue
		}
		for _, r := range st.rulesOf(c) {
			if ok, restricted := hookLimitOf(r.target.kind); restricted && masks[c]&^ok.mask != 0 {
				return true
			}
		}
	}
	return false
}

func (nf *Netfilter) commit(st *staged) {
	t := st.t
	t.chains = st.chains
	t.reach = nil
	nf.edits++
	for _, c := range st.chains {
		if c.Builtin {
			if p, ok := st.policy[c]; ok {
				c.Policy = p
			}
			if pc, ok := st.pcount[c]; ok {
				c.Packets, c.Bytes = pc[0], pc[1]
			}
		}
		rs, changed := st.rules[c]
		if !changed {
			continue // a chain the restore did not touch keeps its rules as compiled
		}
		c.ctr = st.counters(c, rs)
		c.rules = rs
		for _, r := range rs {
			r.chain = c
			r.classify()
		}
		c.buildIndex()
	}
	nf.gen++
	nf.syncPassive(t) // the hooks whose chain is empty count without a call
	if !t.loaded {
		t.loaded = true
		nf.order = append(nf.order, t.Name)
	}
}

// counters returns the counters of c's rules once they are rs: those the
// input gave, else those the rules kept from before had (a rule keeps its
// counters when other rules are inserted or deleted around it), else zero.
func (st *staged) counters(c *Chain, rs []*Rule) []counter {
	old := c.rules
	if len(old) == len(rs) && (len(rs) == 0 || &old[0] == &rs[0]) && len(st.ctr) == 0 {
		return c.ctr // the chain's rules are unchanged
	}
	var at map[*Rule]int
	if c.ctr != nil {
		at = make(map[*Rule]int, len(old))
		for i, r := range old {
			at[r] = i
		}
	}
	var ctr []counter
	for i, r := range rs {
		k, ok := st.ctr[r]
		if !ok && at != nil {
			if j, kept := at[r]; kept {
				k = c.ctr[j]
			}
		}
		if k != (counter{}) {
			if ctr == nil {
				ctr = make([]counter, len(rs))
			}
			ctr[i] = k
		}
	}
	return ctr
}

// Restore loads iptables-save formatted input, as iptables-restore does:
// "*table" starts a table, ":CHAIN POLICY [p:b]" declares a chain, lines
// starting with "-" are iptables commands (-A, -I, -D, -N, -X, -F, -P) and
// "COMMIT" ends the table. Blank lines and "#" comments are ignored.
// Everything is parsed and checked before anything changes: on any error
// (a *ParseError naming the line) no table is modified.
func (nf *Netfilter) Restore(input string, opts RestoreOptions) error {
	nf.settle()
	err := nf.restore(input, opts)
	if err == errDetach {
		// The input changes a shared chain: the namespace takes its own
		// copy of its shared chains, then restores.
		for _, name := range []string{Raw, Mangle, NAT, Filter} {
			nf.detach(nf.tables[name])
		}
		err = nf.restore(input, opts)
	}
	return err
}

func (nf *Netfilter) restore(input string, opts RestoreOptions) error {
	return nf.restoreLines(strings.Split(input, "\n"), opts)
}

// restoreLines is restore of the input whose lines (split at "\n") are
// lines: a caller holding an input by its lines (patchShared's scratch
// restore of the chains kube-proxy wrote anew) restores them without
// writing them out and splitting them again.
func (nf *Netfilter) restoreLines(lines []string, opts RestoreOptions) error {
	var done []*staged
	var cur *staged
	curLine, curText := 0, ""
	for i, raw := range lines {
		ln := i + 1
		text := strings.TrimRight(raw, "\r")
		trim := strings.TrimSpace(text)
		if trim == "" || trim[0] == '#' {
			continue
		}
		fail := func(err error) error {
			if err == errDetach {
				return err
			}
			return &ParseError{Line: ln, Text: text, Msg: err.Error()}
		}
		switch {
		case trim[0] == '*':
			if cur != nil {
				return fail(errorf("table `%s' not committed before `%s'", cur.t.Name, trim))
			}
			t := nf.tables[strings.TrimSpace(trim[1:])]
			if t == nil {
				return fail(errorf("can't initialize iptables table `%s': Table does not exist", trim[1:]))
			}
			for _, d := range done {
				if d.t == t {
					return fail(errorf("table `%s' appears twice", t.Name))
				}
			}
			cur, curLine, curText = nf.stage(t, opts), ln, text
		case trim == "COMMIT":
			if cur == nil {
				return fail(errorf("COMMIT outside of a table"))
			}
			if r, err := cur.validate(); err != nil {
				if err == errDetach {
					return err
				}
				if r != nil && r.line > 0 {
					return &ParseError{Line: r.line, Text: strings.TrimRight(lines[r.line-1], "\r"), Msg: err.Error()}
				}
				return fail(err)
			}
			if r, refused := cur.checkDepth(); r != nil {
				return &ParseError{Line: r.line, Text: strings.TrimRight(lines[r.line-1], "\r"), Msg: depthMsg(r), Lines: refused}
			}
			done = append(done, cur)
			cur = nil
		case cur == nil:
			return fail(errorf("no table specified (missing *table line)"))
		case trim[0] == ':':
			words, err := splitLine(trim)
			if err != nil {
				return fail(err)
			}
			if err := nf.declare(cur, words); err != nil {
				return fail(err)
			}
		default:
			words, err := splitLine(trim)
			if err != nil {
				return fail(err)
			}
			if err := nf.command(cur, words, ln); err != nil {
				return fail(err)
			}
		}
	}
	if cur != nil {
		return &ParseError{Line: curLine, Text: curText, Msg: "COMMIT expected at end of input"}
	}
	for _, st := range done {
		nf.commit(st)
	}
	return nil
}

// Exec runs one iptables command on a table, e.g.
// Exec("nat", "-A", "POSTROUTING", "-s", "10.244.0.0/16", "-j", "MASQUERADE"),
// with the same checks as Restore (the table is otherwise unchanged, as
// with --noflush). It is how components that call iptables directly
// (ensureRule in kube-proxy, the CNI plugins) change rules.
func (nf *Netfilter) Exec(table string, args ...string) error {
	nf.settle()
	err := nf.exec(table, args)
	if err == errDetach {
		nf.detach(nf.tables[table])
		err = nf.exec(table, args)
	}
	return err
}

func (nf *Netfilter) exec(table string, args []string) error {
	t := nf.tables[table]
	text := func() string { return "-t " + table + " " + strings.Join(args, " ") }
	if t == nil {
		return &ParseError{Text: text(), Msg: "can't initialize iptables table `" + table + "': Table does not exist"}
	}
	if len(args) == 0 {
		return &ParseError{Text: text(), Msg: "no command specified"}
	}
	st := nf.stage(t, RestoreOptions{Noflush: true})
	st.memo = nf.checked
	if err := nf.command(st, args, 0); err != nil {
		if err == errDetach {
			return err
		}
		return &ParseError{Text: text(), Msg: err.Error()}
	}
	if _, err := st.validate(); err != nil {
		if err == errDetach {
			return err
		}
		return &ParseError{Text: text(), Msg: err.Error()}
	}
	// Only a new jump or goto can make a chain too deep.
	if n := len(st.added); n > 0 && st.added[n-1].target.chain != nil {
		if r, _ := st.checkDepth(); r != nil {
			return &ParseError{Text: text(), Msg: depthMsg(r)}
		}
	}
	nf.commit(st)
	return nil
}

// Check reports whether chain in table holds a rule equal to the rule
// specification args (iptables -C), comparing the saved form.
func (nf *Netfilter) Check(table, chain string, args ...string) (bool, error) {
	t := nf.tables[table]
	if t == nil {
		return false, &ParseError{Text: table, Msg: "Table does not exist"}
	}
	c := t.lookup(chain)
	if c == nil {
		return false, &ParseError{Text: chain, Msg: errorf("chain `%s' does not exist (No chain/target/match by that name)", chain).Error()}
	}
	key := checkKey(table, chain, args)
	// A memoized rule parses the same while the chain it jumps to is
	// there: nothing else it names (no ipset, no recent table) is looked
	// up when it is parsed.
	if m, ok := nf.checked[key]; ok && (m.target == "" || t.lookup(m.target) != nil) {
		return c.hasRuleText(m.text), nil
	}
	st := nf.stage(t, RestoreOptions{Noflush: true})
	r, err := st.parseRule(nf, c, args)
	if err != nil {
		return false, &ParseError{Text: strings.Join(args, " "), Msg: err.Error()}
	}
	if r.memoizable() {
		if nf.checked == nil {
			nf.checked = map[string]checkedRule{}
		} else if len(nf.checked) >= checkedMax {
			clear(nf.checked) // shared (ShareChecks): cleared for every namespace sharing it
		}
		m := checkedRule{text: r.text}
		if r.target.chain != nil {
			m.target = r.target.chain.Name
		}
		nf.checked[key] = m
	}
	return c.hasRuleText(r.text), nil
}

// CheckMemo is a memo of what Check's arguments parse to, shared by the
// namespaces given it (ShareChecks): every node's kube-proxy checks the
// same jump rules, and they parse to the same rule text in every
// namespace where the chain they jump to exists (the memo is keyed by
// table, chain and arguments; rules whose parse consults the namespace,
// naming an ipset or a recent table, are not memoized). The zero value is
// ready to use. Not safe for concurrent use: the namespaces sharing one
// are used from one goroutine.
type CheckMemo struct{ m map[string]checkedRule }

// ShareChecks makes Check use m for its memo, as every other namespace
// given m does. It changes no answer Check gives, only how often the
// arguments are parsed.
func (nf *Netfilter) ShareChecks(m *CheckMemo) {
	if m.m == nil {
		m.m = map[string]checkedRule{}
	}
	nf.checked = m.m
}

// checkKey is the key of Check's memo.
func checkKey(table, chain string, args []string) string {
	return table + "\x00" + chain + "\x00" + strings.Join(args, "\x00")
}

// hasRuleText reports whether c holds a rule iptables-save prints as text
// (iptables -C compares the rule given with each rule of the chain).
func (c *Chain) hasRuleText(text string) bool {
	for _, o := range c.rules {
		if o.text == text {
			return true
		}
	}
	return false
}

// memoizable reports whether parsing r's arguments again would give the
// same rule while its jump target exists: it names no ipset and no
// recent table, whose existence and state parsing consults.
func (r *Rule) memoizable() bool {
	for _, m := range r.ms {
		if n := m.name(); n == "set" || n == "recent" {
			return false
		}
	}
	return true
}

// Edits returns how many iptables-restore inputs and iptables commands
// have changed the namespace's tables so far (loading a shared ruleset
// is not counted): while it stays the same, what Check answers stays
// the same for the rules of the namespace's built-in and own chains.
func (nf *Netfilter) Edits() uint64 { return nf.edits }
