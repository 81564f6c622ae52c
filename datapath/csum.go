package datapath

import "encoding/binary"

// csum is the 16-bit one's complement sum of b (big-endian words, an odd
// last byte padded with a zero) added to initial, the same value as gVisor's
// checksum.Checksum(b, initial). The walk sums short headers (the IPv4
// header at every ip_rcv, the outer headers of every VXLAN packet) where
// the general routine's set-up costs more than the sum: this one adds four
// bytes at a time into a 64-bit accumulator and folds once.
func csum(b []byte, initial uint16) uint16 {
	s := uint64(initial)
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	if len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return uint16(s + s>>16)
}

// pseudoSum is the one's complement sum of the IPv4 pseudo-header (source
// and destination addresses, protocol, length), the same value as gVisor's
// header.PseudoHeaderChecksum, without its four calls to the general
// routine.
func pseudoSum(src, dst [4]byte, proto uint8, length uint16) uint16 {
	s := uint64(binary.BigEndian.Uint32(src[:])) + uint64(binary.BigEndian.Uint32(dst[:])) + uint64(proto) + uint64(length)
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return uint16(s + s>>16)
}
