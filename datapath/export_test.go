package datapath

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// StateDigest renders everything about ns a walk can change, internal
// timestamps included, for tests that compare two worlds (the fast path's
// equivalence test): the IP ID counter, every device's state and
// counters, the bridge FDBs with their last-seen times, the neighbour
// entries with their timestamps, the VXLAN FDBs, the underlay FDBs of the
// segments the namespace's NICs are on, and the node's ARP table state.
func (ns *Netns) StateDigest() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ns %s/%s ipid %d\n", ns.Node, ns.Name, ns.ipID)
	for _, d := range ns.devs {
		fmt.Fprintf(&b, "dev %s up %v mtu %d mac %s stats %+v\n", d.Name, d.up, d.mtu, d.mac, d.Stats)
		if d.br != nil {
			for _, k := range slices.Sorted(maps.Keys(d.br.fdb)) {
				e := d.br.fdb[k]
				fmt.Fprintf(&b, "  fdb %s port %s local %v static %v updated %d\n", macFromKey(k), e.port.Name, e.local, e.static, e.updated)
			}
		}
		if d.vx != nil {
			for _, k := range slices.Sorted(maps.Keys(d.vx.fdb)) {
				fmt.Fprintf(&b, "  vxfdb %s %v\n", macFromKey(k), d.vx.fdb[k])
			}
		}
		if s := d.seg; s != nil {
			for _, k := range slices.Sorted(maps.Keys(s.fdb)) {
				fmt.Fprintf(&b, "  segfdb %s %s\n", macFromKey(k), s.fdb[k].Name)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ns.neigh.m)) {
		e := ns.neigh.m[k]
		fmt.Fprintf(&b, "neigh %v dev %s %s %s confirmed %d updated %d used %d probes %d queued %d\n",
			k.ip(), e.dev.Name, e.state, e.mac, e.confirmed, e.updated, e.used, e.probes, len(e.queue))
	}
	fmt.Fprintf(&b, "arp next %d entries %d\n", ns.arp.nextPeriodic, ns.arp.gcEntries)
	return b.String()
}

// SetCheckLinks makes every linked replay of an entry handing its own
// frame on check the frame against the linked entry's key too, and panic
// where the two disagree (TestFastPathEquivalence).
func SetCheckLinks(on bool) { checkLinks = on }

// LaterLinks is the number of replays e ran linked across a delay
// (linkLater): a frame handed over the underlay replayed at its receipt
// without the queue, the device and the lookup.
func LaterLinks(e *Engine) uint64 { return e.laterLinks }

// SumsKnown is the number of outer UDP checksums e's replays took as
// right by construction, without verifying them (fastDecap): the replay
// that handed the frame on encapsulated it and changed none of its bytes
// after.
func SumsKnown(e *Engine) uint64 { return e.sumsKnown }

// EncSummed is the number of encapsulations e's replays repeated from a
// template with the outer UDP checksum summed as VXLAN.encap sums it (the
// inner checksums not known right, or a UDP datagram without checksum).
func EncSummed(e *Engine) uint64 { return e.encSummed }

// Deferred is the number of replays whose deferred counter increments
// (Flat.Defer) e has not applied yet.
func Deferred(e *Engine) uint64 {
	var n uint64
	for _, f := range e.deferred {
		n += f.pend
	}
	return n
}

// FlatTimers is the number of flattened timer refreshes (Flat.Timer: a
// conntrack entry's, checked and refreshed without its stage) the
// entries of ns's fast path hold.
func FlatTimers(ns *Netns) int {
	n := 0
	if ns.fast != nil {
		for _, e := range ns.fast.slots {
			if e != nil {
				n += len(e.timers)
			}
		}
	}
	return n
}
