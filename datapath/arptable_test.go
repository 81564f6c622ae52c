package datapath

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lonelyHost is a namespace with eth0 10.9.0.1/16 on a segment where
// nobody answers ARP.
func lonelyHost(t testing.TB, e *Engine, node, name string) *Netns {
	t.Helper()
	ns := e.NewNetns(node, name)
	d, err := ns.AddNIC("eth0", MAC{0x52, 0x54, 0, 0, 0, byte(len(name))}, 1500)
	require.NoError(t, err)
	d.SetUp(true)
	require.NoError(t, NewSegment("lan-"+name, time.Microsecond).Attach(d))
	require.NoError(t, ns.AddAddr("eth0", pfx("10.9.0.1/16")))
	return ns
}

func host(i int) [4]byte { return [4]byte{10, 9, byte(1 + i/250), byte(1 + i%250)} }

// sendTo sends one UDP datagram from ns to each of n unresolved addresses
// starting at host(from) and returns how many were dropped for overflow.
func sendTo(t testing.TB, ns *Netns, from, n int) int {
	t.Helper()
	tr := &Trace{}
	for i := from; i < from+n; i++ {
		p, err := ns.Send(udp([4]byte{10, 9, 0, 1}, host(i), 40000, 9, 64, []byte("x")))
		require.NoError(t, err)
		p.Trace = tr
	}
	require.NoError(t, ns.e.RunUntil(ns.e.now))
	over := 0
	for _, o := range tr.Obs {
		if o.Reason == ReasonNeighTableOverflow.String() {
			require.Contains(t, o.Detail, "arp_cache: neighbor table overflow!")
			over++
		}
	}
	return over
}

// TestNeighTableOverflowAndForcedGC: 5,000 unresolved addresses make at
// most gc_thresh3 (1024) entries; the rest are dropped as "neighbour table
// overflow" while the 1024 are INCOMPLETE (their ARP timer holds them).
// Once they have FAILED, a new entry makes the forced collector remove
// FAILED ones and is admitted. Before, every address got an entry, kept
// after it failed.
func TestNeighTableOverflowAndForcedGC(t *testing.T) {
	e := NewEngine(1)
	ns := lonelyHost(t, e, "n", "host")
	require.Equal(t, 5000-1024, sendTo(t, ns, 0, 5000))
	require.Equal(t, 1024, ns.ARPTable().Entries())
	require.Len(t, ns.neigh.m, 1024)
	require.NoError(t, e.Run()) // three probes each, then FAILED
	for _, n := range ns.Neighbors() {
		require.Equal(t, NeighFailed, n.State)
	}
	require.Zero(t, sendTo(t, ns, 5000, 600), "forced gc makes room from the FAILED entries")
	require.LessOrEqual(t, ns.ARPTable().Entries(), 1024)
	require.NotZero(t, ns.ARPTable().ForcedGCRuns)

	// Memory stays bounded: more rounds of 5,000 new addresses.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for round := 0; round < 1; round++ {
		sendTo(t, ns, 10000+round*5000, 5000)
		require.NoError(t, e.Run())
		require.LessOrEqual(t, len(ns.neigh.m), 1024)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(8<<20), "heap growth")
}

// TestNeighPeriodicGC: from gc_thresh1 (128) entries up, the periodic
// collector removes STALE entries unused for gc_stale_time (60 s) and
// FAILED ones; below it, nothing. PERMANENT entries stay.
func TestNeighPeriodicGC(t *testing.T) {
	for _, tc := range []struct {
		n, want int
	}{{126, 126 + 1}, {127, 1}, {300, 1}} { // entries count the PERMANENT one
		e := NewEngine(1)
		ns := lonelyHost(t, e, "n", "host")
		mac := MAC{0x52, 0x54, 0, 9, 9, 9}
		require.NoError(t, ns.SetNeigh("eth0", addr("10.9.255.1"), mac, NeighPermanent))
		for i := 0; i < tc.n; i++ {
			require.NoError(t, ns.SetNeigh("eth0", netip.AddrFrom4(host(i)), mac, NeighStale))
		}
		require.NoError(t, e.Advance(59*time.Second))
		require.Len(t, ns.Neighbors(), tc.n+1, "not stale for 60 s yet")
		require.NoError(t, e.Advance(16*time.Second)) // a run at 75 s
		require.Len(t, ns.Neighbors(), tc.want, "n=%d", tc.n)
	}
}

// TestNeighLimitsAreTheKernels: a node's namespaces share one ARP table,
// and `ip neigh add` of a non-permanent entry fails with ENOBUFS when it is
// full of entries updated in the last 5 s; PERMANENT ones are exempt.
func TestNeighLimitsAreTheKernels(t *testing.T) {
	e := NewEngine(1)
	a := lonelyHost(t, e, "node", "a")
	b := lonelyHost(t, e, "node", "b")
	other := lonelyHost(t, e, "other", "c")
	mac := MAC{0x52, 0x54, 0, 9, 9, 9}
	for i := 0; i < 1024; i++ {
		ns := a
		if i%2 == 1 {
			ns = b
		}
		require.NoError(t, ns.SetNeigh("eth0", netip.AddrFrom4(host(i)), mac, NeighStale))
	}
	require.Same(t, a.ARPTable(), b.ARPTable())
	require.Equal(t, 1024, a.ARPTable().Entries())
	err := b.SetNeigh("eth0", netip.AddrFrom4(host(2000)), mac, NeighReachable)
	require.ErrorContains(t, err, "RTNETLINK answers: No buffer space available")
	require.NoError(t, b.SetNeigh("eth0", netip.AddrFrom4(host(2000)), mac, NeighPermanent))
	require.NoError(t, other.SetNeigh("eth0", netip.AddrFrom4(host(2000)), mac, NeighStale), "another kernel")
	require.Equal(t, 1, sendTo(t, a, 3000, 1), "a packet to a new neighbour is dropped")

	// 5 s later the entries are old enough for the forced collector.
	require.NoError(t, e.Advance(6*time.Second))
	require.Zero(t, sendTo(t, a, 3000, 1))
	require.Equal(t, 512, a.ARPTable().gcEntries, "collected down to gc_thresh2, the new one included")
}
