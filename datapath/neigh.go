package datapath

import (
	"net/netip"
	"slices"
	"time"

	"github.com/kubewalk/kubewalk/datapath/route"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// NeighState is a neighbour entry's NUD state, as `ip neigh` prints it.
type NeighState uint8

// NUD states modelled.
const (
	NeighIncomplete NeighState = iota + 1
	NeighReachable
	NeighStale
	NeighFailed
	NeighPermanent
	NeighNoARP
)

// String implements fmt.Stringer.
func (s NeighState) String() string {
	switch s {
	case NeighIncomplete:
		return "INCOMPLETE"
	case NeighReachable:
		return "REACHABLE"
	case NeighStale:
		return "STALE"
	case NeighFailed:
		return "FAILED"
	case NeighPermanent:
		return "PERMANENT"
	case NeighNoARP:
		return "NOARP"
	}
	return "NONE"
}

// Neighbour-table timing, the kernel's defaults for net.ipv4.neigh.default.
const (
	// ARPRetransTime is retrans_time_ms: the interval between ARP probes.
	ARPRetransTime = time.Second
	// ARPProbes is mcast_solicit: broadcast probes before the entry fails.
	ARPProbes = 3
	// ReachableTime is base_reachable_time_ms. The kernel randomises it to
	// between half and one and a half times this; kubewalk uses it as is.
	ReachableTime = 30 * time.Second
	// UnresQueueLen bounds the packets queued on an INCOMPLETE entry
	// (the kernel bounds bytes, unres_qlen_bytes; a count keeps it simple).
	UnresQueueLen = 101
)

// neighKey is (ifindex << 32 | IPv4 address): one uint64 so lookups take
// the map fast path.
type neighKey uint64

func mkNeighKey(dev int, ip [4]byte) neighKey {
	return neighKey(uint64(dev)<<32 | uint64(ip[0])<<24 | uint64(ip[1])<<16 | uint64(ip[2])<<8 | uint64(ip[3]))
}

func (k neighKey) dev() int { return int(k >> 32) }
func (k neighKey) ip() [4]byte {
	return [4]byte{byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}
}

type neighEntry struct {
	key       neighKey
	ns        *Netns
	dev       *Device
	state     NeighState
	mac       MAC
	confirmed time.Duration
	// updated is the last state change, used the last output through a
	// not-connected entry (neigh->updated, neigh->used).
	updated, used time.Duration
	// gcPrev and gcNext link the entry on its ARPTable's gc list.
	gcPrev, gcNext *neighEntry
	onGC           bool
	probes         int
	queue          []*Packet
	// trace of the packet that started resolution, so the ARP exchange
	// shows up in its walk.
	trace  *Trace
	parent int
	srcIP  [4]byte
	// removed is set when the entry leaves the table (removeNeigh); an
	// entry never returns to it (a new one is created).
	removed bool
}

func (e *neighEntry) usable() bool {
	return e.state == NeighReachable || e.state == NeighStale || e.state == NeighPermanent || e.state == NeighNoARP
}

type neighTable struct {
	m map[neighKey]*neighEntry
}

func (t *neighTable) get(dev int, ip [4]byte) *neighEntry { return t.m[mkNeighKey(dev, ip)] }

// Neighbor is a neighbour entry as `ip neigh show` lists it.
type Neighbor struct {
	IP    netip.Addr
	Dev   string
	MAC   MAC
	State NeighState
}

// String prints the entry as `ip neigh show` does (dev included).
func (n Neighbor) String() string {
	s := n.IP.String() + " dev " + n.Dev
	if n.State != NeighIncomplete && n.State != NeighFailed {
		s += " lladdr " + n.MAC.String()
	}
	return s + " " + n.State.String()
}

// Neighbors lists the neighbour table sorted by device index then address,
// with REACHABLE entries older than ReachableTime shown as STALE.
func (ns *Netns) Neighbors() []Neighbor {
	ns.arp.catchUp(ns.e.now)
	var out []Neighbor
	keys := make([]neighKey, 0, len(ns.neigh.m))
	for k := range ns.neigh.m {
		keys = append(keys, k)
	}
	for _, v := range ns.vxlans {
		if v.mesh == nil {
			continue
		}
		for gw, e := range v.mesh.neigh {
			if e.node != v.meshNode {
				keys = append(keys, mkNeighKey(v.dev.Index, gw))
			}
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		e := ns.neigh.m[k]
		if e == nil {
			d := ns.devByIndex(k.dev())
			out = append(out, Neighbor{IP: netip.AddrFrom4(k.ip()), Dev: d.Name, MAC: d.vx.mesh.neigh[k.ip()].mac, State: NeighPermanent})
			continue
		}
		ns.age(e)
		out = append(out, Neighbor{IP: netip.AddrFrom4(k.ip()), Dev: e.dev.Name, MAC: e.mac, State: e.state})
	}
	return out
}

// unshareNeigh takes d's VTEP out of its mesh before a change to the
// mesh's neighbour ip on it.
func unshareNeigh(d *Device, ip [4]byte) {
	if v := d.vx; v != nil && v.mesh != nil {
		if _, ok := v.meshNeigh(ip); ok {
			v.mesh.Detach(d)
		}
	}
}

func (ns *Netns) age(e *neighEntry) {
	if e.state == NeighReachable && ns.e.now-e.confirmed > ReachableTime {
		e.state, e.updated = e.stateAt(ns.e.now)
	}
}

// SetNeigh installs a neighbour entry (`ip neigh replace IP dev D lladdr M
// nud permanent|reachable`). Packets waiting on it are sent. A new entry
// that is not PERMANENT counts against the kernel's gc_thresh3 and fails
// with "No buffer space available" when the table is full (see ARPTable).
func (ns *Netns) SetNeigh(dev string, ip netip.Addr, mac MAC, state NeighState) error {
	d := ns.Device(dev)
	if d == nil {
		return &ConfigError{Op: "neigh replace", Object: ip.String(), Reason: "Cannot find device \"" + dev + "\""}
	}
	if !ip.Is4() {
		return &ConfigError{Op: "neigh replace", Object: ip.String(), Reason: "not an IPv4 address"}
	}
	if state != NeighPermanent && state != NeighReachable && state != NeighStale && state != NeighNoARP {
		return &ConfigError{Op: "neigh replace", Object: ip.String(), Reason: "state " + state.String() + " cannot be set"}
	}
	k := mkNeighKey(d.Index, ip.As4())
	ns.arp.catchUp(ns.e.now)
	unshareNeigh(d, ip.As4())
	e := ns.neigh.m[k]
	if e == nil {
		if e = ns.newNeigh(k, d, state); e == nil {
			return &ConfigError{Op: "neigh replace", Object: ip.String(), Reason: "RTNETLINK answers: No buffer space available"}
		}
	}
	e.mac, e.confirmed = mac, ns.e.now
	e.setState(state, ns.e.now)
	ns.flushQueue(ns.e.Walk(), e)
	return nil
}

// DeleteNeigh removes an entry (`ip neigh del`).
func (ns *Netns) DeleteNeigh(dev string, ip netip.Addr) bool {
	d := ns.Device(dev)
	if d == nil || !ip.Is4() {
		return false
	}
	unshareNeigh(d, ip.As4())
	e := ns.neigh.m[mkNeighKey(d.Index, ip.As4())]
	if e == nil {
		return false
	}
	ns.removeNeigh(e)
	return true
}

// neighOutput fills in the Ethernet header for nextHop on dev and transmits,
// resolving with ARP first if needed (neigh_output / neigh_resolve_output).
func (ns *Netns) neighOutput(w *Walk, dev *Device, nextHop [4]byte, p *Packet) {
	r := w.recording()
	if dev.Kind == KindLoopback {
		w.noFast()
		p.SetMACs(MAC{}, MAC{})
		dev.transmit(w, p)
		return
	}
	if _, bcast := ns.addrClass(nextHop); nextHop == [4]byte{255, 255, 255, 255} || bcast {
		p.SetMACs(dev.mac, BroadcastMAC)
		if r != nil {
			r.macs(p)
		}
		dev.transmit(w, p)
		return
	}
	now := ns.e.now
	if now >= ns.arp.nextPeriodic {
		ns.arp.catchUp(now)
	}
	if r != nil {
		r.op(fcARP).arp = ns.arp
	}
	k := mkNeighKey(dev.Index, nextHop)
	e := dev.lastNeigh
	if e == nil || e.key != k || e.removed {
		if v := dev.vx; v != nil && v.mesh != nil {
			// A mesh peer's PERMANENT entry (the VTEP holds no entry of
			// its own for it).
			if mac, ok := v.meshNeigh(nextHop); ok {
				p.setNeighMACs(dev.mac, mac)
				if r != nil {
					// The mesh's changes change the engine's cfgGen.
					r.macs(p)
				}
				dev.transmit(w, p)
				return
			}
		}
		if e = ns.neigh.m[k]; e != nil {
			dev.lastNeigh = e
		}
	}
	if e != nil {
		ns.age(e)
		if e.state == NeighStale {
			e.used = now // neigh_event_send
		}
		if e.usable() {
			p.setNeighMACs(dev.mac, e.mac)
			if r != nil {
				r.neigh(e, true)
				r.macs(p)
			}
			dev.transmit(w, p)
			return
		}
	}
	w.noFast()
	if e == nil || e.state == NeighFailed {
		if e == nil {
			if e = ns.newNeigh(k, dev, NeighIncomplete); e == nil {
				// __neigh_create failed: ip_finish_output2 drops the packet.
				ns.drop(w, p, dev, "neigh", ReasonNeighTableOverflow,
					"arp_cache: neighbor table overflow! ("+itoa(ns.arp.gcEntries)+" entries, gc_thresh3 "+itoa(ns.arp.Thresh3)+")")
				return
			}
		}
		e.setState(NeighIncomplete, now)
		e.used = now
		e.probes, e.trace, e.parent = 0, p.Trace, p.ID
		// arp_solicit: the packet's own source if it is ours, else the
		// device's address (arp_announce=0).
		src := [4]byte(p.IPv4()[12:16])
		if !ns.IsLocal(src) {
			src = ns.devAddrFor(dev, nextHop)
		}
		e.srcIP = src
	}
	if len(e.queue) >= UnresQueueLen {
		ns.drop(w, p, dev, "neigh", ReasonNeighQueueFull, "")
		return
	}
	e.queue = append(e.queue, p)
	if p.Trace != nil {
		ns.observe(w, p, dev, "neigh", trace.Queued, "waiting for ARP reply for "+addrString(nextHop))
	}
	if e.probes == 0 {
		ns.arpProbe(w, e)
	}
}

// devAddrFor picks the source address of an ARP request for dst on dev:
// inet_select_addr(dev, dst, RT_SCOPE_LINK) as arp_solicit calls it.
func (ns *Netns) devAddrFor(dev *Device, dst [4]byte) [4]byte {
	a, _ := ns.selectAddr(dev, dst, route.ScopeLink)
	return a
}

// Fire is the ARP retransmission timer.
func (e *neighEntry) Fire(w *Walk) {
	if e.state != NeighIncomplete || e.ns.neigh.m[e.key] != e {
		return
	}
	e.ns.arp.catchUp(w.Now())
	if e.probes >= ARPProbes {
		e.setState(NeighFailed, w.Now()) // neigh_invalidate
		q := e.queue
		e.queue = nil
		for _, p := range q {
			e.ns.icmpError(w, p, header.ICMPv4DstUnreachable, header.ICMPv4HostUnreachable, 0)
			e.ns.drop(w, p, e.dev, "neigh", ReasonNeighUnresolved,
				"no ARP reply for "+addrString(e.key.ip())+" after "+itoa(ARPProbes)+" probes (ICMP host unreachable sent)")
		}
		return
	}
	e.ns.arpProbe(w, e)
}

// arpProbe broadcasts an ARP request for e and arms the retransmit timer.
func (ns *Netns) arpProbe(w *Walk, e *neighEntry) {
	e.probes++
	p := ns.e.Pool.Get()
	f := p.buf[Headroom : Headroom+42]
	p.head, p.tail = Headroom, Headroom+42
	writeARP(f, 1, e.dev.mac, e.srcIP, BroadcastMAC, MAC{}, e.key.ip())
	if e.trace != nil {
		p.Trace = e.trace
		p.ID = e.trace.NewPacketID()
		p.Parent = e.parent
		ns.observe(w, p, e.dev, "arp", trace.Replied, "who-has "+addrString(e.key.ip())+" (probe "+itoa(e.probes)+"/"+itoa(ARPProbes)+")")
	}
	ns.e.ScheduleTimer(ARPRetransTime, e)
	e.dev.transmit(w, p)
}

// writeARP writes an Ethernet+ARP frame for IPv4 over Ethernet into f (42 bytes).
// For requests the Ethernet destination is broadcast and tha is tha as given.
func writeARP(f []byte, op uint16, sha MAC, spa [4]byte, ethDst, tha MAC, tpa [4]byte) {
	copy(f[0:6], ethDst[:])
	copy(f[6:12], sha[:])
	f[12], f[13] = 0x08, 0x06
	a := f[14:]
	a[0], a[1] = 0, 1 // Ethernet
	a[2], a[3] = 0x08, 0x00
	a[4], a[5] = 6, 4
	a[6], a[7] = byte(op>>8), byte(op)
	copy(a[8:14], sha[:])
	copy(a[14:18], spa[:])
	copy(a[18:24], tha[:])
	copy(a[24:28], tpa[:])
}

// ARP describes a parsed ARP packet for IPv4 over Ethernet.
type ARP struct {
	Op       uint16
	SHA, THA MAC
	SPA, TPA [4]byte
}

// ParseARP parses the ARP payload of a frame (after the Ethernet header).
func ParseARP(b []byte) (ARP, error) {
	if len(b) < 28 {
		return ARP{}, &FrameError{Layer: "arp", Reason: "shorter than 28 bytes"}
	}
	if b[0] != 0 || b[1] != 1 || b[2] != 0x08 || b[3] != 0 || b[4] != 6 || b[5] != 4 {
		return ARP{}, &FrameError{Layer: "arp", Reason: "not IPv4 over Ethernet"}
	}
	op := uint16(b[6])<<8 | uint16(b[7])
	if op != 1 && op != 2 {
		return ARP{}, &FrameError{Layer: "arp", Reason: "opcode " + itoa(int(op)) + " is neither request nor reply"}
	}
	return ARP{Op: op, SHA: MAC(b[8:14]), SPA: [4]byte(b[14:18]), THA: MAC(b[18:24]), TPA: [4]byte(b[24:28])}, nil
}

// arpReceive is arp_process: answer requests for our addresses, learn the
// sender, complete INCOMPLETE entries from replies.
func (ns *Netns) arpReceive(w *Walk, dev *Device, p *Packet) {
	a, err := ParseARP(p.Frame()[EthHdrLen:])
	if err != nil {
		ns.drop(w, p, dev, "arp", ReasonMalformed, err.Error())
		return
	}
	ns.arp.catchUp(ns.e.now)
	k := mkNeighKey(dev.Index, a.SPA)
	e := ns.neigh.m[k]
	forUs := ns.local.has(a.TPA)
	// A mesh peer's entry is PERMANENT: neither created nor updated.
	meshed := false
	if v := dev.vx; e == nil && v != nil && v.mesh != nil {
		_, meshed = v.meshNeigh(a.SPA)
	}
	if a.Op == 1 && forUs {
		// neigh_event_ns: a request for us creates or refreshes the
		// sender (when the table has room; the reply goes out anyway).
		if e == nil {
			if !meshed {
				if e = ns.newNeigh(k, dev, NeighStale); e != nil {
					e.mac = a.SHA
				}
			}
		} else if e.state != NeighPermanent {
			if e.mac != a.SHA || e.state == NeighIncomplete || e.state == NeighFailed {
				e.setState(NeighStale, ns.e.now)
			}
			e.mac = a.SHA
			ns.flushQueue(w, e)
		}
		r := ns.e.Pool.Get()
		r.head, r.tail = Headroom, Headroom+42
		writeARP(r.buf[Headroom:Headroom+42], 2, dev.mac, a.TPA, a.SHA, a.SHA, a.SPA)
		if p.Trace != nil {
			r.Trace, r.ID, r.Parent = p.Trace, p.Trace.NewPacketID(), p.ID
			ns.observe(w, p, dev, "arp", trace.Delivered, "request for local address "+addrString(a.TPA))
			ns.observe(w, r, dev, "arp", trace.Replied, addrString(a.TPA)+" is-at "+dev.mac.String())
		}
		p.Release()
		dev.transmit(w, r)
		return
	}
	if e != nil && e.state != NeighPermanent && (a.Op == 2 || forUs || e.state == NeighIncomplete) {
		e.mac, e.confirmed = a.SHA, ns.e.now
		e.setState(NeighReachable, ns.e.now)
		if p.Trace != nil {
			ns.observe(w, p, dev, "arp", trace.Resolved, addrString(a.SPA)+" is-at "+a.SHA.String())
		}
		p.Release()
		ns.flushQueue(w, e)
		return
	}
	if p.Trace != nil {
		ns.observe(w, p, dev, "arp", trace.Delivered, "not for us; ignored")
	}
	p.Release()
}

// flushQueue transmits the packets waiting on a now-usable entry.
func (ns *Netns) flushQueue(w *Walk, e *neighEntry) {
	if !e.usable() || len(e.queue) == 0 {
		return
	}
	q := e.queue
	e.queue = nil
	for _, p := range q {
		p.setNeighMACs(e.dev.mac, e.mac)
		e.dev.transmit(w, p)
	}
}
