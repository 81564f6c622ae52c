package scenarios

import (
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

// NewDuplicatePodCIDR builds the duplicate-podCIDR lab from
// duplicate-podcidr.yaml.
func NewDuplicatePodCIDR(seed uint64) (*DuplicatePodCIDR, error) {
	c, err := build("duplicate-podcidr", seed, "")
	if err != nil {
		return nil, err
	}
	l := &lookup{c: c, name: "duplicate-podcidr"}
	r := &DuplicatePodCIDR{Cluster: c, CP1: l.node("cka-cp1"), W1: l.node("cka-w1"), W2: l.node("cka-w2"),
		Client: l.pod("net", "client"), Web1: l.pod("net", "web-1"), Web2: l.pod("net", "web-2"), Probe: l.pod("net", "probe")}
	return r, l.err
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

// NewWrongNIC builds the lab from wrong-nic.yaml; with fixed set, from
// wrong-nic-fixed.yaml, which passes --node-ip and --iface=eth1 on every
// node, as the fix does.
func NewWrongNIC(seed uint64, fixed bool) (*WrongNIC, error) {
	name := "wrong-nic"
	if fixed {
		name = "wrong-nic-fixed"
	}
	c, err := build(name, seed, "")
	if err != nil {
		return nil, err
	}
	l := &lookup{c: c, name: name}
	r := &WrongNIC{Cluster: c, CP1: l.node("cka-cp1"), W1: l.node("cka-w1"), W2: l.node("cka-w2"),
		Client: l.pod("net", "client"), Web2: l.pod("net", "web-2")}
	return r, l.err
}

// NewBrNetfilterOff builds br-netfilter-off.yaml: the reference cluster with
// net.bridge.bridge-nf-call-iptables=0 on every node (br_netfilter not
// loaded): bridged frames bypass iptables, so when net/client's connection
// to the net/web ClusterIP is DNATed to net/web-1 on the same bridge, the
// reply is bridged straight back without being un-DNATed and the client
// rejects a SYN-ACK from an address it never called.
func NewBrNetfilterOff(seed uint64) (*Reference, error) {
	return newReference("br-netfilter-off", seed, "")
}
