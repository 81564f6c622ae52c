package datapath

import (
	"encoding/binary"
	"math/bits"
)

// csum is the 16-bit one's complement sum of b (big-endian words, an odd
// last byte padded with a zero) added to initial, the same value as gVisor's
// checksum.Checksum(b, initial). It adds little-endian 64-bit words with
// carry, folds once and swaps the two bytes of the result: a one's
// complement sum does not depend on the byte order but for that swap (RFC
// 1071, 2.(B)), and a sum of words that are not all zero folds to the same
// one of its two representations (never 0, 0xffff for a multiple of it)
// either way. The walk sums short headers (the IPv4 header at every
// ip_rcv, the outer headers of every VXLAN packet) and whole segments the
// receiver verifies.
func csum(b []byte, initial uint16) uint16 {
	var s, c uint64
	for len(b) >= 32 {
		// The carry chain stays inside a block (ADC), where a carry
		// carried from one iteration to the next costs more.
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b), 0)
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[8:]), c)
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[16:]), c)
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[24:]), c)
		s += c // cannot carry: the last add left s below 2^64-1 if it carried
		b = b[32:]
	}
	if len(b) >= 16 {
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b), 0)
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[8:]), c)
		s += c
		b = b[16:]
	}
	if len(b) >= 8 {
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b), 0)
		s += c
		b = b[8:]
	}
	// The last 0 to 7 bytes, zero-padded: a little-endian word's bytes in
	// their order in b.
	var t uint64
	var shift uint
	if len(b) >= 4 {
		t, shift = uint64(binary.LittleEndian.Uint32(b)), 32
		b = b[4:]
	}
	if len(b) >= 2 {
		t |= uint64(binary.LittleEndian.Uint16(b)) << shift
		shift += 16
		b = b[2:]
	}
	if len(b) == 1 {
		t |= uint64(b[0]) << shift
	}
	s, c = bits.Add64(s, t, 0)
	s += c
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	v := uint32(bits.ReverseBytes16(uint16(s))) + uint32(initial)
	return uint16(v + v>>16)
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
