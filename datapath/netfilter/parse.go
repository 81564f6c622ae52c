package netfilter

import (
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// args is a cursor over a rule's words.
type args struct {
	v []string
	i int
}

func (a *args) next() (string, bool) {
	if a.i >= len(a.v) {
		return "", false
	}
	s := a.v[a.i]
	a.i++
	return s, true
}

func (a *args) value(opt string) (string, error) {
	s, ok := a.next()
	if !ok {
		return "", errorf("option \"%s\" requires an argument", opt)
	}
	return s, nil
}

// ruleErr is an error in a rule, before the line is known.
type ruleErr struct{ msg string }

func (e *ruleErr) Error() string { return e.msg }

func errorf(format string, v ...any) error { return &ruleErr{msg: sprintf(format, v...)} }

// splitLine tokenises a restore line the way iptables-restore's
// add_param_to_argv does: words split on blanks; a double-quoted string is
// one word in which a backslash escapes the next character.
func splitLine(s string) ([]string, error) {
	if strings.IndexByte(s, '"') < 0 {
		return splitPlain(s), nil
	}
	return splitQuoted(s)
}

// isBlank is what splits words on a restore line.
func isBlank(ch byte) bool { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' }

// splitPlain is splitLine of a line with no double quote (nearly every
// line kube-proxy and the CNI plugins write): its words are substrings
// of one copy of the line, so that a word a rule keeps does not hold the
// whole restore input, and the line costs two allocations, not a few per
// word.
func splitPlain(s string) []string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !isBlank(s[i]) && (i == 0 || isBlank(s[i-1])) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	s = strings.Clone(s)
	out := make([]string, 0, n)
	start := -1
	for i := 0; i < len(s); i++ {
		switch {
		case isBlank(s[i]):
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
		case start < 0:
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// splitQuoted is splitLine of a line with double quotes. Its words are
// substrings of one string of the line's characters with the quotes
// and escapes taken out, so the line costs two allocations (that string
// and the word slice), not one or more per word.
func splitQuoted(s string) ([]string, error) {
	var b strings.Builder
	b.Grow(len(s))
	var buf [64]int
	bounds := buf[:0] // each word's start and end in b
	inWord, quoted, escaped := false, false, false
	start := 0
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if quoted {
			switch {
			case escaped:
				b.WriteByte(ch)
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				quoted = false
			default:
				b.WriteByte(ch)
			}
			continue
		}
		switch ch {
		case '"':
			if !inWord {
				start = b.Len()
			}
			quoted, inWord = true, true
		case ' ', '\t', '\n', '\r':
			if inWord {
				bounds = append(bounds, start, b.Len())
				inWord = false
			}
		default:
			if !inWord {
				start = b.Len()
			}
			b.WriteByte(ch)
			inWord = true
		}
	}
	if quoted {
		return nil, errorf("unterminated quoted string")
	}
	if inWord {
		bounds = append(bounds, start, b.Len())
	}
	if len(bounds) == 0 {
		return nil, nil
	}
	all := b.String()
	out := make([]string, len(bounds)/2)
	for i := range out {
		out[i] = all[bounds[2*i]:bounds[2*i+1]]
	}
	return out, nil
}

// parseAddr parses -s/-d values: a.b.c.d, a.b.c.d/len or a.b.c.d/mask.
// Host names are not resolved.
func parseAddr(s string) (addr, mask uint32, err error) {
	ip, m, hasMask := strings.Cut(s, "/")
	a, e := netip.ParseAddr(ip)
	if e != nil || !a.Is4() {
		return 0, 0, errorf("host/network `%s' not found", ip)
	}
	mask = 0xffffffff
	if hasMask {
		if n, e := strconv.Atoi(m); e == nil {
			if n < 0 || n > 32 {
				return 0, 0, errorf("invalid mask `%s' specified", m)
			}
			mask = 0
			if n > 0 {
				mask = ^uint32(0) << (32 - n)
			}
		} else if ma, e := netip.ParseAddr(m); e == nil && ma.Is4() {
			b := ma.As4()
			mask = be32(b[:])
		} else {
			return 0, 0, errorf("invalid mask `%s' specified", m)
		}
	}
	b := a.As4()
	return be32(b[:]) & mask, mask, nil
}

var protoNames = map[string]uint8{"all": 0, "icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51, "sctp": 132, "udplite": 136}

func protoName(p uint8) string {
	for n, v := range protoNames {
		if v == p && n != "all" {
			return n
		}
	}
	return strconv.Itoa(int(p))
}

func parseProto(s string) (uint8, error) {
	if v, ok := protoNames[strings.ToLower(s)]; ok {
		return v, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, errorf("unknown protocol \"%s\" specified", s)
	}
	return uint8(n), nil
}

func parseIface(s string) (name string, wild bool, err error) {
	if len(s) == 0 || len(s) > 15 {
		return "", false, errorf("interface name `%s' must be shorter than IFNAMSIZ (15)", s)
	}
	if strings.HasSuffix(s, "+") {
		return s[:len(s)-1], true, nil
	}
	return s, false, nil
}

// parseUint parses like strtoul with base 0 (0x hex, leading 0 octal).
func parseUint(s string, bits int) (uint64, bool) {
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		// strconv base 0 accepts 0o and _; strtoul does not, which only
		// makes us more lenient.
		return 0, false
	}
	return v, true
}

func parsePort(s string) (uint16, error) {
	v, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, errorf("invalid port/service `%s' specified", s)
	}
	return uint16(v), nil
}

func parsePortRange(s string) (portRange, error) {
	lo, hi, isRange := strings.Cut(s, ":")
	if !isRange {
		p, err := parsePort(s)
		return portRange{p, p}, err
	}
	r := portRange{0, 0xffff}
	var err error
	if lo != "" {
		if r.lo, err = parsePort(lo); err != nil {
			return r, err
		}
	}
	if hi != "" {
		if r.hi, err = parsePort(hi); err != nil {
			return r, err
		}
	}
	if r.lo > r.hi {
		return r, errorf("invalid portrange (min > max)")
	}
	return r, nil
}

var builtinTargets = map[string]targetKind{"ACCEPT": tAccept, "DROP": tDrop, "RETURN": tReturn, "REJECT": tReject,
	"DNAT": tDNAT, "SNAT": tSNAT, "MASQUERADE": tMasquerade, "MARK": tMark, "LOG": tLog}

// validChainName applies iptables' checks on a new chain name.
func validChainName(name string) error {
	switch {
	case name == "":
		return errorf("empty chain name is not allowed")
	case len(name) > 28:
		return errorf("chain name `%s' too long (must be under 29 chars)", name)
	case name[0] == '-' || name[0] == '!':
		return errorf("chain name not allowed to start with `%c'", name[0])
	case strings.ContainsAny(name, " \t\n"):
		return errorf("chain name `%s' contains whitespace", name)
	}
	if _, ok := builtinTargets[name]; ok {
		return errorf("chain name may not clash with target name")
	}
	return nil
}

// ruleParser parses the words of one rule after "-A CHAIN".
type ruleParser struct {
	nf    *Netfilter
	table string
	chain *Chain
	// chains resolves jump targets in the table being built, then base.
	chains map[string]*Chain
	base   *Shared
	// known: the rule's text is text (memoized by Check: the same
	// arguments parsed in the same table and chain).
	text  string
	known bool
	// buf, when set, is where the rule's text is saved before it is
	// copied into its own string (a restore's scratch, so that a rule
	// costs that one string, not a slice grown from nothing as well).
	buf *[]byte
	// args, when set, is where the rule's words are read from (a
	// restore's scratch; no match keeps it past its option call).
	args *args
}

func (rp *ruleParser) parse(words []string) (*Rule, []uint64, error) {
	r := &Rule{chain: rp.chain, smsk: 0, dmsk: 0}
	// The matches named, at most: r.ms is made once (an implicit
	// protocol match grows it).
	nm := 0
	for _, w := range words {
		if w == "-m" || w == "--match" {
			nm++
		}
	}
	if nm > 0 {
		r.ms = make([]match, 0, nm)
	}
	a := rp.args
	if a == nil {
		a = &args{}
	}
	*a = args{v: words}
	var counters []uint64
	inv := false
	var tg *target
	seen := map[string]bool{}
	once := func(o string) error {
		if seen[o] {
			return errorf("multiple %s flags not allowed", o)
		}
		seen[o] = true
		return nil
	}
	for {
		w, ok := a.next()
		if !ok {
			break
		}
		if w == "!" {
			if inv {
				return nil, nil, errorf("multiple consecutive ! not allowed")
			}
			inv = true
			continue
		}
		if tg != nil && strings.HasPrefix(w, "--") {
			handled, err := rp.targetOption(r, tg, w, inv, a)
			if err != nil {
				return nil, nil, err
			}
			if handled {
				inv = false
				continue
			}
		}
		switch w {
		case "-s", "--source", "--src":
			if err := once("-s"); err != nil {
				return nil, nil, err
			}
			v, err := a.value(w)
			if err != nil {
				return nil, nil, err
			}
			if r.src, r.smsk, err = parseAddr(v); err != nil {
				return nil, nil, err
			}
			r.invSrc = inv
		case "-d", "--destination", "--dst":
			if err := once("-d"); err != nil {
				return nil, nil, err
			}
			v, err := a.value(w)
			if err != nil {
				return nil, nil, err
			}
			if r.dst, r.dmsk, err = parseAddr(v); err != nil {
				return nil, nil, err
			}
			r.invDst = inv
		case "-p", "--protocol":
			if err := once("-p"); err != nil {
				return nil, nil, err
			}
			v, err := a.value(w)
			if err != nil {
				return nil, nil, err
			}
			if r.proto, err = parseProto(v); err != nil {
				return nil, nil, err
			}
			if r.proto == 0 && inv {
				return nil, nil, errorf("rule would never match protocol")
			}
			r.invProto = inv
		case "-i", "--in-interface", "-o", "--out-interface":
			out := w == "-o" || w == "--out-interface"
			key := "-i"
			if out {
				key = "-o"
			}
			if err := once(key); err != nil {
				return nil, nil, err
			}
			v, err := a.value(w)
			if err != nil {
				return nil, nil, err
			}
			name, wild, err := parseIface(v)
			if err != nil {
				return nil, nil, err
			}
			if out {
				r.out, r.outWild, r.invOut = name, wild, inv
			} else {
				r.in, r.inWild, r.invIn = name, wild, inv
			}
		case "-f", "--fragment":
			r.frag, r.invFrag = true, inv
		case "-m", "--match":
			if inv {
				return nil, nil, errorf("unexpected ! flag before --match")
			}
			v, err := a.value(w)
			if err != nil {
				return nil, nil, err
			}
			m, err := rp.newMatch(v)
			if err != nil {
				return nil, nil, err
			}
			r.ms = append(r.ms, m)
		case "-j", "--jump", "-g", "--goto":
			if tg != nil {
				return nil, nil, errorf("multiple -j flags not allowed")
			}
			if inv {
				return nil, nil, errorf("cannot have ! before -j")
			}
			v, err := a.value(w)
			if err != nil {
				return nil, nil, err
			}
			r.target.name = v
			tg = &r.target
			isGoto := w == "-g" || w == "--goto"
			if k, ok := builtinTargets[v]; ok {
				if isGoto {
					return nil, nil, errorf("goto '%s' is not a chain", v)
				}
				tg.kind = k
				rp.targetDefaults(tg)
			} else {
				c := rp.chains[v]
				if c == nil && rp.base != nil {
					c = rp.base.chains[v]
				}
				if c == nil || c.Builtin {
					return nil, nil, errorf("Couldn't load target `%s':No such file or directory", v)
				}
				tg.chain = c
				tg.kind = tJump
				if isGoto {
					tg.kind = tGoto
				}
			}
		case "-c", "--set-counters":
			p, err1 := a.value(w)
			b, err2 := a.value(w)
			if err1 != nil || err2 != nil {
				return nil, nil, errorf("-c requires packet and byte counter")
			}
			pv, ok1 := parseUint(p, 64)
			bv, ok2 := parseUint(b, 64)
			if !ok1 || !ok2 {
				return nil, nil, errorf("-c packet counter not numeric")
			}
			counters = []uint64{pv, bv}
		default:
			if !strings.HasPrefix(w, "-") {
				return nil, nil, errorf("Bad argument `%s'", w)
			}
			handled := false
			for i := len(r.ms) - 1; i >= 0 && !handled; i-- {
				h, err := r.ms[i].option(w, inv, a)
				if err != nil {
					return nil, nil, err
				}
				handled = h
			}
			if !handled {
				// iptables loads the protocol's match implicitly for its
				// options (-p tcp --dport 80 saves as -m tcp --dport 80).
				var m match
				switch {
				case r.proto == datapath.ProtoTCP && !r.invProto:
					m = newTCPMatch(false)
				case r.proto == datapath.ProtoUDP && !r.invProto:
					m = newTCPMatch(true)
				case r.proto == datapath.ProtoICMP && !r.invProto:
					m = &icmpMatch{}
				case r.proto == datapath.ProtoSCTP && !r.invProto:
					m = newSCTPMatch()
				}
				if m != nil {
					h, err := m.option(w, inv, a)
					if err != nil {
						return nil, nil, err
					}
					if h {
						r.ms = append(r.ms, m)
						handled = true
					}
				}
			}
			if !handled {
				return nil, nil, errorf("unknown option \"%s\"", w)
			}
		}
		inv = false
	}
	if inv {
		return nil, nil, errorf("! not allowed at the end of a rule")
	}
	for _, m := range r.ms {
		if err := m.check(r); err != nil {
			return nil, nil, err
		}
	}
	if err := rp.checkTarget(r); err != nil {
		return nil, nil, err
	}
	if r.chain.Builtin {
		h := r.chain.Hook
		if r.in != "" && (h == datapath.Output || h == datapath.Postrouting) {
			return nil, nil, errorf("Can't use -i with %s", h)
		}
		if r.out != "" && (h == datapath.Prerouting || h == datapath.Input) {
			return nil, nil, errorf("Can't use -o with %s", h)
		}
	}
	switch {
	case rp.known:
		r.text = rp.text
	case rp.buf != nil:
		*rp.buf = r.save((*rp.buf)[:0])
		r.text = string(*rp.buf)
	default:
		r.text = string(r.save(nil))
	}
	return r, counters, nil
}

func (rp *ruleParser) newMatch(name string) (match, error) {
	switch name {
	case "tcp":
		return newTCPMatch(false), nil
	case "udp":
		return newTCPMatch(true), nil
	case "sctp":
		return newSCTPMatch(), nil
	case "icmp":
		return &icmpMatch{}, nil
	case "comment":
		return &commentMatch{}, nil
	case "statistic":
		return &statisticMatch{}, nil
	case "mark":
		return &markMatch{}, nil
	case "conntrack":
		return &conntrackMatch{}, nil
	case "addrtype":
		return &addrtypeMatch{}, nil
	case "multiport":
		return &multiportMatch{}, nil
	case "recent":
		return &recentMatch{name_: "DEFAULT", mask: 0xffffffff, nf: rp.nf}, nil
	case "set":
		return &setMatch{nf: rp.nf}, nil
	case "physdev":
		return &physdevMatch{}, nil
	case "ipvs":
		return &ipvsMatch{nf: rp.nf}, nil
	}
	return nil, errorf("Couldn't load match `%s':No such file or directory", name)
}

func (rp *ruleParser) targetDefaults(tg *target) {
	switch tg.kind {
	case tReject:
		tg.rejectCode = 3 // icmp-port-unreachable
	case tLog:
		tg.logLevel = 4
	}
}

// rejectTypes is libipt_REJECT's reject_table, in its order.
var rejectTypes = []struct {
	name, alias string
	code        uint8
	tcpReset    bool
}{
	{"icmp-net-unreachable", "net-unreach", 0, false},
	{"icmp-host-unreachable", "host-unreach", 1, false},
	{"icmp-proto-unreachable", "proto-unreach", 2, false},
	{"icmp-port-unreachable", "port-unreach", 3, false},
	{"icmp-net-prohibited", "net-prohib", 9, false},
	{"icmp-host-prohibited", "host-prohib", 10, false},
	{"tcp-reset", "tcp-rst", 0, true},
	{"icmp-admin-prohibited", "admin-prohib", 13, false},
}

func rejectName(tg *target) string {
	for _, t := range rejectTypes {
		if t.tcpReset == tg.tcpReset && (tg.tcpReset || t.code == tg.rejectCode) {
			return t.name
		}
	}
	return "icmp-port-unreachable"
}

func parseNATRange(s string, ports bool) (conntrack.NATRange, error) {
	var r conntrack.NATRange
	ipPart, portPart, hasPort := s, "", false
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		ipPart, portPart, hasPort = s[:i], s[i+1:], true
	}
	if ipPart != "" {
		lo, hi, isRange := strings.Cut(ipPart, "-")
		a, err := netip.ParseAddr(lo)
		if err != nil || !a.Is4() {
			return r, errorf("Bad IP address \"%s\"", lo)
		}
		r.MinIP = a.As4()
		r.MaxIP = r.MinIP
		if isRange {
			b, err := netip.ParseAddr(hi)
			if err != nil || !b.Is4() {
				return r, errorf("Bad IP address \"%s\"", hi)
			}
			r.MaxIP = b.As4()
			if be32(r.MaxIP[:]) < be32(r.MinIP[:]) {
				return r, errorf("Bad IP range \"%s\"", ipPart)
			}
		}
		r.Flags |= conntrack.MapIPs
	}
	if hasPort {
		lo, hi, isRange := strings.Cut(portPart, "-")
		p, err := strconv.ParseUint(lo, 10, 16)
		if err != nil || p == 0 {
			return r, errorf("Port \"%s\" not valid", lo)
		}
		r.MinPort, r.MaxPort = uint16(p), uint16(p)
		if isRange {
			q, err := strconv.ParseUint(hi, 10, 16)
			if err != nil || q == 0 || q < p {
				return r, errorf("Port range \"%s\" not valid", portPart)
			}
			r.MaxPort = uint16(q)
		}
		r.Flags |= conntrack.ProtoSpecified
	}
	if r.Flags == 0 {
		return r, errorf("bad --to-%s \"%s\"", map[bool]string{true: "destination", false: "source"}[ports], s)
	}
	return r, nil
}

func (rp *ruleParser) targetOption(r *Rule, tg *target, opt string, inv bool, a *args) (bool, error) {
	if inv {
		switch tg.kind {
		case tReject, tDNAT, tSNAT, tMasquerade, tMark, tLog:
			return false, errorf("unexpected ! flag before %s", opt)
		}
	}
	switch tg.kind {
	case tReject:
		if opt != "--reject-with" {
			return false, nil
		}
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		for _, t := range rejectTypes {
			if v == t.name || v == t.alias {
				tg.rejectCode, tg.tcpReset = t.code, t.tcpReset
				return true, nil
			}
		}
		return false, errorf("unknown reject type \"%s\"", v)
	case tDNAT, tSNAT:
		want := "--to-destination"
		if tg.kind == tSNAT {
			want = "--to-source"
		}
		switch opt {
		case want:
			if tg.nat.Flags&(conntrack.MapIPs|conntrack.ProtoSpecified) != 0 {
				return false, errorf("Multiple %s not supported", want)
			}
			v, err := a.value(opt)
			if err != nil {
				return false, err
			}
			rg, err := parseNATRange(v, tg.kind == tDNAT)
			if err != nil {
				return false, err
			}
			tg.nat.Flags |= rg.Flags
			tg.nat.MinIP, tg.nat.MaxIP, tg.nat.MinPort, tg.nat.MaxPort = rg.MinIP, rg.MaxIP, rg.MinPort, rg.MaxPort
		case "--random":
			tg.nat.Flags |= conntrack.Random
		case "--persistent":
			tg.nat.Flags |= conntrack.Persistent
		case "--random-fully":
			if tg.kind != tSNAT {
				return false, nil
			}
			tg.nat.Flags |= conntrack.RandomFully
		default:
			return false, nil
		}
		return true, nil
	case tMasquerade:
		switch opt {
		case "--to-ports":
			v, err := a.value(opt)
			if err != nil {
				return false, err
			}
			rg, err := parseNATRange(":"+v, false)
			if err != nil {
				return false, err
			}
			tg.nat.Flags |= conntrack.ProtoSpecified
			tg.nat.MinPort, tg.nat.MaxPort = rg.MinPort, rg.MaxPort
		case "--random":
			tg.nat.Flags |= conntrack.Random
		case "--random-fully":
			tg.nat.Flags |= conntrack.RandomFully
		default:
			return false, nil
		}
		return true, nil
	case tMark:
		switch opt {
		case "--set-xmark", "--set-mark", "--and-mark", "--or-mark", "--xor-mark":
		default:
			return false, nil
		}
		if tg.opts != "" {
			return false, errorf("MARK target: Can't specify multiple mark operations")
		}
		tg.opts = opt
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		vs, ms, hasMask := strings.Cut(v, "/")
		val, ok := parseUint(vs, 32)
		mask := uint64(0xffffffff)
		if hasMask {
			mask, ok = parseUint(ms, 32)
			if !ok || opt == "--and-mark" || opt == "--or-mark" || opt == "--xor-mark" {
				ok = false
			}
		}
		if !ok {
			return false, errorf("Bad MARK value \"%s\"", v)
		}
		m, k := uint32(val), uint32(mask)
		switch opt {
		case "--set-xmark":
			tg.mark, tg.mask = m, k
		case "--set-mark":
			tg.mark, tg.mask = m, m|k
		case "--and-mark":
			tg.mark, tg.mask = 0, ^m
		case "--or-mark":
			tg.mark, tg.mask = m, m
		case "--xor-mark":
			tg.mark, tg.mask = m, 0
		}
		return true, nil
	case tLog:
		switch opt {
		case "--log-prefix":
			v, err := a.value(opt)
			if err != nil {
				return false, err
			}
			if len(v) > 29 {
				return false, errorf("Maximum prefix length 29 for --log-prefix")
			}
			tg.logPrefix = v
		case "--log-level":
			v, err := a.value(opt)
			if err != nil {
				return false, err
			}
			lv := -1
			for i, n := range []string{"emerg", "alert", "crit", "error", "warning", "notice", "info", "debug"} {
				if v == n || (n == "error" && v == "err") || (n == "warning" && v == "warn") || (n == "emerg" && v == "panic") {
					lv = i
				}
			}
			if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 7 {
				lv = n
			}
			if lv < 0 {
				return false, errorf("log-level `%s' unknown", v)
			}
			tg.logLevel = lv
		case "--log-tcp-sequence", "--log-tcp-options", "--log-ip-options", "--log-uid", "--log-macdecode":
			for _, f := range tg.logFlags {
				if f == opt {
					return true, nil
				}
			}
			tg.logFlags = append(tg.logFlags, opt)
		default:
			return false, nil
		}
		return true, nil
	}
	return false, nil
}

func (rp *ruleParser) checkTarget(r *Rule) error {
	tg := &r.target
	switch tg.kind {
	case tDNAT, tSNAT:
		if rp.table != NAT {
			return errorf("%s target: only valid in nat table, not %s", tg.name, rp.table)
		}
		if tg.nat.Flags&(conntrack.MapIPs|conntrack.ProtoSpecified) == 0 {
			if tg.kind == tDNAT {
				return errorf("DNAT: option \"--to-destination\" must be specified")
			}
			return errorf("SNAT: option \"--to-source\" must be specified")
		}
		fallthrough
	case tMasquerade:
		if rp.table != NAT {
			return errorf("%s target: only valid in nat table, not %s", tg.name, rp.table)
		}
		if tg.nat.Flags&conntrack.ProtoSpecified != 0 && (r.invProto || (r.proto != datapath.ProtoTCP && r.proto != datapath.ProtoUDP && r.proto != 132 && r.proto != 33)) {
			return errorf("Need TCP, UDP, SCTP or DCCP with port specification")
		}
	case tReject:
		if tg.tcpReset && (r.proto != datapath.ProtoTCP || r.invProto) {
			return errorf("REJECT: TCP_RESET invalid for non-tcp")
		}
	case tMark:
		if tg.opts == "" {
			return errorf("MARK target: Parameter --set/and/or/xor-mark is required")
		}
	}
	return nil
}

// option parsers of the matches

func (m *tcpMatch) option(opt string, inv bool, a *args) (bool, error) {
	switch opt {
	case "--sport", "--source-port", "--dport", "--destination-port":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		pr, err := parsePortRange(v)
		if err != nil {
			return false, err
		}
		if opt == "--sport" || opt == "--source-port" {
			m.sport, m.invSport = pr, inv
		} else {
			m.dport, m.invDport = pr, inv
		}
		return true, nil
	}
	if m.udp {
		return false, nil
	}
	if m.sctp {
		if opt == "--chunk-types" {
			return false, errorf("sctp match: --chunk-types is not modelled")
		}
		return false, nil
	}
	switch opt {
	case "--syn":
		m.flgMask, m.flgCmp, m.invFlags = 0x17, 0x02, inv
	case "--tcp-flags":
		ms, err := a.value(opt)
		if err != nil {
			return false, err
		}
		cs, err := a.value(opt)
		if err != nil {
			return false, errorf("--tcp-flags requires two args.")
		}
		mask, err := parseTCPFlags(ms)
		if err != nil {
			return false, err
		}
		cmp, err := parseTCPFlags(cs)
		if err != nil {
			return false, err
		}
		m.flgMask, m.flgCmp, m.invFlags = mask, cmp, inv
	case "--tcp-option":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		n, err := strconv.ParseUint(v, 10, 8)
		if err != nil || n == 0 {
			return false, errorf("Bad TCP option \"%s\"", v)
		}
		m.option8, m.invOption = uint8(n), inv
	default:
		return false, nil
	}
	return true, nil
}

var tcpFlagNames = []struct {
	name string
	bit  uint8
}{{"FIN", 0x01}, {"SYN", 0x02}, {"RST", 0x04}, {"PSH", 0x08}, {"ACK", 0x10}, {"URG", 0x20}, {"ALL", 0x3f}, {"NONE", 0}}

func parseTCPFlags(s string) (uint8, error) {
	var v uint8
	for _, f := range strings.Split(s, ",") {
		ok := false
		for _, n := range tcpFlagNames {
			if strings.EqualFold(f, n.name) {
				v |= n.bit
				ok = true
			}
		}
		if !ok {
			return 0, errorf("Unknown TCP flag `%s'", f)
		}
	}
	return v, nil
}

func (m *tcpMatch) check(r *Rule) error {
	want := uint8(datapath.ProtoTCP)
	switch {
	case m.udp:
		want = datapath.ProtoUDP
	case m.sctp:
		want = datapath.ProtoSCTP
	}
	if r.proto != want || r.invProto {
		if m.sctp {
			// xt_sctp's checkentry refuses it in the kernel; iptables-nft
			// reports the rule (EINVAL).
			return errorf("RULE_APPEND failed (Invalid argument): sctp match needs -p sctp")
		}
		return errorf("%s match: only valid for protocol %d", m.name(), want)
	}
	return nil
}

func (m *commentMatch) option(opt string, inv bool, a *args) (bool, error) {
	if opt != "--comment" {
		return false, nil
	}
	if inv {
		return false, errorf("comment: unexpected ! flag")
	}
	v, err := a.value(opt)
	if err != nil {
		return false, err
	}
	if len(v) > 255 {
		return false, errorf("comment: COMMENT must be shorter than 256 characters")
	}
	m.text = v
	return true, nil
}

func (m *commentMatch) check(*Rule) error { return nil }

var icmpTypeNames = []struct {
	name        string
	typ, lo, hi uint8
}{
	{"any", 0xff, 0, 0xff}, {"echo-reply", 0, 0, 0xff}, {"pong", 0, 0, 0xff},
	{"destination-unreachable", 3, 0, 0xff}, {"network-unreachable", 3, 0, 0}, {"host-unreachable", 3, 1, 1},
	{"protocol-unreachable", 3, 2, 2}, {"port-unreachable", 3, 3, 3}, {"fragmentation-needed", 3, 4, 4},
	{"host-prohibited", 3, 10, 10}, {"communication-prohibited", 3, 13, 13},
	{"redirect", 5, 0, 0xff}, {"echo-request", 8, 0, 0xff}, {"ping", 8, 0, 0xff},
	{"time-exceeded", 11, 0, 0xff}, {"ttl-zero-during-transit", 11, 0, 0}, {"parameter-problem", 12, 0, 0xff},
}

func (m *icmpMatch) option(opt string, inv bool, a *args) (bool, error) {
	if opt != "--icmp-type" {
		return false, nil
	}
	v, err := a.value(opt)
	if err != nil {
		return false, err
	}
	m.inv, m.set = inv, true
	for _, n := range icmpTypeNames {
		if v == n.name {
			m.typ, m.codeLo, m.codeHi = n.typ, n.lo, n.hi
			return true, nil
		}
	}
	ts, cs, hasCode := strings.Cut(v, "/")
	t, err := strconv.ParseUint(ts, 10, 8)
	if err != nil {
		return false, errorf("Invalid ICMP type `%s'", v)
	}
	m.typ, m.codeLo, m.codeHi = uint8(t), 0, 0xff
	if hasCode {
		c, err := strconv.ParseUint(cs, 10, 8)
		if err != nil {
			return false, errorf("Invalid ICMP code `%s'", cs)
		}
		m.codeLo, m.codeHi = uint8(c), uint8(c)
	}
	return true, nil
}

func (m *icmpMatch) check(r *Rule) error {
	if r.proto != datapath.ProtoICMP || r.invProto {
		return errorf("icmp match: only valid for protocol 1")
	}
	if !m.set {
		m.typ, m.codeLo, m.codeHi = 0xff, 0, 0xff
	}
	return nil
}

func (m *statisticMatch) option(opt string, inv bool, a *args) (bool, error) {
	switch opt {
	case "--mode":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		switch v {
		case "random":
			m.nth = false
		case "nth":
			m.nth = true
		default:
			return false, errorf("statistic: Bad mode \"%s\"", v)
		}
		m.haveMode = true
	case "--probability":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || p < 0 || p > 1 || math.IsNaN(p) {
			return false, errorf("statistic: --probability must be between 0 and 1")
		}
		m.prob = uint32(math.Round(0x80000000 * p))
		m.haveProb = true
		if inv {
			m.inv = true
		}
	case "--every":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return false, errorf("statistic: --every must be positive")
		}
		m.every = uint32(n - 1)
		m.haveEvery = true
		if inv {
			m.inv = true
		}
	case "--packet":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return false, errorf("statistic: Bad --packet \"%s\"", v)
		}
		m.pkt = uint32(n)
	default:
		return false, nil
	}
	return true, nil
}

