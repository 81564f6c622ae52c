package scenarios

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// Flows is the reference cluster with one Service of every kind kube-proxy
// handles, for flow tests in the style of kube-proxy's own.
type Flows struct {
	*Reference
	// Client2 is a pod on cka-w2; Web3 (app=web-local) runs only on cka-w2.
	Client2, Web3 *sim.Pod
	// Stranger is a machine on the node network outside the
	// LoadBalancer's source ranges (192.168.122.101).
	Stranger *sim.Host
}

// Addresses of the flow scenario's Services.
const (
	FlowLBIP       = "192.168.122.200"
	FlowExternalIP = "192.168.122.201"
)

// NewFlows builds the flow scenario: the reference cluster plus
//
//	net/web-udp    ClusterIP, UDP 53 -> 5353 on the app=web pods
//	net/web-local  NodePort 30081, externalTrafficPolicy Local (endpoint only on cka-w2)
//	net/web-lb     LoadBalancer 192.168.122.200:80, NodePort 30082, source range 192.168.122.100/32
//	net/web-ext    ClusterIP with externalIP 192.168.122.201:8080 -> 80
//	net/empty      ClusterIP selecting nothing
//	net/web-itp    ClusterIP, internalTrafficPolicy Local
//	net/sticky     ClusterIP, sessionAffinity ClientIP
//
// The outside machines route the LoadBalancer, external and service
// addresses to cka-w1, as a router in front of the cluster would.
func NewFlows(seed uint64) (*Flows, error) { return NewFlowsMode(seed, "") }

