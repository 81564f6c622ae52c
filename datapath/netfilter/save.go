package netfilter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

func sprintf(format string, v ...any) string { return fmt.Sprintf(format, v...) }

// appendSaveString is xtables_save_string: a leading space, then the value
// bare if it is only [A-Za-z0-9_-] (and not empty), else double-quoted
// with ", \ and ' escaped by a backslash.
func appendSaveString(b []byte, s string) []byte {
	b = append(b, ' ')
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
	}
	if plain {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c == '\'' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

func appendIP(b []byte, a uint32) []byte {
	for i := 3; i >= 0; i-- {
		b = strconv.AppendUint(b, uint64(byte(a>>(8*i))), 10)
		if i > 0 {
			b = append(b, '.')
		}
	}
	return b
}

// appendAddrMask prints addr/len for a contiguous mask, else addr/mask, as
// xtables_ipaddr_to_numeric + xtables_ipmask_to_numeric do.
func appendAddrMask(b []byte, a, m uint32) []byte {
	b = appendIP(b, a)
	b = append(b, '/')
	bits := 0
	for bits < 32 && m&(1<<(31-bits)) != 0 {
		bits++
	}
	if bits == 32 || m<<bits == 0 {
		return strconv.AppendInt(b, int64(bits), 10)
	}
	return appendIP(b, m)
}

func appendUint(b []byte, v uint64) []byte { return strconv.AppendUint(b, v, 10) }

func appendHex(b []byte, v uint32) []byte {
	b = append(b, "0x"...)
	return strconv.AppendUint(b, uint64(v), 16)
}

// save appends the rule as print_rule4 prints it for iptables-save.
func (r *Rule) save(b []byte) []byte {
	b = append(b, "-A "...)
	b = append(b, r.chain.Name...)
	if r.smsk != 0 || r.src != 0 || r.invSrc {
		if r.invSrc {
			b = append(b, " !"...)
		}
		b = append(b, " -s "...)
		b = appendAddrMask(b, r.src, r.smsk)
	}
	if r.dmsk != 0 || r.dst != 0 || r.invDst {
		if r.invDst {
			b = append(b, " !"...)
		}
		b = append(b, " -d "...)
		b = appendAddrMask(b, r.dst, r.dmsk)
	}
	if r.in != "" {
		if r.invIn {
			b = append(b, " !"...)
		}
		b = append(b, " -i "...)
		b = append(b, r.in...)
		if r.inWild {
			b = append(b, '+')
		}
	}
	if r.out != "" {
		if r.invOut {
			b = append(b, " !"...)
		}
		b = append(b, " -o "...)
		b = append(b, r.out...)
		if r.outWild {
			b = append(b, '+')
		}
	}
	if r.proto != 0 {
		if r.invProto {
			b = append(b, " !"...)
		}
		b = append(b, " -p "...)
		b = append(b, protoName(r.proto)...)
	}
	if r.frag {
		if r.invFrag {
			b = append(b, " !"...)
		}
		b = append(b, " -f"...)
	}
	for _, m := range r.ms {
		b = append(b, " -m "...)
		b = append(b, m.name()...)
		b = m.save(b)
	}
	tg := &r.target
	if tg.kind == 0 {
		// A rule without a target only counts packets (kube-proxy writes
		// one as a comment in KUBE-FW-* chains).
		return b
	}
	if tg.kind == tGoto {
		b = append(b, " -g "...)
	} else {
		b = append(b, " -j "...)
	}
	b = append(b, tg.name...)
	return tg.save(b)
}

func appendNATRange(b []byte, r *conntrack.NATRange) []byte {
	if r.Flags&conntrack.MapIPs != 0 {
		b = appendIP(b, be32(r.MinIP[:]))
		if r.MaxIP != r.MinIP {
			b = append(b, '-')
			b = appendIP(b, be32(r.MaxIP[:]))
		}
	}
	if r.Flags&conntrack.ProtoSpecified != 0 {
		b = append(b, ':')
		b = appendUint(b, uint64(r.MinPort))
		if r.MaxPort != r.MinPort {
			b = append(b, '-')
			b = appendUint(b, uint64(r.MaxPort))
		}
	}
	return b
}

func (tg *target) save(b []byte) []byte {
	switch tg.kind {
	case tReject:
		b = append(b, " --reject-with "...)
		b = append(b, rejectName(tg)...)
	case tDNAT, tSNAT:
		if tg.kind == tDNAT {
			b = append(b, " --to-destination "...)
		} else {
			b = append(b, " --to-source "...)
		}
		b = appendNATRange(b, &tg.nat)
		if tg.nat.Flags&conntrack.Random != 0 {
			b = append(b, " --random"...)
		}
		if tg.nat.Flags&conntrack.RandomFully != 0 {
			b = append(b, " --random-fully"...)
		}
		if tg.nat.Flags&conntrack.Persistent != 0 {
			b = append(b, " --persistent"...)
		}
	case tMasquerade:
		if tg.nat.Flags&conntrack.ProtoSpecified != 0 {
			b = append(b, " --to-ports "...)
			b = appendUint(b, uint64(tg.nat.MinPort))
			if tg.nat.MaxPort != tg.nat.MinPort {
				b = append(b, '-')
				b = appendUint(b, uint64(tg.nat.MaxPort))
			}
		}
		if tg.nat.Flags&conntrack.Random != 0 {
			b = append(b, " --random"...)
		}
		if tg.nat.Flags&conntrack.RandomFully != 0 {
			b = append(b, " --random-fully"...)
		}
	case tMark:
		// MARK revision 2 always saves as --set-xmark value/mask.
		b = append(b, " --set-xmark "...)
		b = appendHex(b, tg.mark)
		b = append(b, '/')
		b = appendHex(b, tg.mask)
	case tLog:
		if tg.logPrefix != "" {
			b = append(b, " --log-prefix"...)
			b = appendSaveString(b, tg.logPrefix)
		}
		if tg.logLevel != 4 {
			b = append(b, " --log-level "...)
			b = appendUint(b, uint64(tg.logLevel))
		}
		for _, f := range []string{"--log-tcp-sequence", "--log-tcp-options", "--log-ip-options", "--log-uid", "--log-macdecode"} {
			if slices.Contains(tg.logFlags, f) {
				b = append(b, ' ')
				b = append(b, f...)
			}
		}
	}
	return b
}

func appendPortRange(b []byte, p portRange) []byte {
	b = appendUint(b, uint64(p.lo))
	if p.hi != p.lo {
		b = append(b, ':')
		b = appendUint(b, uint64(p.hi))
	}
	return b
}

func appendTCPFlags(b []byte, f uint8) []byte {
	if f == 0 {
		return append(b, "NONE"...)
	}
	first := true
	for _, n := range tcpFlagNames[:6] {
		if f&n.bit != 0 {
			if !first {
				b = append(b, ',')
			}
			b = append(b, n.name...)
			first = false
		}
	}
	return b
}

func (m *tcpMatch) save(b []byte) []byte {
	if m.sport.set() {
		if m.invSport {
			b = append(b, " !"...)
		}
		b = append(b, " --sport "...)
		b = appendPortRange(b, m.sport)
	}
	if m.dport.set() {
		if m.invDport {
			b = append(b, " !"...)
		}
		b = append(b, " --dport "...)
		b = appendPortRange(b, m.dport)
	}
	if m.option8 != 0 || m.invOption {
		if m.invOption {
			b = append(b, " !"...)
		}
		b = append(b, " --tcp-option "...)
		b = appendUint(b, uint64(m.option8))
	}
	if m.flgMask != 0 || m.invFlags {
		if m.invFlags {
			b = append(b, " !"...)
		}
		b = append(b, " --tcp-flags "...)
		b = appendTCPFlags(b, m.flgMask)
		b = append(b, ' ')
		b = appendTCPFlags(b, m.flgCmp)
	}
	return b
}

func (m *commentMatch) save(b []byte) []byte {
	b = append(b, " --comment"...)
	return appendSaveString(b, m.text)
}

func (m *icmpMatch) save(b []byte) []byte {
	if m.inv {
		b = append(b, " !"...)
	}
	if m.typ == 0xff {
		return append(b, " --icmp-type any"...)
	}
	b = append(b, " --icmp-type "...)
	b = appendUint(b, uint64(m.typ))
	if m.codeLo != 0 || m.codeHi != 0xff {
		b = append(b, '/')
		b = appendUint(b, uint64(m.codeLo))
	}
	return b
}

func (m *statisticMatch) save(b []byte) []byte {
	if m.nth {
		b = append(b, " --mode nth"...)
		if m.inv {
			b = append(b, " !"...)
		}
		b = append(b, " --every "...)
		b = appendUint(b, uint64(m.every)+1)
		b = append(b, " --packet "...)
		return appendUint(b, uint64(m.pkt))
	}
	b = append(b, " --mode random"...)
	if m.inv {
		b = append(b, " !"...)
	}
	b = append(b, " --probability "...)
	return strconv.AppendFloat(b, float64(m.prob)/(1<<31), 'f', 11, 64)
}

func (m *markMatch) save(b []byte) []byte {
	if m.inv {
		b = append(b, " !"...)
	}
	b = append(b, " --mark "...)
	b = appendHex(b, m.mark)
	if m.mask != 0xffffffff {
		b = append(b, '/')
		b = appendHex(b, m.mask)
	}
	return b
}

func (m *conntrackMatch) save(b []byte) []byte {
	if m.hasState {
		if m.invState {
			b = append(b, " !"...)
		}
		b = append(b, " --ctstate "...)
		first := true
		for _, n := range ctStateNames {
			if m.states&n.bit != 0 {
				if !first {
					b = append(b, ',')
				}
				b = append(b, n.name...)
				first = false
			}
		}
	}
	if m.hasStatus {
		if m.invStatus {
			b = append(b, " !"...)
		}
		b = append(b, " --ctstatus "...)
		if m.status == 0 {
			b = append(b, "NONE"...)
		}
		first := true
		for _, n := range ctStatusNames {
			if m.status&n.bit != 0 {
				if !first {
					b = append(b, ',')
				}
				b = append(b, n.name...)
				first = false
			}
		}
	}
	return b
}

func appendAddrTypes(b []byte, v uint16) []byte {
	first := true
	for i, n := range rtnNames {
		if v&(1<<i) != 0 {
			if !first {
				b = append(b, ',')
			}
			b = append(b, n...)
			first = false
		}
	}
	return b
}

func (m *addrtypeMatch) save(b []byte) []byte {
	if m.src != 0 {
		if m.invSrc {
			b = append(b, " !"...)
		}
		b = append(b, " --src-type "...)
		b = appendAddrTypes(b, m.src)
	}
	if m.dst != 0 {
		if m.invDst {
			b = append(b, " !"...)
		}
		b = append(b, " --dst-type "...)
		b = appendAddrTypes(b, m.dst)
	}
	if m.limitIn {
		b = append(b, " --limit-iface-in"...)
	}
	if m.limitOut {
		b = append(b, " --limit-iface-out"...)
	}
	return b
}

func (m *multiportMatch) save(b []byte) []byte {
	if m.inv {
		b = append(b, " !"...)
	}
	switch m.flags {
	case 1:
		b = append(b, " --sports "...)
	case 2:
		b = append(b, " --dports "...)
	default:
		b = append(b, " --ports "...)
	}
	for i, p := range m.ports {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPortRange(b, p)
	}
	return b
}

func (m *recentMatch) save(b []byte) []byte {
	if m.inv {
		b = append(b, " !"...)
	}
	switch {
	case m.mode&recentSet != 0:
		b = append(b, " --set"...)
	case m.mode&recentCheck != 0:
		b = append(b, " --rcheck"...)
	case m.mode&recentUpdate != 0:
		b = append(b, " --update"...)
	case m.mode&recentRemove != 0:
		b = append(b, " --remove"...)
	}
	if m.seconds != 0 {
		b = append(b, " --seconds "...)
		b = appendUint(b, uint64(m.seconds))
	}
	if m.mode&recentReap != 0 {
		b = append(b, " --reap"...)
	}
	if m.hits != 0 {
		b = append(b, " --hitcount "...)
		b = appendUint(b, uint64(m.hits))
	}
	if m.mode&recentTTL != 0 {
		b = append(b, " --rttl"...)
	}
	b = append(b, " --name "...)
	b = append(b, m.name_...)
	b = append(b, " --mask "...)
	b = appendIP(b, m.mask)
	if m.dest {
		return append(b, " --rdest"...)
	}
	return append(b, " --rsource"...)
}

func sortedChains(m map[string]*Chain) []*Chain {
	var bi, user []*Chain
	for _, c := range m {
		if c.Builtin {
			bi = append(bi, c)
		} else {
			user = append(user, c)
		}
	}
	slices.SortFunc(bi, func(a, b *Chain) int { return int(a.Hook) - int(b.Hook) })
	slices.SortFunc(user, func(a, b *Chain) int { return strings.Compare(a.Name, b.Name) })
	return append(bi, user...)
}

// SaveOptions select what Save prints.
type SaveOptions struct {
	// Counters prints rule counters as "[packets:bytes] -A ..." (-c).
	Counters bool
	// Tables limits the output to these tables (-t); empty means every
	// table that has been loaded, in the order they were first loaded
	// (legacy iptables-save lists tables in module load order).
	Tables []string
}

// Save returns the tables as iptables-save prints them (without the
// "# Generated by" and "# Completed on" comment lines, which carry a wall
// clock time). Built-in chain headers always show the policy counters,
// as legacy iptables-save does; user chains show "- [0:0]".
func (nf *Netfilter) Save(opts SaveOptions) string {
	nf.settle()
	names := opts.Tables
	if len(names) == 0 {
		names = nf.order
	}
	var b []byte
	for _, n := range names {
		t := nf.tables[n]
		if t == nil {
			continue
		}
		b = t.appendSave(b, opts.Counters)
	}
	return string(b)
}

func (t *Table) appendSave(b []byte, counters bool) []byte {
	b = append(b, '*')
	b = append(b, t.Name...)
	b = append(b, '\n')
	chains := t.Chains()
	for _, c := range chains {
		b = append(b, ':')
		b = append(b, c.Name...)
		if c.Builtin {
			b = append(b, ' ')
			b = append(b, c.Policy.String()...)
			b = append(b, " ["...)
			b = appendUint(b, c.Packets)
			b = append(b, ':')
			b = appendUint(b, c.Bytes)
			b = append(b, "]\n"...)
		} else {
			b = append(b, " - [0:0]\n"...)
		}
	}
	for _, c := range chains {
		for i, r := range c.rules {
			if counters {
				p, n := c.RuleCounters(i)
				b = append(b, '[')
				b = appendUint(b, p)
				b = append(b, ':')
				b = appendUint(b, n)
				b = append(b, "] "...)
			}
			b = append(b, r.text...)
			b = append(b, '\n')
		}
	}
	return append(b, "COMMIT\n"...)
}

var _ = datapath.Prerouting
