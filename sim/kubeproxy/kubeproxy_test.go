package kubeproxy

import (
	"errors"
	"github.com/kubewalk/kubewalk/internal/golden"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			r, err := Generate(sc.cfg, sc.snap)
			require.NoError(t, err)
			golden.Check(t, sc.name+".golden", r.Save())
			golden.Check(t, sc.name+".restore.golden", r.RestoreInput())
			// Determinism: a second run with reversed input order is identical.
			rev := sc.snap
			rev.Services = reversed(sc.snap.Services)
			rev.EndpointSlices = reversed(sc.snap.EndpointSlices)
			r2, err := Generate(sc.cfg, rev)
			require.NoError(t, err)
			assert.Equal(t, r.Save(), r2.Save())
		})
	}
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// Hashes published in kube-proxy's own proxier_test.go expectations.
func TestChainHashesMatchKubeProxy(t *testing.T) {
	tests := []struct {
		spn, endpoint, svc, sep string
	}{
		{"ns1/svc1:p80", "10.180.0.1:80", "KUBE-SVC-XPGD46QRK7WJZT7O", "KUBE-SEP-SXIVWICOYRO3J4NJ"},
		{"ns2/svc2:p80", "10.180.0.2:80", "KUBE-SVC-GNZBNJ2PO5MGZ6GT", "KUBE-SEP-RS4RBKLTHTF2IUXJ"},
		{"ns3/svc3:p80", "10.180.0.3:80", "KUBE-SVC-X27LE4BHSL4DOUIK", "KUBE-SEP-OYPFS5VJICHGATKP"},
		{"ns4/svc4:p80", "10.180.0.4:80", "KUBE-SVC-4SW47YFZTEDKD3PK", "KUBE-SEP-UKSFD7AGPMPPLUHC"},
		{"ns4/svc4:p80", "10.180.0.5:80", "KUBE-SVC-4SW47YFZTEDKD3PK", "KUBE-SEP-C6EBXVWJJZMIWKLZ"},
		{"ns5/svc5:p80", "10.180.0.3:80", "KUBE-SVC-NUKIZ6OKUXPJNT4C", "KUBE-SEP-I77PXRDZVX7PMWMN"},
	}
	for _, tc := range tests {
		t.Run(tc.sep, func(t *testing.T) {
			assert.Equal(t, tc.svc, ServiceChainName(PrefixService, tc.spn, ProtocolTCP))
			assert.Equal(t, tc.sep, EndpointChainName(tc.spn, ProtocolTCP, tc.endpoint))
			hash := strings.TrimPrefix(tc.svc, PrefixService)
			assert.Equal(t, "KUBE-SVL-"+hash, ServiceChainName(PrefixServiceLocal, tc.spn, ProtocolTCP))
			assert.Equal(t, "KUBE-EXT-"+hash, ServiceChainName(PrefixExternal, tc.spn, ""))
			assert.Equal(t, "KUBE-FW-"+hash, ServiceChainName(PrefixFirewall, tc.spn, ProtocolTCP))
		})
	}
	// Through the generator too.
	r, err := Generate(refConfig(), Snapshot{
		Services: []Service{{Namespace: "ns1", Name: "svc1", ClusterIP: ip("172.30.0.41"),
			Ports: []ServicePort{{Name: "p80", Protocol: ProtocolTCP, Port: 80}}}},
		EndpointSlices: []EndpointSlice{slice("ns1", "svc1", tcp("p80", 80), ep("10.180.0.1", "x"))},
	})
	require.NoError(t, err)
	s, ok := r.Service("ns1/svc1:p80", ProtocolTCP)
	require.True(t, ok)
	assert.Equal(t, "KUBE-SVC-XPGD46QRK7WJZT7O", s.ClusterChain)
	assert.Equal(t, "KUBE-SEP-SXIVWICOYRO3J4NJ", s.Endpoints[0].Chain)
	ci, ok := r.Chain("KUBE-SEP-SXIVWICOYRO3J4NJ")
	require.True(t, ok)
	assert.Equal(t, ChainKindEndpoint, ci.Kind)
	assert.Equal(t, netip.MustParseAddrPort("10.180.0.1:80"), ci.Endpoint)
}

