package nftables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// cmdErr is an error at a token.
type cmdErr struct {
	tok token
	msg string
}

// parser walks the tokens of one command against the staged ruleset.
type parser struct {
	toks []token
	i    int
	st   *staged
}

func (p *parser) peek() token {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return token{nl: true}
}

func (p *parser) next() token {
	t := p.peek()
	if p.i < len(p.toks) {
		p.i++
	}
	return t
}

func (p *parser) atEnd() bool { return p.peek().nl }

func unexpected(t token, expecting string) *cmdErr {
	what := "string"
	switch {
	case t.nl:
		what = "newline"
	case t.quoted:
		what = "quoted string"
	case t.text == "{":
		what = "'{'"
	case t.text == "}":
		what = "'}'"
	case t.text == ",":
		what = "comma"
	case t.text == ";":
		what = "semicolon"
	case t.text == ":":
		what = "colon"
	case isNumber(t.text):
		what = "number"
	case keywords[t.text]:
		what = t.text
	}
	msg := "syntax error, unexpected " + what
	if expecting != "" {
		msg += ", expecting " + expecting
	}
	return &cmdErr{tok: t, msg: msg}
}

// keywords are the words nft's scanner returns as their own tokens (a
// subset: those that matter for error messages here).
var keywords = map[string]bool{"add": true, "create": true, "insert": true, "delete": true, "flush": true, "table": true,
	"chain": true, "rule": true, "set": true, "map": true, "element": true, "ip": true, "ip6": true, "inet": true,
	"type": true, "hook": true, "priority": true, "policy": true, "jump": true, "goto": true, "accept": true, "drop": true,
	"return": true, "reject": true, "counter": true, "dnat": true, "snat": true, "masquerade": true, "meta": true,
	"ct": true, "fib": true, "numgen": true, "vmap": true, "comment": true, "tcp": true, "udp": true, "th": true,
	"mark": true, "ruleset": true, "elements": true, "flags": true, "timeout": true, "update": true, "saddr": true,
	"daddr": true, "dport": true, "sport": true, "state": true, "to": true, "mod": true, "random": true}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func (p *parser) expect(word string) *cmdErr {
	t := p.next()
	if t.quoted || t.text != word {
		return unexpected(t, "'"+word+"'")
	}
	return nil
}

// setRef reads `@name` (the '@' already read as at); the token spans both,
// as nft marks it in errors.
func (p *parser) setRef(at token) (token, *cmdErr) {
	nt, e := p.name()
	if e != nil {
		return nt, e
	}
	nt.col = at.col
	return nt, nil
}

// name reads an identifier (table, chain, set name).
func (p *parser) name() (token, *cmdErr) {
	t := p.next()
	if t.nl || t.quoted || len(t.text) == 1 && strings.Contains("{},;:@", t.text) {
		return t, unexpected(t, "string")
	}
	return t, nil
}

// family reads an optional family; nft defaults to ip.
func (p *parser) family() (string, *cmdErr) {
	t := p.peek()
	switch t.text {
	case "ip":
		p.next()
		return "ip", nil
	case "ip6", "inet", "arp", "bridge", "netdev":
		p.next()
		return "", &cmdErr{tok: t, msg: "family " + t.text + " is not modelled (only ip)"}
	}
	return "ip", nil
}

// command parses and applies one command.
func (p *parser) command() *cmdErr {
	verb := p.next()
	switch verb.text {
	case "add", "create", "insert", "delete", "flush", "destroy":
	default:
		return unexpected(verb, "")
	}
	obj := p.next()
	switch obj.text {
	case "table":
		return p.table(verb)
	case "chain":
		return p.chain(verb)
	case "rule":
		if verb.text != "add" && verb.text != "insert" {
			return unexpected(obj, "")
		}
		return p.rule(verb)
	case "set", "map":
		return p.set(verb, obj.text == "map")
	case "element":
		if verb.text != "add" && verb.text != "create" && verb.text != "delete" {
			return unexpected(obj, "")
		}
		return p.element(verb)
	case "ruleset":
		if verb.text != "flush" {
			return unexpected(obj, "")
		}
		p.st.tables = nil
		return p.end()
	}
	// `add [family] TABLE CHAIN RULE` is `add rule ...`: obj was the
	// table, and the chain name must follow.
	if (verb.text == "add" || verb.text == "insert") && !obj.quoted && !obj.nl && !keywords[obj.text] {
		if n := p.peek(); n.nl || n.quoted || keywords[n.text] || isNumber(n.text) {
			return unexpected(n, "string")
		}
		p.i -= 1
		return p.rule(verb)
	}
	return unexpected(obj, "")
}

