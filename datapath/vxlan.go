package datapath

import (
	"net/netip"
	"slices"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// VXLAN encapsulation overhead on IPv4: outer Ethernet 14 + IPv4 20 + UDP 8
// + VXLAN 8. A VXLAN device's MTU is its underlay's minus this (1450).
const VXLANOverhead = 50

const vxlanHdrLen = 8

// VXLANConfig is what `ip link add NAME type vxlan ...` takes.
type VXLANConfig struct {
	VNI      uint32
	Port     uint16     // dstport (Linux default 8472 when 0 is given to iproute2 is not assumed: set it)
	Local    netip.Addr // local address used as the outer source
	Dev      string     // underlay device name, shown by `ip -d link`
	Learning bool       // `nolearning` when false
	// SrcPortMin and SrcPortMax bound the outer UDP source port to
	// [min, max); both zero means the kernel's default, the local port
	// range 32768-60999.
	SrcPortMin, SrcPortMax uint16
}

// VXLAN is the state of a vxlan device: its configuration and the FDB that
// maps inner destination MACs to remote VTEP addresses.
type VXLAN struct {
	VXLANConfig
	dev      *Device
	fdb      map[uint64][4]byte
	hashSeed uint32
	// mesh is the Mesh this VTEP is a member of, as meshNode's; the
	// meshX fields cache its last neighbour and FDB answers at a mesh
	// generation (plus one).
	mesh              *Mesh
	meshNode          string
	meshGen, meshFGen uint64
	meshIP            [4]byte
	meshMAC           MAC
	meshOK, meshFOK   bool
	meshFKey          uint64
	meshFDst          [4]byte
}

// fdbChanged is called on every change of the FDB: what the fast path
// recorded may no longer hold.
func (v *VXLAN) fdbChanged() {
	if ns := v.dev.ns; ns != nil {
		ns.e.cfgGen++
	}
}

// AddVXLAN creates a VXLAN device (`ip link add NAME type vxlan id VNI
// local A dev D dstport P [no]learning`) with a random MAC and an MTU 50
// bytes below the underlay device's.
func (ns *Netns) AddVXLAN(name string, cfg VXLANConfig) (*Device, error) {
	if cfg.VNI == 0 || cfg.VNI >= 1<<24 {
		return nil, &ConfigError{Op: "add vxlan", Object: name, Reason: "VNI " + itoa(int(cfg.VNI)) + " out of range 1..16777215"}
	}
	if cfg.Port == 0 {
		return nil, &ConfigError{Op: "add vxlan", Object: name, Reason: "dstport must be set"}
	}
	if !cfg.Local.Is4() {
		return nil, &ConfigError{Op: "add vxlan", Object: name, Reason: "local must be an IPv4 address"}
	}
	mtu := 1500 - VXLANOverhead
	if cfg.Dev != "" {
		u := ns.Device(cfg.Dev)
		if u == nil {
			return nil, &ConfigError{Op: "add vxlan", Object: name, Reason: "Cannot find device \"" + cfg.Dev + "\""}
		}
		mtu = u.mtu - VXLANOverhead
	}
	for _, d := range ns.devs {
		if d.vx != nil && d.vx.Port == cfg.Port {
			return nil, &ConfigError{Op: "add vxlan", Object: name, Reason: "udp port " + itoa(int(cfg.Port)) + " already used by " + d.Name}
		}
	}
	if cfg.SrcPortMin == 0 && cfg.SrcPortMax == 0 {
		// net.ipv4.ip_local_port_range, which udp_flow_src_port scales
		// into as [min, max): 60999 itself is never chosen.
		cfg.SrcPortMin, cfg.SrcPortMax = 32768, 60999
	}
	d, err := ns.addDevice(nil, name, KindVXLAN, RandomMAC(ns.e.rng), mtu)
	if err != nil {
		return nil, err
	}
	d.vx = &VXLAN{VXLANConfig: cfg, dev: d, fdb: map[uint64][4]byte{}, hashSeed: ns.e.rng.Uint32()}
	ns.vxlans = append(ns.vxlans, d.vx)
	return d, nil
}

// VXLANFDBEntry is an entry of a VXLAN device's FDB (`bridge fdb show dev`).
type VXLANFDBEntry struct {
	MAC MAC
	Dst netip.Addr
}

// AddFDB installs `bridge fdb append MAC dev D dst IP self permanent`.
func (v *VXLAN) AddFDB(mac MAC, dst netip.Addr) error {
	if !dst.Is4() {
		return &ConfigError{Op: "fdb append", Object: mac.String(), Reason: "dst must be IPv4"}
	}
	v.unshareFDB(mac.key())
	v.fdbChanged()
	v.fdb[mac.key()] = dst.As4()
	if v.mesh != nil {
		v.mesh.claimFDB(v, mac.key())
	}
	return nil
}

// DeleteFDB removes the entry for mac.
func (v *VXLAN) DeleteFDB(mac MAC) {
	v.unshareFDB(mac.key())
	v.fdbChanged()
	delete(v.fdb, mac.key())
	if v.mesh != nil {
		v.mesh.unclaimFDB(v, mac.key())
	}
}

// unshareFDB takes v out of its mesh before a change to the mesh's entry k.
func (v *VXLAN) unshareFDB(k uint64) {
	if v.mesh != nil {
		if _, ok := v.meshDst(k); ok {
			v.mesh.Detach(v.dev)
		}
	}
}

// FDB lists the entries sorted by MAC.
func (v *VXLAN) FDB() []VXLANFDBEntry {
	out := make([]VXLANFDBEntry, 0, len(v.fdb))
	for m, a := range v.fdb {
		out = append(out, VXLANFDBEntry{MAC: macFromKey(m), Dst: netip.AddrFrom4(a)})
	}
	if v.mesh != nil {
		for m, e := range v.mesh.fdb {
			if e.node != v.meshNode {
				out = append(out, VXLANFDBEntry{MAC: macFromKey(m), Dst: netip.AddrFrom4(e.dst)})
			}
		}
	}
	slices.SortFunc(out, func(a, b VXLANFDBEntry) int { return slices.Compare(a.MAC[:], b.MAC[:]) })
	return out
}

// flowHash is a deterministic stand-in for skb_get_hash on the inner
// packet: symmetric in source and destination like the kernel's flow
// dissector hash, seeded per "boot" (per device).
func (v *VXLAN) flowHash(inner []byte) uint32 {
	h := v.hashSeed ^ 0x811c9dc5
	mix := func(x uint32) {
		h ^= x
		h *= 0x01000193
		h ^= h >> 15
	}
	if len(inner) >= EthHdrLen+20 && inner[12] == 0x08 && inner[13] == 0x00 {
		ip := inner[EthHdrLen:]
		a := uint32(ip[12])<<24 | uint32(ip[13])<<16 | uint32(ip[14])<<8 | uint32(ip[15])
		b := uint32(ip[16])<<24 | uint32(ip[17])<<16 | uint32(ip[18])<<8 | uint32(ip[19])
		var pa, pb uint32
		ihl := int(ip[0]&0xf) * 4
		if (ip[9] == ProtoTCP || ip[9] == ProtoUDP) && len(ip) >= ihl+4 {
			pa = uint32(ip[ihl])<<8 | uint32(ip[ihl+1])
			pb = uint32(ip[ihl+2])<<8 | uint32(ip[ihl+3])
		}
		if a > b || (a == b && pa > pb) {
			a, b, pa, pb = b, a, pb, pa
		}
		mix(a)
		mix(b)
		mix(pa<<16 | pb)
		mix(uint32(ip[9]))
	} else {
		for _, c := range inner[:min(len(inner), EthHdrLen)] {
			mix(uint32(c))
		}
	}
	return h
}

// srcPort scales the flow hash into [SrcPortMin, SrcPortMax) as
// udp_flow_src_port does.
func (v *VXLAN) srcPort(inner []byte) uint16 {
	span := uint64(v.SrcPortMax - v.SrcPortMin)
	return uint16(uint64(v.flowHash(inner))*span>>32) + v.SrcPortMin
}

// xmit is vxlan_xmit: look up the remote VTEP by inner destination MAC,
// prepend outer IPv4/UDP/VXLAN headers into headroom and send the result as
// a locally generated packet of the device's namespace (OUTPUT,
// POSTROUTING, ARP on the underlay).
func (v *VXLAN) xmit(w *Walk, p *Packet) {
	ns := v.dev.ns
	dst, ok := v.fdb[p.DstMAC().key()]
	// The fast path need not record the FDB or mesh (their changes
	// change the engine's cfgGen), only the configuration.
	if r := w.recording(); r != nil {
		r.op(fcVXLAN).vx = v
	}
	if !ok && v.mesh != nil {
		dst, ok = v.meshDst(p.DstMAC().key())
	}
	if !ok {
		v.dev.drop(w, p, "vxlan", ReasonNoVXLANDestination, "no fdb entry for "+p.DstMAC().String())
		return
	}
	var inner [12]byte
	if p.Trace != nil {
		copy(inner[:], p.Frame())
	}
	if !v.encap(p, dst) {
		v.dev.drop(w, p, "vxlan", ReasonEncapLoop, "no headroom left: the outer packet was routed back into "+v.dev.Name)
		return
	}
	if r := w.recording(); r != nil {
		o := r.op(feEncap)
		o.vx, o.dst = v, dst
		if !r.enc.ok && r.ipOK {
			o.b1 = r.enc.record(v, p)
			if o.b1 {
				// The template holds the namespace's default TTL.
				r.netns(v.dev.ns)
			}
		}
	}
	// iptunnel_xmit scrubs the skb: the outer packet is a new flow for
	// conntrack (nf_reset_ct); the mark stays within the namespace.
	p.CT = CTRef{}
	if p.Trace != nil {
		w.Observe(p, trace.Observation{Node: ns.Node, Netns: ns.Name, Device: v.dev.Name, Stage: "vxlan",
			Action: trace.Encapsulated, Summary: p.Summary(),
			Detail: "vni " + itoa(int(v.VNI)) + " to " + addrString(dst) + ":" + itoa(int(v.Port)) + " (fdb " + MAC(inner[0:6]).String() + " dst " + addrString(dst) + ")"})
	}
	ns.output(w, p)
}

// encap prepends the outer Ethernet, IPv4, UDP and VXLAN headers toward
// dst (the IP ID from the namespace's counter, the outer UDP checksum as
// outerUDPChecksum computes it), reporting false when the headroom is
// exhausted.
func (v *VXLAN) encap(p *Packet, dst [4]byte) bool {
	ns := v.dev.ns
	inner := p.Frame()
	sport := v.srcPort(inner)
	var ecn byte
	if p.EtherType() == 0x0800 {
		ecn = p.IPv4()[1] & 0x03
	}
	innerLen := len(inner)
	hdr := p.Prepend(EthHdrLen + 20 + 8 + vxlanHdrLen)
	if hdr == nil {
		return false
	}
	clear(hdr[:EthHdrLen])
	hdr[12], hdr[13] = 0x08, 0x00
	ipb := hdr[EthHdrLen:]
	udpLen := 8 + vxlanHdrLen + innerLen
	writeIPv4(ipb, ecn, 20+udpLen, ns.nextID(), false, ns.Sysctl.DefaultTTL, ProtoUDP, v.Local.As4(), dst)
	u := header.UDP(ipb[20:])
	u.SetSourcePort(sport)
	u.SetDestinationPort(v.Port)
	u.SetLength(uint16(udpLen))
	vx := ipb[28:36]
	vx[0], vx[1], vx[2], vx[3] = 0x08, 0, 0, 0
	vx[4], vx[5], vx[6], vx[7] = byte(v.VNI>>16), byte(v.VNI>>8), byte(v.VNI), 0
	u.SetChecksum(0)
	seg := p.buf[p.head+EthHdrLen+20 : p.tail]
	u.SetChecksum(outerUDPChecksum(header.IPv4(ipb), seg, p.CsumValid))
	return true
}

func (ns *Netns) vxlanFor(port uint16) *VXLAN {
	for _, v := range ns.vxlans {
		if v.Port == port {
			return v
		}
	}
	return nil
}

// decap is vxlan_rcv for a local UDP packet to the device's port that
// passed PREROUTING and INPUT: check flags and VNI, strip the outer
// headers, and let the inner frame arrive on the VXLAN device.
func (v *VXLAN) decap(w *Walk, in *Device, p *Packet) {
	ns := v.dev.ns
	ip := p.IPv4()
	l4 := p.L4()
	if len(l4) < 8+vxlanHdrLen+EthHdrLen {
		ns.drop(w, p, in, "vxlan", ReasonMalformed, (&FrameError{Layer: "vxlan", Reason: "too short for a VXLAN header and inner frame"}).Error())
		return
	}
	vx := l4[8:16]
	if vx[0]&0x08 == 0 {
		ns.drop(w, p, in, "vxlan", ReasonMalformed, (&FrameError{Layer: "vxlan", Reason: "I flag not set"}).Error())
		return
	}
	vni := uint32(vx[4])<<16 | uint32(vx[5])<<8 | uint32(vx[6])
	if vni != v.VNI {
		ns.drop(w, p, in, "vxlan", ReasonNoVXLANDestination, "vni "+itoa(int(vni))+" does not match "+v.dev.Name+" vni "+itoa(int(v.VNI)))
		return
	}
	outer := EthHdrLen + ip.HeaderLength()
	if v.Learning {
		k := MAC(l4[16+6 : 16+12]).key()
		v.unshareFDB(k)
		if old, ok := v.fdb[k]; !ok || old != [4]byte(ip[12:16]) {
			v.fdbChanged()
			v.fdb[k] = [4]byte(ip[12:16])
		}
	}
	p.TrimFront(int(outer) + 16)
	p.Mark = 0
	// iptunnel_xmit scrubs the skb: the outer packet is a new flow for
	// conntrack (nf_reset_ct); the mark stays within the namespace.
	p.CT = CTRef{}
	if p.Trace != nil {
		w.Observe(p, trace.Observation{Node: ns.Node, Netns: ns.Name, Device: v.dev.Name, Stage: "vxlan",
			Action: trace.Decapsulated, Summary: p.Summary(),
			Detail: "vni " + itoa(int(vni)) + " from " + addrString([4]byte(ip[12:16]))})
	}
	w.e.ScheduleRx(0, v.dev, p)
}

// fastDecap is what deliver, udpReceive and decap do with p, an untraced
// packet that went up to ns's sockets in a replay, when they decapsulate
// it on v: each of their tests is made here on p as it is (the checksum
// verified as udpReceive verifies it, v's port, VNI and learning read as
// they are now), without their generality; it reports false, having done
// nothing, when any of them would go another way (the caller delivers p
// then, which drops it or gives it to a socket). sum says the UDP
// checksum is right by construction (fastRun: the replay that handed p
// on summed it when it encapsulated p, and no byte it covers changed
// since): its verification, which would find it right, is skipped.
func (ns *Netns) fastDecap(w *Walk, v *VXLAN, p *Packet, sum bool) bool {
	f := p.buf[p.head:p.tail]
	const outer = EthHdrLen + 20
	if len(f) < outer+8+vxlanHdrLen+EthHdrLen || f[14] != 0x45 || f[EthHdrLen+9] != ProtoUDP ||
		f[EthHdrLen+6]&0x3f|f[EthHdrLen+7] != 0 || v.Learning {
		return false // options, a fragment, not UDP, too short; learning updates the FDB
	}
	ip, l4 := header.IPv4(f[EthHdrLen:]), f[outer:]
	if u := header.UDP(l4); int(u.Length()) != len(l4) || u.DestinationPort() != v.Port || ns.vxlanFor(v.Port) != v ||
		(!p.CsumValid && !sum && u.Checksum() != 0 && l4Checksum(ip, l4, header.UDPProtocolNumber) != 0xffff) {
		return false
	}
	if sum {
		w.e.sumsKnown++
	}
	if vx := l4[8:16]; vx[0]&0x08 == 0 || uint32(vx[4])<<16|uint32(vx[5])<<8|uint32(vx[6]) != v.VNI {
		return false
	}
	p.TrimFront(outer + 16)
	p.Mark = 0
	p.CT = CTRef{}
	w.e.ScheduleRx(0, v.dev, p)
	return true
}

// outerUDPChecksum is the outer UDP checksum of a VXLAN segment (UDP and
// VXLAN headers, then the inner frame), 0xffff for a sum of zero as UDP
// sends it. When the inner frame's checksums are known to be right (a
// stack or an offloading NIC computed them: innerValid), the sum over the
// inner frame follows from them without reading its payload, the way
// udp_set_csum builds the outer checksum from the inner's partial sum
// (local checksum offload, LCO): a valid inner IPv4 header sums to
// 0xffff, and a valid inner TCP, UDP or ICMP segment sums to the
// complement of its pseudo-header. The result is the same 16 bits as the
// full sum; anything this does not cover (fragments, padding, a UDP
// datagram without checksum, IP options past the frame) is summed in full.
func outerUDPChecksum(outer header.IPv4, seg []byte, innerValid bool) uint16 {
	x := pseudoSum([4]byte(outer[12:16]), [4]byte(outer[16:20]), ProtoUDP, uint16(len(seg)))
	var c uint16
	if sum, ok := innerSum(seg[8+vxlanHdrLen:], innerValid); ok {
		c = ^checksum.Combine(csum(seg[:8+vxlanHdrLen+EthHdrLen], x), sum)
	} else {
		c = ^checksum.Checksum(seg, x)
	}
	if c == 0 {
		c = 0xffff
	}
	return c
}

// innerSum is the one's complement sum of an inner Ethernet frame after its
// Ethernet header, derived from its valid checksums; ok is false when it
// has to be summed in full.
func innerSum(frame []byte, valid bool) (uint16, bool) {
	if !valid || len(frame) < EthHdrLen+20 || frame[12] != 0x08 || frame[13] != 0x00 {
		return 0, false
	}
	ip := header.IPv4(frame[EthHdrLen:])
	ihl := int(ip[0]&0xf) * 4
	if ip[0]>>4 != 4 || ihl < 20 || int(ip.TotalLength()) != len(ip) || ihl > len(ip) ||
		ip.FragmentOffset() != 0 || ip.Flags()&header.IPv4FlagMoreFragments != 0 {
		return 0, false
	}
	hsum := csum(ip[:ihl], 0)
	if hsum != 0xffff {
		return 0, false
	}
	l4 := ip[ihl:]
	var proto tcpip.TransportProtocolNumber
	switch ip.Protocol() {
	case ProtoTCP:
		if len(l4) < header.TCPMinimumSize {
			return 0, false
		}
		proto = header.TCPProtocolNumber
	case ProtoUDP:
		if len(l4) < header.UDPMinimumSize || header.UDP(l4).Checksum() == 0 {
			return 0, false
		}
		proto = header.UDPProtocolNumber
	case ProtoICMP:
		// A valid ICMP message sums to 0xffff on its own.
		return checksum.Combine(hsum, 0xffff), len(l4) >= header.ICMPv4MinimumSize
	default:
		return 0, false
	}
	ph := pseudoSum([4]byte(ip[12:16]), [4]byte(ip[16:20]), uint8(proto), uint16(len(l4)))
	return checksum.Combine(hsum, ^ph), true
}

// vxlanTemplate is a recorded encapsulation's outer headers, from which
// the fast path repeats it for a later frame of the same flow: every
// outer field but the IP ID, the IP header checksum and the UDP checksum
// is the same for every frame of the flow (the outer UDP source port is
// a hash of the inner addresses and ports, the ECN bits the inner TOS's,
// the lengths are the flow key's, the TTL the namespace's default, which
// the fast path checks), and so is the outer UDP checksum when
// outerUDPChecksum derives it from the inner checksums (derived: the
// inner headers are the key's, the inner IPv4 header sums to 0xffff and
// the inner segment to its pseudo-header's complement). Otherwise the
// outer UDP checksum is summed as encap sums it. The template holds for a
// frame while the device's configuration is the recorded one (the fast
// path checks it).
type vxlanTemplate struct {
	ok bool
	// derived says the recorded outer UDP checksum was derived from the
	// inner checksums (the frame's were known right: Packet.CsumValid,
	// which the fast path's key holds), so it holds for every frame of
	// the flow that carries a UDP checksum.
	derived bool
	// hdr is the outer Ethernet, IPv4, UDP and VXLAN headers with the IP
	// ID zero and the IP checksum of that header.
	hdr [EthHdrLen + 20 + 8 + vxlanHdrLen]byte
}

// record makes t the template of the encapsulation v just prepended to p,
// whose inner IPv4 header the walk validated when the event started, and
// reports whether it can be repeated from one.
func (t *vxlanTemplate) record(v *VXLAN, p *Packet) bool {
	n := len(t.hdr)
	if p.Len() < n {
		return false
	}
	seg := p.buf[p.head+EthHdrLen+20 : p.tail]
	_, t.derived = innerSum(seg[8+vxlanHdrLen:], p.CsumValid)
	copy(t.hdr[:], p.buf[p.head:p.head+n])
	ip := t.hdr[EthHdrLen : EthHdrLen+20]
	ip[4], ip[5], ip[10], ip[11] = 0, 0, 0, 0
	c := ^csum(ip, 0)
	ip[10], ip[11] = byte(c>>8), byte(c)
	t.ok = true
	return true
}

// apply prepends t's headers to p as v.encap would, with the next IP ID
// of v's namespace, and reports whether it did (ok; it does nothing when
// the template does not hold for p) and whether it summed the outer UDP
// checksum as encap does (summed) rather than taking the derived one.
func (t *vxlanTemplate) apply(v *VXLAN, p *Packet) (ok, summed bool) {
	n := len(t.hdr)
	// The device's configuration is the fast path's check (fastVXLAN).
	// The inner frame is the event's (its key's) with the recorded
	// transformations applied: its IPv4 header was validated when the
	// event started (a template is recorded only then) and rewritten
	// with incremental checksum updates since, and its checksum state is
	// the key's. Only the UDP checksum, which the key leaves out, can
	// make outerUDPChecksum sum the frame in full.
	if !t.ok || p.head < n || p.Len() < EthHdrLen+20+8 {
		return false, false
	}
	inner := p.buf[p.head:p.tail]
	summed = !t.derived || (inner[EthHdrLen+9] == ProtoUDP && inner[EthHdrLen+20+6]|inner[EthHdrLen+20+7] == 0)
	p.head -= n
	h := (*[EthHdrLen + 20 + 8 + vxlanHdrLen]byte)(p.buf[p.head:])
	*h = t.hdr
	id := v.dev.ns.nextID()
	// RFC 1624 from the checksum of the header with ID zero; both sums
	// are of a header that is not all zeros, so the result is the one a
	// full sum gives.
	ip := h[EthHdrLen : EthHdrLen+20]
	s := uint32(^(uint16(ip[10])<<8 | uint16(ip[11]))) + uint32(id)
	s = s&0xffff + s>>16
	c := ^uint16(s)
	ip[4], ip[5], ip[10], ip[11] = byte(id>>8), byte(id), byte(c>>8), byte(c)
	if summed {
		// What encap writes: the sum over the segment with its
		// checksum field zero (a UDP datagram without checksum, or
		// inner checksums not known right, is summed in full).
		u := header.UDP(h[EthHdrLen+20:])
		u.SetChecksum(0)
		u.SetChecksum(outerUDPChecksum(header.IPv4(ip), p.buf[p.head+EthHdrLen+20:p.tail], p.CsumValid))
	}
	return true, summed
}
