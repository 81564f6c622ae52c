package datapath

import (
	"encoding/binary"
	"math"
	"net/netip"
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
// for everything that decided the walk, a check. Most of what decides a
// walk is configuration, which the engine's configuration generation
// (cfgGen) covers in one word: every change of addresses, devices (up,
// MTU, MAC and hairpin through their setters, stages, deletion), hooks,
// bridge ports, bridge and underlay FDBs, VXLAN FDBs, meshes and the
// namespaces' routing tables (route.Table.SetNotify, shared routes
// included) bumps it. What can change without it is checked one by one:
// the sysctls of the namespace (written directly), the neighbour entry's state and address, the underlay's latency, and each
// stage's own effect (the generation of a hook's rules, the conntrack
// entry's identity, state and status). What changes with time alone (a
// neighbour due to turn STALE, an FDB entry due to age out, the periodic
// neighbour collector due) is one deadline. Anything it does not know — a
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
	fastSlotBits = 4
	fastSlots    = 1 << fastSlotBits
	fastMaxOps   = 64
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

// same reports whether p's metadata is m (field by field: cheaper than
// building p's and comparing the structs).
func (m *fastMeta) same(p *Packet) bool {
	return m.InDev == p.InDev && m.OutDev == p.OutDev && m.PhysIn == p.PhysIn && m.NextHop == p.NextHop &&
		m.Mark == p.Mark && m.Local == p.Local && m.CsumValid == p.CsumValid && m.IPVSProperty == p.IPVSProperty &&
		m.brPrerouted == p.brPrerouted && m.bridgedDNAT == p.bridgedDNAT && m.keepSrcMAC == p.keepSrcMAC &&
		m.ctReply == p.CT.Reply
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

// fastMayRecord reports whether p may be recorded at all: an IPv4 frame
// without options or fragmentation, of a protocol whose connections the
// key identifies, with no conntrack entry and no delay stage attached,
// and for TCP, an ACK without SYN, FIN, RST or URG. Every key the fast
// path holds passed it, and the key covers everything it tests, so a
// packet it refuses cannot match one (fastReplay tells the commonest
// refusal, a TCP segment with SYN, FIN, RST or URG, from the words it
// loads for the lookup).
func fastMayRecord(p *Packet) bool {
	h, n := p.head, p.tail-p.head
	if n < EthHdrLen+20+8 || n > 0xffff || p.CT.Entry != nil || p.delayedBy != nil || h+8*fastHdrWords > len(p.buf) {
		return false
	}
	b := (*[8 * fastHdrWords]byte)(p.buf[h:])
	if b[12] != 0x08 || b[13] != 0 || b[14] != 0x45 || b[20]&0x3f != 0 || b[21] != 0 {
		return false
	}
	switch b[23] {
	case ProtoTCP:
		// SYN, FIN, RST or URG, or not an ACK: never recorded
		return n >= EthHdrLen+20+20 && b[47]&0x37 == 0x10
	case ProtoUDP, ProtoICMP:
		return true
	}
	return false
}

// The key's masks by protocol, as little-endian words of the frame's
// first 64 bytes: the Ethernet header, the IPv4 version, TOS and total
// length, flags and fragment offset, TTL, protocol and addresses (not
// the ID and checksum); then the ports (ICMP type and code); for TCP the
// data offset and flags (not the sequence numbers, window and checksum),
// for UDP the length (not the checksum), for ICMP the identifier (not the
// checksum and sequence). Every byte they cover lies within the shortest
// frame fastMayRecord admits for the protocol.
var (
	fastMaskTCP  = [fastHdrWords]uint64{^uint64(0), ^uint64(0), 0xffffffff0000ffff, 0xffffffffffff0000, 0x0000ffffffffffff, 0xffff000000000000}
	fastMaskUDP  = [fastHdrWords]uint64{^uint64(0), ^uint64(0), 0xffffffff0000ffff, 0xffffffffffff0000, ^uint64(0)}
	fastMaskICMP = [fastHdrWords]uint64{^uint64(0), ^uint64(0), 0xffffffff0000ffff, 0xffffffffffff0000, 0xffff0000ffffffff}
)

// fastKeyOf builds the key of p, which fastMayRecord admitted.
func fastKeyOf(dev *Device, p *Packet, k *fastKey) {
	k.dev, k.head, k.flen, k.meta = dev, uint16(p.head), uint16(p.Len()), metaOf(p)
	switch p.buf[p.head+EthHdrLen+9] {
	case ProtoTCP:
		k.mask = fastMaskTCP
	case ProtoUDP:
		k.mask = fastMaskUDP
	default:
		k.mask = fastMaskICMP
	}
	loadHdr(p, &k.hdr)
	for i := range k.hdr {
		k.hdr[i] &= k.mask[i]
	}
}

// fastSlot is where a frame's entry is kept (that slot or its
// neighbour, i^1): from its addresses, protocol and ports or ICMP type
// and code (bytes 23 and 26 to 37 but the ICMP checksum: what every key
// covers) and the device.
func fastSlot(dev *Device, w2, w3, w4 uint64) int {
	proto := w2 >> 56
	if proto == ProtoICMP {
		w4 &= 0xffffffff
	} else {
		w4 &= 0xffffffffffff
	}
	h := (w3>>16 ^ proto<<48 ^ w4*0x9e3779b97f4a7c15) * 0xff51afd7ed558ccd
	if dev != nil {
		h ^= uint64(dev.Index) * 0xc2b2ae3d27d4eb4f
	}
	h ^= h >> 29
	h *= 0x94d049bb133111eb
	return int(h >> (64 - fastSlotBits))
}

type fastKind uint8

const (
	// checks
	fcNetns    fastKind = iota + 1 // sysctls
	fcNeigh                        // entry live, same state and MAC; its ageing
	fcARP                          // the node's periodic neighbour collector is not due
	fcFDBAlive                     // an FDB entry the walk looked up has not aged out
	fcSegment                      // the underlay's latency
	fcVXLAN                        // a VXLAN device's configuration (its fields can be set directly)
	// effects (fcStage is both)
	fcStage    // a hook stage's effect (Effect)
	feAdd      // *a += x, *b += y
	feDecTTL   // ip_decrease_ttl
	feMACs     // write the Ethernet addresses
	feFDBTouch // an FDB entry's last-seen time is now
	feNeighUse // a STALE neighbour's used time is now
	feEncap    // VXLAN encapsulation toward an address
	feMark     // the mark a flattened effect set (Flat.SetMark)
	feCT       // the connection a flattened effect attached (Flat.SetCT)
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
	seg   *Segment
	arp   *ARPTable
	sys   Sysctls
	dst   [4]byte
	fx    Effect
}

// fastEntry is one recorded event, compiled from the recording into
// small flat arrays: the key, one deadline for everything that changes
// with time alone, the checks on what the engine's configuration
// generation does not cover (by the type of what they look at), the
// stage effects, the counter increments, the packet's transformations in
// order, and the hand-over.
//
// The configuration generation (Engine.cfgGen) changes with every change
// of addresses, devices and their stages, hooks, bridge ports and FDBs,
// the underlay's FDB, VXLAN FDBs, meshes and routes; the deadline is the earliest
// virtual time at which an entry the walk used may have aged (a neighbour
// due to turn STALE, an FDB entry due to age out, the node's periodic
// neighbour collector due to run), computed when recorded from times
// that only move later (so a replay may fall back to the walk early,
// never late).
type fastEntry struct {
	dev        *Device
	head, flen uint16
	ipOK       bool   // the walk validated the IPv4 header
	ipSum      uint32 // with ipOK: the IPv4 header's words but the ID and checksum, summed (ipSumOf)
	gen        uint64
	stamp      uint64 // when recorded (fastTable.stamps)
	deadline   time.Duration
	hdr, mask  [fastHdrWords]uint64
	meta       fastMeta
	nss        []fastNetns
	neighs     []fastNeigh
	segs       []fastSeg
	vxs        []fastVXLAN
	words      []fastWord
	fx         []Effect
	valid      []int32 // the effects whose Valid is asked (not AlwaysValid)
	adds       []fastAdd
	timers     []fastTimer
	cts        []CTRef // feCT's connections
	// has says which of the check lists are not empty (hasNetns and
	// on): holds skips the others without loading them.
	has uint8
	// deferred are increments applied pend times at once, when the
	// engine settles its counters (Flat.Defer); listed says the entry
	// is in Engine.deferred.
	deferred []fastAdd
	pend     uint64
	listed   bool
	xf       []fastXf
	term     fastOp
	out      fastMeta // the packet's metadata when it leaves
	ct       any
	enc      vxlanTemplate
	// encaps says xf encapsulates; keepAll that no transformation
	// changes a byte the L4 checksum covers (every stage BytesKept, no
	// TTL decrement, no encapsulation), keepTail the same of those after
	// the last encapsulation (fastRun's sum).
	encaps, keepAll, keepTail bool
	tbl                       *fastTable
	// link is the entry the event this one hands its frame on to
	// replayed last time, if it was recorded as linkStamp then (fastRun).
	link      *fastEntry
	linkStamp uint64
}

// fastNetns holds while the namespace's sysctls are as they were (its
// routes are covered by the configuration generation).
type fastNetns struct {
	ns  *Netns
	sys Sysctls
}

// fastNeigh holds while the neighbour entry is in the table in the same
// state with the same address.
type fastNeigh struct {
	e     *neighEntry
	mac   MAC
	state NeighState
}

// fastSeg holds while the segment's latency (set directly) is the delay
// recorded for the hand-over.
type fastSeg struct {
	seg     *Segment
	latency time.Duration
}

// fastVXLAN holds while the VXLAN device's configuration that decides
// an encapsulation (fields that can be set directly) is as it was.
type fastVXLAN struct {
	vx                     *VXLAN
	vni                    uint32
	port, portMin, portMax uint16
	local                  netip.Addr
}

func vxlanCheck(v *VXLAN) fastVXLAN {
	return fastVXLAN{v, v.VNI, v.Port, v.SrcPortMin, v.SrcPortMax, v.Local}
}

// fastWord holds while *w is v (a flattened effect's check, Flat.Check).
type fastWord struct {
	w *uint64
	v uint64
}

// fastTimer holds while *status is st, *state is ts and *exp is later
// than the current time, and sets *exp to the current time plus d
// (Flat.Timer).
type fastTimer struct {
	exp    *time.Duration
	d      time.Duration
	status *uint32
	state  *uint8
	st     uint32
	ts     uint8
}

// fastAdd is *a += x, *b += y.
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
	macs [12]byte // destination then source, as in the frame
	fe   *fdbEntry
	ne   *neighEntry
	vx   *VXLAN
	b1   bool   // feEncap: from the entry's template; fcStage: BytesKept
	mark uint32 // feMark
}

// The check lists of a fastEntry, as bits of fastEntry.has.
const (
	hasNetns uint8 = 1 << iota
	hasNeigh
	hasSeg
	hasWord
	hasTimer
	hasVXLAN
	hasValid
)

type fastTable struct {
	slots  [fastSlots]*fastEntry
	stamps uint64
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
	// enc is the template of the event's first encapsulation, if it
	// can be repeated from one (see vxlanTemplate).
	enc vxlanTemplate
	// flat takes the effects flattened when the recording is kept.
	flat Flat
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

// EffectFlattener is implemented by an EffectReplayer whose effect is
// only counter increments and a mark, and holds while some words keep the
// values they have when the recording is kept (say a ruleset generation):
// Flatten hands the fast path those increments, words and mark (Flat),
// and the fast path then repeats the effect without calling the stage —
// the increments among its own, the words among its own checks, the mark
// set where a stage applied after it could read it (the packet leaves
// with the recorded metadata anyway). Flatten reports false, having
// handed over nothing, when the effect does not hold now.
type EffectFlattener interface {
	EffectReplayer
	Flatten(fx *Effect, f *Flat) bool
}

// Flat takes one recording's flattened effects (EffectFlattener).
type Flat struct {
	e       *fastEntry
	now     time.Duration
	mark    uint32
	markSet bool
	ctSet   bool
	ct      CTRef
}

// Now is the virtual time of the recorded walk (the time the effects
// being flattened took place).
func (f *Flat) Now() time.Duration { return f.now }

// Timer makes the replay hold only while *status is st, *state is ts and
// *exp is later than the current time, and set *exp to the current time
// plus d: a connection tracked on use, its status, state and expiry
// checked and its timeout refreshed (conntrack). The replay sets *exp
// with the other effects' counter increments, before any transformation
// of the packet: nothing that transforms one reads it.
func (f *Flat) Timer(status *uint32, st uint32, state *uint8, ts uint8, exp *time.Duration, d time.Duration) {
	f.e.timers = append(f.e.timers, fastTimer{exp: exp, d: d, status: status, state: state, st: st, ts: ts})
}

// Until makes the replay hold only before t: the time at which what the
// effect does would change (a replied UDP flow turning into a stream).
func (f *Flat) Until(t time.Duration) { f.e.deadline = min(f.e.deadline, t) }

// SetCT records that the effect attaches the connection ct to the packet
// (Packet.CT), for a stage applied after it that could read it (the
// packet leaves with the recorded metadata anyway).
func (f *Flat) SetCT(ct CTRef) { f.ct, f.ctSet = ct, true }

// Add makes the replay do *a += x, *b += y.
func (f *Flat) Add(a *uint64, x uint64, b *uint64, y uint64) { f.e.add(a, x, b, y) }

// add makes the replay do *a += x, *b += y, in one increment with an
// earlier one of the same two counters (a rule's packets and bytes
// counted twice, the evaluations of two hooks): the replay applies every
// increment before anything else, and a sum of increments is what they
// add one by one.
func (e *fastEntry) add(a *uint64, x uint64, b *uint64, y uint64) {
	e.adds = mergeAdd(e.adds, a, x, b, y)
}

// mergeAdd adds *a += x, *b += y to adds, into an increment of the same
// two counters already there if there is one.
func mergeAdd(adds []fastAdd, a *uint64, x uint64, b *uint64, y uint64) []fastAdd {
	for i := range adds {
		if c := &adds[i]; c.a == a && c.b == b {
			c.x += x
			c.y += y
			return adds
		}
	}
	return append(adds, fastAdd{a, b, x, y})
}

// Defer makes the replay do *a += x, *b += y as Add does, but not at
// once: a replay only counts itself, and the increments of every replay
// since are applied together when the engine settles its counters
// (Engine.SettleCounters). The counters' owner must settle them before
// anything reads them or changes them otherwise than by an increment
// (netfilter does, in iptables-save, its commits and the accessors it
// hands chains out by). A sum of increments is what they add one by one,
// in any order.
func (f *Flat) Defer(a *uint64, x uint64, b *uint64, y uint64) {
	f.e.deferred = mergeAdd(f.e.deferred, a, x, b, y)
}

// settle applies the deferred increments of e's replays not yet applied.
func (e *fastEntry) settle() {
	n := e.pend
	if n == 0 {
		return
	}
	e.pend = 0
	for i := range e.deferred {
		c := &e.deferred[i]
		*c.a += c.x * n
		*c.b += c.y * n
	}
}

// SettleCounters applies the counter increments the fast path's replays
// deferred (Flat.Defer): after it, every counter holds what the walks so
// far added. It is cheap when nothing is deferred; a counter's owner
// calls it before reading or replacing its counters.
func (e *Engine) SettleCounters() {
	for i, f := range e.deferred {
		f.settle()
		f.listed = false
		e.deferred[i] = nil
	}
	e.deferred = e.deferred[:0]
}

// Check makes the replay hold only while *w is v.
func (f *Flat) Check(w *uint64, v uint64) {
	if c := (fastWord{w, v}); !slices.Contains(f.e.words, c) {
		f.e.words = append(f.e.words, c)
	}
}

// SetMark records that the effect leaves the packet's mark at m.
func (f *Flat) SetMark(m uint32) { f.mark, f.markSet = m, true }

// AlwaysValid is implemented by an EffectReplayer whose Valid always
// holds (what decides its effect is checked by another stage's, say the
// conntrack entry a NAT rewrite uses): the fast path does not ask it.
type AlwaysValid interface {
	EffectReplayer
	AlwaysValid()
}

// BytesKept is implemented by an EffectReplayer whose Apply changes no
// byte of the packet (conntrack's tracking, say): a checksum the replay
// knows to be right before it is right after it (fastRun).
type BytesKept interface {
	EffectReplayer
	BytesKept()
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

// noFast abandons the recording in progress, if any: the rest of the
// event walks as if none had started (no recording checks, no effects
// collected).
func (w *Walk) noFast() {
	if r := w.rec; r != nil {
		r.fail = true
		w.rec = nil
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

// netns notes that the walk read a sysctl of ns (the only namespace state
// the configuration generation does not cover): called where they are
// read, so that a replay checks the namespaces whose sysctls decided it,
// not every namespace it passed.
func (r *fastRec) netns(ns *Netns) {
	if r.lastNS == ns {
		return
	}
	r.lastNS = ns
	o := r.op(fcNetns)
	o.ns, o.sys = ns, ns.Sysctl
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
// by ns's stack), which fastMayRecord admitted.
func (ns *Netns) fastStart(w *Walk, dev *Device, p *Packet) {
	r := w.e.recBuf
	if r == nil {
		r = new(fastRec)
		w.e.recBuf = r
	}
	fastKeyOf(dev, p, &r.key)
	r.ns, r.fail, r.lastNS = ns, false, nil
	r.gen, r.ipOK, r.n = w.e.cfgGen, false, 0
	r.enc.ok = false
	w.rec = r
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
	k := &r.key
	t := ns.fast
	i := fastSlot(k.dev, k.hdr[2], k.hdr[3], k.hdr[4])
	// Two ways: the slot or its neighbour, whichever is free, stale or
	// holds the same key, else the one recorded longer ago.
	gen := w.e.cfgGen
	free := func(e *fastEntry) bool {
		return e == nil || e.gen != gen || (e.dev == k.dev && e.head == k.head && e.flen == k.flen && e.hdr == k.hdr && e.mask == k.mask && e.meta == k.meta)
	}
	if a, b := t.slots[i], t.slots[i^1]; !free(a) && (free(b) || b.stamp < a.stamp) {
		i ^= 1
	}
	if t.slots[i] == nil {
		t.slots[i] = new(fastEntry)
	}
	e := t.slots[i]
	// Its replays' deferred increments are applied before it is made
	// anew (it stays listed: the next settle finds nothing to apply).
	e.settle()
	t.stamps++
	e.stamp, e.tbl, e.link = t.stamps, t, nil
	e.dev, e.head, e.flen, e.ipOK, e.gen, e.deadline = k.dev, k.head, k.flen, r.ipOK, r.gen, math.MaxInt64
	e.hdr, e.mask, e.meta, e.out, e.ct = k.hdr, k.mask, k.meta, metaOf(p), p.CT.Entry
	e.ipSum = ipSumOf(&k.hdr)
	e.nss, e.neighs, e.segs, e.vxs, e.words = e.nss[:0], e.neighs[:0], e.segs[:0], e.vxs[:0], e.words[:0]
	e.fx, e.valid, e.adds, e.xf, e.deferred = e.fx[:0], e.valid[:0], e.adds[:0], e.xf[:0], e.deferred[:0]
	e.timers, e.cts = e.timers[:0], e.cts[:0]
	e.enc = r.enc
	flat := &r.flat
	*flat = Flat{e: e, now: w.e.now}
	for i := range r.ops[:r.n] {
		o := &r.ops[i]
		switch o.kind {
		case fcNetns:
			// Its addresses are covered by the configuration generation.
			if c := (fastNetns{o.ns, o.sys}); !slices.Contains(e.nss, c) {
				e.nss = append(e.nss, c)
			}
		case fcFDBAlive:
			// The bridge's FDB and ageing time are covered by the
			// configuration generation; the entry's last-seen time
			// only moves later.
			if fe := o.fe; !fe.local && !fe.static {
				e.deadline = min(e.deadline, fe.updated+o.br.AgeingTime+1)
			}
		case fcSegment:
			if c := (fastSeg{o.seg, time.Duration(o.y)}); !slices.Contains(e.segs, c) {
				e.segs = append(e.segs, c)
			}
		case fcVXLAN:
			if c := vxlanCheck(o.vx); !slices.Contains(e.vxs, c) {
				e.vxs = append(e.vxs, c)
			}
		case fcNeigh:
			if c := (fastNeigh{o.ne, o.mac[0], o.state}); !slices.Contains(e.neighs, c) {
				e.neighs = append(e.neighs, c)
			}
			if o.b1 && o.state == NeighReachable {
				// Aged on use: due to turn STALE after ReachableTime
				// from its confirmation (which only moves later).
				e.deadline = min(e.deadline, o.ne.confirmed+ReachableTime+1)
			}
		case fcARP:
			// The periodic collector's next run only moves later.
			e.deadline = min(e.deadline, o.arp.nextPeriodic)
		case fcStage:
			if fl, ok := o.fx.R.(EffectFlattener); ok && fl.Flatten(&o.fx, flat) {
				continue
			}
			if flat.markSet {
				// This stage could read the mark a flattened one set.
				e.xf = append(e.xf, fastXf{kind: feMark, mark: flat.mark})
				flat.markSet = false
			}
			if flat.ctSet {
				// Or the connection a flattened one attached.
				e.xf = append(e.xf, fastXf{kind: feCT, i: int32(len(e.cts))})
				e.cts = append(e.cts, flat.ct)
				flat.ctSet = false
			}
			if _, ok := o.fx.R.(AlwaysValid); !ok {
				e.valid = append(e.valid, int32(len(e.fx)))
			}
			_, kept := o.fx.R.(BytesKept)
			e.xf = append(e.xf, fastXf{kind: fcStage, i: int32(len(e.fx)), b1: kept})
			e.fx = append(e.fx, o.fx)
		case feAdd:
			e.add(o.a, o.x, o.b, o.y)
		case ftRx, ftDeliver:
			e.term = *o
		case feDecTTL:
			e.xf = append(e.xf, fastXf{kind: o.kind})
		case feMACs:
			x := fastXf{kind: o.kind}
			copy(x.macs[:6], o.mac[1][:])
			copy(x.macs[6:], o.mac[0][:])
			e.xf = append(e.xf, x)
		case feFDBTouch:
			e.xf = append(e.xf, fastXf{kind: o.kind, fe: o.fe})
		case feNeighUse:
			e.xf = append(e.xf, fastXf{kind: o.kind, ne: o.ne})
		case feEncap:
			e.xf = append(e.xf, fastXf{kind: o.kind, vx: o.vx, dst: o.dst, b1: o.b1})
		}
	}
	e.has = 0
	for i, n := range [...]int{len(e.nss), len(e.neighs), len(e.segs), len(e.words), len(e.timers), len(e.vxs), len(e.valid)} {
		if n != 0 {
			e.has |= 1 << i
		}
	}
	e.encaps, e.keepAll, e.keepTail = false, true, true
	for i := range e.xf {
		switch x := &e.xf[i]; x.kind {
		case feEncap:
			e.encaps, e.keepAll, e.keepTail = true, false, true
		case feDecTTL:
			e.keepAll, e.keepTail = false, false
		case fcStage:
			if !x.b1 {
				e.keepAll, e.keepTail = false, false
			}
		}
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
	hit, may := ns.fastReplay(w, dev, p)
	if hit {
		return true
	}
	if may && fastMayRecord(p) {
		ns.fastStart(w, dev, p)
	}
	return false
}

// fastReplay replays p's recorded event, if there is one and it holds;
// may is false for a packet that can be neither replayed nor recorded,
// told from what the lookup loads anyway (a TCP segment that is not a
// bare ACK or carries SYN, FIN, RST or URG: a connection's first packet
// costs no more than that).
func (ns *Netns) fastReplay(w *Walk, dev *Device, p *Packet) (hit, may bool) {
	from := w.from
	w.from = nil
	head := p.head
	if p.CT.Entry != nil || p.delayedBy != nil || head+8*fastHdrWords > len(p.buf) {
		return false, false
	}
	b := (*[8 * fastHdrWords]byte)(p.buf[head:])
	h2, h5 := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[40:])
	if h2>>56 == ProtoTCP && (h5>>56)&0x37 != 0x10 {
		// Byte 23 is the protocol and byte 47 the TCP flags of every
		// frame fastMayRecord admits, and the key covers both.
		return false, false
	}
	t := ns.fast
	if t == nil {
		return false, true
	}
	h0, h1 := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
	h3, h4 := binary.LittleEndian.Uint64(b[24:]), binary.LittleEndian.Uint64(b[32:])
	h6, h7 := binary.LittleEndian.Uint64(b[48:]), binary.LittleEndian.Uint64(b[56:])
	i := fastSlot(dev, h2, h3, h4)
	gen, flen := w.e.cfgGen, p.tail-head
	e := t.slots[i]
	for way := 0; ; way++ {
		if e != nil && e.gen == gen && e.dev == dev && int(e.head) == head && int(e.flen) == flen {
			m, k := &e.mask, &e.hdr
			if (h0&m[0]^k[0])|(h1&m[1]^k[1])|(h2&m[2]^k[2])|(h3&m[3]^k[3])|
				(h4&m[4]^k[4])|(h5&m[5]^k[5])|(h6&m[6]^k[6])|(h7&m[7]^k[7]) == 0 && e.meta.same(p) {
				break
			}
		}
		if way == 1 {
			return false, true
		}
		e = t.slots[i^1]
	}
	if !e.holds(w, h2, h3) {
		return false, true
	}
	if from != nil {
		// The event was handed on by from's replay: from's next time,
		// this entry is tried first (fastRun).
		from.link, from.linkStamp = e, e.stamp
	}
	t.hits++
	w.e.runSum = false
	w.fastRun(e, p)
	return true, false
}

// holds reports whether e's checks hold now, for a frame that matches its
// key and whose words 2 and 3 are h2 and h3.
func (e *fastEntry) holds(w *Walk, h2, h3 uint64) bool {
	if w.e.now >= e.deadline || (e.ipOK && !ipv4SumOKFrom(e.ipSum, h2, h3)) {
		return false
	}
	has := e.has
	if has == 0 {
		return true
	}
	// The loops run over local copies of the slices: the stores through
	// the counters' pointers could otherwise alias the entry, and make
	// every iteration load the slice again.
	if has&hasNetns != 0 {
		nss := e.nss
		for i := range nss {
			c := &nss[i]
			if c.ns.Sysctl != c.sys {
				return false
			}
		}
	}
	if has&hasNeigh != 0 {
		neighs := e.neighs
		for i := range neighs {
			c := &neighs[i]
			if n := c.e; n.removed || n.state != c.state || n.mac != c.mac {
				return false
			}
		}
	}
	if has&hasSeg != 0 {
		segs := e.segs
		for i := range segs {
			if c := &segs[i]; c.seg.Latency != c.latency {
				return false
			}
		}
	}
	if has&hasWord != 0 {
		words := e.words
		for i := range words {
			if c := &words[i]; *c.w != c.v {
				return false
			}
		}
	}
	if has&hasTimer != 0 {
		now := w.e.now
		timers := e.timers
		for i := range timers {
			if c := &timers[i]; *c.status != c.st || *c.state != c.ts || *c.exp <= now {
				return false
			}
		}
	}
	if has&hasVXLAN != 0 {
		vxs := e.vxs
		for i := range vxs {
			// vxlanCheck(c.vx) != *c, field by field: inline, where the
			// struct's comparison is a call.
			c := &vxs[i]
			if v := c.vx; v.VNI != c.vni || v.Port != c.port || v.SrcPortMin != c.portMin || v.SrcPortMax != c.portMax || v.Local != c.local {
				return false
			}
		}
	}
	if has&hasValid != 0 {
		fxs := e.fx
		for _, i := range e.valid {
			if fx := &fxs[i]; !fx.R.Valid(w, fx) {
				return false
			}
		}
	}
	return true
}

// matches reports whether e is an entry the lookup of p, received on
// e.dev now, would find and replay: what Device.receive and fastReplay
// test (but what the configuration generation covers), without the hash.
func (e *fastEntry) matches(w *Walk, p *Packet) bool {
	head := p.head
	if e.gen != w.e.cfgGen || p.Trace != nil || p.CT.Entry != nil || p.delayedBy != nil || int(e.head) != head ||
		int(e.flen) != p.tail-head || head+8*fastHdrWords > len(p.buf) {
		return false
	}
	b := (*[8 * fastHdrWords]byte)(p.buf[head:])
	h0, h1 := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
	h2, h3 := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
	h4, h5 := binary.LittleEndian.Uint64(b[32:]), binary.LittleEndian.Uint64(b[40:])
	h6, h7 := binary.LittleEndian.Uint64(b[48:]), binary.LittleEndian.Uint64(b[56:])
	m, k := &e.mask, &e.hdr
	return (h0&m[0]^k[0])|(h1&m[1]^k[1])|(h2&m[2]^k[2])|(h3&m[3]^k[3])|
		(h4&m[4]^k[4])|(h5&m[5]^k[5])|(h6&m[6]^k[6])|(h7&m[7]^k[7]) == 0 && e.meta.same(p) && e.holds(w, h2, h3)
}

// checkLinks makes linkHolds also ask matches, and panic where they
// disagree (tests).
var checkLinks bool

// linkHolds is matches for l, the entry linked to by an entry whose
// replay hands its own frame p on (ftRx, no delay) and which that frame
// matched when the link was made: the replays since start from frames
// matching the same key, apply the same effects (each a function of
// the key and of what the checks hold: rewrites from the same
// connection, the same addresses, TTL decrement, template or
// encapsulation from the key's inner headers) and restore the same
// metadata, so p matches l's key, metadata, offset and length by
// construction. The generation and l's own checks remain.
func (l *fastEntry) linkHolds(w *Walk, p *Packet) bool {
	head := p.head
	if l.gen != w.e.cfgGen || head+8*fastHdrWords > len(p.buf) {
		return false
	}
	b := (*[8 * fastHdrWords]byte)(p.buf[head:])
	ok := l.holds(w, binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:]))
	if checkLinks && ok && !l.matches(w, p) {
		panic("datapath: a linked entry holds but does not match the frame handed on")
	}
	return ok
}

// linkLater replays e.link for p, the frame e's replay handed on to dev
// across a delay (handOnLater), now that its time has come, if it is the
// entry that receipt replayed last time and it holds (linkHolds: the
// frame is e's, as for a hand-over without delay), and reports whether
// it did; runNext otherwise has dev receive p. What Device.receive tests
// before its lookup the configuration generation covers (the device up,
// in a namespace, the fast path on), or the frame by construction (its
// length, no trace).
func (e *fastEntry) linkLater(w *Walk, dev *Device, p *Packet, sum bool) bool {
	l := e.link
	if l == nil || l.stamp != e.linkStamp || l.dev != dev || !l.linkHolds(w, p) {
		return false
	}
	w.from = nil
	w.e.laterLinks++
	l.tbl.hits++
	w.e.runSum = sum
	w.fastRun(l, p)
	return true
}

// fastRun applies e's effects to p, which matched e's key, e's checks
// holding, and hands p over (or delivers it). Engine.runSum says, when
// it starts and as it goes, that p's L4
// checksum is right by construction: the replay that handed p on
// encapsulated it in full (VXLAN.encap summed what it covers) and changed
// no byte of it after but its Ethernet addresses (stages that are
// BytesKept); a decapsulation then need not verify it (fastDecap). When that hands a frame on
// to a device as the next event (Engine.handOn: the frame itself, or the
// one a VXLAN socket decapsulated from it), and the entry that event
// replayed last time (e.link) matches the frame and holds, that replay
// runs here, as the next event, without the device and the lookup.
func (w *Walk) fastRun(e *fastEntry, p *Packet) {
	eng := w.e
	for {
		now := eng.now
		fxs := e.fx
		adds := e.adds
		for i := range adds {
			a := &adds[i]
			*a.a += a.x
			*a.b += a.y
		}
		timers := e.timers
		for i := range timers {
			c := &timers[i]
			*c.exp = now + c.d
		}
		if len(e.deferred) != 0 {
			if !e.listed {
				e.listed = true
				eng.deferred = append(eng.deferred, e)
			}
			e.pend++
		}
		xf := e.xf
		for i := range xf {
			switch o := &xf[i]; o.kind {
			case fcStage:
				fx := &fxs[o.i]
				fx.R.Apply(w, p, fx)
			case feMACs:
				*(*[12]byte)(p.buf[p.head:]) = o.macs
			case feDecTTL:
				decTTL(p.IPv4())
			case feMark:
				p.Mark = o.mark
			case feCT:
				p.CT = e.cts[o.i]
			case feFDBTouch:
				o.fe.updated = now
			case feNeighUse:
				o.ne.used = now
			case feEncap:
				ok := false
				if o.b1 {
					if ok, eng.encSum = e.enc.apply(o.vx, p); eng.encSum {
						eng.encSummed++
					}
				}
				if !ok {
					eng.encSum = o.vx.encap(p, o.dst)
				}
			}
		}
		if !e.keepAll {
			eng.runSum = e.encaps && e.keepTail && eng.encSum
		}
		e.out.restore(p, e.ct)
		switch {
		case e.term.kind == ftDeliver:
			if v := e.term.vx; v == nil || !e.term.ns.fastDecap(w, v, p, eng.runSum) {
				e.term.ns.deliver(w, e.term.dev, p)
			}
		case e.term.x == 0 && eng.inl > 0 && eng.next.kind == 0 && eng.nothingDue():
			// The hand-over is the next event: what handOn and runNext
			// do, without them when the link holds.
			if l := e.link; l != nil && l.stamp == e.linkStamp && l.dev == e.term.dev && l.linkHolds(w, p) {
				eng.seq++
				eng.inl--
				eng.inlined++
				l.tbl.hits++
				e = l
				continue
			}
			eng.handOn(evRx, e.term.dev, nil, p)
			eng.nextFrom = e
			return
		case e.term.x > 0 && eng.inl > 0 && eng.next.kind == 0:
			// The hand-over crosses a delay: the receipt is the next
			// event, at its time, if nothing is due before it when
			// this event ends (runNext decides, and replays e.link
			// there if it holds: linkLater).
			eng.handOnLater(time.Duration(e.term.x), e.term.dev, p)
			eng.nextFrom, eng.nextSum = e, eng.runSum
			return
		default:
			eng.ScheduleRx(time.Duration(e.term.x), e.term.dev, p)
		}
		n := &eng.next
		if n.kind != evRx {
			return
		}
		// A frame was handed on (Engine.handOn): the next event is its
		// receipt, and nothing else happens in this one. If the entry
		// that event replayed last time matches the frame and holds, it
		// is replayed here; runNext would find one that does the same.
		if l := e.link; l != nil && l.stamp == e.linkStamp && l.dev == n.dev && l.matches(w, n.pkt) {
			p, eng.runSum = n.pkt, false // the decapsulated frame
			n.kind = 0
			eng.fg-- // as runNext: handOn counted the event
			l.tbl.hits++
			e = l
			continue
		}
		if e.term.kind == ftDeliver {
			// Only a delivery hands on a frame here (decapsulated);
			// an entry handing on its own frame links above alone,
			// which linkHolds relies on.
			eng.nextFrom = e
		}
		return
	}
}

// ipSumOf sums the 16-bit words of the IPv4 header (without options) in
// a key's masked header, where the ID and checksum, which the key leaves
// out, are zero: the part of the header's checksum test a frame that
// matches the key shares with the recorded one. The words are summed as
// little-endian ones: a ones'-complement sum does not depend on the byte
// order (RFC 1071, 2.(B)), and the frame's ID and checksum are then the
// low halves of two words the lookup loads anyway (ipv4SumOKFrom).
func ipSumOf(h *[fastHdrWords]uint64) uint32 {
	var b [8 * fastHdrWords]byte
	for i := range h {
		binary.LittleEndian.PutUint64(b[8*i:], h[i])
	}
	var s uint32
	for i := EthHdrLen; i < EthHdrLen+20; i += 2 {
		s += uint32(binary.LittleEndian.Uint16(b[i:]))
	}
	return s
}

// ipv4SumOKFrom reports whether the IPv4 header of a frame whose first
// words are h2 and h3 (little-endian, bytes 16 to 31) sums to 0xffff (its
// checksum is right), given rest, the sum of its words but the ID and
// checksum (ipSumOf): a frame matching a key differs from the recorded
// one, in its header, only in those two words, bytes 18 and 24.
func ipv4SumOKFrom(rest uint32, h2, h3 uint64) bool {
	s := rest + uint32(uint16(h2>>16)) + uint32(uint16(h3))
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return s == 0xffff
}
