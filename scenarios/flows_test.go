package scenarios

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
)

// source resolves a flow-test source name to its namespace and address. A
// node's socket is left unbound (the zero Addr): the kernel picks its
// source by the route to the destination.
func (f *Flows) source(t testing.TB, name string) (*datapath.Netns, netip.Addr) {
	switch name {
	case "client":
		return f.Client.Netns, f.Client.IP
	case "client-2":
		return f.Client2.Netns, f.Client2.IP
	case "web-1":
		return f.Web1.Netns, f.Web1.IP
	case "outside":
		return f.Outside.Netns, f.Outside.IP
	case "stranger":
		return f.Stranger.Netns, f.Stranger.IP
	}
	if n := f.Node(name); n != nil {
		return n.Host, netip.Addr{}
	}
	t.Fatalf("unknown source %q", name)
	return nil, netip.Addr{}
}

func (f *Flows) addr(name string) netip.Addr {
	switch name {
	case "web":
		return f.Web.ClusterIP()
	case "lb":
		return ma(FlowLBIP)
	case "ext":
		return ma(FlowExternalIP)
	}
	if n := f.Node(name); n != nil {
		return n.InternalIP
	}
	if s := f.Service("net", name); s != nil {
		return s.ClusterIP()
	}
	if p := f.Pod("net", name); p != nil {
		return p.IP
	}
	return ma(name)
}

