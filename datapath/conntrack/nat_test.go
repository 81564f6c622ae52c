package conntrack

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCsumReplaceAddrPort checks the one-fold update of an address and a
// port against the two updates it stands for, byte for byte, on random
// values and on the edges of one's complement arithmetic (0x0000 and
// 0xffff checksums, all-zero and all-one fields).
func TestCsumReplaceAddrPort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	edge := []uint16{0, 1, 0xfffe, 0xffff}
	pick := func() uint16 {
		if rng.IntN(3) == 0 {
			return edge[rng.IntN(len(edge))]
		}
		return uint16(rng.Uint32())
	}
	for range 200000 {
		c := [2]byte{}
		var a, na [4]byte
		var pt, np [2]byte
		for _, b := range [][]byte{c[:], a[:2], a[2:], na[:2], na[2:], pt[:], np[:]} {
			v := pick()
			b[0], b[1] = byte(v>>8), byte(v)
		}
		want := c
		csumReplace(want[:], a[:], na[:])
		csumReplace(want[:], pt[:], np[:])
		got := c
		csumReplaceAddrPort(got[:], &a, &na, &pt, &np)
		require.Equal(t, want, got, "checksum %x, %x -> %x, %x -> %x", c, a, na, pt, np)
	}
}
