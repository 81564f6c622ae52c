package nftables

import (
	"github.com/kubewalk/kubewalk/datapath"
)

// staged is a transaction's copy of the ruleset.
type staged struct {
	tables []*Table
}

func (st *staged) table(family, name string) *Table {
	for _, t := range st.tables {
		if t.Family == family && t.Name == name {
			return t
		}
	}
	return nil
}

// referenced reports whether any rule or map element of t jumps to c.
func (st *staged) referenced(t *Table, c *Chain) bool {
	for _, ch := range t.chains {
		for _, r := range ch.rules {
			for _, e := range r.exprs {
				if refsChain(e, c.Name) {
					return true
				}
			}
		}
	}
	for _, s := range t.sets {
		for _, el := range s.elems {
			if el.verdict.name == c.Name {
				return true
			}
		}
	}
	return false
}

func refsChain(e expr, name string) bool {
	switch x := e.(type) {
	case *verdictStmt:
		return x.v.name == name
	case *vmap:
		if x.set.anonymous {
			for _, el := range x.set.elems {
				if el.verdict.name == name {
					return true
				}
			}
		}
	case *numgen:
		for _, el := range x.set.elems {
			if el.verdict.name == name {
				return true
			}
		}
	}
	return false
}

func (st *staged) setReferenced(t *Table, s *Set) bool {
	for _, ch := range t.chains {
		for _, r := range ch.rules {
			for _, e := range r.exprs {
				switch x := e.(type) {
				case *lookup:
					if x.name == s.Name && !x.set.anonymous {
						return true
					}
				case *vmap:
					if x.name == s.Name && !x.set.anonymous {
						return true
					}
				case *update:
					if x.name == s.Name {
						return true
					}
				}
			}
		}
	}
	return false
}

// Apply runs an `nft -f` input as one transaction. file names the input
// in error messages ("/dev/stdin" when empty). Every command is checked
// against the ruleset as the commands before it left it; on any error the
// ruleset is unchanged and the error is an Errors with each failing
// command's *Error.
func (n *NFTables) Apply(file, input string) error {
	if file == "" {
		file = "/dev/stdin"
	}
	toks, lines, lerr := lex(input)
	mk := func(line, col, end int, msg string) *Error {
		text := ""
		if line-1 < len(lines) && line > 0 {
			text = lines[line-1]
		}
		return &Error{File: file, Line: line, Col: col, EndCol: end, Msg: msg, Text: text}
	}
	if lerr != nil {
		return Errors{mk(lerr.line, lerr.col, lerr.end, lerr.msg)}
	}
	st := &staged{}
	for _, t := range n.tables {
		st.tables = append(st.tables, t.clone())
	}
	relink(st.tables)
	var errs Errors
	start := 0
	for i := 0; i <= len(toks); i++ {
		if i < len(toks) && !toks[i].nl && toks[i].text != ";" {
			continue
		}
		// ';' separates commands only outside braces.
		if i < len(toks) && toks[i].text == ";" && depth(toks[start:i]) > 0 {
			continue
		}
		cmd := toks[start:i]
		if i < len(toks) {
			cmd = toks[start : i+1]
			if !toks[i].nl {
				cmd = append(append([]token(nil), toks[start:i]...), token{nl: true, line: toks[i].line, col: toks[i].col, end: toks[i].end})
			}
		}
		start = i + 1
		if len(cmd) == 0 || (len(cmd) == 1 && cmd[0].nl) {
			continue
		}
		p := &parser{toks: cmd, st: st}
		if err := p.command(); err != nil {
			errs = append(errs, mk(err.tok.line, err.tok.col, err.tok.end, err.msg))
			if len(errs) >= 10 {
				break
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	n.commit(st)
	return nil
}

func depth(ts []token) int {
	d := 0
	for _, t := range ts {
		if t.quoted {
			continue
		}
		switch t.text {
		case "{":
			d++
		case "}":
			d--
		}
	}
	return d
}

// relink points every rule and element at the chains and sets of tables
// (after a clone the copies still point at the originals).
func relink(tables []*Table) {
	for _, t := range tables {
		fix := func(v *verdictVal) {
			if v.name != "" {
				v.chain = t.Chain(v.name)
			}
		}
		for _, s := range t.sets {
			for _, el := range s.elems {
				fix(&el.verdict)
			}
		}
		for _, c := range t.chains {
			for i, r := range c.rules {
				nr := *r
				nr.chain = c
				nr.exprs = make([]expr, len(r.exprs))
				for j, e := range r.exprs {
					nr.exprs[j] = relinkExpr(t, e, fix)
					if ctr, ok := nr.exprs[j].(*counter); ok {
						nr.counter = ctr
					}
				}
				c.rules[i] = &nr
			}
		}
	}
}

func relinkExpr(t *Table, e expr, fix func(*verdictVal)) expr {
	switch x := e.(type) {
	case *verdictStmt:
		y := *x
		fix(&y.v)
		return &y
	case *lookup:
		y := *x
		if !x.set.anonymous {
			y.set = t.Set(x.name)
		}
		return &y
	case *vmap:
		y := *x
		if x.set.anonymous {
			y.set = x.set.clone()
			for _, el := range y.set.elems {
				fix(&el.verdict)
			}
		} else {
			y.set = t.Set(x.name)
		}
		return &y
	case *numgen:
		y := *x
		y.set = x.set.clone()
		for _, el := range y.set.elems {
			fix(&el.verdict)
		}
		return &y
	case *update:
		y := *x
		y.set = t.Set(x.name)
		return &y
	case *counter:
		y := *x
		return &y
	}
	return e
}

// commit installs the staged ruleset and re-registers the base chains on
// their hooks.
func (n *NFTables) commit(st *staged) {
	for _, r := range n.registered {
		if r.nat {
			n.nf.UnregisterNAT(r.hook, r.name)
		} else {
			n.ns.RemoveHookStage(r.hook, r.name)
		}
	}
	n.registered = nil
	n.tables = st.tables
	for _, t := range n.tables {
		for _, c := range t.chains {
			if !c.Base() {
				continue
			}
			name := "nftables/" + t.Family + " " + t.Name + " " + c.Name
			if c.Type == "nat" {
				n.nf.RegisterNAT(c.Hook, c.Priority, name, &natChain{n: n, c: c})
				n.registered = append(n.registered, hookReg{hook: c.Hook, name: name, nat: true})
				continue
			}
			n.ns.AddHookStage(c.Hook, name, c.Priority, &filterChain{n: n, c: c})
			n.registered = append(n.registered, hookReg{hook: c.Hook, name: name})
		}
	}
}

var _ datapath.Stage = (*filterChain)(nil)