func (m *statisticMatch) check(*Rule) error {
	switch {
	case !m.haveMode:
		return errorf("statistic: no mode specified")
	case !m.nth && (!m.haveProb || m.haveEvery || m.pkt != 0):
		return errorf("statistic: random mode needs --probability and no --every/--packet")
	case m.nth && (!m.haveEvery || m.haveProb):
		return errorf("statistic: nth mode needs --every and no --probability")
	case m.nth && m.pkt > m.every:
		return errorf("statistic: --packet can't be bigger than --every")
	}
	return nil
}

func (m *markMatch) option(opt string, inv bool, a *args) (bool, error) {
	if opt != "--mark" {
		return false, nil
	}
	v, err := a.value(opt)
	if err != nil {
		return false, err
	}
	vs, ms, hasMask := strings.Cut(v, "/")
	val, ok := parseUint(vs, 32)
	mask := uint64(0xffffffff)
	if hasMask && ok {
		mask, ok = parseUint(ms, 32)
	}
	if !ok {
		return false, errorf("mark: Bad value \"%s\"", v)
	}
	m.mark, m.mask, m.inv, m.set = uint32(val), uint32(mask), inv, true
	return true, nil
}

func (m *markMatch) check(*Rule) error {
	if !m.set {
		return errorf("mark match: You must specify `--mark'")
	}
	return nil
}

