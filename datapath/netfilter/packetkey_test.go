package netfilter

import (
	"math/rand/v2"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// TestLookupKeyIsInitSetKey: the key the hooks look the flow cache up by,
// read from the packet's bytes, is the one init followed by setKey gives,
// for every hook and key mask and for packets of every shape init looks
// at: each protocol, IP options, fragments, truncated and padded packets,
// total lengths past the frame and below the header, other EtherTypes,
// marks, devices, and conntrack entries of the table (both directions,
// NATed and not) and of another. So is the length replayed counters add,
// and whether the packet is walked at all.
func TestLookupKeyIsInitSetKey(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	tp.restore(t, dnatRules)
	send(t, tp.client, udpPacket(ipClient, ipVIP, 40000, 53, []byte("q")), nil)
	send(t, tp.client, udpPacket(ipClient, ipServer, 40001, 5353, []byte("q")), nil)
	require.NoError(t, tp.e.Run())
	cts := []datapath.CTRef{{}}
	for _, e := range tp.ct.List() {
		cts = append(cts, datapath.CTRef{Entry: e}, datapath.CTRef{Entry: e, Reply: true})
	}
	other := newTopo(t, conntrack.Config{})
	send(t, other.client, udpPacket(ipClient, ipServer, 40002, 5353, []byte("q")), nil)
	require.NoError(t, other.e.Run())
	require.Len(t, other.ct.List(), 1)
	cts = append(cts, datapath.CTRef{Entry: other.ct.List()[0]})
	require.Len(t, cts, 6)

	sctp := udpPacket(ipClient, ipServer, 40003, 5353, make([]byte, 8))
	sctp[9] = datapath.ProtoSCTP
	options := append(append([]byte{}, tcpPacket(ipClient, ipServer, 40004, 80, header.TCPFlagSyn)[:20]...), 1, 1, 1, 0)
	options = append(options, tcpPacket(ipClient, ipServer, 40004, 80, header.TCPFlagSyn)[20:]...)
	options[0], options[3] = 0x46, 44
	bases := [][]byte{
		tcpPacket(ipClient, ipServer, 40000, 80, header.TCPFlagSyn),
		tcpPacket(ipServer, ipClient, 80, 40000, header.TCPFlagSyn|header.TCPFlagAck),
		udpPacket(ipClient, ipVIP, 40000, 53, []byte("query")),
		icmpEcho(ipClient, ipServer),
		sctp, options,
	}
	devs := []*datapath.Device{nil, tp.host.Device("h1"), tp.host.Device("h2")}
	rng := rand.New(rand.NewPCG(12, 1))
	var caches [2][flowSlots]flowSlot
	var walked, l4ok, frag, tracked, hits int
	for range 20000 {
		b := append([]byte{}, bases[rng.IntN(len(bases))]...)
		switch rng.IntN(8) {
		case 0: // header length
			b[0] = 0x40 | byte(rng.IntN(16))
		case 1: // total length
			tot := rng.IntN(len(b) + 8)
			b[2], b[3] = byte(tot>>8), byte(tot)
		case 2: // fragment offset or flags
			b[6], b[7] = byte(rng.IntN(256)), byte(rng.IntN(4))
		case 3: // protocol
			b[9] = []byte{0, 1, 6, 17, 47, 132}[rng.IntN(6)]
		case 4: // truncated
			b = b[:rng.IntN(len(b)+1)]
		case 5: // padded past the total length
			b = append(b, make([]byte, rng.IntN(8))...)
		}
		frame := append(make([]byte, datapath.EthHdrLen), b...)
		frame[12], frame[13] = 0x08, 0x00
		if rng.IntN(16) == 0 {
			frame[12], frame[13] = 0x86, 0xdd
		}
		p := tp.e.Pool.Get()
		require.True(t, p.SetFrame(frame))
		p.Mark = uint32(rng.IntN(4)) << 3
		p.InDev, p.OutDev = devs[rng.IntN(len(devs))], devs[rng.IntN(len(devs))]
		p.Local = rng.IntN(2) == 0
		p.CT = cts[rng.IntN(len(cts))]
		mask := uint16(rng.IntN(kAll + 1))
		if rng.IntN(3) == 0 {
			mask &= kDst | kDport // keys many packets share, for the cache to hold
		}
		s := &tableHook{nf: tp.nf, t: tp.nf.Table(NAT), hook: datapath.Hook(rng.IntN(5)),
			mask: mask, kw: wordsOf(mask), maskGen: tp.nf.gen + 1}

		if rng.IntN(2) == 0 {
			s.cache = &caches[rng.IntN(len(caches))]
		}
		var got flowKey
		sl, plen, ok := s.lookup(p, &got)
		var c evalCtx
		require.Equal(t, c.init(tp.nf, nil, p, s.t, s.hook), ok, "walked, %x", frame)
		if ok {
			var want flowKey
			c.setKey(&want, mask, &s.kw)
			require.Equal(t, want, got, "key of %x at %v, mask %#x", frame, s.hook, mask)
			require.Equal(t, c.plen, plen, "length of %x", frame)
			// The slot is the one of the key's two ways holding it
			// at this generation, if either does.
			var held *flowSlot
			if s.cache != nil {
				for _, i := range []int{got.slot(), got.slot() ^ 1} {
					if x := &s.cache[i]; held == nil && x.valid && x.gen == tp.nf.gen && x.key == got {
						held = x
					}
				}
				if held != nil {
					hits++
				}
			}
			require.Same(t, held, sl)
			if sl == nil && rng.IntN(2) == 0 {
				// Keep the key, in one of its ways, at this
				// generation or an older one.
				c := &caches[rng.IntN(len(caches))]
				c[got.slot()^rng.IntN(2)] = flowSlot{key: got, valid: true, gen: tp.nf.gen - uint64(rng.IntN(2))}
			}
			walked++
			if c.l4ok {
				l4ok++
			}
			if c.frag {
				frag++
			}
			if c.ct != nil && mask&kCTState != 0 {
				tracked++
			}
		}
		p.Release()
	}
	// Every shape was met: walked or not, with an L4 header or without,
	// fragments, tracked packets keyed by their state.
	require.Greater(t, walked, 10000)
	require.Less(t, walked, 20000)
	require.Greater(t, l4ok, 5000)
	require.Less(t, l4ok, walked)
	require.Greater(t, frag, 100)
	require.Greater(t, tracked, 1000)
	require.Greater(t, hits, 40)
}
