package conntrack

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tableModel is the reference a Table is checked against: a Go map from
// each tuple to the connection holding it, as the table was before it had
// its own index, and the live connections in ID order.
type tableModel struct {
	by   map[Tuple]modelSlot
	live []*Entry // in ID order
}

type modelSlot struct {
	e     *Entry
	reply bool
}

func (m *tableModel) reap(now time.Duration) {
	m.live = slices.DeleteFunc(m.live, func(e *Entry) bool {
		if e.expires <= now {
			m.drop(e)
			return true
		}
		return false
	})
}

func (m *tableModel) drop(e *Entry) {
	for _, tu := range []Tuple{e.Orig, e.Reply} {
		if s, ok := m.by[tu]; ok && s.e == e {
			delete(m.by, tu)
		}
	}
}

// confirm is __nf_conntrack_confirm on the model: the entry a packet ends
// up attached to, or nil.
func (m *tableModel) confirm(e *Entry) *Entry {
	if o, ok := m.by[e.Orig]; ok {
		if o.e.Orig == e.Orig && o.e.Reply == e.Reply {
			return o.e
		}
		return nil
	}
	if _, ok := m.by[e.Reply]; ok {
		return nil
	}
	m.by[e.Orig] = modelSlot{e: e}
	m.by[e.Reply] = modelSlot{e: e, reply: true} // a tuple that is its own reply is the reply
	i, _ := slices.BinarySearchFunc(m.live, e.ID, func(x *Entry, id uint32) int { return int(int64(x.ID) - int64(id)) })
	m.live = slices.Insert(m.live, i, e)
	return e
}

// runTableModel drives a table and the model with the operations ops
// encodes, three bytes each, over a tuple space small enough that tuples
// clash, connections are their own reverse, index slots collide and
// shift back, and the index grows; after every operation the table's
// listing, count and lookups must be the model's.
func runTableModel(t *testing.T, ops []byte) {
	e := datapath.NewEngine(1)
	tb := Install(e.NewNetns("n", "ns"), Config{Max: 1 << 20})
	m := &tableModel{by: map[Tuple]modelSlot{}}
	var pending []*Entry
	tuple := func(b byte) Tuple {
		tu := Tuple{Src: [4]byte{10, 0, 0, 1 + b&3}, Dst: [4]byte{10, 0, 0, 1 + b>>2&3}, Sport: uint16(b >> 4 & 3), Dport: uint16(b >> 6)}
		switch b >> 4 & 3 {
		case 3:
			tu.Proto = datapath.ProtoICMP
			tu.Sport, tu.Dport = uint16(b>>6), 8<<8
		case 2:
			tu.Proto = datapath.ProtoUDP
		default:
			tu.Proto = datapath.ProtoTCP
		}
		return tu
	}
	for len(ops) >= 3 {
		op, a, b := ops[0], ops[1], ops[2]
		ops = ops[3:]
		now := e.Now()
		switch op % 8 {
		case 0, 1: // a new unconfirmed connection, DNATed when b says so
			en := tb.newEntry(tuple(a), now)
			en.expires = now + time.Duration(1+b%4)*time.Second
			if b&0x10 != 0 {
				en.Reply.Src = [4]byte{10, 0, 1, b >> 5}
			}
			pending = append(pending, en)
		case 2, 3: // confirm one, not necessarily the oldest
			if len(pending) == 0 {
				break
			}
			i := int(a) % len(pending)
			en := pending[i]
			pending = slices.Delete(pending, i, i+1)
			m.reap(now)
			require.Same(t, m.confirm(en), tb.confirm(en, now), "confirm %v", en.Orig)
		case 4: // lookup
			m.reap(now)
			tu := tuple(a)
			if b&1 != 0 {
				tu = tu.Invert()
			}
			got, reply, ok := tb.Lookup(tu)
			want, wok := m.by[tu]
			require.Equal(t, wok, ok, "lookup %v", tu)
			if ok {
				require.Same(t, want.e, got)
				require.Equal(t, want.reply, reply)
			}
		case 5: // kill one, or delete by a filter
			m.reap(now)
			if len(m.live) == 0 {
				break
			}
			if b&1 == 0 {
				victim := m.live[int(a)%len(m.live)]
				tb.Kill(victim)
				m.drop(victim)
				m.live = slices.DeleteFunc(m.live, func(x *Entry) bool { return x == victim })
				break
			}
			f := Filter{Proto: tuple(a).Proto, OrigSport: tuple(a).Sport}
			n := 0
			m.live = slices.DeleteFunc(m.live, func(x *Entry) bool {
				if f.Matches(x) {
					m.drop(x)
					n++
					return true
				}
				return false
			})
			require.Equal(t, n, tb.Delete(f))
		case 6:
			require.NoError(t, e.Advance(time.Duration(a%3)*time.Second))
		case 7:
			if a%8 == 0 {
				tb.Flush()
				for _, x := range m.live {
					m.drop(x)
				}
				m.live = nil
			}
		}
		m.reap(e.Now())
		require.Equal(t, nilIfEmpty(m.live), nilIfEmpty(tb.List()))
		require.Equal(t, len(m.live), tb.Len())
		for tu, s := range m.by {
			got, reply, ok := tb.Lookup(tu)
			require.True(t, ok, "%v is %d's", tu, s.e.ID)
			require.Same(t, s.e, got)
			require.Equal(t, s.reply, reply)
		}
	}
}