// TestFlows is kube-proxy's flow-test truth table run through the whole
// walk: every branch a first packet can take (explore mode), the endpoint
// it reaches and whether it arrives masqueraded, or the verdict.
func TestFlows(t *testing.T) {
	both := "10.244.1.3:80, 10.244.2.2:80"
	bothMasq := "10.244.1.3:80 (masq), 10.244.2.2:80 (masq)"
	for _, tc := range []struct {
		name, from, to string
		port           uint16
		proto          string
		want           string
		// nft, when set, is the outcome in nftables mode where it differs.
		nft string
		// ipvs, when set, is the outcome in IPVS mode where kube-proxy's
		// IPVS proxier really behaves otherwise.
		ipvs string
	}{
		// ClusterIP
		{"pod to ClusterIP", "client", "web", 80, "tcp", both, "", ""},
		{"pod on other node to ClusterIP", "client-2", "web", 80, "tcp", both, "", ""},
		{"node to ClusterIP is masqueraded", "cka-w1", "web", 80, "tcp", bothMasq, "", ""},
		{"control-plane node to ClusterIP", "cka-cp1", "web", 80, "tcp", bothMasq, "", ""},
		// A node's own connection to a pod leaves from the address of the
		// route's device (flannel.1's 10.244.N.0, cni0's 10.244.N.1): no NAT.
		{"node to a pod on another node is not masqueraded", "cka-w1", "web-2", 80, "tcp", "10.244.2.2:80", "", ""},
		{"node to a pod on the same node is not masqueraded", "cka-w1", "web-1", 80, "tcp", "10.244.1.3:80", "", ""},
		{"node to a remote pod over UDP", "cka-w1", "web-2", 5353, "udp", "10.244.2.2:5353", "", ""},
		{"outside to ClusterIP via a route is masqueraded", "outside", "web", 80, "tcp", bothMasq, "", ""},
		{"hairpin: endpoint to its own Service", "web-1", "web", 80, "tcp", "10.244.1.3:80 (masq), 10.244.2.2:80", "", ""},
		{"UDP ClusterIP", "client", "web-udp", 53, "udp", "10.244.1.3:5353, 10.244.2.2:5353", "", ""},
		// nftables mode rejects traffic to a ClusterIP's other ports
		// (cluster-ips-check); iptables mode routes it to the gateway.
		// IPVS: the ClusterIP is a local address (kube-ipvs0), so a port
		// without a virtual server is refused by KUBE-IPVS-FILTER's
		// "ctstate NEW, dst in KUBE-IPVS-IPS -j REJECT" (kubernetes#72236).
		{"wrong port leaves for the default gateway", "client", "web", 81, "tcp", "DROP(neighbour unresolved)", "REJECT", "REJECT"},
		{"wrong protocol leaves for the default gateway", "client", "web", 80, "udp", "DROP(neighbour unresolved)", "REJECT", "REJECT"},
		// NodePort (externalTrafficPolicy Cluster)
		{"outside to NodePort on a node without endpoints", "outside", "cka-cp1", 30080, "tcp", bothMasq, "", ""},
		{"outside to NodePort on cka-w1", "outside", "cka-w1", 30080, "tcp", bothMasq, "", ""},
		{"outside to NodePort on cka-w2", "outside", "cka-w2", 30080, "tcp", bothMasq, "", ""},
		{"pod to another node's NodePort", "client", "cka-w2", 30080, "tcp", bothMasq, "", ""},
		{"node to its own NodePort", "cka-w1", "cka-w1", 30080, "tcp", bothMasq, "", ""},
		{"outside to a port that is no NodePort", "outside", "cka-w1", 30099, "tcp", "DROP(connection refused (RST))", "", ""},
		{"UDP to a TCP NodePort", "outside", "cka-cp1", 30080, "udp", "DROP(port unreachable)", "", ""},
		// NodePort externalTrafficPolicy Local (endpoint only on cka-w2)
		{"eTP Local: outside to node with local endpoint keeps source", "outside", "cka-w2", 30081, "tcp", "10.244.2.4:80", "", ""},
		// IPVS: a node without a local endpoint gives its NodePort virtual
		// server the cluster endpoints (kubernetes#97081), unmarked by
		// KUBE-NODE-PORT-LOCAL-TCP; flannel's own POSTROUTING rule then
		// masquerades the outside source towards the remote pod subnet.
		{"eTP Local: outside to node without local endpoint", "outside", "cka-w1", 30081, "tcp", "DROP", "", "10.244.2.4:80 (masq)"},
		{"eTP Local: outside to control plane", "outside", "cka-cp1", 30081, "tcp", "DROP", "", "10.244.2.4:80 (masq)"},
		{"eTP Local: pod traffic goes cluster-wide", "client", "cka-w1", 30081, "tcp", "10.244.2.4:80", "", ""},
		{"eTP Local: node's own traffic is masqueraded", "cka-w1", "cka-w1", 30081, "tcp", "10.244.2.4:80 (masq)", "", ""},
		// LoadBalancer with source ranges
		{"LB IP from an allowed source", "outside", "lb", 80, "tcp", bothMasq, "", ""},
		{"LB IP from a source outside the ranges", "stranger", "lb", 80, "tcp", "DROP", "", ""},
		{"LB NodePort ignores source ranges", "stranger", "cka-w1", 30082, "tcp", bothMasq, "", ""},
		// externalIPs
		{"outside to externalIP", "outside", "ext", 8080, "tcp", bothMasq, "", ""},
		{"pod to externalIP", "client", "ext", 8080, "tcp", bothMasq, "", ""},
		// no endpoints
		{"pod to Service without endpoints", "client", "empty", 80, "tcp", "REJECT", "", ""},
		{"outside to Service without endpoints", "outside", "empty", 80, "tcp", "REJECT", "", ""},
		// internalTrafficPolicy Local
		{"iTP Local from cka-w1 pod", "client", "web-itp", 80, "tcp", "10.244.1.3:80", "", ""},
		{"iTP Local from cka-w2 pod", "client-2", "web-itp", 80, "tcp", "10.244.2.2:80", "", ""},
		// IPVS: iTP Local without a local endpoint leaves the virtual server
		// with no real server: ip_vs_leave answers ICMP port unreachable.
		{"iTP Local from a node without endpoints", "cka-cp1", "web-itp", 80, "tcp", "DROP", "", "REJECT"},
		// sessionAffinity: a first packet can still go anywhere
		{"session affinity first connection", "client", "sticky", 80, "tcp", both, "", ""},
	} {
		for _, mode := range []kubeproxy.Mode{kubeproxy.ModeIPTables, kubeproxy.ModeNFTables, kubeproxy.ModeIPVS} {
			want := tc.want
			if mode == kubeproxy.ModeNFTables && tc.nft != "" {
				want = tc.nft
			}
			if mode == kubeproxy.ModeIPVS && tc.ipvs != "" {
				want = tc.ipvs
			}
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				var f *Flows // the copy of the scenario being explored
				build := func() (*sim.Cluster, error) {
					var err error
					if f, err = NewFlowsMode(1, mode); err != nil {
						return nil, err
					}
					return f.Cluster, nil
				}
				out, err := FlowBranches(build, func(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error) {
					ns, src := f.source(t, tc.from)
					dst := f.addr(tc.to)
					if tc.proto == "tcp" {
						c, err := ns.DialTCP(src, dst, 40000, tc.port, 1000, tr)
						if err != nil {
							return src, err
						}
						return netip.AddrFrom4(c.Src), nil
					}
					if !src.IsValid() {
						r, err := ns.RouteGet(dst)
						if err != nil {
							return src, err
						}
						src = r.Src
					}
					if _, err := ns.ListenUDP(40000, false); err != nil {
						return src, err
					}
					ip, err := packet.UDP(packet.IP{Src: src, Dst: dst}, 40000, tc.port, []byte("q"))
					if err != nil {
						return src, err
					}
					return src, c.World.Send(ns, ip, tr)
				})
				require.NoError(t, err)
				require.Equal(t, want, FormatOutcomes(out), "\n%s", Describe(out))
				sum := 0.0
				for _, o := range out {
					sum += o.Probability
				}
				require.InDelta(t, 1.0, sum, 1e-9)
			})
		}
	}
}

