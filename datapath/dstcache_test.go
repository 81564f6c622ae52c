package datapath

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/kubewalk/kubewalk/datapath/route"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDestinationCacheFollowsTheTables sends the same datagram from a to b
// while the tables it depends on change between packets: every packet
// must meet the tables as they are then, not as the cache saw them.
func TestDestinationCacheFollowsTheTables(t *testing.T) {
	tp := newTopo(t)
	sink, err := tp.b.ListenUDP(9, false)
	require.NoError(t, err)
	ipA, ipB := [4]byte{10, 0, 0, 2}, [4]byte{10, 0, 0, 3}
	send := func() {
		t.Helper()
		_, err := tp.a.Send(udp(ipA, ipB, 40000, 9, 64, []byte("x")))
		require.NoError(t, err)
		require.NoError(t, tp.e.Run())
	}
	send()
	send()
	require.Equal(t, 2, sink.Received)

	// b's address moves to a's loopback: a delivers to itself.
	require.NoError(t, tp.a.AddAddr("lo", pfx("10.0.0.3/32")))
	local, err := tp.a.ListenUDP(9, false)
	require.NoError(t, err)
	send()
	assert.Equal(t, 2, sink.Received)
	assert.Equal(t, 1, local.Received, "a's own address since AddAddr")
	require.NoError(t, tp.a.DeleteAddr("lo", pfx("10.0.0.3/32")))
	send()
	assert.Equal(t, 3, sink.Received, "b again since DeleteAddr")

	// A more specific route in a through nowhere useful: no route once
	// the device route is gone, then back.
	require.NoError(t, tp.a.AddRoute(RouteSpec{Dst: pfx("10.0.0.3/32"), Dev: "lo"}))
	send()
	assert.Equal(t, 3, sink.Received, "routed into lo since AddRoute")
	assert.True(t, tp.a.Routes.Delete(pfx("10.0.0.3/32"), 0))
	send()
	assert.Equal(t, 4, sink.Received, "the /24 again")

	// A new subnet's broadcast address, and the route lookups beside it.
	require.NoError(t, tp.host.AddAddr("br0", pfx("10.0.1.1/25")))
	assert.True(t, tp.host.IsBroadcast([4]byte{10, 0, 1, 127}))
	r, ok := tp.host.lookupRoute(ipB)
	require.True(t, ok)
	want, _ := tp.host.Routes.Lookup(ipB)
	assert.Same(t, want, r)
	_, bcast := tp.host.addrClass([4]byte{10, 0, 1, 127})
	assert.True(t, bcast)
	require.NoError(t, tp.host.DeleteAddr("br0", pfx("10.0.1.1/25")))
	_, bcast = tp.host.addrClass([4]byte{10, 0, 1, 127})
	assert.False(t, bcast, "DeleteAddr")
}

// TestNeighbourCacheForgetsRemovedEntries deletes b's neighbour entry on a
// after it was used: the next packet must resolve it again (ARP), not
// reuse the entry the device remembered.
func TestNeighbourCacheForgetsRemovedEntries(t *testing.T) {
	tp := newTopo(t)
	sink, err := tp.b.ListenUDP(9, false)
	require.NoError(t, err)
	ipA, ipB := [4]byte{10, 0, 0, 2}, [4]byte{10, 0, 0, 3}
	require.NoError(t, tp.a.AddRoute(RouteSpec{Dst: pfx("10.0.0.3/32"), Dev: "eth0"}))
	var arps capture
	tp.vb.AddTxStage("arp", 0, &arps)
	send := func() {
		t.Helper()
		_, err := tp.a.Send(udp(ipA, ipB, 40000, 9, 64, []byte("x")))
		require.NoError(t, err)
		require.NoError(t, tp.e.Run())
	}
	send()
	send()
	require.Equal(t, 2, sink.Received)
	n := len(arps.frames)
	require.True(t, tp.a.DeleteNeigh("eth0", netip.AddrFrom4(ipB)))
	require.NoError(t, tp.a.SetNeigh("eth0", netip.AddrFrom4(ipB), MAC{2, 9, 9, 9, 9, 9}, NeighPermanent))
	send()
	assert.Equal(t, 2, sink.Received, "sent to the new entry's MAC, which nobody has")
	require.True(t, tp.a.DeleteNeigh("eth0", netip.AddrFrom4(ipB)))
	send()
	assert.Equal(t, 3, sink.Received, "resolved again")
	assert.Greater(t, len(arps.frames), n+1, "an ARP request reached b")
}