// TestTableMatchesModel runs long random operation sequences (fixed seeds)
// through runTableModel.
func TestTableMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 12))
		ops := make([]byte, 3*600)
		for i := range ops {
			ops[i] = byte(r.Uint32())
		}
		runTableModel(t, ops)
	}
}

// FuzzTableMatchesModel: any operation sequence keeps the table and the
// map model in agreement.
func FuzzTableMatchesModel(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 0, 4, 1, 1})
	f.Add([]byte{0, 0x05, 0, 0, 0x05, 0x10, 2, 1, 0, 2, 0, 0, 7, 0, 0, 0, 0x05, 0, 2, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 3*2000 {
			return
		}
		runTableModel(t, ops)
	})
}

// TestSelfReverseConnectionIsListed: a connection whose tuple is its own
// reverse (a socket connected to itself, 10.0.0.1:5000 > 10.0.0.1:5000)
// has one tuple in the table, in the reply direction as before; it is
// listed, counted and expires like any other. Before, the listing and the
// garbage collector went through the original-direction keys only and
// never saw it, though it was counted.
func TestSelfReverseConnectionIsListed(t *testing.T) {
	e, tb := newTable(t)
	tu := Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 1}, Sport: 5000, Dport: 5000, Proto: datapath.ProtoTCP}
	require.Equal(t, tu, tu.Invert())
	en := tb.newEntry(tu, e.Now())
	en.expires = e.Now() + time.Second
	require.Same(t, en, tb.confirm(en, e.Now()))
	got, reply, ok := tb.Lookup(tu)
	require.True(t, ok)
	assert.Same(t, en, got)
	assert.True(t, reply)
	assert.Equal(t, []*Entry{en}, tb.List())
	assert.Equal(t, 1, tb.Len())
	require.NoError(t, e.Advance(time.Second))
	assert.Empty(t, tb.List())
	assert.Zero(t, tb.Len())
}

// TestListIsInIDOrderWhenConfirmedOutOfOrder: `conntrack -L` lists by
// connection id, also when a later connection's first packet was
// confirmed before an earlier one's (a packet held in a queue).
func TestListIsInIDOrderWhenConfirmedOutOfOrder(t *testing.T) {
	e, tb := newTable(t)
	var ens []*Entry
	for sp := range uint16(4) {
		en := tb.newEntry(Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Sport: 1000 + sp, Dport: 80, Proto: 6}, e.Now())
		en.expires = e.Now() + time.Minute
		ens = append(ens, en)
	}
	for _, i := range []int{2, 0, 3, 1} {
		require.Same(t, ens[i], tb.confirm(ens[i], e.Now()))
	}
	assert.Equal(t, ens, tb.List())
	tb.Kill(ens[0])
	tb.Kill(ens[3])
	assert.Equal(t, ens[1:3], tb.List())
}

