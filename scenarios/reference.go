// Package scenarios builds ready-made clusters and labs: the kubeadm +
// flannel reference cluster from the teaching notes, and broken variants
// that reproduce the failures learners meet.
package scenarios

import (
	"net/netip"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
)

// Reference is the three-node kubeadm + flannel cluster of the teaching
// notes, with its well-known pods.
type Reference struct {
	*sim.Cluster
	CP1, W1, W2 *sim.Node
	// Client is a busybox-like pod on cka-w1 (net/client).
	Client *sim.Pod
	// Web1 and Web2 are nginx-like pods (label app=web, TCP 80) on cka-w1
	// and cka-w2.
	Web1, Web2 *sim.Pod
	// Outside is a machine on the node network, 192.168.122.100.
	Outside *sim.Host
	// Web is the Service net/web: NodePort 30080, ClusterIP 10.111.80.136,
	// port 80 to the app=web pods (one endpoint per worker).
	Web *sim.Service
}

// WebNodePort is net/web's NodePort.
const WebNodePort = 30080

// UnderlaySegment is the name of the node network segment.
const UnderlaySegment = "192.168.122.0/24"

// ClientFrameToWeb2 is a UDP datagram from net/client's port 40000 to
// net/web-2's dport with 64 zero bytes, as the Ethernet frame the client's
// eth0 sends for it: to cka-w1's cni0, the pod's gateway, whose MAC the
// client's ARP resolves. It is the packet of the kernel side-by-side
// (sim/export) and of BenchmarkCrossNodePodToPodUDPFrame.
func (r *Reference) ClientFrameToWeb2(dport uint16) ([]byte, error) {
	ip, err := packet.UDP(packet.IP{Src: r.Client.IP, Dst: r.Web2.IP}, 40000, dport, make([]byte, 64))
	if err != nil {
		return nil, err
	}
	frame := make([]byte, 14+len(ip))
	dst, src := r.W1.Host.Device("cni0").MAC(), r.Client.Netns.Device("eth0").MAC()
	copy(frame[0:6], dst[:])
	copy(frame[6:12], src[:])
	frame[12], frame[13] = 0x08, 0x00 // EtherType IPv4
	copy(frame[14:], ip)
	return frame, nil
}

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ma(s string) netip.Addr   { return netip.MustParseAddr(s) }

// NewReference builds the reference cluster from reference.yaml: nodes
// cka-cp1 192.168.122.11, cka-w1 .21, cka-w2 .22 on one L2 segment with the
// default route via .1; pod network 10.244.0.0/16 (a /24 per node,
// allocated in join order); service network 10.96.0.0/12; the NodePort
// Service net/web in front of the two web pods.
func NewReference(seed uint64) (*Reference, error) { return newReference("reference", seed, "") }

// NewReferenceMode is NewReference with kube-proxy in mode (the kube-proxy
// ConfigMap's mode; "" is the file's, iptables).
func NewReferenceMode(seed uint64, mode kubeproxy.Mode) (*Reference, error) {
	return newReference("reference", seed, mode)
}

// newReference builds a scenario file with the reference cluster's nodes,
// pods, host and Service, with kube-proxy in mode unless it is "".
func newReference(name string, seed uint64, mode kubeproxy.Mode) (*Reference, error) {
	c, err := build(name, seed, mode)
	if err != nil {
		return nil, err
	}
	l := &lookup{c: c, name: name}
	r := &Reference{Cluster: c, CP1: l.node("cka-cp1"), W1: l.node("cka-w1"), W2: l.node("cka-w2"),
		Client: l.pod("net", "client"), Web1: l.pod("net", "web-1"), Web2: l.pod("net", "web-2"),
		Outside: l.host("outside"), Web: l.service("net", "web")}
	return r, l.err
}