func (p *parser) end() *cmdErr {
	if !p.atEnd() {
		return unexpected(p.next(), "end of file")
	}
	return nil
}

func (p *parser) tableRef() (*Table, token, *cmdErr) {
	fam, err := p.family()
	if err != nil {
		return nil, token{}, err
	}
	nt, err := p.name()
	if err != nil {
		return nil, nt, err
	}
	return p.st.table(fam, nt.text), nt, nil
}

func (p *parser) table(verb token) *cmdErr {
	fam, err := p.family()
	if err != nil {
		return err
	}
	nt, err := p.name()
	if err != nil {
		return err
	}
	t := p.st.table(fam, nt.text)
	switch verb.text {
	case "add", "create":
		if t != nil && verb.text == "create" {
			return &cmdErr{tok: nt, msg: msgCouldNot + msgExist}
		}
		if t == nil {
			t = &Table{Family: fam, Name: nt.text}
			p.st.tables = append(p.st.tables, t)
		}
		if p.peek().text == "{" {
			p.next()
			for p.peek().text != "}" {
				k := p.next()
				switch k.text {
				case "comment":
					v := p.next()
					if !v.quoted {
						return unexpected(v, "quoted string")
					}
					t.Comment = v.text
				case ";":
					continue
				default:
					return unexpected(k, "'}'")
				}
			}
			p.next()
		}
		return p.end()
	case "delete", "flush", "destroy":
		if t == nil {
			if verb.text == "destroy" {
				return p.end()
			}
			return &cmdErr{tok: nt, msg: msgCouldNot + msgNoEnt}
		}
		if verb.text == "flush" {
			for _, c := range t.chains {
				c.rules = nil
			}
			for _, s := range t.sets {
				s.elems = map[string]*Element{}
			}
		} else {
			p.st.tables = slices.DeleteFunc(p.st.tables, func(x *Table) bool { return x == t })
		}
		return p.end()
	}
	return unexpected(verb, "")
}

func (p *parser) chain(verb token) *cmdErr {
	t, tt, err := p.tableRef()
	if err != nil {
		return err
	}
	if t == nil {
		return &cmdErr{tok: tt, msg: msgNoEnt}
	}
	nt, err := p.name()
	if err != nil {
		return err
	}
	c := t.Chain(nt.text)
	switch verb.text {
	case "delete", "destroy":
		if c == nil {
			if verb.text == "destroy" {
				return p.end()
			}
			return &cmdErr{tok: nt, msg: msgCouldNot + msgNoEnt}
		}
		if p.st.referenced(t, c) {
			return &cmdErr{tok: nt, msg: msgCouldNot + msgBusy}
		}
		t.deleteChain(c)
		return p.end()
	case "flush":
		if c == nil {
			return &cmdErr{tok: nt, msg: msgCouldNot + msgNoEnt}
		}
		c.rules = nil
		return p.end()
	case "add", "create":
	default:
		return unexpected(verb, "")
	}
	if len(nt.text) > 255 {
		return &cmdErr{tok: nt, msg: msgCouldNot + "Numerical result out of range"}
	}
	if c != nil && verb.text == "create" {
		return &cmdErr{tok: nt, msg: msgCouldNot + msgExist}
	}
	nc := &Chain{Name: nt.text, table: t}
	if p.peek().text == "{" {
		p.next()
		for p.peek().text != "}" {
			k := p.next()
			switch k.text {
			case ";":
			case "comment":
				v := p.next()
				if !v.quoted {
					return unexpected(v, "quoted string")
				}
				nc.Comment = v.text
			case "type":
				ty := p.next()
				if ty.text != "filter" && ty.text != "nat" {
					return &cmdErr{tok: ty, msg: "unknown chain type"}
				}
				nc.Type = ty.text
				if e := p.expect("hook"); e != nil {
					return e
				}
				h := p.next()
				hk, ok := hookNames[h.text]
				if !ok {
					return &cmdErr{tok: h, msg: "unknown chain hook"}
				}
				nc.Hook = hk
				if e := p.expect("priority"); e != nil {
					return e
				}
				prio, e := p.priority(hk)
				if e != nil {
					return e
				}
				nc.Priority = prio
				if nc.Type == "nat" && (hk == datapath.Forward) {
					return &cmdErr{tok: h, msg: msgCouldNot + msgNotSupp}
				}
			case "policy":
				v := p.next()
				switch v.text {
				case "accept":
				case "drop":
					nc.PolicyDrop = true
				default:
					return unexpected(v, "accept or drop")
				}
			default:
				return unexpected(k, "'}'")
			}
		}
		p.next()
	}
	if err := p.end(); err != nil {
		return err
	}
	if c != nil {
		// Re-adding a chain may only repeat its declaration.
		if nc.Type != "" && (nc.Type != c.Type || nc.Hook != c.Hook || nc.Priority != c.Priority) {
			return &cmdErr{tok: nt, msg: msgCouldNot + msgExist}
		}
		if nc.Comment != "" {
			c.Comment = nc.Comment
		}
		return nil
	}
	t.addChain(nc)
	return nil
}

