package conntrack

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func TestTupleInvert(t *testing.T) {
	tcp := Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Sport: 1234, Dport: 80, Proto: 6}
	assert.Equal(t, Tuple{Src: tcp.Dst, Dst: tcp.Src, Sport: 80, Dport: 1234, Proto: 6}, tcp.Invert())
	echo := Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Sport: 77, Dport: 8 << 8, Proto: 1}
	r := echo.Invert()
	assert.Equal(t, uint8(0), r.ICMPType(), "echo request inverts to echo reply")
	assert.Equal(t, uint16(77), r.Sport, "the identifier stays in place")
	assert.Equal(t, echo, r.Invert())
	assert.Equal(t, "src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=77", echo.String())
}

func newTable(t *testing.T) (*datapath.Engine, *Table) {
	e := datapath.NewEngine(1)
	ns := e.NewNetns("n", "ns")
	return e, Install(ns, Config{})
}

func TestFormatAndDeleteFilter(t *testing.T) {
	e, tb := newTable(t)
	mk := func(src, dst string, sp, dp uint16, proto uint8, nat func(*Entry)) *Entry {
		tu := Tuple{Src: netip.MustParseAddr(src).As4(), Dst: netip.MustParseAddr(dst).As4(), Sport: sp, Dport: dp, Proto: proto}
		en := tb.newEntry(tu, e.Now())
		en.expires = e.Now() + 30*time.Second
		if nat != nil {
			nat(en)
		}
		require.Same(t, en, tb.confirm(en, e.Now()))
		return en
	}
	u := mk("10.244.1.2", "10.96.0.10", 40000, 53, 17, func(en *Entry) {
		en.Reply.Src = [4]byte{10, 244, 2, 3}
		en.Status |= StatusDstNAT
	})
	mk("10.244.1.2", "10.96.0.1", 40001, 443, 6, nil).TCPState = TCPSynSent
	ic := mk("10.244.1.2", "10.244.2.3", 9, 8<<8, 1, nil)
	ic.Status |= StatusSeenReply
	assert.Equal(t, "udp      17 30 src=10.244.1.2 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED] src=10.244.2.3 dst=10.244.1.2 sport=53 dport=40000 mark=0 use=1\n"+
		"tcp      6 30 SYN_SENT src=10.244.1.2 dst=10.96.0.1 sport=40001 dport=443 [UNREPLIED] src=10.96.0.1 dst=10.244.1.2 sport=443 dport=40001 mark=0 use=1\n"+
		"icmp     1 30 src=10.244.1.2 dst=10.244.2.3 type=8 code=0 id=9 src=10.244.2.3 dst=10.244.1.2 type=0 code=0 id=9 mark=0 use=1\n", tb.Dump())

	// kube-proxy: conntrack -D -p udp --orig-dst 10.96.0.10
	assert.Equal(t, 0, tb.Delete(Filter{Proto: 6, OrigDst: netip.MustParseAddr("10.96.0.10")}))
	assert.Equal(t, 1, tb.Delete(Filter{Proto: 17, ReplySrc: netip.MustParseAddr("10.244.2.3")}))
	assert.Equal(t, 2, tb.Len())
	_, _, ok := tb.Lookup(u.Reply)
	assert.False(t, ok, "both directions are gone")
	tb.Flush()
	assert.Equal(t, 0, tb.Len())
}

func TestTCPTransitions(t *testing.T) {
	const syn, ack, fin, rst = 0x02, 0x10, 0x01, 0x04
	for _, tc := range []struct {
		name  string
		steps []struct {
			reply bool
			flags uint8
		}
		want    TCPState
		assured bool
	}{
		{"handshake", []struct {
			reply bool
			flags uint8
		}{{false, syn}, {true, syn | ack}, {false, ack}}, TCPEstablished, true},
		{"client close", []struct {
			reply bool
			flags uint8
		}{{false, syn}, {true, syn | ack}, {false, ack}, {false, fin | ack}, {true, ack}}, TCPCloseWait, true},
		{"full close", []struct {
			reply bool
			flags uint8
		}{{false, syn}, {true, syn | ack}, {false, ack}, {false, fin | ack}, {true, fin | ack}, {false, ack}}, TCPTimeWait, true},
		{"reset", []struct {
			reply bool
			flags uint8
		}{{false, syn}, {true, syn | ack}, {false, ack}, {true, rst}}, TCPClose, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, tb := newTable(t)
			en := tb.newEntry(Tuple{Proto: 6, Sport: 1, Dport: 2}, 0)
			en.TCPState = TCPSynSent
			tb.confirm(en, 0)
			for _, s := range tc.steps[1:] {
				require.Equal(t, resAccept, tb.tcpPacket(en, s.reply, s.flags, e.Now()))
				if s.reply {
					en.Status |= StatusSeenReply
				}
			}
			assert.Equal(t, tc.want, en.TCPState)
			assert.Equal(t, tc.assured, en.Status&StatusAssured != 0)
			assert.Equal(t, tb.to.tcp(tc.want), en.Timeout(e.Now()))
		})
	}
	// A stray SYN-ACK does not start a connection; a mid-stream ACK does (loose).
	assert.Equal(t, tcpInvalid, tcpConntracks[0][tcpIndex(syn|ack)][sNO])
	assert.Equal(t, TCPEstablished, tcpConntracks[0][tcpIndex(ack)][sNO])
}

