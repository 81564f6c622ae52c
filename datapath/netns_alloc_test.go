package datapath

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewNetnsAllocations: a namespace is made in 9 allocations (14 with
// its socket and neighbour maps made up front and its device and address
// slices grown one by one); a pod's eth0 and its address fit the room made
// for them; the maps made lazily work from their first entry.
func TestNewNetnsAllocations(t *testing.T) {
	e := NewEngine(1)
	assert.LessOrEqual(t, testing.AllocsPerRun(50, func() { e.NewNetns("n", "x") }), 9.0)

	ns := e.NewNetns("n", "pod")
	assert.Nil(t, ns.sockets.udp)
	assert.Nil(t, ns.sockets.tcp)
	assert.Nil(t, ns.neigh.m)
	devs, byIndex, addrs := &ns.devs[:1][0], &ns.byIndex[:2][0], &ns.addrs[:1][0]
	host := e.NewNetns("n", "host")
	_, _, err := ns.AddVeth("eth0", host, "veth0")
	require.NoError(t, err)
	require.NoError(t, ns.AddAddr("eth0", netip.MustParsePrefix("10.244.0.2/24")))
	assert.Same(t, devs, &ns.devs[0], "eth0 fits the devices' room")
	assert.Same(t, byIndex, &ns.byIndex[0], "ifindex 2 fits the index's room")
	assert.Same(t, addrs, &ns.addrs[0], "eth0's address fits the addresses' room")

	_, err = ns.ListenUDP(53, false)
	require.NoError(t, err)
	_, err = ns.ListenUDP(53, false)
	assert.Error(t, err, "the lazily made UDP map holds the first socket")
	_, err = ns.ListenTCP(80)
	require.NoError(t, err)
	_, err = ns.ListenTCP(80)
	assert.Error(t, err, "the lazily made TCP map holds the first listener")
	require.NoError(t, ns.SetNeigh("eth0", netip.MustParseAddr("10.244.0.1"), MAC{2, 0, 0, 0, 0, 1}, NeighPermanent))
	assert.Len(t, ns.Neighbors(), 1)
}