var ctStateNames = []struct {
	name string
	bit  uint16
}{{"INVALID", stInvalid}, {"NEW", stNew}, {"RELATED", stRelated}, {"ESTABLISHED", stEstablished},
	{"UNTRACKED", stUntracked}, {"SNAT", stSNAT}, {"DNAT", stDNAT}}

var ctStatusNames = []struct {
	name string
	bit  uint16
}{{"EXPECTED", uint16(conntrack.StatusExpected)}, {"SEEN_REPLY", uint16(conntrack.StatusSeenReply)},
	{"ASSURED", uint16(conntrack.StatusAssured)}, {"CONFIRMED", uint16(conntrack.StatusConfirmed)}}

func (m *conntrackMatch) option(opt string, inv bool, a *args) (bool, error) {
	var names []struct {
		name string
		bit  uint16
	}
	switch opt {
	case "--ctstate":
		names = ctStateNames
	case "--ctstatus":
		names = ctStatusNames
	default:
		return false, nil
	}
	v, err := a.value(opt)
	if err != nil {
		return false, err
	}
	var mask uint16
	for _, w := range strings.Split(v, ",") {
		ok := false
		for _, n := range names {
			if strings.EqualFold(w, n.name) {
				mask |= n.bit
				ok = true
			}
		}
		if opt == "--ctstatus" && strings.EqualFold(w, "NONE") {
			ok = true
		}
		if !ok {
			return false, errorf("conntrack: Bad %s \"%s\"", opt[2:], w)
		}
	}
	if opt == "--ctstate" {
		m.states, m.invState, m.hasState = mask, inv, true
	} else {
		m.status, m.invStatus, m.hasStatus = mask, inv, true
	}
	return true, nil
}

