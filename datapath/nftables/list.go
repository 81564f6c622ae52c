package nftables

import (
	"slices"
	"strconv"
	"strings"
)

// ListRuleset is `nft list ruleset`: every table in creation order.
func (n *NFTables) ListRuleset() string {
	var b strings.Builder
	for _, t := range n.tables {
		b.WriteString(t.List())
	}
	return b.String()
}

// ListTable is `nft list table FAMILY NAME`; ok is false when there is no
// such table (nft: "Error: No such file or directory").
func (n *NFTables) ListTable(family, name string) (string, bool) {
	t := n.Table(family, name)
	if t == nil {
		return "", false
	}
	return t.List(), true
}

// List prints the table as nft 1.0.6 lists it: the comment, sets and
// maps, then chains, each in creation order, objects separated by a blank
// line, rules as nft normalises them (meta mark, a one-element anonymous
// set as its value, counters with their values). Set elements are printed
// sorted by key, wrapped as nft wraps them (two addresses, five integers
// or one concatenation per line); the kernel returns hash-set elements in
// hash order, so compare elements as a set.
func (t *Table) List() string {
	var b strings.Builder
	b.WriteString("table " + t.Family + " " + t.Name + " {\n")
	first := true
	sep := func() {
		if !first {
			b.WriteString("\n")
		}
		first = false
	}
	if t.Comment != "" {
		b.WriteString("\tcomment " + quote(t.Comment) + "\n")
	}
	for _, s := range t.sets {
		sep()
		kind := "set"
		if s.Map {
			kind = "map"
		}
		b.WriteString("\t" + kind + " " + s.Name + " {\n")
		typ := keyName(s.Key)
		if s.Map {
			typ += " : verdict"
		}
		b.WriteString("\t\ttype " + typ + "\n")
		if s.Size > 0 {
			b.WriteString("\t\tsize " + strconv.Itoa(s.Size) + "\n")
		}
		if len(s.Flags) > 0 {
			b.WriteString("\t\tflags " + strings.Join(s.Flags, ",") + "\n")
		}
		if s.Timeout > 0 {
			b.WriteString("\t\ttimeout " + formatDuration(s.Timeout) + "\n")
		}
		if s.Comment != "" {
			b.WriteString("\t\tcomment " + quote(s.Comment) + "\n")
		}
		els := s.Elements()
		if len(els) > 0 {
			b.WriteString("\t\telements = { ")
			per := 1
			if len(s.Key) == 1 {
				switch s.Key[0] {
				case tIPv4:
					per = 2
				case tProto, tService, tInteger, tMark:
					per = 5
				}
			}
			for i, e := range els {
				if i > 0 {
					if i%per == 0 {
						b.WriteString(",\n\t\t\t     ")
					} else {
						b.WriteString(", ")
					}
				}
				b.WriteString(e.text(s))
				if s.dynamic && e.expires != 0 {
					b.WriteString(" timeout " + formatDuration(s.Timeout))
				}
			}
			b.WriteString(" }\n")
		}
		b.WriteString("\t}\n")
	}
	for _, c := range t.chains {
		sep()
		b.WriteString("\tchain " + c.Name + " {\n")
		if c.Comment != "" {
			b.WriteString("\t\tcomment " + quote(c.Comment) + "\n")
		}
		if c.Base() {
			pol := "accept"
			if c.PolicyDrop {
				pol = "drop"
			}
			b.WriteString("\t\ttype " + c.Type + " hook " + hookName(c.Hook) + " priority " + priorityString(c.Hook, c.Priority) + "; policy " + pol + ";\n")
		}
		for _, r := range c.rules {
			b.WriteString("\t\t" + r.String() + "\n")
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// CanonicalListing rewrites an `nft list` output so two listings of the
// same ruleset compare equal: the elements inside every `{ ... }` set or
// map (named sets' `elements = { ... }`, possibly wrapped over lines, and
// anonymous sets in rules) are sorted and put on one line. The kernel
// returns hash-set elements in hash-bucket order, which differs from run
// to run; nothing else is changed.
func CanonicalListing(s string) string {
	var out strings.Builder
	for len(s) > 0 {
		i := strings.Index(s, "{ ")
		if i < 0 {
			out.WriteString(s)
			break
		}
		j := strings.Index(s[i:], " }")
		if j < 0 {
			out.WriteString(s)
			break
		}
		body := s[i+2 : i+j]
		if strings.Contains(body, "{") {
			out.WriteString(s[:i+2])
			s = s[i+2:]
			continue
		}
		out.WriteString(s[:i])
		var parts []string
		for _, p := range strings.Split(body, ",") {
			parts = append(parts, strings.TrimSpace(p))
		}
		slices.Sort(parts)
		out.WriteString("{ " + strings.Join(parts, ", ") + " }")
		s = s[i+j+2:]
	}
	return out.String()
}
