package datapath

import (
	"slices"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
)

// DefaultAgeingTime is the bridge FDB ageing time (`ip -d link` ageing_time
// 300.00, in seconds).
const DefaultAgeingTime = 300 * time.Second

type fdbEntry struct {
	port    *Device
	local   bool // the address of a port or of the bridge: deliver up, never aged
	static  bool
	updated time.Duration
}

// bridge is the state of a Linux bridge device: its ports and forwarding
// database.
type bridge struct {
	dev        *Device
	ports      []*Device
	fdb        map[uint64]*fdbEntry
	AgeingTime time.Duration
}

// changed is called on every change of the FDB's keys, its entries'
// ports or the ageing time: what the fast path recorded may no longer
// hold.
func (b *bridge) changed() {
	if ns := b.dev.ns; ns != nil {
		ns.e.cfgGen++
	}
}

// FDBEntry is one forwarding database entry as `bridge fdb show` lists it.
type FDBEntry struct {
	MAC    MAC
	Port   string
	Local  bool // "permanent": an address of the bridge or of a port
	Static bool
	Age    time.Duration
}

// BridgePorts returns the ports of a bridge device, in enslavement order.
func (d *Device) BridgePorts() []*Device {
	if d.br == nil {
		return nil
	}
	return d.br.ports
}

// SetAgeingTime sets the FDB ageing time of a bridge device.
func (d *Device) SetAgeingTime(t time.Duration) {
	if d.br != nil {
		d.br.AgeingTime = t
		d.br.changed()
	}
}

// FDB returns the bridge's current (not aged out) entries, sorted by port
// then MAC.
func (d *Device) FDB(now time.Duration) []FDBEntry {
	if d.br == nil {
		return nil
	}
	var out []FDBEntry
	for m, e := range d.br.fdb {
		if !e.local && !e.static && now-e.updated > d.br.AgeingTime {
			continue
		}
		out = append(out, FDBEntry{MAC: macFromKey(m), Port: e.port.Name, Local: e.local, Static: e.static, Age: now - e.updated})
	}
	slices.SortFunc(out, func(a, b FDBEntry) int {
		if a.Port != b.Port {
			if a.Port < b.Port {
				return -1
			}
			return 1
		}
		return slices.Compare(a.MAC[:], b.MAC[:])
	})
	return out
}

// lookup finds the port for dst, ageing out a stale entry.
func (b *bridge) lookup(now time.Duration, dst MAC) (*fdbEntry, bool) {
	e, ok := b.fdb[dst.key()]
	if !ok {
		return nil, false
	}
	if !e.local && !e.static && now-e.updated > b.AgeingTime {
		delete(b.fdb, dst.key())
		b.changed()
		return nil, false
	}
	return e, true
}

// fdbAlive records, for the fast path, that the walk found fe in the FDB.
func (b *bridge) fdbAlive(w *Walk, fe *fdbEntry) {
	if r := w.recording(); r != nil {
		o := r.op(fcFDBAlive)
		o.br, o.fe = b, fe
	}
}

func (b *bridge) learn(w *Walk, port *Device, p *Packet, src MAC) {
	if src.IsMulticast() || src.IsZero() {
		return
	}
	now := w.e.now
	e, ok := b.fdb[src.key()]
	if ok && (e.local || e.static) {
		b.fdbAlive(w, e)
		return
	}
	if ok && e.port == port {
		e.updated = now
		if r := w.recording(); r != nil {
			b.fdbAlive(w, e)
			r.op(feFDBTouch).fe = e
		}
		return
	}
	w.noFast()
	b.changed()
	if !ok {
		e = &fdbEntry{}
		b.fdb[src.key()] = e
	}
	e.port, e.updated = port, now
	if p.Trace != nil {
		w.Observe(p, trace.Observation{Node: b.dev.ns.Node, Netns: b.dev.ns.Name, Device: b.dev.Name,
			Stage: "bridge", Action: trace.Learned, Detail: src.String() + " on port " + port.Name})
	}
}

// input handles a frame received on port: learn the source, then deliver
// locally, forward to one port, or flood, as br_handle_frame does.
func (b *bridge) input(w *Walk, port *Device, p *Packet) {
	if !b.dev.up {
		port.drop(w, p, "bridge", ReasonDeviceDown, "bridge "+b.dev.Name+" is down")
		return
	}
	src := p.SrcMAC()
	ns := b.dev.ns
	if r := w.recording(); r != nil {
		r.netns(ns)
	}
	if src.IsMulticast() || src.IsZero() {
		w.noFast()
	}
	b.learn(w, port, p, src)
	// br_netfilter: every bridged IPv4 frame traverses PREROUTING here,
	// before the forwarding decision, whether it is for the host or not
	// (br_nf_pre_routing); ip_rcv then skips PREROUTING for it.
	if ns.Sysctl.BridgeNFCallIPTables && p.EtherType() == 0x0800 {
		if !ns.bridgePrerouting(w, b, p) {
			return
		}
	}
	dst := p.DstMAC()
	if dst.IsMulticast() {
		b.flood(w, port, p, true)
		return
	}
	fe, ok := b.lookup(w.e.now, dst)
	if ok {
		b.fdbAlive(w, fe)
	}
	if ok && fe.local {
		b.up(w, p)
		return
	}
	if !ok {
		b.flood(w, port, p, false)
		return
	}
	if fe.port == port && !port.hairpin {
		b.dev.drop(w, p, "bridge", ReasonHairpin, "destination "+dst.String()+" is behind ingress port "+port.Name)
		return
	}
	if p.Trace != nil {
		w.Observe(p, trace.Observation{Node: ns.Node, Netns: ns.Name, Device: b.dev.Name, Stage: "bridge",
			Action: trace.Forwarded, Summary: p.Summary(), Detail: "fdb " + dst.String() + " -> " + fe.port.Name})
	}
	b.forward(w, fe.port, p)
}