func TestEndpointSortOrder(t *testing.T) {
	sc := scenarios()[1]
	require.Equal(t, "sort-order", sc.name)
	r, err := Generate(sc.cfg, sc.snap)
	require.NoError(t, err)
	s, _ := r.Service("ns1/svc1:p80", ProtocolTCP)
	var got []string
	for _, e := range s.Endpoints {
		got = append(got, e.Endpoint.String())
	}
	// Plain string order: '0' (0x30) sorts before ':' (0x3a).
	assert.Equal(t, []string{"10.180.0.10:80", "10.180.0.1:80", "10.180.0.2:80", "10.180.0.3:80"}, got)
	assert.Empty(t, s.Endpoints[3].Chain, "not-ready endpoint gets no chain")
	var svcRules []string
	for _, l := range strings.Split(r.SaveNAT(), "\n") {
		if strings.HasPrefix(l, "-A "+s.ClusterChain+" ") && strings.Contains(l, "->") {
			svcRules = append(svcRules, l)
		}
	}
	require.Len(t, svcRules, 3)
	assert.Contains(t, svcRules[0], `"ns1/svc1:p80 -> 10.180.0.10:80" -m statistic --mode random --probability 0.33333333349`)
	assert.Contains(t, svcRules[1], `"ns1/svc1:p80 -> 10.180.0.1:80" -m statistic --mode random --probability 0.50000000000`)
	assert.NotContains(t, svcRules[2], "statistic")
	assert.Contains(t, svcRules[2], "10.180.0.2:80")
}

func TestProbabilities(t *testing.T) {
	tests := []struct {
		n           int
		kube, saved []string
	}{
		{1, []string{""}, []string{""}},
		{2, []string{"0.5000000000", ""}, []string{"0.50000000000", ""}},
		{3, []string{"0.3333333333", "0.5000000000", ""}, []string{"0.33333333349", "0.50000000000", ""}},
		{4, []string{"0.2500000000", "0.3333333333", "0.5000000000", ""}, []string{"0.25000000000", "0.33333333349", "0.50000000000", ""}},
		{5, []string{"0.2000000000", "0.2500000000", "0.3333333333", "0.5000000000", ""}, []string{"0.20000000019", "0.25000000000", "0.33333333349", "0.50000000000", ""}},
	}
	for _, tc := range tests {
		for i := 0; i < tc.n; i++ {
			k, s := Probability(i, tc.n)
			assert.Equal(t, tc.kube[i], k, "n=%d i=%d", tc.n, i)
			assert.Equal(t, tc.saved[i], s, "n=%d i=%d", tc.n, i)
		}
	}
}

