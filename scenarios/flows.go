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

// NewFlows builds the flow scenario from flows.yaml: the reference cluster plus
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

// NewFlowsMode is NewFlows with kube-proxy in mode ("" is the file's,
// iptables).
func NewFlowsMode(seed uint64, mode kubeproxy.Mode) (*Flows, error) {
	r, err := newReference("flows", seed, mode)
	if err != nil {
		return nil, err
	}
	l := &lookup{c: r.Cluster, name: "flows"}
	f := &Flows{Reference: r, Client2: l.pod("net", "client-2"), Web3: l.pod("net", "web-3"), Stranger: l.host("stranger")}
	for _, s := range []string{"web-udp", "web-local", "web-lb", "web-ext", "empty", "web-itp", "sticky"} {
		l.service("net", s)
	}
	return f, l.err
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