func (p *parser) priority(h datapath.Hook) (int, *cmdErr) {
	t := p.next()
	s := t.text
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	for _, np := range namedPriorities {
		if strings.HasPrefix(s, np.name) {
			rest := s[len(np.name):]
			if rest == "" && (p.peek().text == "+" || p.peek().text == "-") {
				op := p.next().text
				num := p.next()
				n, err := strconv.Atoi(num.text)
				if err != nil {
					return 0, unexpected(num, "number")
				}
				rest = op + strconv.Itoa(n)
			}
			if np.hooks != nil && !slices.Contains(np.hooks, h) {
				return 0, &cmdErr{tok: t, msg: "'" + s + "' is invalid priority in this context."}
			}
			off := 0
			if rest != "" {
				n, err := strconv.Atoi(strings.TrimPrefix(rest, "+"))
				if err != nil {
					return 0, unexpected(t, "")
				}
				off = n
			}
			return np.val + off, nil
		}
	}
	return 0, &cmdErr{tok: t, msg: "'" + s + "' is invalid priority."}
}

func parseDuration(s string) (time.Duration, bool) {
	var d time.Duration
	num := 0
	have := false
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			num = num*10 + int(r-'0')
			have = true
		case strings.ContainsRune("dhms", r) && have:
			u := map[rune]time.Duration{'d': 24 * time.Hour, 'h': time.Hour, 'm': time.Minute, 's': time.Second}[r]
			d += time.Duration(num) * u
			num, have = 0, false
		default:
			return 0, false
		}
	}
	if have {
		d += time.Duration(num) * time.Second
	}
	return d, true
}

// formatDuration prints a timeout as nft does (3h, 1h30m, 10s).
func formatDuration(d time.Duration) string {
	s := int64(d / time.Second)
	var b strings.Builder
	for _, u := range []struct {
		n   int64
		sfx string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}} {
		if s >= u.n {
			b.WriteString(strconv.FormatInt(s/u.n, 10) + u.sfx)
			s %= u.n
		}
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}