func TestSessionAffinitySticks(t *testing.T) {
	for _, mode := range []kubeproxy.Mode{kubeproxy.ModeIPTables, kubeproxy.ModeIPVS} {
		testSessionAffinitySticks(t, mode)
	}
}

// testSessionAffinitySticks: iptables mode keeps a client on its endpoint
// with -m recent; IPVS mode with a persistent virtual server (a template
// connection per client address).
func testSessionAffinitySticks(t *testing.T, mode kubeproxy.Mode) {
	for seed := range uint64(5) {
		f, err := NewFlowsMode(seed, mode)
		require.NoError(t, err)
		var first string
		for i := range 6 {
			tr := &trace.Trace{}
			_, err := f.Client.Netns.DialTCP(f.Client.IP, f.Service("net", "sticky").ClusterIP(), uint16(41000+i), 80, 1, tr)
			require.NoError(t, err)
			require.NoError(t, f.World.Run())
			ep := OutcomeOf(tr, f.Client.IP).Endpoint
			if i == 0 {
				first = ep
			}
			require.Equal(t, first, ep, "%s: seed %d connection %d", mode, seed, i)
		}
	}
}

func TestEndpointChoiceIsUniformAndSeeded(t *testing.T) {
	// run opens n connections from net/client to net/web (three endpoints:
	// one per node) and returns which endpoint each first packet reached,
	// read from the listeners' SYN counters (tracing off: this is 10,000
	// walks).
	run := func(seed uint64, n int) []string {
		r, err := NewReference(seed)
		require.NoError(t, err)
		_, err = r.AddPod(sim.PodSpec{Namespace: "net", Name: "web-3", Node: "cka-cp1", Labels: map[string]string{"app": "web"},
			Containers: []sim.Container{{Name: "nginx", Ports: []sim.ContainerPort{{ContainerPort: 80}}}}})
		require.NoError(t, err)
		var pods []*sim.Pod
		var ls []*datapath.TCPListener
		for _, name := range []string{"web-1", "web-2", "web-3"} {
			p := r.Pod("net", name)
			pods = append(pods, p)
			ls = append(ls, p.Netns.TCPListener(80))
		}
		var seq []string
		for i := range n {
			before := []int{ls[0].SYNs, ls[1].SYNs, ls[2].SYNs}
			_, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web.ClusterIP(), uint16(10000+i), 80, uint32(i), nil)
			require.NoError(t, err)
			require.NoError(t, r.World.Run())
			for k, l := range ls {
				if l.SYNs != before[k] {
					seq = append(seq, pods[k].Spec.Name)
				}
			}
			require.Len(t, seq, i+1, "flow %d reached exactly one endpoint", i)
		}
		return seq
	}
	const flows = 10000
	seq := run(3, flows)
	counts := map[string]int{}
	for _, ep := range seq {
		counts[ep]++
	}
	require.Len(t, counts, 3, fmt.Sprint(counts))
	// Chi-square with 2 degrees of freedom; 13.8 is the 0.001 critical value.
	chi := 0.0
	for _, n := range counts {
		d := float64(n) - flows/3.0
		chi += d * d / (flows / 3.0)
	}
	require.Less(t, chi, 13.8, "counts %v", counts)
	t.Logf("10,000 flows: %v, chi-square %.2f", counts, chi)
	require.Equal(t, seq[:200], run(3, 200), "the same seed gives the same sequence")
	require.NotEqual(t, seq[:200], run(4, 200), "another seed gives another sequence")
}