func TestVerdictsAndChains(t *testing.T) {
	byName := map[string]scenario{}
	for _, sc := range scenarios() {
		byName[sc.name] = sc
	}
	gen := func(name string) *Rules {
		r, err := Generate(byName[name].cfg, byName[name].snap)
		require.NoError(t, err)
		return r
	}
	t.Run("etp local without local endpoints drops external traffic", func(t *testing.T) {
		r := gen("nodeport-etp-local-no-local")
		s, _ := r.Service("ns2/np:http", ProtocolTCP)
		assert.Equal(t, VerdictDrop, s.ExternalVerdict)
		assert.Equal(t, VerdictNone, s.InternalVerdict)
		assert.Empty(t, s.LocalChain)
		assert.NotEmpty(t, s.ExternalChain)
		assert.Contains(t, r.SaveFilter(), `-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment "ns2/np:http has no local endpoints" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j DROP`)
	})
	t.Run("etp local with local endpoint", func(t *testing.T) {
		r := gen("nodeport-etp-local-with-local")
		s, _ := r.Service("ns2/np:http", ProtocolTCP)
		assert.Equal(t, VerdictNone, s.ExternalVerdict)
		assert.Equal(t, "KUBE-SVL-"+strings.TrimPrefix(s.ClusterChain, "KUBE-SVC-"), s.LocalChain)
		assert.Contains(t, r.SaveNAT(), "-A "+s.ExternalChain+" -j "+s.LocalChain+"\n")
	})
	t.Run("no endpoints rejects", func(t *testing.T) {
		r := gen("no-endpoints")
		s, _ := r.Service("ns6/dns:dns", ProtocolUDP)
		assert.Equal(t, VerdictReject, s.InternalVerdict)
		assert.Contains(t, r.SaveFilter(), `-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "ns6/dns:dns has no endpoints" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable`)
		assert.NotContains(t, r.SaveNAT(), "KUBE-SVC-")
	})
	t.Run("itp local without local endpoints drops", func(t *testing.T) {
		r := gen("itp-local-no-local")
		s, _ := r.Service("net/web", ProtocolTCP)
		assert.Equal(t, VerdictDrop, s.InternalVerdict)
		assert.Contains(t, r.SaveFilter(), `-A KUBE-SERVICES -d 10.111.80.136/32 -p tcp -m comment --comment "net/web has no local endpoints" -m tcp --dport 80 -j DROP`)
	})
	t.Run("terminating endpoints only as fallback", func(t *testing.T) {
		r := gen("terminating-fallback")
		s, _ := r.Service("ns2/np:http", ProtocolTCP)
		for _, e := range s.Endpoints {
			switch e.Endpoint.Addr().String() {
			case "10.244.1.9": // local serving+terminating: used by SVL only
				assert.True(t, e.InLocalChain)
				assert.False(t, e.InClusterChain)
			case "10.244.1.10": // terminating, not serving: unused
				assert.Empty(t, e.Chain)
			case "10.244.2.9": // ready remote: cluster chain
				assert.True(t, e.InClusterChain)
			}
		}
	})
	t.Run("named target port uses slice ports", func(t *testing.T) {
		r := gen("named-targetport")
		nat := r.SaveNAT()
		assert.Contains(t, nat, "--to-destination 10.244.1.30:8080")
		assert.Contains(t, nat, "--to-destination 10.244.2.30:9090")
		p, ok := ResolveTargetPort(ServicePort{Port: 80, TargetPort: FromString("web")},
			[]ContainerPort{{Name: "metrics", ContainerPort: 9100}, {Name: "web", ContainerPort: 8080}})
		assert.True(t, ok)
		assert.Equal(t, 8080, p)
		_, ok = ResolveTargetPort(ServicePort{Port: 80, Protocol: ProtocolUDP, TargetPort: FromString("web")},
			[]ContainerPort{{Name: "web", ContainerPort: 8080}})
		assert.False(t, ok, "protocol must match")
		p, _ = ResolveTargetPort(ServicePort{Port: 80}, nil)
		assert.Equal(t, 80, p)
	})
	t.Run("firewall chain and node allowance", func(t *testing.T) {
		r := gen("loadbalancer-source-ranges")
		s, _ := r.Service("ns5/lb:https", ProtocolTCP)
		nat := r.SaveNAT()
		assert.Contains(t, nat, "-A "+s.FirewallChain+` -s 192.168.122.200/32 -m comment --comment "ns5/lb:https loadbalancer IP" -j `+s.ExternalChain)
		assert.Contains(t, nat, "-A KUBE-SERVICES -d 192.168.122.200/32 -p tcp -m comment --comment \"ns5/lb:https loadbalancer IP\" -m tcp --dport 443 -j "+s.FirewallChain)
	})
}

