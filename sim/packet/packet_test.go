package packet

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"
)

func TestSCTPInitChecksumIsCRC32c(t *testing.T) {
	b, err := SCTP(IP{Src: netip.MustParseAddr("10.244.1.2"), Dst: netip.MustParseAddr("10.96.0.5")},
		SCTPInit{Sport: 40000, Dport: 3868, InitiateTag: 0x01020304, InitialTSN: 7})
	require.NoError(t, err)
	require.Equal(t, byte(132), b[9])
	require.Equal(t, byte(0x40), b[6]&0x40, "DF")
	sctp := append([]byte(nil), b[20:]...)
	require.Len(t, sctp, 12+20)
	sum := binary.LittleEndian.Uint32(sctp[8:12])
	clear(sctp[8:12])
	require.Equal(t, crc32.Checksum(sctp, crc32.MakeTable(crc32.Castagnoli)), sum)
	require.Zero(t, binary.BigEndian.Uint32(sctp[4:8]), "INIT has verification tag 0")

	p := Decode(Ethernet([6]byte{2}, [6]byte{4}, b))
	init, ok := p.Layer(layers.LayerTypeSCTPInit).(*layers.SCTPInit)
	require.True(t, ok, "%v", p)
	require.Equal(t, uint32(0x01020304), init.InitiateTag)
	require.Equal(t, uint16(10), init.OutboundStreams)
}
