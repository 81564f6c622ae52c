package datapath

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// TestIPv4SumOKFrom checks the replay's header checksum test, which sums
// only the ID and checksum of the frame onto the rest of the header
// summed from the recorded key, against the whole header's test, for
// frames that match the key: the same header but for the ID and
// checksum, which are random (half the time the checksum is right).
func TestIPv4SumOKFrom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		var b [8 * fastHdrWords]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if rng.IntN(4) == 0 {
			for i := EthHdrLen; i < EthHdrLen+20; i++ {
				b[i] = 0 // all-zero words around the ID and checksum
			}
		}
		var hdr [fastHdrWords]uint64
		for i := range hdr {
			hdr[i] = binary.LittleEndian.Uint64(b[8*i:]) & fastMaskUDP[i]
		}
		rest := ipSumOf(&hdr)
		for range 4 {
			ip := b[EthHdrLen : EthHdrLen+20]
			binary.BigEndian.PutUint16(ip[4:], uint16(rng.Uint32()))
			binary.BigEndian.PutUint16(ip[10:], uint16(rng.Uint32()))
			if rng.IntN(2) == 0 {
				ip[10], ip[11] = 0, 0
				binary.BigEndian.PutUint16(ip[10:], ^checksum.Checksum(ip, 0))
			}
			h2, h3 := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
			require.Equal(t, csum(ip, 0) == 0xffff, ipv4SumOKFrom(rest, h2, h3), "% x", ip)
		}
	}
}