func TestValidationErrors(t *testing.T) {
	good := webService()
	tests := []struct {
		name   string
		mutate func(*Snapshot)
		cfg    func(*Config)
		field  string
	}{
		{"missing cluster IP", func(s *Snapshot) { s.Services[0].ClusterIP = netip.Addr{} }, nil, "spec.clusterIP"},
		{"ipv6 cluster IP", func(s *Snapshot) { s.Services[0].ClusterIP = ip("fd00::1") }, nil, "spec.clusterIP"},
		{"port out of range", func(s *Snapshot) { s.Services[0].Ports[0].Port = 70000 }, nil, "spec.ports[0].port"},
		{"nodeport on ClusterIP", func(s *Snapshot) { s.Services[0].Ports[0].NodePort = 30001 }, nil, "spec.ports[0].nodePort"},
		{"nodeport out of range", func(s *Snapshot) {
			s.Services[0].Type = ServiceTypeNodePort
			s.Services[0].Ports[0].NodePort = 8080
		}, nil, "spec.ports[0].nodePort"},
		{"nodeport missing", func(s *Snapshot) { s.Services[0].Type = ServiceTypeNodePort }, nil, "spec.ports[0].nodePort"},
		{"duplicate port names", func(s *Snapshot) {
			s.Services[0].Ports = []ServicePort{{Name: "a", Port: 80}, {Name: "a", Port: 81}}
		}, nil, "spec.ports[1].name"},
		{"unnamed multi port", func(s *Snapshot) {
			s.Services[0].Ports = []ServicePort{{Name: "a", Port: 80}, {Port: 81}}
		}, nil, "spec.ports[1].name"},
		{"bad protocol", func(s *Snapshot) { s.Services[0].Ports[0].Protocol = "ICMP" }, nil, "spec.ports[0].protocol"},
		{"bad type", func(s *Snapshot) { s.Services[0].Type = "ExternalName" }, nil, "spec.type"},
		{"etp local on ClusterIP", func(s *Snapshot) { s.Services[0].ExternalTrafficPolicy = TrafficPolicyLocal }, nil, "spec.externalTrafficPolicy"},
		{"affinity timeout", func(s *Snapshot) {
			s.Services[0].SessionAffinity = SessionAffinityClientIP
			s.Services[0].ClientIPTimeoutSeconds = 90000
		}, nil, "spec.sessionAffinityConfig.clientIP.timeoutSeconds"},
		{"endpoint ipv6", func(s *Snapshot) {
			s.EndpointSlices[0].Endpoints[0].Addresses = []netip.Addr{ip("fd00::5")}
		}, nil, "endpoints[0].addresses[0]"},
		{"endpoint no address", func(s *Snapshot) { s.EndpointSlices[0].Endpoints[0].Addresses = nil }, nil, "endpoints[0].addresses"},
		{"slice bad protocol", func(s *Snapshot) { s.EndpointSlices[0].Ports[0].Protocol = "tcp" }, nil, "ports[0].protocol"},
		{"slice duplicate port names", func(s *Snapshot) {
			s.EndpointSlices[0].Ports = append(s.EndpointSlices[0].Ports, s.EndpointSlices[0].Ports[0])
		}, nil, "ports[1].name"},
		{"slice port out of range", func(s *Snapshot) { s.EndpointSlices[0].Ports[0].Port = 70000 }, nil, "ports[0].port"},
		{"second endpoint loopback", func(s *Snapshot) {
			e := s.EndpointSlices[0].Endpoints[0]
			e.Addresses = []netip.Addr{ip("10.244.1.6"), ip("127.0.0.1")}
			s.EndpointSlices[0].Endpoints = append(s.EndpointSlices[0].Endpoints, e)
		}, nil, "endpoints[1].addresses[1]"},
		{"slice missing service label", func(s *Snapshot) { s.EndpointSlices[0].ServiceName = "" }, nil, "metadata.labels[kubernetes.io/service-name]"},
		{"duplicate service", func(s *Snapshot) { s.Services = append(s.Services, s.Services[0]) }, nil, "metadata.name"},
		{"source ranges on ClusterIP", func(s *Snapshot) {
			s.Services[0].LoadBalancerSourceRanges = []netip.Prefix{pfx("10.0.0.0/8")}
		}, nil, "spec.loadBalancerSourceRanges[0]"},
		{"masquerade bit", nil, func(c *Config) { c.MasqueradeBit = 32 }, "masqueradeBit"},
		{"ipv6 cluster cidr", nil, func(c *Config) { c.ClusterCIDR = pfx("fd00::/48") }, "clusterCIDR"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := good
			svc.Ports = append([]ServicePort(nil), good.Ports...)
			snap := Snapshot{
				Services:       []Service{svc},
				EndpointSlices: []EndpointSlice{slice("net", "web", tcp("", 80), ep("10.244.1.5", "cka-w1"))},
			}
			cfg := refConfig()
			if tc.mutate != nil {
				tc.mutate(&snap)
			}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			r, err := Generate(cfg, snap)
			require.Error(t, err)
			assert.Nil(t, r)
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), "error type %T", err)
			assert.Equal(t, tc.field, ve.Field)
			assert.Contains(t, err.Error(), tc.field)
			if ve.Kind != "Config" {
				assert.Contains(t, err.Error(), "net/web")
			}
		})
	}
}

