package kubeproxy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/internal/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// renderIPVS prints an IPVSRules for golden files: the virtual servers,
// the non-empty sets, the bound addresses and the restore input.
func renderIPVS(r *IPVSRules) string {
	var b strings.Builder
	for _, v := range r.VirtualServers {
		fmt.Fprintf(&b, "vs %s %s:%d %s kind=%q svc=%s bind=%v", v.Protocol, v.Addr, v.Port, v.Scheduler, v.Kind, v.ServicePortName, v.Bind)
		if v.Persistent {
			fmt.Fprintf(&b, " persistent %d", v.Timeout)
		}
		if v.LocalOnly {
			b.WriteString(" local-only")
		}
		b.WriteByte('\n')
		for _, d := range v.Dests {
			fmt.Fprintf(&b, "  -> %s\n", d)
		}
	}
	for _, s := range r.Sets {
		if len(s.Entries) > 0 {
			fmt.Fprintf(&b, "set %s %s: %s\n", s.Name, s.Type, strings.Join(s.Entries, " "))
		}
	}
	fmt.Fprintf(&b, "kube-ipvs0: %v\n", r.BindAddrs)
	return b.String() + r.RestoreInput()
}

func TestIPVSGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			r, err := GenerateIPVS(sc.cfg, sc.snap, "", sc.cfg.NodeIPs)
			require.NoError(t, err)
			golden.Check(t, sc.name+".ipvs.golden", renderIPVS(r))
			rev := sc.snap
			rev.Services = reversed(sc.snap.Services)
			rev.EndpointSlices = reversed(sc.snap.EndpointSlices)
			r2, err := GenerateIPVS(sc.cfg, rev, "", sc.cfg.NodeIPs)
			require.NoError(t, err)
			assert.Equal(t, renderIPVS(r), renderIPVS(r2), "input order does not matter")
		})
	}
}

func TestIPVSTrafficPolicies(t *testing.T) {
	ip := netip.MustParseAddr
	node := ip("192.168.1.10")
	cfg := Config{NodeName: "n1", NodeIPs: []netip.Addr{node}, ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")}
	ep := func(a, n string) Endpoint { return Endpoint{Addresses: []netip.Addr{ip(a)}, NodeName: n} }
	snap := Snapshot{
		Services: []Service{
			{Namespace: "ns", Name: "etp", Type: ServiceTypeNodePort, ClusterIP: ip("10.96.0.10"), ExternalTrafficPolicy: TrafficPolicyLocal,
				Ports: []ServicePort{{Port: 80, NodePort: 30010}}},
			{Namespace: "ns", Name: "itp", ClusterIP: ip("10.96.0.11"), InternalTrafficPolicy: TrafficPolicyLocal, Ports: []ServicePort{{Port: 80}}},
			{Namespace: "ns", Name: "sticky", ClusterIP: ip("10.96.0.12"), SessionAffinity: SessionAffinityClientIP, Ports: []ServicePort{{Port: 80}}},
			{Namespace: "ns", Name: "lb", Type: ServiceTypeLoadBalancer, ClusterIP: ip("10.96.0.13"), LoadBalancerIngress: []netip.Addr{ip("1.2.3.4")},
				LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Ports: []ServicePort{{Port: 80, NodePort: 30013}}},
		},
		EndpointSlices: []EndpointSlice{
			{Namespace: "ns", ServiceName: "etp", Ports: []EndpointPort{{Port: 8080}}, Endpoints: []Endpoint{ep("10.244.2.2", "n2")}},
			{Namespace: "ns", ServiceName: "itp", Ports: []EndpointPort{{Port: 8080}}, Endpoints: []Endpoint{ep("10.244.2.3", "n2")}},
			{Namespace: "ns", ServiceName: "sticky", Ports: []EndpointPort{{Port: 8080}}, Endpoints: []Endpoint{ep("10.244.1.4", "n1")}},
			{Namespace: "ns", ServiceName: "lb", Ports: []EndpointPort{{Port: 8080}}, Endpoints: []Endpoint{ep("10.244.1.5", "n1")}},
		},
	}
	r, err := GenerateIPVS(cfg, snap, "wrr", []netip.Addr{node, ip("127.0.0.1"), ip("169.254.1.1")})
	require.NoError(t, err)
	vs := func(a string, port int) VirtualServer {
		v, ok := r.VirtualServer(ProtocolTCP, ip(a), port)
		require.True(t, ok, "%s:%d", a, port)
		return v
	}
	// eTP Local without a local endpoint: the NodePort falls back to the
	// cluster endpoints (kubernetes#97081).
	assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("10.244.2.2:8080")}, vs("192.168.1.10", 30010).Dests)
	assert.False(t, vs("192.168.1.10", 30010).Bind, "node addresses are not bound to kube-ipvs0")
	// iTP Local without a local endpoint: no real server at all.
	assert.Empty(t, vs("10.96.0.11", 80).Dests)
	// ClientIP affinity is persistence for the timeout.
	assert.True(t, vs("10.96.0.12", 80).Persistent)
	assert.Equal(t, DefaultClientIPTimeoutSeconds, vs("10.96.0.12", 80).Timeout)
	assert.Equal(t, "wrr", vs("10.96.0.12", 80).Scheduler)
	// NodePorts only on the node address: not loopback, not link-local.
	_, ok := r.VirtualServer(ProtocolTCP, ip("127.0.0.1"), 30010)
	assert.False(t, ok)
	_, ok = r.VirtualServer(ProtocolTCP, ip("169.254.1.1"), 30010)
	assert.False(t, ok)
	// The node is outside the LB's source ranges: KUBE-IPVS-OUT-FILTER.
	assert.Contains(t, r.RestoreInput(), "-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4 -m ipvs --vaddr 1.2.3.4 --vproto tcp --vport 80 -j DROP\n")
	s, _ := r.Set("KUBE-LOAD-BALANCER-SOURCE-CIDR")
	assert.Equal(t, []string{"1.2.3.4,tcp:80,10.0.0.0/8"}, s.Entries)
	s, _ = r.Set("KUBE-NODE-PORT-LOCAL-TCP")
	assert.Equal(t, []string{"30010"}, s.Entries)
	s, _ = r.Set("KUBE-LOOP-BACK")
	assert.Equal(t, []string{"10.244.1.4,tcp:8080,10.244.1.4", "10.244.1.5,tcp:8080,10.244.1.5"}, s.Entries, "local endpoints only")
	assert.Equal(t, []netip.Addr{ip("1.2.3.4"), ip("10.96.0.10"), ip("10.96.0.11"), ip("10.96.0.12"), ip("10.96.0.13")}, r.BindAddrs)
}

func TestIPVSSchedulerRejected(t *testing.T) {
	for _, s := range []string{"mh", "fo", "RR", "bogus"} {
		_, err := GenerateIPVS(Config{NodeName: "n"}, Snapshot{}, s, nil)
		var se *SchedulerError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, fmt.Sprintf(`KubeProxyConfiguration.KubeProxyIPVSConfiguration.Scheduler.Scheduler: Invalid value: %q: must be in [rr wrr lc wlc lblc lblcr sh dh sed nq ], blank means the default algorithm method (currently rr)`, s), err.Error())
	}
	got, err := ParseIPVSScheduler("")
	require.NoError(t, err)
	assert.Equal(t, "rr", got)
}
