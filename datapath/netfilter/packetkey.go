package netfilter

import (
	"encoding/binary"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// A connection's first packet crosses a dozen table hooks on its way
// between two pods on different nodes (the inner packet's and the VXLAN
// packet's, on both nodes), and at all but one of them (the nat walk that
// picks the Service endpoint) the flow cache holds the walk. The hooks'
// Process look the walk up by a key read straight from the packet's bytes
// (lookup) and repeat it; only a miss fills the evaluation context (init)
// and walks the rules. The key is the one init followed by setKey gives
// (TestLookupKeyIsInitSetKey), so the cache holds and answers the same walks
// either way.

// lookup sets k to the flow key of p at the hook, with the fields the
// hook's rules read (keyMask): what init followed by setKey sets it to.
// It returns the flow cache's slot holding the walk for k at the ruleset
// generation (nil for none: replay's lookup), the packet length init takes (plen), and whether init
// accepts the packet at all; k is unset when it does not.
func (s *tableHook) lookup(p *datapath.Packet, k *flowKey) (*flowSlot, uint64, bool) {
	f := p.Frame()
	if len(f) < datapath.EthHdrLen+20 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return nil, 0, false
	}
	ip := f[datapath.EthHdrLen:]
	ihl := int(ip[0]&0xf) * 4
	tot := int(binary.BigEndian.Uint16(ip[2:]))
	if ihl < 20 || ihl > len(ip) {
		return nil, 0, false
	}
	if tot > len(ip) || tot < ihl {
		tot = len(ip)
	}
	if s.maskGen != s.nf.gen+1 {
		s.keyMask()
	}
	mask := s.mask
	// The words as setKey packs them: l4 is the protocol, TCP flags<<8,
	// ICMP code<<16 and type<<24, fragment<<32, L4 header present<<33;
	// ports the source port<<48, the destination port<<32 and the mark.
	// hw is the header's identification, flags and fragment offset, TTL
	// and protocol (bytes 4 to 11).
	hw := binary.BigEndian.Uint64(ip[4:12])
	proto := uint8(hw >> 16)
	l4 := uint64(proto)
	var ports uint64
	if hw>>32&0x1fff != 0 {
		l4 |= 1 << 32
	} else if h, n := ip[ihl:], tot-ihl; n >= 4 {
		// Every protocol init reads is there from 4 bytes on (ICMP)
		// or more (TCP 20, UDP 8, SCTP 12).
		w := binary.BigEndian.Uint32(h)
		switch proto {
		case datapath.ProtoTCP:
			if n >= 20 {
				ports = uint64(w) << 32
				l4 |= uint64(h[13])<<8 | 1<<33
			}
		case datapath.ProtoUDP:
			if n >= 8 {
				ports = uint64(w) << 32
				l4 |= 1 << 33
			}
		case datapath.ProtoICMP:
			l4 |= uint64(w>>16)<<16 | 1<<33
		case datapath.ProtoSCTP:
			if n >= 12 {
				ports = uint64(w) << 32
				l4 |= 1 << 33
			}
		}
	}
	l4 &= s.kw.l4
	k.addr = binary.BigEndian.Uint64(ip[12:20]) & s.kw.addr
	k.ports = (ports | uint64(p.Mark)) & s.kw.ports
	k.status, k.agen, k.in, k.out = 0, 0, nil, nil
	if mask&(kCTState|kCTStatus) != 0 {
		if e, info := s.nf.ct.Get(p); e != nil {
			l4 |= 1<<34 | uint64(info)<<40
			k.status = uint64(e.Status & conntrack.StatusNATMask)
			if mask&kCTStatus != 0 {
				k.status = uint64(e.Status)
			}
		}
	}
	if mask&(kIn|kOut) != 0 {
		var in, out *datapath.Device
		switch s.hook {
		case datapath.Prerouting, datapath.Input:
			in = p.InDev
		case datapath.Forward:
			in, out = p.InDev, p.OutDev
		case datapath.Output, datapath.Postrouting:
			out = p.OutDev
			if s.hook == datapath.Postrouting && !p.Local {
				in = p.InDev
			}
		}
		if mask&kIn != 0 {
			k.in = in
		}
		if mask&kOut != 0 {
			k.out = out
		}
	}
	if mask&kAddrs != 0 {
		k.agen = s.nf.ns.AddrGen() + 1
	}
	k.l4 = l4
	// The flow cache's two ways for k (here, not in a function of
	// their own: the call cost more than the lookup).
	if s.cache == nil {
		return nil, uint64(tot), true
	}
	i := k.slot()
	sl := &s.cache[i]
	if !sl.valid || sl.gen != s.nf.gen || !sl.key.equal(k) {
		if sl = &s.cache[i^1]; !sl.valid || sl.gen != s.nf.gen || !sl.key.equal(k) {
			return nil, uint64(tot), true
		}
	}
	return sl, uint64(tot), true
}

// walk is run for a packet whose key k (lookup) the flow cache holds no
// walk for, c being init for it: the walk is run, recorded and kept if it
// may be repeated.
func (s *tableHook) walk(c *evalCtx, k *flowKey) verdict {
	c.rec.on = true
	evals := s.nf.Evaluations
	v := s.nf.runTable(c)
	s.store(c, k, v, s.nf.Evaluations-evals)
	return v
}
