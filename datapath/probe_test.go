package datapath

import (
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/require"
)

func TestProbeStages(t *testing.T) {
	tp := newTopo(t)
	sink, err := tp.b.ListenUDP(9, false)
	require.NoError(t, err)
	count, capt := &Counter{}, &Capture{}
	tp.vb.AddTxStage("count", 0, count)
	tp.vb.AddTxStage("capture", 1, capt)
	delay := &Delay{D: 5 * time.Millisecond, Dev: tp.b.Device("eth0")}
	tp.b.Device("eth0").AddRxStage("delay", 0, delay)

	require.NoError(t, sendTraced(tp.a, udp(ipA, ipB, 1, 9, 64, []byte("one")), nil))
	require.NoError(t, tp.e.Run())
	require.Equal(t, 1, sink.Received)
	// Toward b went the flooded ARP request, then the datagram.
	require.Equal(t, uint64(2), count.Packets)
	require.Len(t, capt.Frames, 2)
	require.Equal(t, []byte{0x08, 0x06}, capt.Frames[0][12:14], "ARP request first")
	require.Equal(t, []byte("one"), capt.Frames[1][len(capt.Frames[1])-3:], "then the datagram")
	require.Equal(t, uint64(len(capt.Frames[0])+len(capt.Frames[1])), count.Bytes)
	require.Positive(t, delay.Delayed)
	// Warm: the second datagram's only delay is the probe's.
	start := tp.e.Now()
	tr := &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, udp(ipA, ipB, 1, 9, 64, []byte("two")), tr))
	require.NoError(t, tp.e.Run())
	require.Equal(t, 2, sink.Received)
	var got time.Duration
	for _, o := range tr.Obs {
		if o.Action == trace.Delivered {
			got = o.At - start
		}
	}
	require.Equal(t, 5*time.Millisecond, got, "held for exactly D of virtual time")

	// Corrupt a UDP payload byte on the wire: the receiver's checksum check drops it.
	tp.b.Device("eth0").RemoveStage("delay")
	cor := &Corrupt{Offset: EthHdrLen + 28, Mask: 0x01}
	tp.vb.AddTxStage("corrupt", 2, cor)
	tr = &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, udp(ipA, ipB, 1, 9, 64, []byte("three")), tr))
	require.NoError(t, tp.e.Run())
	require.Equal(t, 2, sink.Received)
	require.Equal(t, 1, cor.Applied)
	oc := tr.Outcomes()
	require.Equal(t, "malformed", oc[0].Reason)
	require.Contains(t, oc[0].Last.Detail, "bad checksum")

	// Drop everything on a port.
	tp.vb.RemoveStage("corrupt")
	drop := &DropIf{Why: "cable unplugged"}
	tp.vb.AddTxStage("drop", 3, drop)
	tr = &trace.Trace{}
	require.NoError(t, sendTraced(tp.a, udp(ipA, ipB, 1, 9, 64, []byte("four")), tr))
	require.NoError(t, tp.e.Run())
	require.Equal(t, 2, sink.Received)
	require.Equal(t, 1, drop.Dropped)
	require.Equal(t, ReasonStage.String(), tr.Outcomes()[0].Reason)
	notes := tr.Find(func(o *trace.Observation) bool { return o.Stage == "probe" })
	require.Equal(t, "veth-b", notes[0].Device, "the probe says where it acted")
}
