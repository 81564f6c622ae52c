package datapath

import (
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
)

// DeviceKind is the link type, as `ip -d link` names it.
type DeviceKind uint8

// Device kinds modelled.
const (
	KindLoopback DeviceKind = iota + 1
	KindVeth
	KindBridge
	KindNIC // a physical-like Ethernet NIC attached to an underlay Segment
	KindVXLAN
	// KindDummy is a dummy device (drivers/net/dummy.c): NOARP, no
	// queue, everything sent to it vanishes. kube-proxy's IPVS mode
	// holds every Service address on one (kube-ipvs0), left down.
	KindDummy
)

// String implements fmt.Stringer.
func (k DeviceKind) String() string {
	switch k {
	case KindLoopback:
		return "loopback"
	case KindVeth:
		return "veth"
	case KindBridge:
		return "bridge"
	case KindNIC:
		return "ether"
	case KindVXLAN:
		return "vxlan"
	case KindDummy:
		return "dummy"
	}
	return "unknown"
}

// DeviceStats are the counters `ip -s link` shows.
type DeviceStats struct {
	RxPackets, RxBytes, TxPackets, TxBytes, RxDropped, TxDropped uint64
}

// Device is a network interface in a network namespace. Kind-specific state
// hangs off it (the bridge's FDB, the veth peer, the NIC's segment, the
// VXLAN configuration).
type Device struct {
	Name  string
	Index int
	Kind  DeviceKind
	// mac and mtu are the device's address and MTU (MAC, MTU), changed
	// only through SetMAC and Netns.SetMTU (`ip link set dev X
	// address|mtu`): the setters tell the fast path, which does not look
	// at them again on a replay.
	mac   MAC
	mtu   int
	up    bool
	ns    *Netns
	Stats DeviceStats

	// Bridge port state: the bridge this device is enslaved to and the
	// port's hairpin flag (`bridge link set dev X hairpin on`; Hairpin,
	// SetHairpin).
	master  *Device
	hairpin bool

	peer *Device  // veth
	br   *bridge  // bridge
	seg  *Segment // NIC
	vx   *VXLAN   // vxlan

	rx, tx hookList
	// lastNeigh is the neighbour entry the device last transmitted to,
	// looked at before the table (the cached neighbour of a dst_entry).
	lastNeigh *neighEntry
}

// Netns returns the namespace the device lives in.
func (d *Device) Netns() *Netns { return d.ns }

// Up reports whether the device is administratively up.
func (d *Device) Up() bool { return d.up }

// SetUp sets the device up or down (`ip link set dev X up|down`).
func (d *Device) SetUp(up bool) {
	d.up = up
	if d.ns != nil {
		d.ns.e.cfgGen++
	}
}

// MAC is the device's link-layer address (`ip link show`'s link/ether).
func (d *Device) MAC() MAC { return d.mac }

// MTU is the device's MTU (`ip link show`'s mtu).
func (d *Device) MTU() int { return d.mtu }

// Hairpin reports whether the bridge port's hairpin flag is on (`bridge
// -d link show`'s hairpin on).
func (d *Device) Hairpin() bool { return d.hairpin }

// SetMAC sets the device's address (`ip link set dev X address M`).
func (d *Device) SetMAC(m MAC) {
	d.mac = m
	d.bump()
}

// SetHairpin sets the bridge port's hairpin flag (`bridge link set dev X
// hairpin on|off`, IFLA_BRPORT_MODE): a frame may be forwarded back out
// of the port it came in on.
func (d *Device) SetHairpin(on bool) {
	d.hairpin = on
	d.bump()
}

// Master returns the bridge the device is a port of, or nil.
func (d *Device) Master() *Device { return d.master }

// Peer returns the other end of a veth pair, or nil.
func (d *Device) Peer() *Device { return d.peer }

// Segment returns the underlay segment a NIC is attached to, or nil.
func (d *Device) Segment() *Segment { return d.seg }

// VXLAN returns the VXLAN configuration of a vxlan device, or nil.
func (d *Device) VXLAN() *VXLAN { return d.vx }

// AddRxStage inserts a stage that sees every frame the device receives,
// before anything else does (like a tc ingress filter). Lower priority runs
// first.
func (d *Device) AddRxStage(name string, priority int, s Stage) {
	d.bump()
	d.rx.add(HookEntry{Name: name, Priority: priority, Stage: s})
}

// AddTxStage inserts a stage that sees every frame the device transmits,
// last before the wire (like a tc egress qdisc or filter).
func (d *Device) AddTxStage(name string, priority int, s Stage) {
	d.bump()
	d.tx.add(HookEntry{Name: name, Priority: priority, Stage: s})
}

