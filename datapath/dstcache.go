package datapath

import (
	"encoding/binary"

	"github.com/kubewalk/kubewalk/datapath/route"
)

// The destination cache remembers, per namespace, what a destination
// address is: one of its addresses, a broadcast address of one of its
// subnets, and the route to it, as the kernel keeps a dst_entry with a
// socket or in the FIB nexthop's cache instead of looking the tables up
// for every packet. Every answer is taken from the tables and kept with
// the generation they had then (addrGen for the addresses, Routes.Gen for
// the routes), so a cached answer is the one the tables give now.

// dstSlots is the size of the direct-mapped cache.
const (
	dstBits  = 4
	dstSlots = 1 << dstBits
)

type dstSlot struct {
	dst          uint32 // the address, as binary.LittleEndian.Uint32 reads it
	local, bcast bool
	rok          bool
	// agen and rgen are the generations plus one at which local, bcast
	// and r, rok were taken; zero means not taken.
	agen, rgen uint64
	r          *route.Route
}

func (ns *Netns) dstSlot(dst [4]byte) *dstSlot {
	a := binary.LittleEndian.Uint32(dst[:])
	d := ns.dsts
	if d == nil {
		d = new([dstSlots]dstSlot)
		ns.dsts = d
	}
	s := &d[(a*0x9e3779b1)>>(32-dstBits)]
	if s.dst != a {
		*s = dstSlot{dst: a}
	}
	return s
}

// addrClass reports whether dst is one of the namespace's addresses and
// whether it is a broadcast address of one of its subnets.
func (ns *Netns) addrClass(dst [4]byte) (local, bcast bool) {
	s := ns.dstSlot(dst)
	if s.agen != ns.addrGen+1 {
		s.local = ns.local.has(dst)
		s.bcast = ns.bcast.has(dst)
		s.agen = ns.addrGen + 1
	}
	return s.local, s.bcast
}

// lookupRoute is Routes.Lookup(dst) through the cache.
func (ns *Netns) lookupRoute(dst [4]byte) (*route.Route, bool) {
	s := ns.dstSlot(dst)
	if g := ns.Routes.Gen() + 1; s.rgen != g {
		s.r, s.rok = ns.Routes.Lookup(dst)
		s.rgen = g
	}
	return s.r, s.rok
}
