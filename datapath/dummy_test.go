package datapath

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDummyDeviceHoldsLocalAddressesWhileDown(t *testing.T) {
	e := NewEngine(1)
	ns := e.NewNetns("n", "host")
	d, err := ns.AddDummy("kube-ipvs0")
	require.NoError(t, err)
	require.NoError(t, ns.AddAddr("kube-ipvs0", netip.MustParsePrefix("10.96.0.1/32")))
	require.True(t, ns.IsLocal([4]byte{10, 96, 0, 1}), "a down dummy's address is local")
	require.Equal(t, "2: kube-ipvs0: <BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN mode DEFAULT group default \n"+
		"    link/ether "+d.mac.String()+" brd ff:ff:ff:ff:ff:ff promiscuity 0  allmulti 0 minmtu 0 maxmtu 0 \n"+
		"    dummy addrgenmode eui64 numtxqueues 1 numrxqueues 1 gso_max_size 65536 gso_max_segs 65535 tso_max_size 524280 tso_max_segs 65535 gro_max_size 65536 \n",
		ns.IPLink("kube-ipvs0", true))
	require.Contains(t, ns.IPAddr(), "2: kube-ipvs0: <BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN group default \n    inet 10.96.0.1/32 scope global kube-ipvs0\n")
	require.NoError(t, ns.DeleteAddr("kube-ipvs0", netip.MustParsePrefix("10.96.0.1/32")))
	require.False(t, ns.IsLocal([4]byte{10, 96, 0, 1}))
	require.Error(t, ns.DeleteAddr("kube-ipvs0", netip.MustParsePrefix("10.96.0.1/32")))
}

func TestBroadcastAddressesFollowTheirDevice(t *testing.T) {
	e := NewEngine(1)
	ns := e.NewNetns("n", "host")
	_, err := ns.AddNIC("eth0", MAC{2, 0, 0, 0, 0, 1}, 1500)
	require.NoError(t, err)
	require.NoError(t, ns.AddAddr("eth0", netip.MustParsePrefix("192.168.1.5/24")))
	require.True(t, ns.IsBroadcast([4]byte{192, 168, 1, 255}))
	require.NoError(t, ns.DeleteAddr("eth0", netip.MustParsePrefix("192.168.1.5/24")))
	require.False(t, ns.IsBroadcast([4]byte{192, 168, 1, 255}))
	require.NoError(t, ns.AddAddr("eth0", netip.MustParsePrefix("192.168.1.5/24")))
	require.NoError(t, ns.DeleteDevice("eth0"))
	require.False(t, ns.IsBroadcast([4]byte{192, 168, 1, 255}), "gone with the device")
}
