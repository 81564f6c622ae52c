package ipvs

import (
	"strconv"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

// hookStage is one of IPVS's netfilter hooks: request (ip_vs_in) or
// reply (ip_vs_out).
type hookStage struct {
	v       *IPVS
	request bool
}

var _ datapath.Stage = (*hookStage)(nil)

// pkt is the part of a packet IPVS looks at.
type pkt struct {
	proto        uint8
	src, dst     [4]byte
	sport, dport uint16
	flags        uint8
}

func parse(p *datapath.Packet) (pkt, bool) {
	if p.Len() < datapath.EthHdrLen+20 || p.EtherType() != 0x0800 {
		return pkt{}, false
	}
	ip := p.IPv4()
	ihl := int(ip[0]&0xf) * 4
	if ihl < 20 || len(ip) < ihl+8 || (uint16(ip[6])<<8|uint16(ip[7]))&0x1fff != 0 {
		return pkt{}, false
	}
	k := pkt{proto: ip[9], src: [4]byte(ip[12:16]), dst: [4]byte(ip[16:20])}
	l4 := ip[ihl:]
	switch k.proto {
	case datapath.ProtoTCP:
		if len(l4) < 20 {
			return pkt{}, false
		}
		k.flags = l4[13]
	case datapath.ProtoUDP:
	default:
		return pkt{}, false
	}
	k.sport, k.dport = uint16(l4[0])<<8|uint16(l4[1]), uint16(l4[2])<<8|uint16(l4[3])
	return k, true
}

// Process implements datapath.Stage.
func (h *hookStage) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	v := h.v
	if p.IPVSProperty || (len(v.svcs) == 0 && len(v.in) == 0) {
		return datapath.VerdictContinue
	}
	k, ok := parse(p)
	if !ok {
		return datapath.VerdictContinue
	}
	if h.request {
		return v.request(w, p, k)
	}
	return v.reply(w, p, k)
}

func (v *IPVS) observe(w *datapath.Walk, p *datapath.Packet, a trace.Action, detail, before string) {
	o := trace.Observation{Node: v.ns.Node, Netns: v.ns.Name, Stage: StageIn, Action: a,
		Summary: p.Summary(), Detail: detail}
	if before != "" {
		o.Before, o.After = before, flow(p)
	}
	w.Observe(p, o)
}

func flow(p *datapath.Packet) string {
	t, _ := conntrack.TupleOf(p)
	return t.Flow()
}

// request is ip_vs_in: find the connection or schedule a new one, then
// translate and transmit.
func (v *IPVS) request(w *datapath.Walk, p *datapath.Packet, k pkt) datapath.Verdict {
	ck := connKey{k.proto, k.src, k.dst, k.sport, k.dport}
	c := v.lookup(v.in, ck)
	if c == nil {
		v.Lookups++
		s := v.svcs[svcKey{k.proto, k.dst, k.dport}]
		if s == nil {
			return datapath.VerdictContinue
		}
		// tcp_conn_schedule: only a SYN (not a RST) starts a connection;
		// other segments go on to the local stack.
		if k.proto == datapath.ProtoTCP && (k.flags&0x02 == 0 || k.flags&0x04 != 0) {
			return datapath.VerdictContinue
		}
		c = v.schedule(w, p, s, k)
		if c == nil {
			// ip_vs_leave: "the destination is unreachable", ICMP port
			// unreachable whatever the protocol, and the packet dropped.
			if p.Trace != nil {
				v.observe(w, p, trace.Note, s.String()+" "+s.Scheduler+": no destination available, ICMP port unreachable sent", "")
			}
			v.ns.SendICMPError(w, p, 3, 3)
			return datapath.DropVerdict(datapath.ReasonNetfilterReject)
		}
	} else if c.dest.removed && v.ExpireNoDestConn {
		if p.Trace != nil {
			v.observe(w, p, trace.Note, "destination "+ap(c.DAddr, c.DPort)+" was removed: connection expired (expire_nodest_conn)", "")
		}
		v.expire(c)
		return datapath.DropVerdict(datapath.ReasonNetfilterDrop)
	}
	v.transition(c, 0, k.flags)
	if c.dest != nil && c.dest.svc != nil {
		c.dest.svc.InPkts++
	}
	return v.xmit(w, p, c)
}