// TestMissMemoFollowsInserts: a tuple found absent is found present as
// soon as a connection holding it is confirmed.
func TestMissMemoFollowsInserts(t *testing.T) {
	e, tb := newTable(t)
	tu := Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Sport: 1000, Dport: 80, Proto: 6}
	for range 2 {
		_, _, ok := tb.Lookup(tu.Invert())
		require.False(t, ok)
	}
	en := tb.newEntry(tu, e.Now())
	en.expires = e.Now() + time.Minute
	require.Same(t, en, tb.confirm(en, e.Now()))
	got, reply, ok := tb.Lookup(tu.Invert())
	require.True(t, ok)
	assert.Same(t, en, got)
	assert.True(t, reply)
}

// TestNullBindingRemapsAClashingSourcePort: a null source binding keeps
// the tuple unless its reply is taken; when another connection's SNAT
// already uses it, the source port is remapped (SRC_NAT), as
// get_unique_tuple does.
func TestNullBindingRemapsAClashingSourcePort(t *testing.T) {
	e, tb := newTable(t)
	a := tb.newEntry(Tuple{Src: [4]byte{10, 0, 0, 3}, Dst: [4]byte{10, 0, 0, 2}, Sport: 1000, Dport: 80, Proto: 6}, e.Now())
	a.expires = e.Now() + time.Minute
	a.SetupNAT(nil, NATRange{Flags: MapIPs, MinIP: [4]byte{10, 0, 0, 1}, MaxIP: [4]byte{10, 0, 0, 1}}, ManipSrc)
	require.Equal(t, Tuple{Src: [4]byte{10, 0, 0, 2}, Dst: [4]byte{10, 0, 0, 1}, Sport: 80, Dport: 1000, Proto: 6}, a.Reply)
	require.Same(t, a, tb.confirm(a, e.Now()))

	free := tb.newEntry(Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Sport: 1001, Dport: 80, Proto: 6}, e.Now())
	free.NullBinding(nil, ManipSrc)
	assert.Equal(t, StatusSrcNATDone, free.Status)
	assert.Equal(t, free.Orig.Invert(), free.Reply)

	b := tb.newEntry(Tuple{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, Sport: 1000, Dport: 80, Proto: 6}, e.Now())
	b.NullBinding(nil, ManipDst)
	assert.Equal(t, StatusDstNATDone, b.Status, "the destination side does not clash")
	b.NullBinding(nil, ManipSrc)
	assert.Equal(t, StatusDstNATDone|StatusSrcNATDone|StatusSrcNAT, b.Status)
	assert.NotEqual(t, uint16(1000), b.Reply.Dport, "source port remapped")
	assert.Equal(t, [4]byte{10, 0, 0, 1}, b.Reply.Dst)
	b.expires = e.Now() + time.Minute
	require.Same(t, b, tb.confirm(b, e.Now()))
}

// TestFlushThenEarlyDrop: after `conntrack -F` on a table whose
// early_drop chains are built, the chains are empty and a full table
// again evicts the unassured connections of the new one's bucket.
func TestFlushThenEarlyDrop(t *testing.T) {
	e := datapath.NewEngine(1)
	tb := Install(e.NewNetns("n", "ns"), Config{Max: 2, Buckets: 1})
	for _, sp := range []uint16{1000, 1001, 1002} {
		udpFlow(t, e, tb, sp)
	}
	require.Equal(t, uint64(2), tb.Stats.EarlyDrop, "the third flow evicted the first two")
	tb.Flush()
	require.Zero(t, tb.Len())
	for _, sp := range []uint16{2000, 2001} {
		v, _ := udpFlow(t, e, tb, sp)
		require.Equal(t, datapath.Continue, v.Code)
	}
	v, tr := udpFlow(t, e, tb, 2002)
	require.Equal(t, datapath.Continue, v.Code)
	require.Contains(t, details(tr), "table full: early_drop evicted 2 unassured connection(s)")
	got := tb.List()
	require.Len(t, got, 1)
	assert.Equal(t, uint16(2002), got[0].Orig.Sport)
}

func nilIfEmpty(l []*Entry) []*Entry {
	if len(l) == 0 {
		return nil
	}
	return l
}
