package netfilter

import (
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/ipset"
)

// UseIPSets gives the namespace's iptables the IP sets that `-m set`
// rules refer to (the kernel's ip_set of the same network namespace), and
// makes `ipset list` count the rules that reference each set.
func (nf *Netfilter) UseIPSets(r *ipset.Registry) {
	nf.sets = r
	r.References = nf.setReferences
}

// IPSets returns the registry installed with UseIPSets, or nil.
func (nf *Netfilter) IPSets() *ipset.Registry { return nf.sets }

// setReferences counts the loaded rules whose set match uses name (the
// set's reference count, which keeps `ipset destroy` from removing it).
func (nf *Netfilter) setReferences(name string) int {
	n := 0
	for _, t := range nf.tables {
		for _, c := range t.chains {
			for _, r := range c.rules {
				for _, m := range r.ms {
					if sm, ok := m.(*setMatch); ok && sm.set.Name == name {
						n++
					}
				}
			}
		}
	}
	return n
}

// setMatch is -m set (xt_set revision 4): [!] --match-set NAME dir[,dir]...
// Each direction picks the source or destination value of one dimension
// of the set (address, port, second address). A set with more dimensions
// than directions given never matches, as ip_set_test does.
type setMatch struct {
	nf      *Netfilter
	setName string
	set     *ipset.Set
	dirs    []bool // true: src
	inv     bool
}

func (m *setMatch) name() string { return "set" }

func (m *setMatch) option(opt string, inv bool, a *args) (bool, error) {
	if opt != "--match-set" {
		return false, nil
	}
	if m.set != nil {
		return false, errorf("--match-set can be specified only once")
	}
	name, err := a.value(opt)
	if err != nil {
		return false, err
	}
	flags, err := a.value(opt)
	if err != nil {
		return false, errorf("--match-set requires two args.")
	}
	if m.nf == nil || m.nf.sets == nil || m.nf.sets.Get(name) == nil {
		return false, errorf("Set %s doesn't exist.", name)
	}
	for _, f := range strings.Split(flags, ",") {
		switch f {
		case "src":
			m.dirs = append(m.dirs, true)
		case "dst":
			m.dirs = append(m.dirs, false)
		default:
			return false, errorf("You must specify (the comma separated list of) 'src' or 'dst'.")
		}
	}
	if len(m.dirs) > 6 {
		return false, errorf("Can't be more src/dst options than 6.")
	}
	m.setName, m.set, m.inv = name, m.nf.sets.Get(name), inv
	return true, nil
}

func (m *setMatch) check(*Rule) error {
	if m.set == nil {
		return errorf("You must specify `--match-set' with proper arguments")
	}
	return nil
}

func (m *setMatch) save(b []byte) []byte {
	if m.inv {
		b = append(b, " !"...)
	}
	b = append(b, " --match-set "...)
	b = append(b, m.setName...)
	b = append(b, ' ')
	for i, src := range m.dirs {
		if i > 0 {
			b = append(b, ',')
		}
		if src {
			b = append(b, "src"...)
		} else {
			b = append(b, "dst"...)
		}
	}
	return b
}

func u32to4(v uint32) [4]byte { return [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

// match is set_match_v4 → ip_set_test → the type's kadt: the first
// dimension is an address (a port for bitmap:port), the second a port with
// its protocol, the third an address or net.
func (m *setMatch) match(c *evalCtx) bool {
	s := m.nf.sets.Get(m.setName)
	if s == nil || len(m.dirs) < s.Dimensions() {
		return m.inv
	}
	pick := func(src bool) ([4]byte, uint16) {
		if src {
			return u32to4(c.src), c.sport
		}
		return u32to4(c.dst), c.dport
	}
	var ip, ip2 [4]byte
	var port uint16
	ok := true
	switch s.Type {
	case ipset.BitmapPort:
		_, port = pick(m.dirs[0])
		ok = c.l4ok && !c.frag && (c.proto == datapath.ProtoTCP || c.proto == datapath.ProtoUDP)
	default:
		ip, _ = pick(m.dirs[0])
		if s.HasPort() {
			_, port = pick(m.dirs[1])
			switch c.proto {
			case datapath.ProtoTCP, datapath.ProtoUDP, 132:
				ok = c.l4ok && !c.frag
			case datapath.ProtoICMP:
				port = uint16(c.icmpType)<<8 | uint16(c.icmpCode)
				ok = c.l4ok && !c.frag
			default:
				port = 0
			}
		}
		if s.Dimensions() == 3 {
			ip2, _ = pick(m.dirs[2])
		}
	}
	return (ok && s.Match(ip, c.proto, port, ip2)) != m.inv
}

// physdevMatch is -m physdev (xt_physdev): the bridge ports a bridged
// packet came in on or goes out of (br_netfilter's nf_bridge info). Only
// the forms kube-proxy and CNI plugins write are modelled:
// [!] --physdev-is-in, [!] --physdev-is-out, [!] --physdev-is-bridged,
// [!] --physdev-in NAME.
type physdevMatch struct {
	isIn, isOut, isBridged, in      bool
	invIsIn, invIsOut, invBr, invIn bool
	inName                          string
	inWild                          bool
}

func (m *physdevMatch) name() string { return "physdev" }

func (m *physdevMatch) option(opt string, inv bool, a *args) (bool, error) {
	switch opt {
	case "--physdev-is-in":
		m.isIn, m.invIsIn = true, inv
	case "--physdev-is-out":
		m.isOut, m.invIsOut = true, inv
	case "--physdev-is-bridged":
		m.isBridged, m.invBr = true, inv
	case "--physdev-in":
		v, err := a.value(opt)
		if err != nil {
			return false, err
		}
		name, wild, err := parseIface(v)
		if err != nil {
			return false, err
		}
		m.in, m.invIn, m.inName, m.inWild = true, inv, name, wild
	default:
		return false, nil
	}
	return true, nil
}

func (m *physdevMatch) check(*Rule) error {
	if !m.isIn && !m.isOut && !m.isBridged && !m.in {
		return errorf("PHYSDEV: no physdev option specified")
	}
	return nil
}

func (m *physdevMatch) save(b []byte) []byte {
	if m.in {
		if m.invIn {
			b = append(b, " !"...)
		}
		b = append(b, " --physdev-in "...)
		b = append(b, m.inName...)
		if m.inWild {
			b = append(b, '+')
		}
	}
	for _, f := range []struct {
		on, inv bool
		s       string
	}{{m.isIn, m.invIsIn, " --physdev-is-in"}, {m.isOut, m.invIsOut, " --physdev-is-out"}, {m.isBridged, m.invBr, " --physdev-is-bridged"}} {
		if f.on {
			if f.inv {
				b = append(b, " !"...)
			}
			b = append(b, f.s...)
		}
	}
	return b
}

func (m *physdevMatch) match(c *evalCtx) bool {
	in := c.p.PhysIn
	bridged := in != nil && c.out != nil && c.out.Kind == datapath.KindBridge
	if m.isIn && (in != nil) == m.invIsIn {
		return false
	}
	if m.isOut && bridged == m.invIsOut {
		return false
	}
	if m.isBridged && bridged == m.invBr {
		return false
	}
	if m.in && ifaceMatch(in, m.inName, m.inWild) == m.invIn {
		return false
	}
	return true
}
