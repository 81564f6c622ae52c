package sim

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim/packet"
)

// meshPair is the same cluster twice: flannel's remote leases held in the
// shared mesh, and programmed entry by entry on every node (the per-pair
// reference).
type meshPair struct {
	shared, perPair *Cluster
}

func newMeshPair(t *testing.T, nodes int) *meshPair {
	t.Helper()
	mp := &meshPair{}
	for i, ref := range []bool{false, true} {
		c, err := NewCluster(DefaultConfig())
		require.NoError(t, err)
		if ref {
			c.Flannel.DisableMesh()
		}
		for n := range nodes {
			addMeshNode(t, c, n)
		}
		if i == 0 {
			mp.shared = c
		} else {
			mp.perPair = c
		}
	}
	return mp
}

func addMeshNode(t *testing.T, c *Cluster, n int) {
	t.Helper()
	name := fmt.Sprint("n", n)
	_, err := c.AddNode(NodeSpec{Name: name, NICs: []NICSpec{{Name: "eth0", Segment: "lan",
		Addr: netip.MustParsePrefix(fmt.Sprintf("192.168.7.%d/24", 10+n)), Gateway: netip.MustParseAddr("192.168.7.1")}}})
	require.NoError(t, err)
	_, err = c.AddPod(PodSpec{Namespace: "ns", Name: "p" + name, Node: name, Containers: []Container{{Name: "echo",
		Ports: []ContainerPort{{ContainerPort: 7, Protocol: "UDP", Echo: true}}}}})
	require.NoError(t, err)
}

// state is everything a user can read off c's nodes about the mesh: the
// dumps, the ARP table's entry count, `ip route get` to every pod and
// node address, and the trace of a datagram from every pod to every other.
func meshState(t *testing.T, c *Cluster) string {
	t.Helper()
	var b strings.Builder
	for _, n := range c.Nodes() {
		fmt.Fprintf(&b, "== %s\n%s--\n%s--\n%s-- entries %d\n", n.Name, n.Host.IPRoute(), n.Host.IPNeigh(""),
			n.Host.BridgeFDB(""), n.Host.ARPTable().Entries())
		for _, p := range c.Pods() {
			r, err := n.Host.RouteGet(p.IP)
			fmt.Fprintf(&b, "get %s: %+v %v\n", p.IP, r, err)
		}
		for i := range 12 {
			a := netip.AddrFrom4([4]byte{10, 244, byte(i), 0})
			r, err := n.Host.RouteGet(a)
			fmt.Fprintf(&b, "get %s: %+v %v\n", a, r, err)
		}
	}
	for _, from := range c.Pods() {
		for _, to := range c.Pods() {
			if from == to {
				continue
			}
			ip, err := packet.UDP(packet.IP{Src: from.IP, Dst: to.IP}, 40000, 7, []byte("hi"))
			require.NoError(t, err)
			tr := &trace.Trace{}
			require.NoError(t, c.World.Send(from.Netns, ip, tr))
			require.NoError(t, c.World.Run())
			fmt.Fprintf(&b, "trace %s -> %s\n%s", from.Spec.Name, to.Spec.Name, tr.Text(trace.Detailed))
		}
	}
	return b.String()
}

func (mp *meshPair) requireSame(t *testing.T, step string) {
	t.Helper()
	want := meshState(t, mp.perPair)
	got := meshState(t, mp.shared)
	require.Equal(t, want, got, step)
}

func (mp *meshPair) both(t *testing.T, f func(c *Cluster)) {
	t.Helper()
	f(mp.shared)
	f(mp.perPair)
}

func inMesh(c *Cluster) []string {
	var out []string
	for _, n := range c.Nodes() {
		if n.Flannel.InMesh() {
			out = append(out, n.Name)
		}
	}
	return out
}

