// Package scenarios builds ready-made clusters and labs: the kubeadm +
// flannel reference cluster from the teaching notes, and broken variants
// that reproduce the failures learners meet.
package scenarios

import (
	"net/netip"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
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

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ma(s string) netip.Addr   { return netip.MustParseAddr(s) }

// NewReference builds the reference cluster: nodes cka-cp1 192.168.122.11,
// cka-w1 .21, cka-w2 .22 on one L2 segment with the default route via
// .1; pod network 10.244.0.0/16 (a /24 per node, allocated in join order);
// service network 10.96.0.0/12; the NodePort Service net/web in front of
// the two web pods.
func NewReference(seed uint64) (*Reference, error) { return newReference(seed, false, "") }

// NewReferenceMode is NewReference with kube-proxy in mode (the kube-proxy
// ConfigMap's mode; "" is iptables).
func NewReferenceMode(seed uint64, mode kubeproxy.Mode) (*Reference, error) {
	return newReference(seed, false, mode)
}

// newReference builds the reference cluster; withUDP makes the web pods
// also run a UDP echo server on 5353 (used by the flow scenario's UDP
// Service, whose flow tests expect an answer).
func newReference(seed uint64, withUDP bool, mode kubeproxy.Mode) (*Reference, error) {
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	cfg.ProxyMode = mode
	c, err := sim.NewCluster(cfg)
	if err != nil {
		return nil, err
	}
	r := &Reference{Cluster: c}
	for _, n := range []struct {
		name string
		ip   string
		dst  **sim.Node
	}{{"cka-cp1", "192.168.122.11/24", &r.CP1}, {"cka-w1", "192.168.122.21/24", &r.W1}, {"cka-w2", "192.168.122.22/24", &r.W2}} {
		node, err := c.AddNode(sim.NodeSpec{Name: n.name, NICs: []sim.NICSpec{{
			Name: "eth0", Segment: UnderlaySegment, Addr: mp(n.ip), Gateway: ma("192.168.122.1"),
		}}})
		if err != nil {
			return nil, err
		}
		*n.dst = node
	}
	web := []sim.Container{{Name: "nginx", Ports: []sim.ContainerPort{{Name: "http", ContainerPort: 80}}}}
	if withUDP {
		web[0].Ports = append(web[0].Ports, sim.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: "UDP", Echo: true})
	}
	if r.Client, err = c.AddPod(sim.PodSpec{Namespace: "net", Name: "client", Node: "cka-w1",
		Labels: map[string]string{"app": "client"}, Containers: []sim.Container{{Name: "busybox"}}}); err != nil {
		return nil, err
	}
	if r.Web1, err = c.AddPod(sim.PodSpec{Namespace: "net", Name: "web-1", Node: "cka-w1",
		Labels: map[string]string{"app": "web"}, Containers: web}); err != nil {
		return nil, err
	}
	if r.Web2, err = c.AddPod(sim.PodSpec{Namespace: "net", Name: "web-2", Node: "cka-w2",
		Labels: map[string]string{"app": "web"}, Containers: web}); err != nil {
		return nil, err
	}
	if r.Outside, err = c.AddExternalHost("outside", UnderlaySegment, mp("192.168.122.100/24"), netip.Addr{}); err != nil {
		return nil, err
	}
	if r.Web, err = c.AddService(sim.ServiceSpec{Selector: map[string]string{"app": "web"}, Service: kubeproxy.Service{
		Namespace: "net", Name: "web", Type: kubeproxy.ServiceTypeNodePort, ClusterIP: ma("10.111.80.136"),
		Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80), NodePort: WebNodePort}},
	}}); err != nil {
		return nil, err
	}
	return r, nil
}