// forward sends a bridged frame out of port, through br_netfilter's FORWARD
// and POSTROUTING when enabled.
func (b *bridge) forward(w *Walk, port *Device, p *Packet) {
	ns := b.dev.ns
	if r := w.recording(); r != nil {
		r.netns(ns)
	}
	if ns.Sysctl.BridgeNFCallIPTables && p.EtherType() == 0x0800 && p.InDev != nil && p.InDev.master == b.dev {
		if !ns.bridgeForward(w, b, port, p) {
			return
		}
	}
	port.transmit(w, p)
}

// up passes a frame to the bridge device itself (the host's stack).
func (b *bridge) up(w *Walk, p *Packet) {
	p.InDev = b.dev
	b.dev.Stats.RxPackets++
	b.dev.Stats.RxBytes += uint64(p.Len())
	if r := w.recording(); r != nil {
		r.add(&b.dev.Stats.RxPackets, 1, &b.dev.Stats.RxBytes, uint64(p.Len()))
	}
	if p.Trace != nil {
		b.dev.observe(w, p, "rx", trace.Received, ethDetail(p))
	}
	b.dev.ns.l2Receive(w, b.dev, p)
}

// flood copies p to every port but the ingress one (and up to the host when
// toHost), in enslavement order.
func (b *bridge) flood(w *Walk, in *Device, p *Packet, toHost bool) {
	ns := b.dev.ns
	w.noFast()
	if p.Trace != nil {
		w.Observe(p, trace.Observation{Node: ns.Node, Netns: ns.Name, Device: b.dev.Name, Stage: "bridge",
			Action: trace.Flooded, Summary: p.Summary()})
	}
	var targets [64]*Device
	n := 0
	for _, port := range b.ports {
		if (port == in && !port.hairpin) || !port.up {
			continue
		}
		if n < len(targets) {
			targets[n] = port
			n++
		}
	}
	if toHost {
		b.up(w, p.Clone())
	}
	if n == 0 {
		p.Release()
		return
	}
	for i := 0; i < n-1; i++ {
		b.forward(w, targets[i], p.Clone())
	}
	b.forward(w, targets[n-1], p)
}

// localXmit sends a frame the host stack transmitted on the bridge device
// (br_dev_xmit): FDB lookup, else flood; no learning.
func (b *bridge) localXmit(w *Walk, p *Packet) {
	dst := p.DstMAC()
	if p.bridgedDNAT {
		// A frame br_netfilter DNATed to a neighbour on this bridge
		// (br_nf_pre_routing_finish_bridge): bridged on with FORWARD and
		// POSTROUTING, as if it had never left the bridge.
		w.noFast()
		p.bridgedDNAT = false
		if fe, ok := b.lookup(w.e.now, dst); ok && !fe.local {
			if fe.port == p.InDev && !fe.port.hairpin {
				b.dev.drop(w, p, "bridge", ReasonHairpin, "destination "+dst.String()+" is behind ingress port "+fe.port.Name)
				return
			}
			if p.Trace != nil {
				w.Observe(p, trace.Observation{Node: b.dev.ns.Node, Netns: b.dev.ns.Name, Device: b.dev.Name, Stage: "bridge",
					Action: trace.Forwarded, Summary: p.Summary(), Detail: "fdb " + dst.String() + " -> " + fe.port.Name})
			}
			b.forward(w, fe.port, p)
			return
		}
		b.flood(w, p.InDev, p, false)
		return
	}
	p.InDev = nil
	if !dst.IsMulticast() {
		if fe, ok := b.lookup(w.e.now, dst); ok && !fe.local {
			b.fdbAlive(w, fe)
			if p.Trace != nil {
				ns := b.dev.ns
				w.Observe(p, trace.Observation{Node: ns.Node, Netns: ns.Name, Device: b.dev.Name, Stage: "bridge",
					Action: trace.Forwarded, Summary: p.Summary(), Detail: "fdb " + dst.String() + " -> " + fe.port.Name})
			}
			fe.port.transmit(w, p)
			return
		}
	}
	b.flood(w, nil, p, false)
}