func TestStaleUDP(t *testing.T) {
	cfg := refConfig()
	dns := Service{Namespace: "kube-system", Name: "kube-dns", ClusterIP: ip("10.96.0.10"), Type: ServiceTypeNodePort,
		ExternalIPs: []netip.Addr{ip("192.168.99.53")},
		Ports: []ServicePort{
			{Name: "dns", Protocol: ProtocolUDP, Port: 53, NodePort: 30053},
			{Name: "dns-tcp", Protocol: ProtocolTCP, Port: 53, NodePort: 30054},
		}}
	ports := []EndpointPort{{Name: "dns", Protocol: ProtocolUDP, Port: 53}, {Name: "dns-tcp", Protocol: ProtocolTCP, Port: 53}}
	old := Snapshot{Services: []Service{dns}, EndpointSlices: []EndpointSlice{
		slice("kube-system", "kube-dns", ports, ep("10.244.0.2", "cka-cp1"), ep("10.244.0.3", "cka-cp1"))}}
	cur := Snapshot{Services: []Service{dns}, EndpointSlices: []EndpointSlice{
		slice("kube-system", "kube-dns", ports, ep("10.244.0.3", "cka-cp1"), terminating("10.244.0.4", "cka-w1", false))}}
	flows, err := StaleUDPFlows(cfg, old, cur)
	require.NoError(t, err)
	assert.Equal(t, flows, StaleUDPFlowsAfterSync(cfg, old, cur), "a proxier's form gives the same flows")
	var got []string
	for _, f := range flows {
		got = append(got, f.String())
	}
	assert.Equal(t, []string{
		"conntrack -D -p udp --orig-dst 10.96.0.10 --reply-src 10.244.0.2",
		"conntrack -D -p udp --orig-dst 192.168.99.53 --reply-src 10.244.0.2",
		"conntrack -D -p udp --orig-port-dst 30053 --reply-src 10.244.0.2",
	}, got)

	r, err := Generate(cfg, cur)
	require.NoError(t, err)
	assert.True(t, r.StaleUDPEntry(ip("10.96.0.10"), 53, ip("10.244.0.2")), "removed endpoint")
	assert.False(t, r.StaleUDPEntry(ip("10.96.0.10"), 53, ip("10.244.0.3")), "serving endpoint")
	assert.True(t, r.StaleUDPEntry(ip("10.96.0.10"), 53, ip("10.96.0.10")), "entry created before DNAT existed")
	assert.True(t, r.StaleUDPEntry(ip("192.168.122.21"), 30053, ip("10.244.0.4")), "not serving endpoint via NodePort")
	assert.False(t, r.StaleUDPEntry(ip("8.8.8.8"), 53, ip("8.8.8.8")), "not a service")
	assert.False(t, r.StaleUDPEntry(ip("192.168.122.21"), 30054, ip("10.244.0.2")), "TCP NodePort is not reconciled")
}

func TestJumpRulesAndChainInfo(t *testing.T) {
	r, err := Generate(refConfig(), Snapshot{})
	require.NoError(t, err)
	j := r.JumpRules()
	require.Len(t, j, 14)
	assert.Equal(t, JumpRule{Table: "nat", Chain: "PREROUTING", Args: []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}}, j[10])
	ci, ok := r.Chain("KUBE-MARK-MASQ")
	require.True(t, ok)
	assert.Equal(t, ChainKindTopLevel, ci.Kind)
	assert.NotEmpty(t, ci.Description)
	_, ok = r.Chain("KUBE-SVC-NOPE")
	assert.False(t, ok)
	// kube-proxy formats the mark with Go's %#08x, which pads after "0x".
	assert.Equal(t, "0x00004000", r.MasqueradeMark)
	assert.Equal(t, []string{"KUBE-PROXY-CANARY"}, r.EnsuredChains()["mangle"])
}

func TestLargeClusterDropsEndpointComments(t *testing.T) {
	var eps []Endpoint
	for i := 0; i < 1001; i++ {
		eps = append(eps, ep(netip.AddrFrom4([4]byte{10, 244, byte(1 + i/250), byte(1 + i%250)}).String(), "cka-w2"))
	}
	svc := webService()
	r, err := Generate(refConfig(), Snapshot{
		Services:       []Service{svc, {Namespace: "net", Name: "headless", Headless: true}},
		EndpointSlices: []EndpointSlice{slice("net", "web", tcp("", 80), eps...)},
	})
	require.NoError(t, err)
	require.Len(t, r.Services, 1, "headless services are not proxied")
	nat := r.SaveNAT()
	assert.NotContains(t, nat, "-> 10.244.")
	assert.Contains(t, nat, `-A KUBE-SERVICES -d 10.111.80.136/32 -p tcp -m comment --comment "net/web cluster IP"`)
	e0 := r.Services[0].Endpoints[0]
	assert.Contains(t, nat, "-A "+e0.Chain+" -s "+e0.Endpoint.Addr().String()+"/32 -j KUBE-MARK-MASQ\n")
}

// TestRestoreLen: restoreLen is the length of the restore line of every
// rule the scenarios generate (restoreLine grows its builder by it once).
func TestRestoreLen(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			r, err := Generate(sc.cfg, sc.snap)
			require.NoError(t, err)
			for _, tb := range []*table{r.filter, r.nat} {
				for i := range tb.rules {
					ru := &tb.rules[i]
					assert.Equal(t, len(ru.restoreLine()), ru.restoreLen(), "%s", ru.restoreLine())
				}
			}
		})
	}
}