func (m *conntrackMatch) check(*Rule) error {
	if !m.hasState && !m.hasStatus {
		return errorf("conntrack: At least one option is required")
	}
	return nil
}

func parseAddrTypes(s string) (uint16, error) {
	var v uint16
	for _, w := range strings.Split(s, ",") {
		ok := false
		for i, n := range rtnNames {
			if strings.EqualFold(w, n) {
				v |= 1 << i
				ok = true
			}
		}
		if !ok {
			return 0, errorf("addrtype: Unknown address type \"%s\"", w)
		}
	}
	return v, nil
}

func (m *addrtypeMatch) option(opt string, inv bool, a *args) (bool, error) {
	switch opt {
	case "--src-type", "--dst-type":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		t, err := parseAddrTypes(v)
		if err != nil {
			return false, err
		}
		if opt == "--src-type" {
			m.src, m.invSrc = t, inv
		} else {
			m.dst, m.invDst = t, inv
		}
	case "--limit-iface-in":
		m.limitIn = true
	case "--limit-iface-out":
		m.limitOut = true
	default:
		return false, nil
	}
	return true, nil
}

func (m *addrtypeMatch) check(*Rule) error {
	if m.limitIn && m.limitOut {
		return errorf("addrtype: you can't specify both --limit-iface-in and --limit-iface-out")
	}
	if m.src == 0 && m.dst == 0 {
		return errorf("addrtype: you must specify --src-type or --dst-type")
	}
	return nil
}