func (p *parser) set(verb token, isMap bool) *cmdErr {
	t, tt, err := p.tableRef()
	if err != nil {
		return err
	}
	if t == nil {
		return &cmdErr{tok: tt, msg: msgNoEnt}
	}
	nt, err := p.name()
	if err != nil {
		return err
	}
	s := t.Set(nt.text)
	switch verb.text {
	case "delete", "destroy":
		if s == nil {
			if verb.text == "destroy" {
				return p.end()
			}
			return &cmdErr{tok: nt, msg: msgCouldNot + msgNoEnt}
		}
		if p.st.setReferenced(t, s) {
			return &cmdErr{tok: nt, msg: msgCouldNot + msgBusy}
		}
		t.sets = slices.DeleteFunc(t.sets, func(x *Set) bool { return x == s })
		return p.end()
	case "flush":
		if s == nil {
			return &cmdErr{tok: nt, msg: msgCouldNot + msgNoEnt}
		}
		s.elems = map[string]*Element{}
		return p.end()
	case "add", "create":
	default:
		return unexpected(verb, "")
	}
	ns := &Set{Name: nt.text, Map: isMap, elems: map[string]*Element{}}
	if e := p.expect("{"); e != nil {
		return e
	}
	var elemToks []token
	for p.peek().text != "}" {
		k := p.next()
		switch k.text {
		case ";":
		case "type":
			for {
				ty := p.next()
				dt, ok := dtypeNames[ty.text]
				if !ok || dt == tVerdict {
					return &cmdErr{tok: ty, msg: "unknown datatype " + ty.text}
				}
				ns.Key = append(ns.Key, dt)
				if p.peek().text == "." {
					p.next()
					continue
				}
				break
			}
			if isMap {
				if e := p.expect(":"); e != nil {
					return e
				}
				v := p.next()
				if v.text != "verdict" {
					return &cmdErr{tok: v, msg: "map data type " + v.text + " is not modelled (only verdict)"}
				}
			}
		case "flags":
			f := p.next()
			for _, fl := range strings.Split(f.text, ",") {
				switch fl {
				case "dynamic":
					ns.dynamic = true
				case "timeout":
					ns.hasTimeout = true
				case "interval", "constant":
				default:
					return unexpected(f, "")
				}
				ns.Flags = append(ns.Flags, fl)
			}
		case "timeout":
			v := p.next()
			d, ok := parseDuration(v.text)
			if !ok {
				return &cmdErr{tok: v, msg: "invalid timeout value"}
			}
			ns.Timeout = d
		case "size":
			v := p.next()
			n, e := strconv.Atoi(v.text)
			if e != nil {
				return unexpected(v, "number")
			}
			ns.Size = n
		case "comment":
			v := p.next()
			if !v.quoted {
				return unexpected(v, "quoted string")
			}
			ns.Comment = v.text
		case "elements":
			if e := p.expect("="); e != nil {
				return e
			}
			start := p.i
			if e := p.skipBraces(); e != nil {
				return e
			}
			elemToks = p.toks[start:p.i]
		default:
			return unexpected(k, "'}'")
		}
	}
	p.next()
	if err := p.end(); err != nil {
		return err
	}
	if len(ns.Key) == 0 {
		return &cmdErr{tok: nt, msg: "set definition does not specify key"}
	}
	if ns.dynamic && ns.Size == 0 {
		ns.Size = 65535
	}
	if s != nil {
		if !slices.Equal(s.Key, ns.Key) || s.Map != ns.Map {
			return &cmdErr{tok: nt, msg: msgCouldNot + msgExist}
		}
		s.Comment = ns.Comment
	} else {
		t.sets = append(t.sets, ns)
		s = ns
	}
	if elemToks != nil {
		sub := &parser{toks: append(slices.Clone(elemToks), token{nl: true}), st: p.st}
		return sub.elements(t, s, false)
	}
	return nil
}

// skipBraces skips a balanced { ... }.
func (p *parser) skipBraces() *cmdErr {
	if e := p.expect("{"); e != nil {
		return e
	}
	depth := 1
	for depth > 0 {
		t := p.next()
		if t.nl {
			return unexpected(t, "'}'")
		}
		switch t.text {
		case "{":
			depth++
		case "}":
			depth--
		}
	}
	return nil
}

func (p *parser) element(verb token) *cmdErr {
	t, tt, err := p.tableRef()
	if err != nil {
		return err
	}
	if t == nil {
		return &cmdErr{tok: tt, msg: msgNoEnt}
	}
	nt, err := p.name()
	if err != nil {
		return err
	}
	s := t.Set(nt.text)
	if s == nil {
		return &cmdErr{tok: nt, msg: msgNoEnt}
	}
	if err := p.elements(t, s, verb.text == "delete"); err != nil {
		return err
	}
	return p.end()
}

// elements parses `{ elem, elem }` into s (or deletes them).
func (p *parser) elements(t *Table, s *Set, del bool) *cmdErr {
	if e := p.expect("{"); e != nil {
		return e
	}
	for {
		if p.peek().text == "}" {
			p.next()
			return nil
		}
		first := p.peek()
		el, e := p.elementKey(s)
		if e != nil {
			return e
		}
		if p.peek().text == "comment" {
			p.next()
			c := p.next()
			if !c.quoted {
				return unexpected(c, "quoted string")
			}
			el.Comment = c.text
		}
		if s.Map && !del {
			if e := p.expect(":"); e != nil {
				return e
			}
			v, e := p.verdict(t)
			if e != nil {
				return e
			}
			el.verdict = v
		}
		if del {
			if _, ok := s.elems[string(el.key)]; !ok {
				return &cmdErr{tok: first, msg: msgCouldNot + msgNoEnt}
			}
			delete(s.elems, string(el.key))
		} else if s.interval {
			s.prefixes = append(s.prefixes, el)
		} else {
			if old, ok := s.elems[string(el.key)]; ok && (old.verdict.code != el.verdict.code || old.verdict.name != el.verdict.name) {
				return &cmdErr{tok: first, msg: msgCouldNot + msgExist}
			}
			s.elems[string(el.key)] = el
		}
		switch p.peek().text {
		case ",":
			p.next()
		case "}":
		default:
			return unexpected(p.next(), "comma or '}'")
		}
	}
}