// schedule is ip_vs_schedule (and ip_vs_sched_persist for a persistent
// service): pick a destination, create the connection.
func (v *IPVS) schedule(w *datapath.Walk, p *datapath.Packet, s *Service, k pkt) *Conn {
	if s.UnknownOrder && !s.ordered && len(s.dests) > 0 {
		s.ordered = true
		n := len(s.dests)
		r := n - 1
		for i := 0; i < n-1; i++ {
			if w.Chance(1 / float64(n-i)) {
				r = i
				break
			}
		}
		s.dests = append(s.dests[r:], s.dests[:r]...)
		s.sched.reset(s)
	}
	now := v.now()
	var d *Dest
	how := "scheduled by " + s.Scheduler
	if s.Flags&FlagPersistent != 0 {
		tk := connKey{k.proto, [4]byte(maskAddr(k.src, s.Netmask)), k.dst, 0, k.dport}
		tm := v.lookup(v.tmpl, tk)
		if tm != nil && (tm.dest.removed || !available(tm.dest)) {
			v.expire(tm) // expire_quiescent_template
			tm = nil
		}
		if tm != nil {
			d = tm.dest
			how = "persistence template " + ap(tm.CAddr, 0) + " -> " + ap(tm.DAddr, tm.DPort)
		} else {
			if d = s.sched.schedule(s, k.src, k.dst, k.sport); d == nil {
				return nil
			}
			tm = v.newConn(Conn{Proto: k.proto, CAddr: tk.saddr, VAddr: k.dst, VPort: k.dport, DAddr: d.Addr, DPort: d.Port,
				Template: true, dest: d, id: v.nextID})
			v.nextID++
			v.tmpl[tk] = tm
			v.conns = append(v.conns, tm)
			d.PersistConns++
		}
		tm.timeout = time.Duration(s.Timeout) * time.Second
		tm.expires = now + tm.timeout
	} else if d = s.sched.schedule(s, k.src, k.dst, k.sport); d == nil {
		return nil
	}
	c := v.newConn(Conn{Proto: k.proto, CAddr: k.src, CPort: k.sport, VAddr: k.dst, VPort: k.dport, DAddr: d.Addr, DPort: d.Port,
		State: tcpNone, dest: d, id: v.nextID})
	v.nextID++
	d.InactConns++
	v.in[c.inKey()] = c
	v.out[c.outKey()] = c
	v.conns = append(v.conns, c)
	s.Conns++
	if p.Trace != nil {
		v.observe(w, p, trace.Matched, s.String()+" "+s.Scheduler+" -> "+ap(d.Addr, d.Port)+" Masq weight "+strconv.Itoa(d.Weight)+
			" ("+how+", new connection "+ap(c.CAddr, c.CPort)+")", "")
	}
	return c
}

// connSlab is the most connection entries newConn carves out of one
// allocation.
const connSlab = 128

// newConn returns a new connection entry holding c, carved from a slab
// (doubling from 4 up to connSlab) so that scheduling a connection does
// not allocate each time; entries are never reused, since a caller may
// still hold an expired one.
func (v *IPVS) newConn(c Conn) *Conn {
	if len(v.slab) == 0 {
		v.slabN = min(max(2*v.slabN, 4), connSlab)
		v.slab = make([]Conn, v.slabN)
	}
	e := &v.slab[0]
	v.slab = v.slab[1:]
	*e = c
	return e
}

func maskAddr(a [4]byte, m uint32) [4]byte {
	x := be(a) & m
	return [4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)}
}

// xmit is ip_vs_nat_xmit: DNAT to the destination, then hand a packet for
// a local destination back to the stack (NF_ACCEPT) or send it on through
// LOCAL_OUT (NF_STOLEN) with its TTL decremented.
func (v *IPVS) xmit(w *datapath.Walk, p *datapath.Packet, c *Conn) datapath.Verdict {
	ip := p.IPv4()
	local := v.ns.IsLocal(c.DAddr)
	if !local {
		if ip[8] <= 1 {
			v.ns.SendICMPError(w, p, 11, 0)
			return datapath.DropVerdict(datapath.ReasonTTLExceeded)
		}
		decTTL(ip)
	}
	var before string
	if p.Trace != nil {
		before = flow(p)
	}
	conntrack.Rewrite(ip, conntrack.Tuple{Dst: c.DAddr, Dport: c.DPort, Proto: c.Proto}, conntrack.ManipDst)
	p.IPVSProperty = true
	if v.Conntrack {
		if e, _ := v.ct.Get(p); e != nil && !e.Confirmed() {
			e.AlterReply(conntrack.Tuple{Src: c.DAddr, Dst: c.CAddr, Sport: c.DPort, Dport: c.CPort, Proto: c.Proto})
		}
	}
	if p.Trace != nil {
		v.observe(w, p, trace.Rewritten, "ip_vs_nat_xmit: "+ap(c.VAddr, c.VPort)+" -> "+ap(c.DAddr, c.DPort), before)
	}
	if local {
		return datapath.VerdictContinue
	}
	v.ns.LocalOut(w, p)
	return datapath.VerdictStolen
}

// reply is ip_vs_out: a packet from a real server on a known connection
// gets the virtual address and port back as its source.
func (v *IPVS) reply(w *datapath.Walk, p *datapath.Packet, k pkt) datapath.Verdict {
	c := v.lookup(v.out, connKey{k.proto, k.src, k.dst, k.sport, k.dport})
	if c == nil {
		return datapath.VerdictContinue
	}
	v.transition(c, 1, k.flags)
	if c.dest != nil && c.dest.svc != nil {
		c.dest.svc.OutPkts++
	}
	var before string
	if p.Trace != nil {
		before = flow(p)
	}
	conntrack.Rewrite(p.IPv4(), conntrack.Tuple{Src: c.VAddr, Sport: c.VPort, Proto: c.Proto}, conntrack.ManipSrc)
	p.IPVSProperty = true
	if p.Trace != nil {
		o := trace.Observation{Node: v.ns.Node, Netns: v.ns.Name, Stage: StageOut, Action: trace.Rewritten,
			Summary: p.Summary(), Detail: "ip_vs_out: reply from " + ap(c.DAddr, c.DPort) + " as " + ap(c.VAddr, c.VPort),
			Before: before, After: flow(p)}
		w.Observe(p, o)
	}
	return datapath.VerdictContinue
}

// decTTL is ip_decrease_ttl: TTL minus one, checksum patched (RFC 1624).
func decTTL(ip []byte) {
	ip[8]--
	sum := uint32(ip[10])<<8 | uint32(ip[11])
	sum += 0x0100
	sum = (sum & 0xffff) + (sum >> 16)
	ip[10], ip[11] = byte(sum>>8), byte(sum)
}
