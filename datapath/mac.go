package datapath

import (
	"fmt"
	"math/rand/v2"
	"net"
)

// MAC is an Ethernet address as a comparable value, usable as a map key.
type MAC [6]byte

// BroadcastMAC is ff:ff:ff:ff:ff:ff.
var BroadcastMAC = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// String formats m as ip(8) does: lower-case hex with colons.
func (m MAC) String() string {
	var b [17]byte
	return string(m.appendTo(b[:0]))
}

// appendTo appends m as String formats it.
func (m MAC) appendTo(b []byte) []byte {
	const digits = "0123456789abcdef"
	for i, c := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	return b
}

// IsMulticast reports whether the group bit is set (broadcast included).
func (m MAC) IsMulticast() bool { return m[0]&1 == 1 }

// IsZero reports whether m is 00:00:00:00:00:00.
func (m MAC) IsZero() bool { return m == MAC{} }

// ParseMAC parses "aa:bb:cc:dd:ee:ff".
func ParseMAC(s string) (MAC, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return MAC{}, fmt.Errorf("invalid MAC address %q", s)
	}
	return MAC(hw), nil
}

// RandomMAC returns a locally administered unicast address, as the kernel's
// eth_random_addr does, drawn from r.
func RandomMAC(r *rand.Rand) MAC {
	var m MAC
	v := r.Uint64()
	for i := range m {
		m[i] = byte(v >> (8 * i))
	}
	m[0] &^= 0x01 // unicast
	m[0] |= 0x02  // locally administered
	return m
}

// key packs m into a uint64 for map lookups: 6-byte array keys have no
// fast map path and cost a full hash per lookup.
func (m MAC) key() uint64 {
	return uint64(m[0])<<40 | uint64(m[1])<<32 | uint64(m[2])<<24 | uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
}

func macFromKey(k uint64) MAC {
	return MAC{byte(k >> 40), byte(k >> 32), byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}
}