func (m *multiportMatch) option(opt string, inv bool, a *args) (bool, error) {
	var f uint8
	switch opt {
	case "--sports", "--source-ports":
		f = 1
	case "--dports", "--destination-ports":
		f = 2
	case "--ports":
		f = 3
	default:
		return false, nil
	}
	if m.flags != 0 {
		return false, errorf("multiport can only have one option")
	}
	v, err := a.value(opt)
	if err != nil {
		return false, err
	}
	n := 0
	for _, w := range strings.Split(v, ",") {
		pr, err := parsePortRange(w)
		if err != nil {
			return false, err
		}
		n++
		if pr.lo != pr.hi {
			n++
		}
		m.ports = append(m.ports, pr)
	}
	if n > 15 {
		return false, errorf("too many ports specified")
	}
	m.flags, m.inv = f, inv
	return true, nil
}

func (m *multiportMatch) check(r *Rule) error {
	if m.flags == 0 {
		return errorf("multiport expection an option")
	}
	if r.invProto || (r.proto != datapath.ProtoTCP && r.proto != datapath.ProtoUDP && r.proto != 132 && r.proto != 33 && r.proto != 136) {
		return errorf("multiport needs `-p tcp', `-p udp', `-p udplite', `-p sctp' or `-p dccp'")
	}
	return nil
}