// elementKey parses one key: values of s.Key joined by " . ".
func (p *parser) elementKey(s *Set) (*Element, *cmdErr) {
	el := &Element{}
	var key []byte
	var texts []string
	for i, ty := range s.Key {
		if i > 0 {
			if e := p.expect("."); e != nil {
				return nil, e
			}
		}
		vt := p.next()
		if ty == tIPv4 && strings.Contains(vt.text, "/") {
			if !s.interval {
				return nil, &cmdErr{tok: vt, msg: "You must add 'flags interval' to your set declaration if you want to add prefix elements"}
			}
			pf, err := netip.ParsePrefix(vt.text)
			if err != nil || !pf.Addr().Is4() {
				return nil, &cmdErr{tok: vt, msg: "Could not resolve hostname: Name or service not known"}
			}
			pf = pf.Masked()
			a := pf.Addr().As4()
			el.lo = be32(a[:])
			el.hi = el.lo | (^uint32(0) >> pf.Bits())
			if pf.Bits() == 0 {
				el.hi = ^uint32(0)
			}
			el.keyText = pf.String()
			if pf.Bits() == 32 {
				el.keyText = pf.Addr().String()
			}
			return el, nil
		}
		v, e := parseValue(ty, vt)
		if e != nil {
			return nil, e
		}
		if s.interval && ty == tIPv4 {
			el.lo, el.hi = v, v
		}
		switch ty.width() {
		case 1:
			key = append(key, byte(v))
		case 2:
			key = append(key, byte(v>>8), byte(v))
		default:
			key = append(key, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		}
		texts = append(texts, formatValue(ty, v))
	}
	el.key = key
	el.keyText = strings.Join(texts, " . ")
	return el, nil
}

var protoNumbers = map[string]uint32{"tcp": 6, "udp": 17, "icmp": 1, "sctp": 132}

func parseValue(ty dtype, t token) (uint32, *cmdErr) {
	s := t.text
	switch ty {
	case tIPv4:
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return 0, &cmdErr{tok: t, msg: "Could not resolve hostname: Name or service not known"}
		}
		b := a.As4()
		return be32(b[:]), nil
	case tProto:
		if v, ok := protoNumbers[s]; ok {
			return v, nil
		}
		n, err := strconv.ParseUint(s, 10, 8)
		if err != nil {
			return 0, &cmdErr{tok: t, msg: "Could not resolve protocol name"}
		}
		return uint32(n), nil
	case tService:
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return 0, &cmdErr{tok: t, msg: "Could not resolve service: Servname not supported for ai_socktype"}
		}
		return uint32(n), nil
	case tCTState:
		var v uint32
		for _, part := range strings.Split(s, ",") {
			found := false
			for _, c := range ctStateNames {
				if c.name == part {
					v |= c.bit
					found = true
				}
			}
			if !found {
				return 0, &cmdErr{tok: t, msg: "Could not parse ct state"}
			}
		}
		return v, nil
	case tFibAddr:
		switch s {
		case "local":
			return rtnLocal, nil
		case "unicast":
			return rtnUnicast, nil
		}
		return 0, &cmdErr{tok: t, msg: "Could not parse fib_addrtype"}
	}
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, &cmdErr{tok: t, msg: "Could not parse integer"}
	}
	return uint32(n), nil
}

// verdict parses accept, drop, return, continue, jump X, goto X; a chain
// must exist in t.
func (p *parser) verdict(t *Table) (verdictVal, *cmdErr) {
	v := p.next()
	switch v.text {
	case "accept":
		return verdictVal{code: vAccept}, nil
	case "drop":
		return verdictVal{code: vDrop}, nil
	case "return":
		return verdictVal{code: vReturn}, nil
	case "continue":
		return verdictVal{code: vContinue}, nil
	case "jump", "goto":
		n, e := p.name()
		if e != nil {
			return verdictVal{}, e
		}
		c := t.Chain(n.text)
		if c == nil {
			return verdictVal{}, &cmdErr{tok: n, msg: msgCouldNot + msgNoEnt}
		}
		code := vJump
		if v.text == "goto" {
			code = vGoto
		}
		return verdictVal{code: code, chain: c, name: n.text}, nil
	}
	return verdictVal{}, unexpected(v, "")
}

