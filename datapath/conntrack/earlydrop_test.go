package conntrack

import (
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/require"
)

// udpFlow sends the first datagram of a flow from 10.0.0.1:sport to
// 10.0.0.2:53 through conntrack-in and confirm, as a locally generated
// packet would pass OUTPUT and POSTROUTING. It returns the verdict and the
// packet's trace.
func udpFlow(t *testing.T, e *datapath.Engine, tb *Table, sport uint16) (datapath.Verdict, *trace.Trace) {
	t.Helper()
	p := udpPacket(t, e, sport)
	tr := &trace.Trace{}
	p.Trace = tr
	w := e.Walk()
	v := tb.inStage.Process(w, p)
	if v.Code == datapath.Continue {
		v = tb.cfmStage.Process(w, p)
		p.Release()
	}
	return v, tr
}

// udpPacket is a UDP packet 10.0.0.1:sport > 10.0.0.2:53 from e's pool.
func udpPacket(t *testing.T, e *datapath.Engine, sport uint16) *datapath.Packet {
	t.Helper()
	b := make([]byte, 28)
	b[0], b[2], b[3], b[8], b[9] = 0x45, 0, 28, 64, datapath.ProtoUDP
	copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	b[20], b[21], b[22], b[23], b[25] = byte(sport>>8), byte(sport), 0, 53, 8
	p := e.Pool.Get()
	require.True(t, p.SetIPPacket(b))
	return p
}

func details(tr *trace.Trace) []string {
	var out []string
	for _, o := range tr.Obs {
		out = append(out, o.Detail)
	}
	return out
}

// TestEarlyDropEvictsUnassuredWhenFull: with nf_conntrack_max reached, a
// new connection evicts the not-ASSURED entries of the first of the
// EvictionRange buckets from its own that holds any, and is admitted;
// ASSURED entries are never evicted, and then the packet is dropped with
// "nf_conntrack: table full, dropping packet". Before, every new
// connection on a full table was dropped.
func TestEarlyDropEvictsUnassuredWhenFull(t *testing.T) {
	e := datapath.NewEngine(1)
	tb := Install(e.NewNetns("n", "ns"), Config{Max: 4, Buckets: 1})
	for sp := uint16(1000); sp < 1004; sp++ {
		v, _ := udpFlow(t, e, tb, sp)
		require.Equal(t, datapath.Continue, v.Code)
	}
	require.Equal(t, 4, tb.Len())

	// One bucket: all four unreplied flows are in it and all are evicted.
	v, tr := udpFlow(t, e, tb, 2000)
	require.Equal(t, datapath.Continue, v.Code, "admitted")
	require.Contains(t, details(tr), "table full: early_drop evicted 4 unassured connection(s)")
	require.Equal(t, 1, tb.Len())
	require.Equal(t, uint64(4), tb.Stats.EarlyDrop)

	// Assured entries stay: the table is full and the new flow is dropped.
	for _, en := range tb.List() {
		en.Status |= StatusAssured
	}
	for sp := uint16(3000); sp < 3003; sp++ {
		_, _ = udpFlow(t, e, tb, sp)
	}
	for _, en := range tb.List() {
		en.Status |= StatusAssured
	}
	require.Equal(t, 4, tb.Len())
	v, tr = udpFlow(t, e, tb, 4000)
	require.Equal(t, datapath.Stolen, v.Code, "dropped (traced: recorded and released)")
	last := tr.Obs[len(tr.Obs)-1]
	require.Equal(t, "nf_conntrack: table full, dropping packet", last.Detail)
	require.Equal(t, datapath.ReasonConntrackFull.String(), last.Reason)
	require.Equal(t, uint64(1), tb.Stats.Drop)
	require.Equal(t, 4, tb.Len())
}

// TestEarlyDropScansOnlyEightBuckets: an unassured entry outside the
// EvictionRange buckets from the new tuple's does not make room.
func TestEarlyDropScansOnlyEightBuckets(t *testing.T) {
	e := datapath.NewEngine(1)
	tb := Install(e.NewNetns("n", "ns"), Config{Max: 1, Buckets: 1024})
	v, _ := udpFlow(t, e, tb, 1000)
	require.Equal(t, datapath.Continue, v.Code)
	old := tb.List()[0]
	in := func(b, from uint32) bool { return (b-from+tb.nbuckets)%tb.nbuckets < EvictionRange }
	var near, far uint16
	for sp := uint16(2000); near == 0 || far == 0; sp++ {
		tu := Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Sport: sp, Dport: 53, Proto: datapath.ProtoUDP}
		b := tb.bucket(tu)
		if in(tb.bucket(old.Orig), b) || in(tb.bucket(old.Reply), b) {
			if near == 0 {
				near = sp
			}
		} else if far == 0 {
			far = sp
		}
	}
	v, tr := udpFlow(t, e, tb, far)
	require.Equal(t, datapath.Stolen, v.Code, "%v", details(tr))
	v, tr = udpFlow(t, e, tb, near)
	require.Equal(t, datapath.Continue, v.Code, "%v", details(tr))
	require.Equal(t, uint64(1), tb.Stats.EarlyDrop)
	require.Equal(t, near, tb.List()[0].Orig.Sport)
}

// FuzzSCTPManipCRC: after NAT rewrites an SCTP packet's address and port,
// its CRC32c equals a full recomputation (the address is outside the CRC;
// the port is inside).
func FuzzSCTPManipCRC(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, uint16(40000), uint16(3868), []byte{1, 0, 0, 20, 0, 0, 0, 9})
	f.Add([]byte{0, 0, 0, 0}, uint16(0), uint16(65535), []byte{})
	f.Fuzz(func(t *testing.T, a []byte, sport, dport uint16, chunks []byte) {
		if len(a) < 4 || len(chunks) > 1000 {
			return
		}
		n := 20 + 12 + len(chunks)
		pkt := make([]byte, n)
		pkt[0], pkt[2], pkt[3], pkt[8], pkt[9] = 0x45, byte(n>>8), byte(n), 64, datapath.ProtoSCTP
		copy(pkt[12:16], a[:4])
		copy(pkt[16:20], []byte{10, 96, 0, 1})
		l4 := pkt[20:]
		l4[0], l4[1], l4[2], l4[3] = byte(sport>>8), byte(sport), byte(dport>>8), byte(dport)
		copy(l4[12:], chunks)
		SetSCTPChecksum(l4)
		manipIP(pkt, Tuple{Dst: [4]byte{10, 244, 2, 3}, Dport: dport ^ 0x5a5a}, ManipDst)
		got := uint32(l4[8]) | uint32(l4[9])<<8 | uint32(l4[10])<<16 | uint32(l4[11])<<24
		require.Equal(t, SCTPChecksum(l4), got)
		require.Equal(t, dport^0x5a5a, uint16(l4[2])<<8|uint16(l4[3]))
	})
}