// TestFlannelMeshIsPerPairExactly: a cluster whose flannel leases are held
// in one shared mesh shows and walks exactly like one whose every node
// holds a route, neighbour and FDB entry per other node: dumps, ARP entry
// counts, `ip route get`, traces; after hand edits on single nodes (which
// then hold their own copies), a Node deleted, and a node added.
func TestFlannelMeshIsPerPairExactly(t *testing.T) {
	mp := newMeshPair(t, 4)
	require.Equal(t, []string{"n0", "n1", "n2", "n3"}, inMesh(mp.shared))
	require.Empty(t, inMesh(mp.perPair))
	require.Equal(t, 4, mp.shared.Flannel.Mesh().Members())
	mp.requireSame(t, "built")

	n2sub := func(c *Cluster) netip.Prefix { return c.Node("n2").Flannel.Subnet }
	mp.both(t, func(c *Cluster) {
		// A lab deletes n1's route to n2's pods, n3's neighbour entry for
		// n0's gateway is set by hand, n0 forgets n3's VTEP.
		require.True(t, c.Node("n1").Host.Routes.Delete(n2sub(c), 0))
		n0 := c.Node("n0").Flannel
		require.NoError(t, c.Node("n3").Host.SetNeigh("flannel.1", n0.Subnet.Addr(), datapath.MAC{2, 0, 0, 0, 0, 9}, datapath.NeighPermanent))
		c.Node("n0").Flannel.VTEP.VXLAN().DeleteFDB(c.Node("n3").Flannel.VTEP.MAC())
	})
	require.Equal(t, []string{"n2"}, inMesh(mp.shared), "the edited nodes hold their own copies")
	mp.requireSame(t, "hand edits")

	mp.both(t, func(c *Cluster) {
		require.NoError(t, c.Delete("Node", "", "n2"))
		require.NoError(t, c.Settle())
	})
	require.NotContains(t, mp.shared.Node("n1").Host.IPRoute(), n2sub(mp.shared).String())
	mp.requireSame(t, "n2 deleted")

	mp.both(t, func(c *Cluster) { addMeshNode(t, c, 4) })
	require.Equal(t, []string{"n2", "n4"}, inMesh(mp.shared))
	mp.requireSame(t, "n4 added")

	mp.both(t, func(c *Cluster) {
		// A route of n4's own where a new node's lease then appears: n4
		// takes its own copies, and flanneld's replace overwrites it.
		require.NoError(t, c.Node("n4").Host.AddRoute(datapath.RouteSpec{Dst: netip.MustParsePrefix("10.244.5.0/24"), Dev: "eth0"}))
		addMeshNode(t, c, 5)
	})
	require.Equal(t, []string{"n2", "n5"}, inMesh(mp.shared))
	mp.requireSame(t, "n5 added over n4's own route")
}

// TestFlannelMeshConflictFallsBackToPerPair: two Nodes given one podCIDR
// make what each node holds depend on the order it saw the leases in; the
// mesh is given up, every node holds its own entries, and nothing shows.
func TestFlannelMeshConflictFallsBackToPerPair(t *testing.T) {
	mp := newMeshPair(t, 3)
	mp.both(t, func(c *Cluster) {
		_, err := c.AddNode(NodeSpec{Name: "dup", PodCIDR: c.Node("n1").Flannel.Subnet, NICs: []NICSpec{{Name: "eth0", Segment: "lan",
			Addr: netip.MustParsePrefix("192.168.7.40/24"), Gateway: netip.MustParseAddr("192.168.7.1")}}})
		require.NoError(t, err)
	})
	require.Empty(t, inMesh(mp.shared))
	mp.requireSame(t, "duplicate podCIDR")
}

// TestFlannelMeshEntriesCountForARPGC: the kernel's periodic neighbour
// collector only runs on a table holding gc_thresh1 (128) entries, and a
// node's PERMANENT flannel entries count. With 130 nodes, a STALE entry
// unused for gc_stale_time is collected on the node holding the shared
// mesh exactly as on the one holding its own copies.
func TestFlannelMeshEntriesCountForARPGC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 2 x 130 nodes")
	}
	mp := &meshPair{}
	for i, ref := range []bool{false, true} {
		c, err := NewCluster(DefaultConfig())
		require.NoError(t, err)
		if ref {
			c.Flannel.DisableMesh()
		}
		for n := range 130 {
			_, err := c.AddNode(NodeSpec{Name: fmt.Sprint("n", n), NICs: []NICSpec{{Name: "eth0", Segment: "lan",
				Addr: netip.MustParsePrefix(fmt.Sprintf("192.168.%d.%d/16", 7+n/200, 10+n%200)), Gateway: netip.MustParseAddr("192.168.0.1")}}})
			require.NoError(t, err)
		}
		if i == 0 {
			mp.shared = c
		} else {
			mp.perPair = c
		}
	}
	var dumps [2]string
	for i, c := range []*Cluster{mp.shared, mp.perPair} {
		n0 := c.Node("n0").Host
		require.NoError(t, n0.SetNeigh("eth0", netip.MustParseAddr("192.168.0.99"), datapath.MAC{2, 0, 0, 0, 0, 0x99}, datapath.NeighStale))
		require.Equal(t, 130, n0.ARPTable().Entries())
		require.NoError(t, c.RunFor(3*datapath.GCStaleTime))
		dumps[i] = n0.IPNeigh("")
		require.NotContains(t, dumps[i], "192.168.0.99", "collected: the table holds more than gc_thresh1")
	}
	require.Equal(t, dumps[1], dumps[0])
	require.Empty(t, inMesh(mp.perPair))
	require.Len(t, inMesh(mp.shared), 130)
}