func (p *parser) rule(verb token) *cmdErr {
	t, tt, err := p.tableRef()
	if err != nil {
		return err
	}
	if t == nil {
		return &cmdErr{tok: tt, msg: msgNoEnt}
	}
	ct, err := p.name()
	if err != nil {
		return err
	}
	c := t.Chain(ct.text)
	if c == nil {
		return &cmdErr{tok: ct, msg: msgCouldNot + msgNoEnt}
	}
	r := &Rule{chain: c}
	for !p.atEnd() {
		if p.peek().text == "comment" {
			p.next()
			v := p.next()
			if !v.quoted {
				return unexpected(v, "quoted string")
			}
			r.Comment = v.text
			continue
		}
		e, cerr := p.expr(t, c, r)
		if cerr != nil {
			return cerr
		}
		r.exprs = append(r.exprs, e)
	}
	if len(r.exprs) == 0 {
		return unexpected(p.peek(), "")
	}
	if verb.text == "insert" {
		c.rules = append([]*Rule{r}, c.rules...)
	} else {
		c.rules = append(c.rules, r)
	}
	return nil
}

// selector parses a selector word sequence; ok false if the next tokens
// are not one.
func (p *parser) selector() (sel, bool, *cmdErr) {
	t := p.peek()
	two := func(m map[string]sel) (sel, bool, *cmdErr) {
		p.next()
		f := p.next()
		s, ok := m[f.text]
		if !ok {
			return 0, false, unexpected(f, "")
		}
		return s, true, nil
	}
	switch t.text {
	case "ip":
		return two(map[string]sel{"saddr": sIPSaddr, "daddr": sIPDaddr, "protocol": sIPProto})
	case "tcp":
		return two(map[string]sel{"sport": sTCPSport, "dport": sTCPDport})
	case "udp":
		return two(map[string]sel{"sport": sUDPSport, "dport": sUDPDport})
	case "th":
		return two(map[string]sel{"sport": sTHSport, "dport": sTHDport})
	case "meta":
		return two(map[string]sel{"l4proto": sL4Proto, "mark": sMark})
	case "mark":
		p.next()
		return sMark, true, nil
	case "ct":
		return two(map[string]sel{"state": sCTState})
	case "fib":
		s, ok, e := two(map[string]sel{"saddr": sFibSaddr, "daddr": sFibDaddr})
		if e != nil {
			return s, ok, e
		}
		if e := p.expect("type"); e != nil {
			return 0, false, e
		}
		return s, ok, nil
	}
	return 0, false, nil
}