// FuzzManipChecksums: incremental checksum updates equal a full recompute.
func FuzzManipChecksums(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, []byte{10, 96, 0, 10}, uint16(40000), uint16(53), true, []byte("payload"))
	f.Add([]byte{0, 0, 0, 0}, []byte{255, 255, 255, 255}, uint16(0), uint16(65535), false, []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte, port1, port2 uint16, tcp bool, payload []byte) {
		if len(a) < 4 || len(b) < 4 || len(payload) > 1000 {
			return
		}
		proto := uint8(17)
		hl := 8
		if tcp {
			proto, hl = 6, 20
		}
		n := 20 + hl + len(payload)
		pkt := make([]byte, n)
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(n), TTL: 64, Protocol: proto,
			SrcAddr: tcpip.AddrFrom4([4]byte(a[:4])), DstAddr: tcpip.AddrFrom4([4]byte(b[:4]))})
		ip.SetChecksum(^ip.CalculateChecksum())
		l4 := pkt[20:]
		l4[0], l4[1], l4[2], l4[3] = byte(port1>>8), byte(port1), byte(port2>>8), byte(port2)
		if tcp {
			l4[12] = 5 << 4
		} else {
			l4[4], l4[5] = byte((8+len(payload))>>8), byte(8+len(payload))
		}
		copy(l4[hl:], payload)
		full := func() uint16 {
			x := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(proto), ip.SourceAddress(), ip.DestinationAddress(), uint16(len(l4)))
			return checksum.Checksum(l4, x)
		}
		c := ^full()
		if !tcp && c == 0 {
			c = 0xffff
		}
		ci := 6
		if tcp {
			ci = 16
		}
		l4[ci], l4[ci+1] = byte(c>>8), byte(c)
		target := Tuple{Src: [4]byte(b[:4]), Dst: [4]byte(a[:4]), Sport: port2, Dport: port1 ^ 0x5a5a}
		manipIP(pkt, target, ManipDst)
		manipIP(pkt, target, ManipSrc)
		require.Equal(t, uint16(0xffff), ip.CalculateChecksum())
		require.Equal(t, uint16(0xffff), full())
		require.Equal(t, [4]byte(a[:4]), [4]byte(ip.DestinationAddress().As4()))
		require.Equal(t, port2, header.UDP(l4).SourcePort())
	})
}

func TestRecentLookupsFollowRemovalAndReuse(t *testing.T) {
	e, tb := newTable(t)
	tu := Tuple{Src: [4]byte{10, 244, 1, 2}, Dst: [4]byte{10, 244, 2, 3}, Sport: 40000, Dport: 80, Proto: 6}
	mk := func() *Entry {
		en := tb.newEntry(tu, e.Now())
		en.expires = e.Now() + time.Minute
		require.Same(t, en, tb.confirm(en, e.Now()))
		return en
	}
	first := mk()
	for range 2 { // the second lookup is answered by the recent cache
		got, reply, ok := tb.Lookup(tu.Invert())
		require.True(t, ok)
		assert.Same(t, first, got)
		assert.True(t, reply)
	}
	tb.Kill(first)
	_, _, ok := tb.Lookup(tu.Invert())
	assert.False(t, ok, "a killed connection is not found through the cache")
	second := mk()
	got, _, ok := tb.Lookup(tu)
	require.True(t, ok)
	assert.Same(t, second, got, "the tuple's new connection")
	require.NoError(t, e.Advance(2*time.Minute))
	_, _, ok = tb.Lookup(tu)
	assert.False(t, ok, "expired")
	assert.Zero(t, tb.Len())
}

// TestSteadyTimeoutIsRefresh: wherever a packet is steady, for every
// protocol, TCP state, status, direction and time around a UDP flow's
// stream time, the timeout Flatten hands the fast path (steadyTimeout)
// is the one refresh sets, at that time and at every later one the fast
// path may replay it (before until, the status and state unchanged), and
// refresh changes nothing else.
func TestSteadyTimeoutIsRefresh(t *testing.T) {
	_, tb := newTable(t)
	const ack = 0x10
	steadies := map[uint8]int{}
	for _, proto := range []uint8{datapath.ProtoTCP, datapath.ProtoUDP, datapath.ProtoICMP, datapath.ProtoSCTP, 47} {
		for st := TCPState(0); st < tcpMax; st++ {
			for _, status := range []Status{StatusConfirmed, StatusConfirmed | StatusSeenReply,
				StatusConfirmed | StatusSeenReply | StatusAssured, StatusConfirmed | StatusAssured} {
				for _, reply := range []bool{false, true} {
					for _, now := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
						e := &Entry{t: tb, Status: status, TCPState: st, expires: now + time.Hour, streamTS: 2 * time.Second}
						e.Orig.Proto = proto
						if !tb.steady(e, reply, ack, now) {
							continue
						}
						d, until, ok := tb.steadyTimeout(e, now)
						if proto == datapath.ProtoSCTP {
							require.False(t, ok, "SCTP")
							continue
						}
						require.True(t, ok)
						steadies[proto]++
						ats := []time.Duration{now, now + time.Millisecond}
						if until != math.MaxInt64 {
							ats = append(ats, until-1)
						} else {
							ats = append(ats, now+time.Hour)
						}
						for _, at := range ats {
							if at >= until {
								continue // the fast path walks the packet
							}
							c := *e
							tb.refresh(&c, reply, proto, ack, at)
							require.Equal(t, at+d, c.expires, "proto %d state %v status %v reply %v at %v (recorded %v)", proto, st, status, reply, at, now)
							require.Equal(t, e.Status, c.Status)
							require.Equal(t, e.TCPState, c.TCPState)
						}
					}
				}
			}
		}
	}
	for _, proto := range []uint8{datapath.ProtoTCP, datapath.ProtoUDP, datapath.ProtoICMP, 47} {
		require.Positive(t, steadies[proto], "steady packets of protocol %d", proto)
	}
}
