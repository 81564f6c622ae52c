package datapath

import (
	"encoding/binary"
	"slices"
	"time"
)

// The namespace fast path is a per-namespace memo of whole events, in the
// spirit of the kernel's flow offload (nf_flow_table): once what one
// frame did from the moment a device received it (or the stack sent it)
// until it left the namespace is known, a later frame of the same flow
// gets that effect replayed in one step instead of the walk re-run.
//
// Recording runs beside the ordinary walk of an untraced packet. Every
// step of the walk the fast path knows how to repeat appends an effect
// (a counter increment, a conntrack refresh, a NAT rewrite, a TTL
// decrement, a MAC rewrite, an encapsulation, a bridge FDB refresh) and,
// for everything that decided the walk, a check (the namespace's address
// and route generations and sysctls, each device's state, the neighbour
// entry's state and its ageing, the bridge and underlay FDBs, the VXLAN
// FDB or mesh, the generation of every hook stage's rules, the conntrack
// entry's identity, state and status). Anything it does not know — a
// stage that is not a FastStage, a packet created, cloned or released,
// an event scheduled other than the frame's own hand-over, a state
// change (a neighbour turning stale, an FDB entry learned or moved, a TCP
// state move), a drop — abandons the recording, and the walk goes on as
// it would have. A recording that reaches the hand-over of the frame to
// the next device, or its delivery to the namespace's sockets, is kept.
//
// Replay first evaluates every check, touching nothing; only if all hold
// does it apply the effects in the recorded order, at the current virtual
// time, then hand the frame over (or deliver it, through the ordinary
// socket code). A frame whose key differs in anything the walk reads —
// addresses, ports, protocol, TCP flags, TTL, TOS, lengths, the fragment
// bits, its MACs, its metadata — is a different flow. Traced packets never
// use the fast path, a walk that reaches a branch point (Walk.Chance) is
// never recorded, and neither are TCP segments with SYN, FIN, RST or URG.

const (
	fastSlots  = 8
	fastMaxOps = 64
)

// fastMeta is the packet metadata the walk reads or writes besides the
// bytes (everything in Packet but the buffer, the trace, the delay stage
// and CT, which must be unset when an event starts).
type fastMeta struct {
	InDev, OutDev, PhysIn                         *Device
	NextHop                                       [4]byte
	Mark                                          uint32
	Local, CsumValid, IPVSProperty                bool
	brPrerouted, bridgedDNAT, keepSrcMAC, ctReply bool
}

func metaOf(p *Packet) fastMeta {
	return fastMeta{InDev: p.InDev, OutDev: p.OutDev, PhysIn: p.PhysIn, NextHop: p.NextHop, Mark: p.Mark,
		Local: p.Local, CsumValid: p.CsumValid, IPVSProperty: p.IPVSProperty, brPrerouted: p.brPrerouted,
		bridgedDNAT: p.bridgedDNAT, keepSrcMAC: p.keepSrcMAC, ctReply: p.CT.Reply}
}

func (m *fastMeta) restore(p *Packet, ct any) {
	p.InDev, p.OutDev, p.PhysIn, p.NextHop, p.Mark = m.InDev, m.OutDev, m.PhysIn, m.NextHop, m.Mark
	p.Local, p.CsumValid, p.IPVSProperty = m.Local, m.CsumValid, m.IPVSProperty
	p.brPrerouted, p.bridgedDNAT, p.keepSrcMAC = m.brPrerouted, m.bridgedDNAT, m.keepSrcMAC
	p.CT = CTRef{Entry: ct, Reply: m.ctReply}
}

// fastHdrWords is how much of the frame the key covers: 64 bytes, the
// Ethernet, IPv4 and TCP headers (read from the buffer, which always
// extends that far past the frame's start; the mask covers only bytes
// of the frame).
const fastHdrWords = 8