// RemoveStage removes a stage added with AddRxStage or AddTxStage by name.
func (d *Device) RemoveStage(name string) bool {
	d.bump()
	return d.rx.remove(name) || d.tx.remove(name)
}

// bump invalidates what the namespace fast path recorded.
func (d *Device) bump() {
	if d.ns != nil {
		d.ns.e.cfgGen++
	}
}

func (d *Device) observe(w *Walk, p *Packet, stage string, a trace.Action, detail string) {
	o := trace.Observation{Node: d.ns.Node, Netns: d.ns.Name, Device: d.Name, Stage: stage, Action: a,
		Summary: p.Summary(), Detail: detail}
	if p.Trace.Capture && (a == trace.Received || a == trace.Transmitted) {
		o.Frame = append([]byte(nil), p.Frame()...)
	}
	w.Observe(p, o)
}

// drop records a drop of p at d and releases it.
func (d *Device) drop(w *Walk, p *Packet, stage string, r DropReason, detail string) {
	if p.Trace != nil {
		o := trace.Observation{Node: d.ns.Node, Netns: d.ns.Name, Device: d.Name, Stage: stage,
			Action: trace.Dropped, Summary: p.Summary(), Detail: detail, Reason: r.String()}
		w.Observe(p, o)
	}
	p.Release()
}

func ethDetail(p *Packet) string {
	var b [37]byte
	return string(p.DstMAC().appendTo(append(p.SrcMAC().appendTo(b[:0]), " > "...)))
}

// receive is the device's rx path: counters, rx stages, then the bridge
// (for a bridge port), the VXLAN device, or the namespace's stack.
func (d *Device) receive(w *Walk, p *Packet) {
	if !d.up || d.ns == nil {
		d.Stats.RxDropped++
		if d.ns == nil {
			p.Release()
			return
		}
		d.drop(w, p, "rx", ReasonDeviceDown, "")
		return
	}
	if p.Len() < EthHdrLen {
		d.Stats.RxDropped++
		d.drop(w, p, "rx", ReasonMalformed, (&FrameError{Layer: "ethernet", Reason: "shorter than 14 bytes"}).Error())
		return
	}
	if p.Trace == nil && !w.e.fastOff {
		if d.ns.fastPath(w, d, p) {
			return
		}
	}
	p.InDev = d
	d.Stats.RxPackets++
	d.Stats.RxBytes += uint64(p.Len())
	if r := w.recording(); r != nil {
		r.add(&d.Stats.RxPackets, 1, &d.Stats.RxBytes, uint64(p.Len()))
	}
	if p.Trace != nil {
		d.observe(w, p, "rx", trace.Received, ethDetail(p))
	}
	if len(d.rx) > 0 {
		w.noFast()
		w.dev = d
		v := d.rx.run(w, p)
		w.dev = nil
		switch v.Code {
		case Drop:
			d.drop(w, p, "rx", v.Reason, "")
			return
		case Stolen:
			return
		}
	}
	if d.master != nil {
		d.master.br.input(w, d, p)
		return
	}
	d.ns.l2Receive(w, d, p)
}

// transmit is the device's tx path: tx stages, counters, then the link.
func (d *Device) transmit(w *Walk, p *Packet) {
	if !d.up {
		d.Stats.TxDropped++
		d.drop(w, p, "tx", ReasonDeviceDown, "")
		return
	}
	r := w.recording()
	if len(d.tx) > 0 {
		w.noFast()
		w.dev = d
		v := d.tx.run(w, p)
		w.dev = nil
		switch v.Code {
		case Drop:
			d.Stats.TxDropped++
			d.drop(w, p, "tx", v.Reason, "")
			return
		case Stolen:
			return
		}
	}
	d.Stats.TxPackets++
	d.Stats.TxBytes += uint64(p.Len())
	if r != nil {
		r.add(&d.Stats.TxPackets, 1, &d.Stats.TxBytes, uint64(p.Len()))
	}
	if p.Trace != nil {
		d.observe(w, p, "tx", trace.Transmitted, ethDetail(p))
	}
	switch d.Kind {
	case KindVeth:
		if d.peer == nil {
			d.drop(w, p, "tx", ReasonDeviceDown, "veth peer missing")
			return
		}
		if d.peer.ns != d.ns {
			p.scrub()
		}
		w.fastRx(0, d.peer, p)
	case KindLoopback:
		w.noFast()
		w.e.ScheduleRx(0, d, p)
	case KindBridge:
		d.br.localXmit(w, p)
	case KindNIC:
		if d.seg == nil {
			d.drop(w, p, "tx", ReasonDeviceDown, "NIC not attached to a segment")
			return
		}
		d.seg.send(w, d, p)
	case KindVXLAN:
		d.vx.xmit(w, p)
	default:
		w.noFast()
		p.Release()
	}
}

