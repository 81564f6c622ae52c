package conntrack

import (
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newFlow runs conntrack-in for a UDP packet 10.0.0.1:sport > 10.0.0.2:53
// and returns the new, unconfirmed connection it is attached to.
func newFlow(t *testing.T, e *datapath.Engine, tb *Table, sport uint16) (*Entry, *datapath.Packet) {
	t.Helper()
	p := udpPacket(t, e, sport)
	require.Equal(t, datapath.Continue, tb.inStage.Process(e.Walk(), p).Code)
	en, info := tb.Get(p)
	require.NotNil(t, en)
	require.Equal(t, New, info)
	return en, p
}

// TestNewConnectionLooksItsTuplesUpOnce: a new connection's original
// tuple is looked up by conntrack-in, its reply tuple by the first null
// binding, and neither again by the second null binding or by confirm
// while no other connection is inserted (the entry's memo). A connection
// confirmed in between, and a binding that changes the reply tuple to a
// taken one, are still seen: the clash resolved to the identical
// connection, the insert refused.
func TestNewConnectionLooksItsTuplesUpOnce(t *testing.T) {
	e, tb := newTable(t)
	w := e.Walk()
	en, p := newFlow(t, e, tb, 1000)
	before := tb.lookups
	en.NullBinding(w, ManipDst)
	en.NullBinding(w, ManipSrc)
	require.Same(t, en, tb.confirm(en, e.Now()))
	assert.Equal(t, uint64(1), tb.lookups-before, "the reply tuple, once")
	assert.Equal(t, StatusDstNATDone|StatusSrcNATDone|StatusConfirmed, en.Status)
	p.Release()

	// Two first packets of one flow, both tracked before either is
	// confirmed: the second finds the first at confirm.
	a, pa := newFlow(t, e, tb, 1001)
	b, pb := newFlow(t, e, tb, 1001)
	require.NotSame(t, a, b)
	for _, x := range []*Entry{a, b} {
		x.NullBinding(w, ManipDst)
		x.NullBinding(w, ManipSrc)
	}
	require.Same(t, a, tb.confirm(a, e.Now()))
	require.Same(t, a, tb.confirm(b, e.Now()), "nf_ct_resolve_clash")
	assert.Zero(t, tb.Stats.InsertFailed)
	pa.Release()
	pb.Release()

	// A single-port SNAT makes the reply tuple one a confirmed
	// connection holds (get_unique_tuple does not check a one-port
	// range): confirm refuses it, after the null binding before had
	// found the old reply tuple free.
	c, pc := newFlow(t, e, tb, 1002)
	c.NullBinding(w, ManipDst)
	c.SetupNAT(w, NATRange{Flags: MapIPs | ProtoSpecified, MinIP: [4]byte{10, 0, 0, 1}, MaxIP: [4]byte{10, 0, 0, 1},
		MinPort: 1000, MaxPort: 1000}, ManipSrc)
	require.Equal(t, en.Reply, c.Reply)
	assert.Nil(t, tb.confirm(c, e.Now()))
	assert.Equal(t, uint64(1), tb.Stats.InsertFailed)
	pc.Release()

	// A connection confirmed after the null bindings takes the reply
	// tuple (its single-port SNAT gives it that reply): the
	// connection that found it free is refused.
	f, pf := newFlow(t, e, tb, 1004)
	f.NullBinding(w, ManipDst)
	f.NullBinding(w, ManipSrc)
	g, pg := newFlow(t, e, tb, 2000)
	g.NullBinding(w, ManipDst)
	g.SetupNAT(w, NATRange{Flags: MapIPs | ProtoSpecified, MinIP: [4]byte{10, 0, 0, 1}, MaxIP: [4]byte{10, 0, 0, 1},
		MinPort: 1004, MaxPort: 1004}, ManipSrc)
	require.Equal(t, f.Reply, g.Reply)
	require.Same(t, g, tb.confirm(g, e.Now()))
	assert.Nil(t, tb.confirm(f, e.Now()))
	assert.Equal(t, uint64(2), tb.Stats.InsertFailed)
	pf.Release()
	pg.Release()

	// Taken between the two null bindings: the second remaps the
	// source port (get_unique_tuple), as it does with no memo.
	h, ph := newFlow(t, e, tb, 1005)
	h.NullBinding(w, ManipDst)
	k, pk := newFlow(t, e, tb, 2001)
	k.SetupNAT(w, NATRange{Flags: MapIPs | ProtoSpecified, MinIP: [4]byte{10, 0, 0, 1}, MaxIP: [4]byte{10, 0, 0, 1},
		MinPort: 1005, MaxPort: 1005}, ManipSrc)
	require.Equal(t, h.Reply, k.Reply)
	require.Same(t, k, tb.confirm(k, e.Now()))
	h.NullBinding(w, ManipSrc)
	assert.NotEqual(t, k.Reply, h.Reply)
	assert.NotZero(t, h.Status&StatusSrcNAT, "source port remapped")
	require.Same(t, h, tb.confirm(h, e.Now()))
	ph.Release()
	pk.Release()

	// Found free at conntrack-in, the original tuple is taken by an
	// identical first packet's connection, SNATed, confirmed before the
	// null bindings find the reply tuple free: confirm looks the
	// original tuple up again (and only it), and refuses the insert.
	m, pm := newFlow(t, e, tb, 1006)
	n, pn := newFlow(t, e, tb, 1006)
	n.SetupNAT(w, NATRange{Flags: MapIPs | ProtoSpecified, MinIP: [4]byte{10, 0, 0, 1}, MaxIP: [4]byte{10, 0, 0, 1},
		MinPort: 3000, MaxPort: 3000}, ManipSrc)
	require.Same(t, n, tb.confirm(n, e.Now()))
	before = tb.lookups
	m.NullBinding(w, ManipDst)
	m.NullBinding(w, ManipSrc)
	assert.Nil(t, tb.confirm(m, e.Now()))
	assert.Equal(t, uint64(2), tb.lookups-before, "the reply tuple, then the original one")
	assert.Equal(t, uint64(3), tb.Stats.InsertFailed)
	pm.Release()
	pn.Release()

	// The same as the single-port SNAT with IPVS's AlterReply.
	d, pd := newFlow(t, e, tb, 1003)
	d.NullBinding(w, ManipDst)
	d.AlterReply(en.Reply)
	assert.Nil(t, tb.confirm(d, e.Now()))
	assert.Equal(t, uint64(4), tb.Stats.InsertFailed)
	pd.Release()
}
