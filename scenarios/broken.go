package scenarios

import (
	"net/netip"

	"github.com/kubewalk/kubewalk/sim"
)

// DuplicatePodCIDR is the reference cluster with cka-w1 and cka-w2 both given
// spec.podCIDR 10.244.1.0/24 (set by hand instead of by the controller).
// host-local on each hands out the same addresses; cka-cp1 routes the range
// to whichever node flannel saw last.
type DuplicatePodCIDR struct {
	*sim.Cluster
	CP1, W1, W2 *sim.Node
	// Client (net/client) and Web1 (net/web-1) are on cka-w1; Web2
	// (net/web-2) is on cka-w2 and gets the same address as Client.
	Client, Web1, Web2 *sim.Pod
	// Probe is a pod on cka-cp1 used to reach the others.
	Probe *sim.Pod
}

// NewDuplicatePodCIDR builds the duplicate-podCIDR lab.
func NewDuplicatePodCIDR(seed uint64) (*DuplicatePodCIDR, error) {
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	c, err := sim.NewCluster(cfg)
	if err != nil {
		return nil, err
	}
	r := &DuplicatePodCIDR{Cluster: c}
	dup := mp("10.244.1.0/24")
	for _, n := range []struct {
		name, ip string
		cidr     netip.Prefix
		dst      **sim.Node
	}{{"cka-cp1", "192.168.122.11/24", netip.Prefix{}, &r.CP1}, {"cka-w1", "192.168.122.21/24", dup, &r.W1}, {"cka-w2", "192.168.122.22/24", dup, &r.W2}} {
		node, err := c.AddNode(sim.NodeSpec{Name: n.name, PodCIDR: n.cidr, NICs: []sim.NICSpec{{
			Name: "eth0", Segment: UnderlaySegment, Addr: mp(n.ip), Gateway: ma("192.168.122.1")}}})
		if err != nil {
			return nil, err
		}
		*n.dst = node
	}
	web := []sim.Container{{Name: "nginx", Ports: []sim.ContainerPort{{Name: "http", ContainerPort: 80}}}}
	for _, p := range []struct {
		name, node string
		ctrs       []sim.Container
		dst        **sim.Pod
	}{{"client", "cka-w1", nil, &r.Client}, {"web-1", "cka-w1", web, &r.Web1}, {"web-2", "cka-w2", web, &r.Web2}, {"probe", "cka-cp1", nil, &r.Probe}} {
		pod, err := c.AddPod(sim.PodSpec{Namespace: "net", Name: p.name, Node: p.node, Containers: p.ctrs})
		if err != nil {
			return nil, err
		}
		*p.dst = pod
	}
	return r, nil
}

// WrongNIC is the three-VM lab where every VM's first NIC, eth0, is a NAT
// interface with the same address 10.0.2.15/24 (gateway 10.0.2.2, a
// separate NAT network per VM) and the cluster network is on eth1. With
// neither kubelet --node-ip nor flannel --iface, every node registers
// 10.0.2.15 and every VTEP is reached at 10.0.2.15: each node
// encapsulates to its own address.
type WrongNIC struct {
	*sim.Cluster
	CP1, W1, W2  *sim.Node
	Client, Web2 *sim.Pod
}

// NewWrongNIC builds the lab; with fixed set it passes --node-ip and
// --iface=eth1 on every node, as the fix does.
func NewWrongNIC(seed uint64, fixed bool) (*WrongNIC, error) {
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	c, err := sim.NewCluster(cfg)
	if err != nil {
		return nil, err
	}
	r := &WrongNIC{Cluster: c}
	for _, n := range []struct {
		name, ip string
		dst      **sim.Node
	}{{"cka-cp1", "192.168.122.11", &r.CP1}, {"cka-w1", "192.168.122.21", &r.W1}, {"cka-w2", "192.168.122.22", &r.W2}} {
		spec := sim.NodeSpec{Name: n.name, NICs: []sim.NICSpec{
			{Name: "eth0", Segment: "nat-" + n.name, Addr: mp("10.0.2.15/24"), Gateway: ma("10.0.2.2")},
			{Name: "eth1", Segment: UnderlaySegment, Addr: mp(n.ip + "/24")},
		}}
		if fixed {
			spec.NodeIP = ma(n.ip)
			spec.FlannelIface = "eth1"
		}
		node, err := c.AddNode(spec)
		if err != nil {
			return nil, err
		}
		*n.dst = node
	}
	if r.Client, err = c.AddPod(sim.PodSpec{Namespace: "net", Name: "client", Node: "cka-w1"}); err != nil {
		return nil, err
	}
	if r.Web2, err = c.AddPod(sim.PodSpec{Namespace: "net", Name: "web-2", Node: "cka-w2",
		Containers: []sim.Container{{Name: "nginx", Ports: []sim.ContainerPort{{ContainerPort: 80}}}}}); err != nil {
		return nil, err
	}
	return r, nil
}

// NewBrNetfilterOff is the reference cluster with
// net.bridge.bridge-nf-call-iptables=0 on every node (br_netfilter not
// loaded): bridged frames bypass iptables, so when net/client's connection
// to the net/web ClusterIP is DNATed to net/web-1 on the same bridge, the
// reply is bridged straight back without being un-DNATed and the client
// rejects a SYN-ACK from an address it never called.
func NewBrNetfilterOff(seed uint64) (*Reference, error) {
	r, err := NewReference(seed)
	if err != nil {
		return nil, err
	}
	for _, n := range r.Nodes() {
		n.Host.Sysctl.BridgeNFCallIPTables = false
	}
	return r, nil
}
