// Package ipam models the host-local IPAM plugin: addresses handed out
// from a node-local range, recorded per container ID, with the gateway
// reserved. Like the real plugin it knows nothing of other nodes: give two
// nodes the same range and they hand out the same addresses.
package ipam

import (
	"fmt"
	"net/netip"

	"go4.org/netipx"
)

// ErrRangeFull is returned when no address is free, with the message the
// real plugin prints.
type ErrRangeFull struct {
	First, Last netip.Addr
}

// Error implements the error interface.
func (e *ErrRangeFull) Error() string {
	return fmt.Sprintf("no IP addresses available in range set: %s-%s", e.First, e.Last)
}

// ErrDuplicate is returned when a container ID already holds an address.
type ErrDuplicate struct {
	ID   string
	Addr netip.Addr
}

// Error implements the error interface.
func (e *ErrDuplicate) Error() string {
	return fmt.Sprintf("%s has been allocated to %s, duplicate allocation is not allowed", e.Addr, e.ID)
}

// ErrConfig reports an unusable range.
type ErrConfig struct{ Msg string }

// Error implements the error interface.
func (e *ErrConfig) Error() string { return "host-local: " + e.Msg }

// HostLocal allocates from one subnet (`"subnet": "usePodCidr"` resolves to
// the node's spec.podCIDR). The gateway (.1 by default) and the network and
// broadcast addresses are never handed out. Allocation continues after the
// last reserved address (last_reserved_ip), wrapping around, so a released
// address is reused only after the others.
type HostLocal struct {
	Subnet      netip.Prefix
	Gateway     netip.Addr
	first, last netip.Addr
	lastRes     netip.Addr
	// byAddr and byID hold the handed-out addresses as uint32s (the
	// range is IPv4): keys without pointers, hashed as one word.
	byAddr map[uint32]string
	byID   map[string]uint32
}

// u32 is the IPv4 address a as a number.
func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// addr is u32's inverse.
func addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// NewHostLocal returns an allocator for subnet with gateway .1.
func NewHostLocal(subnet netip.Prefix) (*HostLocal, error) {
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return nil, &ErrConfig{Msg: fmt.Sprintf("subnet %v is not an IPv4 prefix", subnet)}
	}
	if subnet.Masked() != subnet {
		return nil, &ErrConfig{Msg: fmt.Sprintf("subnet %v has host bits set", subnet)}
	}
	if subnet.Bits() > 30 {
		return nil, &ErrConfig{Msg: fmt.Sprintf("subnet %v is too small (need at least /30)", subnet)}
	}
	first := subnet.Addr().Next()
	last := netipx.PrefixLastIP(subnet).Prev()
	return &HostLocal{Subnet: subnet, Gateway: first, first: first, last: last,
		byAddr: map[uint32]string{}, byID: map[string]uint32{}}, nil
}

// Capacity is the number of addresses that can be handed out (the range
// minus the gateway): 253 for a /24.
func (h *HostLocal) Capacity() int {
	n := 0
	for a := h.first; a.Compare(h.last) <= 0; a = a.Next() {
		if a != h.Gateway {
			n++
		}
	}
	return n
}

// Allocate reserves the next free address for id.
func (h *HostLocal) Allocate(id string) (netip.Addr, error) {
	if a, ok := h.byID[id]; ok {
		return netip.Addr{}, &ErrDuplicate{ID: id, Addr: addr(a)}
	}
	start := h.first
	if h.lastRes.IsValid() {
		start = h.lastRes.Next()
		if start.Compare(h.last) > 0 {
			start = h.first
		}
	}
	a := start
	for {
		if _, used := h.byAddr[u32(a)]; !used && a != h.Gateway {
			h.byAddr[u32(a)] = id
			h.byID[id] = u32(a)
			h.lastRes = a
			return a, nil
		}
		a = a.Next()
		if a.Compare(h.last) > 0 {
			a = h.first
		}
		if a == start {
			return netip.Addr{}, &ErrRangeFull{First: h.first, Last: h.last}
		}
	}
}

// Release frees the address held by id. It reports whether id held one.
func (h *HostLocal) Release(id string) bool {
	a, ok := h.byID[id]
	if !ok {
		return false
	}
	delete(h.byID, id)
	delete(h.byAddr, a)
	return true
}

// Lookup returns the address held by id.
func (h *HostLocal) Lookup(id string) (netip.Addr, bool) {
	a, ok := h.byID[id]
	if !ok {
		return netip.Addr{}, false
	}
	return addr(a), true
}

// InUse is the number of addresses handed out.
func (h *HostLocal) InUse() int { return len(h.byID) }