// expr parses one match or statement.
func (p *parser) expr(t *Table, c *Chain, r *Rule) (expr, *cmdErr) {
	tok := p.peek()
	switch tok.text {
	case "accept", "drop", "return", "continue", "jump", "goto":
		v, e := p.verdict(t)
		if e != nil {
			return nil, e
		}
		return &verdictStmt{v: v}, nil
	case "reject":
		p.next()
		if p.peek().text == "with" {
			return nil, &cmdErr{tok: p.peek(), msg: "reject with is not modelled"}
		}
		return &reject{code: 3, text: "reject"}, nil
	case "counter":
		p.next()
		ctr := &counter{}
		r.counter = ctr
		return ctr, nil
	case "dnat", "snat":
		p.next()
		if e := p.expect("to"); e != nil {
			return nil, e
		}
		at := p.next()
		ap, err := netip.ParseAddrPort(at.text)
		var port uint16
		var addr netip.Addr
		if err == nil {
			addr, port = ap.Addr(), ap.Port()
		} else if a, err2 := netip.ParseAddr(at.text); err2 == nil {
			addr = a
		} else {
			return nil, &cmdErr{tok: at, msg: "Could not resolve hostname: Name or service not known"}
		}
		if !addr.Is4() {
			return nil, &cmdErr{tok: at, msg: "Could not resolve hostname: Name or service not known"}
		}
		if c.Base() && c.Type != "nat" {
			return nil, &cmdErr{tok: tok, msg: msgCouldNot + msgNotSupp}
		}
		return &nat{kind: tok.text, addr: addr.As4(), port: port, text: tok.text + " to " + at.text}, nil
	case "masquerade":
		p.next()
		n := &nat{kind: "masquerade", text: "masquerade"}
		for p.peek().text == "fully-random" || p.peek().text == "random" || p.peek().text == "persistent" {
			f := p.next().text
			n.text += " " + f
			switch f {
			case "fully-random":
				n.flags |= conntrack.RandomFully
			case "random":
				n.flags |= conntrack.Random
			case "persistent":
				n.flags |= conntrack.Persistent
			}
		}
		if c.Base() && (c.Type != "nat" || c.Hook != datapath.Postrouting && c.Hook != datapath.Input) {
			return nil, &cmdErr{tok: tok, msg: msgCouldNot + msgNotSupp}
		}
		return n, nil
	case "update", "add":
		p.next()
		at := p.next()
		if at.text != "@" {
			return nil, unexpected(at, "'@'")
		}
		nt, e := p.setRef(at)
		if e != nil {
			return nil, e
		}
		s := t.Set(nt.text)
		if s == nil {
			return nil, &cmdErr{tok: nt, msg: msgNoEnt}
		}
		if e := p.expect("{"); e != nil {
			return nil, e
		}
		sels, e := p.concat()
		if e != nil {
			return nil, e
		}
		if e := p.expect("}"); e != nil {
			return nil, e
		}
		if !s.dynamic {
			return nil, &cmdErr{tok: nt, msg: msgCouldNot + msgNotSupp}
		}
		return &update{sels: sels, set: s, name: nt.text}, nil
	case "numgen":
		p.next()
		if e := p.expect("random"); e != nil {
			return nil, e
		}
		if e := p.expect("mod"); e != nil {
			return nil, e
		}
		mt := p.next()
		mod, err := strconv.ParseUint(mt.text, 10, 32)
		if err != nil || mod == 0 {
			return nil, unexpected(mt, "number")
		}
		if e := p.expect("vmap"); e != nil {
			return nil, e
		}
		s := &Set{Key: []dtype{tInteger}, Map: true, anonymous: true, elems: map[string]*Element{}}
		if e := p.elements(t, s, false); e != nil {
			return nil, e
		}
		return &numgen{mod: uint32(mod), set: s}, nil
	}
	// A match: selectors, optional binop, then operator and value, set,
	// or vmap.
	sels, e := p.concat()
	if e != nil {
		return nil, e
	}
	if len(sels) == 0 {
		return nil, unexpected(p.next(), "")
	}
	if len(sels) == 1 && sels[0] == sMark && p.peek().text == "set" {
		p.next()
		return p.markSet()
	}
	var mask uint32 = ^uint32(0)
	binop := false
	if len(sels) == 1 && (p.peek().text == "&" || p.peek().text == "and") {
		p.next()
		mt := p.next()
		v, e := parseValue(tMark, mt)
		if e != nil {
			return nil, e
		}
		mask, binop = v, true
	}
	neg := false
	switch p.peek().text {
	case "==":
		p.next()
	case "!=":
		p.next()
		neg = true
	}
	switch p.peek().text {
	case "vmap":
		p.next()
		var s *Set
		name := ""
		if p.peek().text == "@" {
			nt, e := p.setRef(p.next())
			if e != nil {
				return nil, e
			}
			s = t.Set(nt.text)
			if s == nil {
				return nil, &cmdErr{tok: nt, msg: msgNoEnt}
			}
			if !s.Map {
				return nil, &cmdErr{tok: nt, msg: "Expression is not a map"}
			}
			if !keyMatches(s.Key, sels) {
				return nil, &cmdErr{tok: nt, msg: "datatype mismatch, map expects " + keyName(s.Key) + ", mapping expression has type " + keyName(selTypes(sels))}
			}
			name = nt.text
		} else {
			s = &Set{Key: selTypes(sels), Map: true, anonymous: true, elems: map[string]*Element{}}
			if e := p.elements(t, s, false); e != nil {
				return nil, e
			}
		}
		return &vmap{sels: sels, set: s, name: name}, nil
	case "@":
		nt, e := p.setRef(p.next())
		if e != nil {
			return nil, e
		}
		s := t.Set(nt.text)
		if s == nil {
			return nil, &cmdErr{tok: nt, msg: msgNoEnt}
		}
		if s.Map || !keyMatches(s.Key, sels) {
			return nil, &cmdErr{tok: nt, msg: "datatype mismatch, expected " + keyName(s.Key) + ", expression has type " + keyName(selTypes(sels))}
		}
		return &lookup{sels: sels, neg: neg, set: s, name: nt.text}, nil
	case "{":
		s := &Set{Key: selTypes(sels), anonymous: true, interval: len(sels) == 1 && sels[0].dtype() == tIPv4, elems: map[string]*Element{}}
		if e := p.elements(t, s, false); e != nil {
			return nil, e
		}
		if s.interval && len(s.prefixes) == 1 {
			el := s.prefixes[0]
			return prefixCmp(sels[0], neg, el.lo, el.hi), nil
		}
		if !s.interval && len(s.elems) == 1 {
			for _, el := range s.elems {
				v := uint32(0)
				for _, b := range el.key {
					v = v<<8 | uint32(b)
				}
				if len(sels) == 1 {
					return &cmp{s: sels[0], neg: neg, mask: ^uint32(0), val: v}, nil
				}
			}
		}
		return &lookup{sels: sels, neg: neg, set: s}, nil
	}
	if len(sels) != 1 {
		return nil, unexpected(p.next(), "")
	}
	vt := p.next()
	s0 := sels[0]
	if s0.dtype() == tIPv4 && strings.Contains(vt.text, "/") {
		pf, err := netip.ParsePrefix(vt.text)
		if err != nil || !pf.Addr().Is4() {
			return nil, &cmdErr{tok: vt, msg: "Could not resolve hostname: Name or service not known"}
		}
		pf = pf.Masked()
		a := pf.Addr().As4()
		lo := be32(a[:])
		return prefixCmp(s0, neg, lo, lo|^uint32(0)>>pf.Bits()), nil
	}
	v, e := parseValue(s0.dtype(), vt)
	if e != nil {
		return nil, e
	}
	if s0 == sCTState && !neg {
		return &cmp{s: s0, val: v, mask: ^uint32(0), bitset: true}, nil
	}
	return &cmp{s: s0, neg: neg, mask: mask, binop: binop, val: v & mask}, nil
}