// Segment is an underlay L2 network between nodes: a learning switch with a
// fixed one-way latency. NICs attach to it.
type Segment struct {
	Name    string
	Latency time.Duration
	ports   []*Device
	fdb     map[uint64]*Device
}

// NewSegment returns a segment with the given one-way latency.
func NewSegment(name string, latency time.Duration) *Segment {
	return &Segment{Name: name, Latency: latency, fdb: map[uint64]*Device{}}
}

// Ports returns the NICs attached to the segment.
func (s *Segment) Ports() []*Device { return s.ports }

func (s *Segment) send(w *Walk, from *Device, p *Packet) {
	// A frame on a wire carries no skb metadata to the next machine. Its
	// checksum state does arrive, in effect: the receiving NIC verifies
	// checksums in hardware (rx checksum offload, CHECKSUM_UNNECESSARY), so
	// a frame whose checksums were right when sent stays trusted, and one
	// that was not (injected bytes, a Corrupt probe) is still verified.
	p.scrub()
	src, dst := p.SrcMAC(), p.DstMAC()
	if k := src.key(); !src.IsMulticast() && s.fdb[k] != from {
		s.fdb[k] = from // learned or moved: a lookup is cheaper than a store
		from.ns.e.cfgGen++
		w.noFast()
	}
	if !dst.IsMulticast() {
		if to, ok := s.fdb[dst.key()]; ok {
			if to == from {
				p.Release()
				return
			}
			if r := w.recording(); r != nil {
				o := r.op(fcSegment)
				o.seg, o.y = s, uint64(s.Latency)
			}
			w.fastRx(s.Latency, to, p)
			return
		}
	}
	w.noFast()
	// Flood in attachment order: deterministic.
	var last *Device
	for _, port := range s.ports {
		if port == from {
			continue
		}
		if last != nil {
			w.e.ScheduleRx(s.Latency, last, p.Clone())
		}
		last = port
	}
	if last == nil {
		p.Release()
		return
	}
	w.e.ScheduleRx(s.Latency, last, p)
}

// Attach plugs a NIC into the segment. A NIC can be on one segment at a time.
func (s *Segment) Attach(d *Device) error {
	if d.Kind != KindNIC {
		return &ConfigError{Op: "attach", Object: d.Name, Reason: "only NIC devices attach to a segment"}
	}
	if d.seg != nil {
		return &ConfigError{Op: "attach", Object: d.Name, Reason: "already attached to segment " + d.seg.Name}
	}
	d.seg = s
	s.ports = append(s.ports, d)
	if d.ns != nil {
		d.ns.e.cfgGen++
	}
	return nil
}

// Inject makes the device receive a copy of frame at the current virtual
// time, as if it came off the wire (or from the veth peer). The returned
// packet may be given a Trace before the engine runs.
func (d *Device) Inject(frame []byte) (*Packet, error) {
	if d.ns == nil {
		return nil, &ConfigError{Op: "inject", Object: d.Name, Reason: "device was deleted"}
	}
	p := d.ns.e.Pool.Get()
	if !p.SetFrame(frame) {
		p.Release()
		return nil, &FrameError{Layer: "ethernet", Reason: "frame of " + itoa(len(frame)) + " bytes exceeds the buffer"}
	}
	d.ns.e.ScheduleRx(0, d, p)
	return p, nil
}

// Transmit sends a copy of frame out of the device now, as a packet socket
// bound to it does (AF_PACKET sendto: dev_queue_xmit, no stack above): tx
// stages, counters, then the link. The frame is traced into tr when tr is
// not nil. Call it between engine runs, not from a stage.
func (d *Device) Transmit(frame []byte, tr *Trace) error {
	if d.ns == nil {
		return &ConfigError{Op: "transmit", Object: d.Name, Reason: "device was deleted"}
	}
	p := d.ns.e.Pool.Get()
	if !p.SetFrame(frame) {
		p.Release()
		return &FrameError{Layer: "ethernet", Reason: "frame of " + itoa(len(frame)) + " bytes exceeds the buffer"}
	}
	if tr != nil {
		p.Trace, p.ID = tr, tr.NewPacketID()
	}
	d.transmit(d.ns.e.Walk(), p)
	return nil
}