// NewFlowsMode is NewFlows with kube-proxy in mode ("" is iptables).
func NewFlowsMode(seed uint64, mode kubeproxy.Mode) (*Flows, error) {
	r, err := newReference(seed, true, mode)
	if err != nil {
		return nil, err
	}
	f := &Flows{Reference: r}
	c := r.Cluster
	if f.Client2, err = c.AddPod(sim.PodSpec{Namespace: "net", Name: "client-2", Node: "cka-w2"}); err != nil {
		return nil, err
	}
	if f.Web3, err = c.AddPod(sim.PodSpec{Namespace: "net", Name: "web-3", Node: "cka-w2",
		Labels:     map[string]string{"app": "web-local"},
		Containers: []sim.Container{{Name: "nginx", Ports: []sim.ContainerPort{{Name: "http", ContainerPort: 80}}}}}); err != nil {
		return nil, err
	}
	if f.Stranger, err = c.AddExternalHost("stranger", UnderlaySegment, mp("192.168.122.101/24"), netip.Addr{}); err != nil {
		return nil, err
	}
	tcp := func(port, target, nodePort int) []kubeproxy.ServicePort {
		return []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: port, TargetPort: kubeproxy.FromInt(target), NodePort: nodePort}}
	}
	web := map[string]string{"app": "web"}
	for _, s := range []sim.ServiceSpec{
		{Selector: web, Service: kubeproxy.Service{Namespace: "net", Name: "web-udp",
			Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolUDP, Port: 53, TargetPort: kubeproxy.FromInt(5353)}}}},
		{Selector: map[string]string{"app": "web-local"}, Service: kubeproxy.Service{Namespace: "net", Name: "web-local",
			Type: kubeproxy.ServiceTypeNodePort, ExternalTrafficPolicy: kubeproxy.TrafficPolicyLocal, Ports: tcp(80, 80, 30081)}},
		{Selector: web, Service: kubeproxy.Service{Namespace: "net", Name: "web-lb", Type: kubeproxy.ServiceTypeLoadBalancer,
			LoadBalancerIngress: []netip.Addr{ma(FlowLBIP)}, LoadBalancerSourceRanges: []netip.Prefix{mp("192.168.122.100/32")},
			Ports: tcp(80, 80, 30082)}},
		{Selector: web, Service: kubeproxy.Service{Namespace: "net", Name: "web-ext", ExternalIPs: []netip.Addr{ma(FlowExternalIP)},
			Ports: tcp(8080, 80, 0)}},
		{Selector: map[string]string{"app": "nothing"}, Service: kubeproxy.Service{Namespace: "net", Name: "empty", Ports: tcp(80, 80, 0)}},
		{Selector: web, Service: kubeproxy.Service{Namespace: "net", Name: "web-itp", InternalTrafficPolicy: kubeproxy.TrafficPolicyLocal,
			Ports: tcp(80, 80, 0)}},
		{Selector: web, Service: kubeproxy.Service{Namespace: "net", Name: "sticky", SessionAffinity: kubeproxy.SessionAffinityClientIP,
			Ports: tcp(80, 80, 0)}},
	} {
		if _, err := c.AddService(s); err != nil {
			return nil, err
		}
	}
	for _, h := range []*sim.Host{r.Outside, f.Stranger} {
		for _, dst := range []string{FlowLBIP + "/32", FlowExternalIP + "/32", "10.96.0.0/12"} {
			if err := h.Netns.AddRoute(datapath.RouteSpec{Dst: mp(dst), Via: ma("192.168.122.21")}); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// FlowOutcome is where one branch of a first packet ended: the endpoint
// ("ip:port") that received it and whether it arrived masqueraded, or a
// verdict ("REJECT", "DROP", or "DROP(reason)").
type FlowOutcome struct {
	Endpoint    string
	Masquerade  bool
	Probability float64
}

// String implements fmt.Stringer.
func (o FlowOutcome) String() string {
	s := o.Endpoint
	if o.Masquerade {
		s += " (masq)"
	}
	return s
}

// OutcomeOf reads a traced first packet's fate: the TCP SYN or UDP datagram
// of packet #1 delivered to a listener, a RST or ICMP error back to the
// client (REJECT), or a drop.
func OutcomeOf(tr *trace.Trace, clientIP netip.Addr) FlowOutcome {
	for _, o := range tr.Obs {
		if o.Packet != 1 {
			continue
		}
		if o.Action == trace.Delivered && (strings.HasPrefix(o.Detail, "SYN to listener") || strings.HasPrefix(o.Detail, "socket udp:")) {
			src, dst := flowAddrs(o.Summary)
			return FlowOutcome{Endpoint: dst, Masquerade: !strings.HasPrefix(src, clientIP.String()+":")}
		}
	}
	for _, o := range tr.Obs {
		if o.Packet == 1 && o.Action == trace.Dropped {
			if o.Reason == datapath.ReasonNetfilterDrop.String() {
				return FlowOutcome{Endpoint: "DROP"}
			}
			if o.Reason == datapath.ReasonNetfilterReject.String() {
				return FlowOutcome{Endpoint: "REJECT"}
			}
			return FlowOutcome{Endpoint: "DROP(" + o.Reason + ")"}
		}
	}
	return FlowOutcome{Endpoint: "LOST"}
}

// flowAddrs extracts "a.b.c.d:port" source and destination from a
// tcpdump-style summary "a.b.c.d.sport > e.f.g.h.dport: ...".
func flowAddrs(summary string) (src, dst string) {
	head, _, _ := strings.Cut(summary, ":")
	s, d, _ := strings.Cut(head, " > ")
	conv := func(x string) string {
		i := strings.LastIndexByte(x, '.')
		if i < 0 {
			return x
		}
		return x[:i] + ":" + x[i+1:]
	}
	return conv(s), conv(d)
}

// FlowBranches runs one flow through Explore: build returns a fresh cluster
// and the sending namespace; send issues the first packet into tr.
func FlowBranches(build func() (*sim.Cluster, error), send func(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error)) ([]FlowOutcome, error) {
	var client netip.Addr
	branches, err := sim.Explore(build, func(c *sim.Cluster, tr *trace.Trace) error {
		ip, err := send(c, tr)
		client = ip
		if err != nil {
			return err
		}
		return c.World.Run()
	})
	if err != nil {
		return nil, err
	}
	merged := map[string]*FlowOutcome{}
	for _, b := range branches {
		o := OutcomeOf(b.Trace, client)
		k := o.String()
		if m, ok := merged[k]; ok {
			m.Probability += b.Probability
			continue
		}
		o.Probability = b.Probability
		merged[k] = &o
	}
	out := make([]FlowOutcome, 0, len(merged))
	for _, o := range merged {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// FormatOutcomes joins outcomes as "10.244.1.3:80, 10.244.2.2:80 (masq)".
func FormatOutcomes(os []FlowOutcome) string {
	parts := make([]string, len(os))
	for i, o := range os {
		parts[i] = o.String()
	}
	return strings.Join(parts, ", ")
}

// Describe formats outcomes with probabilities, one per line.
func Describe(os []FlowOutcome) string {
	var b strings.Builder
	for _, o := range os {
		fmt.Fprintf(&b, "%6.2f%%  %s\n", 100*o.Probability, o)
	}
	return b.String()
}