func prefixCmp(s sel, neg bool, lo, hi uint32) *cmp {
	bits := 32
	for m := hi ^ lo; m != 0; m >>= 1 {
		bits--
	}
	mask := ^uint32(0)
	if bits < 32 {
		mask = ^uint32(0) << (32 - bits)
	}
	if bits == 0 {
		mask = 0
	}
	c := &cmp{s: s, neg: neg, mask: mask, val: lo & mask}
	if bits < 32 {
		c.prefix = bits
	}
	return c
}

func (p *parser) markSet() (expr, *cmdErr) {
	// meta mark set meta mark | v, mark set mark or v, mark set v
	if p.peek().text == "mark" || p.peek().text == "meta" {
		if p.next().text == "meta" {
			if e := p.expect("mark"); e != nil {
				return nil, e
			}
		}
		opt := p.next()
		ops := map[string]byte{"|": '|', "or": '|', "^": '^', "xor": '^', "&": '&', "and": '&'}
		op, ok := ops[opt.text]
		if !ok {
			return nil, unexpected(opt, "")
		}
		vt := p.next()
		v, e := parseValue(tMark, vt)
		if e != nil {
			return nil, e
		}
		return &markSet{op: op, val: v}, nil
	}
	vt := p.next()
	v, e := parseValue(tMark, vt)
	if e != nil {
		return nil, e
	}
	return &markSet{op: '=', val: v}, nil
}

// concat parses `sel . sel . sel`.
func (p *parser) concat() ([]sel, *cmdErr) {
	var out []sel
	for {
		s, ok, e := p.selector()
		if e != nil {
			return nil, e
		}
		if !ok {
			if len(out) > 0 {
				return nil, unexpected(p.next(), "")
			}
			return nil, nil
		}
		out = append(out, s)
		if p.peek().text != "." {
			return out, nil
		}
		p.next()
	}
}

func selTypes(sels []sel) []dtype {
	var out []dtype
	for _, s := range sels {
		out = append(out, s.dtype())
	}
	return out
}

func keyMatches(k []dtype, sels []sel) bool { return slices.Equal(k, selTypes(sels)) }

func keyName(k []dtype) string {
	var p []string
	for _, t := range k {
		p = append(p, t.String())
	}
	return strings.Join(p, " . ")
}