func (m *recentMatch) option(opt string, inv bool, a *args) (bool, error) {
	mode := func(b uint8) (bool, error) {
		if m.mode&(recentSet|recentCheck|recentUpdate|recentRemove) != 0 {
			return false, errorf("recent: only one of `--set', `--rcheck' `--update' or `--remove' may be set")
		}
		m.mode |= b
		if inv {
			m.inv = true
		}
		return true, nil
	}
	switch opt {
	case "--set":
		return mode(recentSet)
	case "--rcheck":
		return mode(recentCheck)
	case "--update":
		return mode(recentUpdate)
	case "--remove":
		return mode(recentRemove)
	case "--seconds", "--hitcount":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return false, errorf("recent: bad value for option \"%s\"", opt)
		}
		if opt == "--seconds" {
			m.seconds = uint32(n)
		} else {
			m.hits = uint32(n)
		}
	case "--reap":
		m.mode |= recentReap
	case "--rttl":
		m.mode |= recentTTL
	case "--name":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		if v == "" || len(v) > 199 || strings.ContainsAny(v, "/ \t") {
			return false, errorf("recent: bad name \"%s\"", v)
		}
		m.name_ = v
	case "--rsource":
		m.dest = false
	case "--rdest":
		m.dest = true
	case "--mask":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		ad, err := netip.ParseAddr(v)
		if err != nil || !ad.Is4() {
			return false, errorf("recent: bad mask \"%s\"", v)
		}
		b := ad.As4()
		m.mask = be32(b[:])
	default:
		return false, nil
	}
	return true, nil
}

func (m *recentMatch) check(*Rule) error {
	switch {
	case m.mode&(recentSet|recentCheck|recentUpdate|recentRemove) == 0:
		return errorf("recent: you must specify one of `--set', `--rcheck' `--update' or `--remove'")
	case m.mode&recentReap != 0 && m.seconds == 0:
		return errorf("recent: --reap is only valid with --seconds")
	case m.hits > ipPktListTot:
		return errorf("recent: hitcount (%d) is larger than packets to be remembered (%d)", m.hits, ipPktListTot)
	}
	t := m.nf.recent[m.name_]
	if t == nil {
		t = &recentTable{m: map[uint32]*recentEntry{}}
		m.nf.recent[m.name_] = t
	}
	m.table = t
	return nil
}
