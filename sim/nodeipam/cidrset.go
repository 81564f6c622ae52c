// Package nodeipam models kube-controller-manager's range allocator
// (--allocate-node-cidrs, --cluster-cidr, --node-cidr-mask-size): each node
// gets the next free block of the cluster range as spec.podCIDR, which can
// never change afterwards.
package nodeipam

import (
	"fmt"
	"net/netip"
)

// ErrNoCIDRsRemaining is the controller's error when the range is exhausted
// (the node then shows a CIDRNotAvailable event and keeps an empty podCIDR).
type ErrNoCIDRsRemaining struct {
	Cluster netip.Prefix
	Mask    int
}

// Error implements the error interface.
func (e *ErrNoCIDRsRemaining) Error() string {
	return fmt.Sprintf("CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range (cluster %s, /%d per node)", e.Cluster, e.Mask)
}

// ErrConfig reports an unusable --cluster-cidr / --node-cidr-mask-size pair.
type ErrConfig struct{ Msg string }

// Error implements the error interface.
func (e *ErrConfig) Error() string { return "node ipam: " + e.Msg }

// CIDRSet hands out /MaskSize blocks of Cluster in order, lowest first,
// remembering where it stopped like cidrset.AllocateNext.
type CIDRSet struct {
	Cluster  netip.Prefix
	MaskSize int
	used     []bool
	next     int
}

// maxBits is cidrset's limit on node-mask minus cluster-mask.
const maxBits = 16

// NewCIDRSet validates the pair as the controller does at start-up.
func NewCIDRSet(cluster netip.Prefix, maskSize int) (*CIDRSet, error) {
	if !cluster.IsValid() || !cluster.Addr().Is4() || cluster.Masked() != cluster {
		return nil, &ErrConfig{Msg: fmt.Sprintf("cluster CIDR %v must be a masked IPv4 prefix", cluster)}
	}
	if maskSize < cluster.Bits() || maskSize > 32 {
		return nil, &ErrConfig{Msg: fmt.Sprintf("node CIDR mask size %d must be between the cluster mask %d and 32", maskSize, cluster.Bits())}
	}
	if maskSize-cluster.Bits() > maxBits {
		return nil, &ErrConfig{Msg: fmt.Sprintf("CIDRSet max number of bits exceeded: node mask /%d is more than %d bits below cluster mask /%d", maskSize, maxBits, cluster.Bits())}
	}
	return &CIDRSet{Cluster: cluster, MaskSize: maskSize, used: make([]bool, 1<<(maskSize-cluster.Bits()))}, nil
}

func (s *CIDRSet) block(i int) netip.Prefix {
	base := s.Cluster.Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i) << (32 - s.MaskSize)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), s.MaskSize)
}

func (s *CIDRSet) index(p netip.Prefix) (int, bool) {
	if p.Bits() != s.MaskSize || !s.Cluster.Contains(p.Addr()) || p.Masked() != p {
		return 0, false
	}
	a, b := p.Addr().As4(), s.Cluster.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	w := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return int((v - w) >> (32 - s.MaskSize)), true
}

// AllocateNext returns the next free block.
func (s *CIDRSet) AllocateNext() (netip.Prefix, error) {
	n := len(s.used)
	for k := range n {
		i := (s.next + k) % n
		if !s.used[i] {
			s.used[i] = true
			s.next = (i + 1) % n
			return s.block(i), nil
		}
	}
	return netip.Prefix{}, &ErrNoCIDRsRemaining{Cluster: s.Cluster, Mask: s.MaskSize}
}

// Occupy marks p used (a node that arrived with spec.podCIDR already set).
// Blocks outside the cluster range are not tracked and are not an error:
// the controller only logs them.
func (s *CIDRSet) Occupy(p netip.Prefix) {
	if i, ok := s.index(p); ok {
		s.used[i] = true
	}
}

// Release frees p (node deleted).
func (s *CIDRSet) Release(p netip.Prefix) {
	if i, ok := s.index(p); ok {
		s.used[i] = false
	}
}
