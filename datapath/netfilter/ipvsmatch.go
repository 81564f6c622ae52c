package netfilter

import (
	"strconv"

	"github.com/kubewalk/kubewalk/datapath"
)

// IPVSLookup finds the IPVS connection a packet IPVS already translated
// belongs to (xt_ipvs's conn_out_get on the inverted header) and returns
// its virtual address and port.
type IPVSLookup func(proto uint8, src, dst [4]byte, sport, dport uint16) (vaddr [4]byte, vport uint16, ok bool)

// UseIPVS gives `-m ipvs` the namespace's IPVS connection table.
func (nf *Netfilter) UseIPVS(f IPVSLookup) { nf.ipvs = f }

// ipvsMatch is -m ipvs (xt_ipvs): [!] --ipvs, [!] --vproto, [!] --vaddr
// ADDR[/MASK], [!] --vport. Any option other than --ipvs needs the packet
// to be one IPVS translated, on a connection found in IPVS's table.
type ipvsMatch struct {
	nf                                  *Netfilter
	ipvs, hasProto, hasAddr, hasPort    bool
	invIPVS, invProto, invAddr, invPort bool
	proto                               uint8
	addr, mask                          uint32
	port                                uint16
}

func (m *ipvsMatch) name() string { return "ipvs" }

func (m *ipvsMatch) option(opt string, inv bool, a *args) (bool, error) {
	switch opt {
	case "--ipvs":
		m.ipvs, m.invIPVS = true, inv
		return true, nil
	case "--vproto", "--vaddr", "--vport":
	default:
		return false, nil
	}
	v, err := a.value(opt)
	if err != nil {
		return false, err
	}
	switch opt {
	case "--vproto":
		p, err := parseProto(v)
		if err != nil {
			return false, err
		}
		m.hasProto, m.invProto, m.proto = true, inv, p
	case "--vaddr":
		ad, mk, err := parseAddr(v)
		if err != nil {
			return false, err
		}
		m.hasAddr, m.invAddr, m.addr, m.mask = true, inv, ad, mk
	case "--vport":
		p, err := parsePort(v)
		if err != nil {
			return false, err
		}
		m.hasPort, m.invPort, m.port = true, inv, p
	}
	return true, nil
}

func (m *ipvsMatch) check(*Rule) error {
	if !m.ipvs && !m.hasProto && !m.hasAddr && !m.hasPort {
		return errorf("IPVS: no option specified")
	}
	return nil
}

func (m *ipvsMatch) save(b []byte) []byte {
	onlyIPVS := !m.hasProto && !m.hasAddr && !m.hasPort
	if onlyIPVS {
		if m.invIPVS {
			b = append(b, " !"...)
		}
		return append(b, " --ipvs"...)
	}
	if m.hasProto {
		if m.invProto {
			b = append(b, " !"...)
		}
		b = append(b, " --vproto "...)
		b = strconv.AppendUint(b, uint64(m.proto), 10)
	}
	if m.hasAddr {
		if m.invAddr {
			b = append(b, " !"...)
		}
		b = append(b, " --vaddr "...)
		b = appendAddrMask(b, m.addr, m.mask)
	}
	if m.hasPort {
		if m.invPort {
			b = append(b, " !"...)
		}
		b = append(b, " --vport "...)
		b = strconv.AppendUint(b, uint64(m.port), 10)
	}
	return b
}

// match is ipvs_mt.
func (m *ipvsMatch) match(c *evalCtx) bool {
	if !m.hasProto && !m.hasAddr && !m.hasPort {
		return c.p.IPVSProperty != m.invIPVS
	}
	if !c.p.IPVSProperty {
		return false
	}
	if m.hasProto && (c.proto == m.proto) == m.invProto {
		return false
	}
	if m.nf.ipvs == nil || !c.l4ok || (c.proto != datapath.ProtoTCP && c.proto != datapath.ProtoUDP) {
		return false
	}
	vaddr, vport, ok := m.nf.ipvs(c.proto, u32to4(c.src), u32to4(c.dst), c.sport, c.dport)
	if !ok {
		return false
	}
	if m.hasPort && (vport == m.port) == m.invPort {
		return false
	}
	if m.hasAddr && (be32(vaddr[:])&m.mask == m.addr&m.mask) == m.invAddr {
		return false
	}
	return true
}