// fastKey is everything about a frame at the start of an event that the
// walk may read to decide what to do with it: the receiving device (nil
// for a packet the stack sends), the frame's offset and length, its
// metadata, and its first 64 bytes under a mask that leaves out what
// varies within a flow and decides nothing (the IP ID and checksum, TCP
// sequence numbers, window and checksum, the UDP checksum, ICMP sequence
// and checksum, the payload).
type fastKey struct {
	dev        *Device
	head, flen uint16
	meta       fastMeta
	hdr, mask  [fastHdrWords]uint64
}

func loadHdr(p *Packet, h *[fastHdrWords]uint64) {
	b := p.buf[p.head : p.head+8*fastHdrWords]
	for i := range h {
		h[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
}

// fastKeyOf builds p's key and reports whether p may be recorded at all:
// an IPv4 frame without options or fragmentation, of a protocol whose
// connections the key identifies, with no conntrack entry and no delay
// stage attached, and for TCP, without SYN, FIN, RST or URG.
func fastKeyOf(dev *Device, p *Packet, k *fastKey) bool {
	if p.Len() < EthHdrLen+20+8 || p.CT.Entry != nil || p.delayedBy != nil || p.Len() > 0xffff ||
		p.head+8*fastHdrWords > len(p.buf) {
		return false
	}
	f := p.Frame()
	if f[12] != 0x08 || f[13] != 0 || f[14] != 0x45 || f[20]&0x3f != 0 || f[21] != 0 {
		return false
	}
	*k = fastKey{dev: dev, head: uint16(p.head), flen: uint16(len(f)), meta: metaOf(p)}
	var m [8 * fastHdrWords]byte
	for i := range 14 + 4 {
		m[i] = 0xff // Ethernet; version, TOS, total length
	}
	for i := 20; i < 24; i++ {
		m[i] = 0xff // flags and fragment offset, TTL, protocol
	}
	for i := 26; i < 38; i++ {
		m[i] = 0xff // addresses; ports, ICMP type and code
	}
	l4 := f[34:]
	switch f[23] {
	case ProtoTCP:
		if len(l4) < 20 || l4[13]&0x27 != 0 || l4[13]&0x10 == 0 {
			return false // SYN, FIN, RST or URG, or not an ACK: never recorded
		}
		m[46], m[47] = 0xff, 0xff // data offset, flags
	case ProtoUDP:
		m[38], m[39] = 0xff, 0xff // length
	case ProtoICMP:
		m[36], m[37] = 0, 0 // checksum
		m[38], m[39] = 0xff, 0xff
	default:
		return false
	}
	for i := len(f); i < len(m); i++ {
		m[i] = 0
	}
	loadHdr(p, &k.hdr)
	for i := range k.mask {
		k.mask[i] = binary.LittleEndian.Uint64(m[8*i:])
		k.hdr[i] &= k.mask[i]
	}
	return true
}

// fastSlot is where a frame's entry is kept: from its addresses and
// ports (bytes 26 to 37) and the device.
func fastSlot(dev *Device, hdr *[fastHdrWords]uint64) int {
	h := (hdr[3]>>16 ^ hdr[4]*0x9e3779b97f4a7c15) * 0xff51afd7ed558ccd
	if dev != nil {
		h ^= uint64(dev.Index) * 0xc2b2ae3d27d4eb4f
	}
	h ^= h >> 29
	h *= 0x94d049bb133111eb
	return int(h >> (64 - 3))
}

type fastKind uint8

const (
	// checks
	fcNetns    fastKind = iota + 1 // addresses, routes, sysctls
	fcDev                          // up, MTU, MAC, hairpin, no rx/tx stages
	fcNeigh                        // entry live, same state and MAC, not due to turn stale
	fcARP                          // the node's periodic neighbour collector is not due
	fcMesh                         // the VXLAN device's mesh and its generation
	fcVXLAN                        // the VXLAN device's own FDB generation
	fcBridge                       // the bridge FDB's generation
	fcFDBAlive                     // an FDB entry the walk looked up has not aged out
	fcSegment                      // the underlay FDB's generation and the latency
	// effects (fcStage is both)
	fcStage    // a hook stage's effect (Effect)
	feAdd      // *a += x, *b += y
	feDecTTL   // ip_decrease_ttl
	feMACs     // write the Ethernet addresses
	feFDBTouch // an FDB entry's last-seen time is now
	feNeighUse // a STALE neighbour's used time is now
	feEncap    // VXLAN encapsulation toward an address
	// terminals
	ftRx      // the frame is received by dev after delay
	ftDeliver // the frame goes up to the namespace's sockets from dev
)

type fastOp struct {
	kind  fastKind
	state NeighState
	b1    bool
	mac   [2]MAC
	a, b  *uint64
	x, y  uint64
	dev   *Device
	ns    *Netns
	ne    *neighEntry
	fe    *fdbEntry
	br    *bridge
	vx    *VXLAN
	mesh  *Mesh
	seg   *Segment
	arp   *ARPTable
	sys   Sysctls
	dst   [4]byte
	fx    Effect
}

// fastEntry is one recorded event, compiled from the recording into
// small flat arrays: the generation checks, the other checks (by the
// type of what they look at), the stage effects, the counter increments,
// the packet's transformations in order, and the hand-over.
type fastEntry struct {
	key    fastKey
	gen    uint64
	ipOK   bool // the walk validated the IPv4 header
	gens   []fastGen
	devs   []fastDev
	nss    []fastNetns
	neighs []fastNeigh
	checks []fastCheck
	meshes []fastMesh
	fx     []Effect
	adds   []fastAdd
	xf     []fastXf
	term   fastOp
	meta   fastMeta // the packet's metadata when it leaves
	ct     any
}

// fastGen holds while *p == v.
type fastGen struct {
	p *uint64
	v uint64
}

// fastDev holds while the device's MTU, MAC and hairpin flag, the
// fields that can be set directly, are as they were.
type fastDev struct {
	d       *Device
	mtu     int
	mac     MAC
	hairpin bool
}

// fastNetns holds while the namespace's routes and sysctls are as they
// were (its addresses are a fastGen).
type fastNetns struct {
	ns   *Netns
	rgen uint64
	sys  Sysctls
}

// fastNeigh holds while the neighbour entry is in the table in the same
// state with the same address and, where the walk aged it, not due to
// turn STALE.
type fastNeigh struct {
	e     *neighEntry
	mac   MAC
	state NeighState
	aged  bool
}

// fastCheck is a check on one object; its type says which (see valid).
type fastCheck struct {
	ref any
	y   uint64
}

// fastMesh holds while the VXLAN device is (or is not) in the mesh.
type fastMesh struct {
	vx   *VXLAN
	mesh *Mesh
}

type fastAdd struct {
	a, b *uint64
	x, y uint64
}

// fastXf is one transformation of the packet (a feXxx kind, or fcStage:
// apply fx[i]).
type fastXf struct {
	kind fastKind
	i    int32
	dst  [4]byte
	mac  [2]MAC
	ref  any
}

type fastTable struct {
	slots [fastSlots]*fastEntry
	// Hits counts replayed events (for tests).
	hits uint64
}

// fastRec is the recording in progress (Walk.rec while recording).
type fastRec struct {
	ns     *Netns
	fail   bool
	lastNS *Netns
	key    fastKey
	gen    uint64
	ipOK   bool
	n      int
	ops    [fastMaxOps]fastOp
}

// FastStage is a Stage that can take part in the namespace fast path:
// ProcessFast is Process for an untraced packet whose walk is being
// recorded, and returns besides the verdict what the stage did, for the
// fast path to repeat (an Effect with a nil Replayer: nothing), with ok
// false when that cannot be repeated exactly.
type FastStage interface {
	Stage
	ProcessFast(w *Walk, p *Packet) (v Verdict, fx Effect, ok bool)
}

// Effect is what one stage did to one packet, in the stage's own terms.
type Effect struct {
	R    EffectReplayer
	Ref  any
	N, M uint64
	U    uint32
	B    bool
}

// EffectReplayer repeats an Effect. Valid reports whether repeating it at
// the current time would be exact; it changes nothing and looks at no
// packet (it runs on a copy of the Effect, before any effect is applied).
// Apply repeats it on p, as p is at that point of the walk.
type EffectReplayer interface {
	Valid(w *Walk, e *Effect) bool
	Apply(w *Walk, p *Packet, e *Effect)
}

// FastHits is the number of events the namespace replayed from its fast
// path (for tests and benchmarks).
func (ns *Netns) FastHits() uint64 {
	if ns.fast == nil {
		return 0
	}
	return ns.fast.hits
}

// SetFastPath turns the engine's namespace fast path on or off (it is on
// by default). Turning it off or on drops what was recorded.
func (e *Engine) SetFastPath(on bool) {
	e.fastOff = !on
	e.cfgGen++
}

// recording returns the recording in progress, if any.
func (w *Walk) recording() *fastRec {
	if r := w.rec; r != nil && !r.fail {
		return r
	}
	return nil
}

// noFast abandons the recording in progress, if any.
func (w *Walk) noFast() {
	if r := w.rec; r != nil {
		r.fail = true
	}
}

func (r *fastRec) op(k fastKind) *fastOp {
	if r.n == fastMaxOps {
		r.fail = true
		return &r.ops[0] // scratch; the recording is abandoned
	}
	o := &r.ops[r.n]
	r.n++
	*o = fastOp{kind: k}
	return o
}

func (r *fastRec) add(a *uint64, x uint64, b *uint64, y uint64) {
	o := r.op(feAdd)
	o.a, o.x, o.b, o.y = a, x, b, y
}

func (r *fastRec) netns(ns *Netns) {
	if r.lastNS == ns {
		return
	}
	r.lastNS = ns
	o := r.op(fcNetns)
	o.ns, o.x, o.y, o.sys = ns, ns.addrGen, ns.Routes.Gen(), ns.Sysctl
}

func (r *fastRec) device(d *Device) {
	for i := 0; i < r.n; i++ {
		if o := &r.ops[i]; o.kind == fcDev && o.dev == d {
			return
		}
	}
	o := r.op(fcDev)
	o.dev, o.x, o.mac[0], o.b1 = d, uint64(d.MTU), d.MAC, d.Hairpin
}

// validatedIP notes that the walk checked the IPv4 header of p (tot is
// its total length); a frame with Ethernet padding is not recorded.
func (r *fastRec) validatedIP(p *Packet, tot int) {
	if p.Len() != EthHdrLen+tot {
		r.fail = true
	}
	r.ipOK = true
}

// neigh records that the walk used neighbour entry e, as it is now; use
// says the walk aged it and sent through it (neighOutput): a STALE
// entry's used time is set again.
func (r *fastRec) neigh(e *neighEntry, use bool) {
	o := r.op(fcNeigh)
	o.ne, o.state, o.mac[0], o.b1 = e, e.state, e.mac, use
	if use && e.state == NeighStale {
		r.op(feNeighUse).ne = e
	}
}

// macs records the Ethernet addresses the walk just wrote.
func (r *fastRec) macs(p *Packet) {
	r.op(feMACs).mac = [2]MAC{p.SrcMAC(), p.DstMAC()}
}

// fastStart begins recording the event of p entering at dev (nil: sent
// by ns's stack), if it may be recorded.
func (ns *Netns) fastStart(w *Walk, dev *Device, p *Packet) {
	r := w.e.recBuf
	if r == nil {
		r = new(fastRec)
		w.e.recBuf = r
	}
	if !fastKeyOf(dev, p, &r.key) {
		return
	}
	r.ns, r.fail, r.lastNS = ns, false, nil
	r.gen, r.ipOK, r.n = w.e.cfgGen, false, 0
	w.rec = r
	r.netns(ns)
	if dev != nil {
		r.device(dev)
	}
}

// fastEnd stops recording; with a terminal op appended and nothing
// abandoned, the recording is kept.
func (w *Walk) fastEnd(p *Packet, keep bool) {
	r := w.rec
	if r == nil {
		return
	}
	w.rec = nil
	if !keep || r.fail {
		return
	}
	ns := r.ns
	if ns.fast == nil {
		ns.fast = new(fastTable)
	}
	sl := &ns.fast.slots[fastSlot(r.key.dev, &r.key.hdr)]
	if *sl == nil {
		*sl = new(fastEntry)
	}
	e := *sl
	e.key, e.gen, e.ipOK, e.meta, e.ct = r.key, r.gen, r.ipOK, metaOf(p), p.CT.Entry
	e.gens, e.checks, e.meshes, e.fx, e.adds, e.xf = e.gens[:0], e.checks[:0], e.meshes[:0], e.fx[:0], e.adds[:0], e.xf[:0]
	e.devs, e.nss, e.neighs = e.devs[:0], e.nss[:0], e.neighs[:0]
	for i := range r.ops[:r.n] {
		o := &r.ops[i]
		switch o.kind {
		case fcNetns:
			e.gen1(&o.ns.addrGen, o.x)
			if c := (fastNetns{o.ns, o.y, o.sys}); !slices.Contains(e.nss, c) {
				e.nss = append(e.nss, c)
			}
		case fcBridge:
			e.gen1(&o.br.gen, o.x)
			e.check(fastCheck{ref: o.br, y: o.y})
		case fcFDBAlive:
			e.check(fastCheck{ref: o.fe, y: uint64(o.br.AgeingTime)})
		case fcSegment:
			e.gen1(&o.seg.gen, o.x)
			e.check(fastCheck{ref: o.seg, y: o.y})
		case fcMesh, fcVXLAN:
			if o.kind == fcMesh {
				e.gen1(&o.mesh.gen, o.x)
			} else {
				e.gen1(&o.vx.fdbGen, o.x)
			}
			m := fastMesh{o.vx, o.mesh}
			if !slices.Contains(e.meshes, m) {
				e.meshes = append(e.meshes, m)
			}
		case fcDev:
			if c := (fastDev{o.dev, int(o.x), o.mac[0], o.b1}); !slices.Contains(e.devs, c) {
				e.devs = append(e.devs, c)
			}
		case fcNeigh:
			if c := (fastNeigh{o.ne, o.mac[0], o.state, o.b1}); !slices.Contains(e.neighs, c) {
				e.neighs = append(e.neighs, c)
			}
		case fcARP:
			e.check(fastCheck{ref: o.arp})
		case fcStage:
			e.xf = append(e.xf, fastXf{kind: fcStage, i: int32(len(e.fx))})
			e.fx = append(e.fx, o.fx)
		case feAdd:
			e.adds = append(e.adds, fastAdd{o.a, o.b, o.x, o.y})
		case ftRx, ftDeliver:
			e.term = *o
		case feDecTTL:
			e.xf = append(e.xf, fastXf{kind: o.kind})
		case feMACs:
			e.xf = append(e.xf, fastXf{kind: o.kind, mac: o.mac})
		case feFDBTouch:
			e.xf = append(e.xf, fastXf{kind: o.kind, ref: o.fe})
		case feNeighUse:
			e.xf = append(e.xf, fastXf{kind: o.kind, ref: o.ne})
		case feEncap:
			e.xf = append(e.xf, fastXf{kind: o.kind, ref: o.vx, dst: o.dst})
		}
	}
}

func (e *fastEntry) gen1(p *uint64, v uint64) {
	if !slices.Contains(e.gens, fastGen{p, v}) {
		e.gens = append(e.gens, fastGen{p, v})
	}
}

func (e *fastEntry) check(c fastCheck) {
	if !slices.Contains(e.checks, c) {
		e.checks = append(e.checks, c)
	}
}

// fastRx hands p over to dev after delay; while recording, it records
// the hand-over as the event's end first.
func (w *Walk) fastRx(delay time.Duration, dev *Device, p *Packet) {
	if w.rec != nil {
		w.fastRxRecord(delay, dev, p)
	}
	w.e.ScheduleRx(delay, dev, p)
}

func (w *Walk) fastRxRecord(delay time.Duration, dev *Device, p *Packet) {
	if r := w.recording(); r != nil {
		o := r.op(ftRx)
		o.dev, o.x = dev, uint64(delay)
		w.fastEnd(p, true)
	} else {
		w.fastEnd(p, false)
	}
}

// fastPath replays the recorded event for p entering at dev (nil: sent
// by ns's stack), or starts recording it, and reports whether it
// replayed it.
func (ns *Netns) fastPath(w *Walk, dev *Device, p *Packet) bool {
	if ns.fastReplay(w, dev, p) {
		return true
	}
	ns.fastStart(w, dev, p)
	return false
}

func (ns *Netns) fastReplay(w *Walk, dev *Device, p *Packet) bool {
	t := ns.fast
	if t == nil || p.CT.Entry != nil || p.delayedBy != nil || p.head+8*fastHdrWords > len(p.buf) {
		return false
	}
	var h [fastHdrWords]uint64
	loadHdr(p, &h)
	e := t.slots[fastSlot(dev, &h)]
	if e == nil || e.gen != w.e.cfgGen || e.key.dev != dev || int(e.key.head) != p.head || int(e.key.flen) != p.Len() {
		return false
	}
	var diff uint64
	for i := range h {
		diff |= (h[i] & e.key.mask[i]) ^ e.key.hdr[i]
	}
	if diff != 0 || e.key.meta != metaOf(p) {
		return false
	}
	if e.ipOK && csum(p.buf[p.head+EthHdrLen:p.head+EthHdrLen+20], 0) != 0xffff {
		return false
	}
	for _, g := range e.gens {
		if *g.p != g.v {
			return false
		}
	}
	for _, m := range e.meshes {
		if m.vx.mesh != m.mesh {
			return false
		}
	}
	for _, c := range e.nss {
		if c.ns.Routes.Gen() != c.rgen || c.ns.Sysctl != c.sys {
			return false
		}
	}
	for _, c := range e.devs {
		// Its state, stages and namespace change through methods that
		// change the engine's cfgGen; these fields can be set directly.
		if d := c.d; d.MTU != c.mtu || d.MAC != c.mac || d.Hairpin != c.hairpin {
			return false
		}
	}
	now := w.e.now
	for _, c := range e.neighs {
		n := c.e
		if n.removed || n.state != c.state || n.mac != c.mac {
			return false
		}
		if c.aged {
			if st, _ := n.stateAt(now); st != n.state {
				return false
			}
		}
	}
	for i := range e.checks {
		if !e.checks[i].valid(now) {
			return false
		}
	}
	for i := range e.fx {
		if !e.fx[i].R.Valid(w, &e.fx[i]) {
			return false
		}
	}
	t.hits++
	for _, a := range e.adds {
		*a.a += a.x
		if a.b != nil {
			*a.b += a.y
		}
	}
	for i := range e.xf {
		o := &e.xf[i]
		switch o.kind {
		case fcStage:
			fx := &e.fx[o.i]
			fx.R.Apply(w, p, fx)
		case feDecTTL:
			decTTL(p.IPv4())
		case feMACs:
			p.SetMACs(o.mac[0], o.mac[1])
		case feFDBTouch:
			o.ref.(*fdbEntry).updated = now
		case feNeighUse:
			o.ref.(*neighEntry).used = now
		case feEncap:
			o.ref.(*VXLAN).encap(p, o.dst)
		}
	}
	e.meta.restore(p, e.ct)
	if e.term.kind == ftDeliver {
		e.term.ns.deliver(w, e.term.dev, p)
	} else {
		w.e.ScheduleRx(time.Duration(e.term.x), e.term.dev, p)
	}
	return true
}

// valid evaluates a check.
func (c *fastCheck) valid(now time.Duration) bool {
	switch r := c.ref.(type) {
	case *ARPTable:
		return now < r.nextPeriodic
	case *bridge:
		return r.AgeingTime == time.Duration(c.y)
	case *fdbEntry:
		return r.local || r.static || now-r.updated <= time.Duration(c.y)
	case *Segment:
		return r.Latency == time.Duration(c.y)
	}
	return false
}