func TestDeviceIndexAndVXLANPortFollowDeletes(t *testing.T) {
	e := NewEngine(1)
	ns := e.NewNetns("n", "host")
	var devs []*Device
	for _, n := range []string{"d0", "d1", "d2"} {
		d, err := ns.AddDummy(n)
		require.NoError(t, err)
		devs = append(devs, d)
	}
	_, err := ns.AddNIC("eth0", MAC{2, 0, 0, 0, 0, 1}, 1500)
	require.NoError(t, err)
	vx, err := ns.AddVXLAN("flannel.1", VXLANConfig{VNI: 1, Port: 8472, Local: addr("192.168.122.21"), Dev: "eth0"})
	require.NoError(t, err)
	for _, d := range append(devs, vx, ns.lo) {
		assert.Same(t, d, ns.devByIndex(d.Index), d.Name)
	}
	assert.Same(t, vx.VXLAN(), ns.vxlanFor(8472))
	require.NoError(t, ns.DeleteDevice("d1"))
	assert.Nil(t, ns.devByIndex(devs[1].Index), "deleted")
	assert.Same(t, devs[2], ns.devByIndex(devs[2].Index))
	assert.Nil(t, ns.devByIndex(0))
	assert.Nil(t, ns.devByIndex(99))
	require.NoError(t, ns.DeleteDevice("flannel.1"))
	assert.Nil(t, ns.vxlanFor(8472), "no VXLAN device on the port")
	vx2, err := ns.AddVXLAN("vxlan0", VXLANConfig{VNI: 2, Port: 8472, Local: addr("192.168.122.21")})
	require.NoError(t, err, "the port is free again")
	assert.Same(t, vx2.VXLAN(), ns.vxlanFor(8472))
	assert.Greater(t, vx2.Index, vx.Index, "ifindexes are not reused")
}

// TestDestinationCacheMadeOnFirstLookup: a namespace that never looks a
// destination up (most pod namespaces of a large cluster) holds no cache,
// and the namespace struct, less the room it has for a pod's fixed parts
// (netnsFixed, the routing table's two routes), stays within 768 bytes
// (it was 1,400 with the cache inline); the first packet makes it, and it
// answers as the tables.
func TestDestinationCacheMadeOnFirstLookup(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Netns{})-unsafe.Sizeof(netnsFixed{})-unsafe.Sizeof([2]route.Route{}), uintptr(768))
	assert.Equal(t, uintptr(32), unsafe.Sizeof(dstSlot{}))
	tp := newTopo(t)
	fresh := tp.e.NewNetns("n", "fresh")
	assert.Nil(t, fresh.dsts)
	sink, err := tp.b.ListenUDP(9, false)
	require.NoError(t, err)
	_, err = tp.a.Send(udp([4]byte{10, 0, 0, 2}, [4]byte{10, 0, 0, 3}, 40000, 9, 64, []byte("x")))
	require.NoError(t, err)
	require.NoError(t, tp.e.Run())
	assert.Equal(t, 1, sink.Received)
	require.NotNil(t, tp.a.dsts)
	r, ok := tp.a.lookupRoute([4]byte{10, 0, 0, 3})
	want, wantOK := tp.a.Routes.Lookup([4]byte{10, 0, 0, 3})
	assert.Equal(t, wantOK, ok)
	assert.Same(t, want, r)
}
