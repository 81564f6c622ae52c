package kubeproxy

import "net/netip"

// Scenarios shared by the golden tests and the real-kernel test.

var (
	ip  = netip.MustParseAddr
	pfx = netip.MustParsePrefix
)

func refConfig() Config {
	return Config{
		NodeName:    "cka-w1",
		NodeIPs:     []netip.Addr{ip("192.168.122.21")},
		ClusterCIDR: pfx("10.244.0.0/16"),
	}
}

func ep(addr, node string) Endpoint {
	return Endpoint{Addresses: []netip.Addr{ip(addr)}, NodeName: node}
}

func terminating(addr, node string, serving bool) Endpoint {
	e := ep(addr, node)
	e.Conditions = EndpointConditions{Ready: Bool(false), Serving: Bool(serving), Terminating: Bool(true)}
	return e
}

func notReady(addr, node string) Endpoint {
	e := ep(addr, node)
	e.Conditions = EndpointConditions{Ready: Bool(false), Serving: Bool(false), Terminating: Bool(false)}
	return e
}

func slice(ns, svc string, ports []EndpointPort, eps ...Endpoint) EndpointSlice {
	return EndpointSlice{Namespace: ns, Name: svc + "-abcde", ServiceName: svc, Ports: ports, Endpoints: eps}
}

func tcp(name string, port int) []EndpointPort {
	return []EndpointPort{{Name: name, Protocol: ProtocolTCP, Port: port}}
}

type scenario struct {
	name string
	cfg  Config
	snap Snapshot
}

func webService() Service {
	return Service{
		Namespace: "net", Name: "web", Type: ServiceTypeClusterIP,
		ClusterIP: ip("10.111.80.136"),
		Ports:     []ServicePort{{Protocol: ProtocolTCP, Port: 80, TargetPort: FromInt(80)}},
	}
}

func scenarios() []scenario {
	cfg := refConfig()
	var out []scenario
	add := func(name string, c Config, s Snapshot) { out = append(out, scenario{name, c, s}) }

	add("reference-web", cfg, Snapshot{
		Services:       []Service{webService()},
		EndpointSlices: []EndpointSlice{slice("net", "web", tcp("", 80), ep("10.244.1.5", "cka-w1"), ep("10.244.2.7", "cka-w2"))},
	})

	add("sort-order", cfg, Snapshot{
		Services: []Service{{Namespace: "ns1", Name: "svc1", ClusterIP: ip("172.30.0.41"),
			Ports: []ServicePort{{Name: "p80", Protocol: ProtocolTCP, Port: 80}}}},
		EndpointSlices: []EndpointSlice{slice("ns1", "svc1", tcp("p80", 80),
			ep("10.180.0.2", "cka-w2"), ep("10.180.0.10", "cka-w2"), ep("10.180.0.1", "cka-w1"),
			notReady("10.180.0.3", "cka-w1"))},
	})

	np := Service{Namespace: "ns2", Name: "np", Type: ServiceTypeNodePort, ClusterIP: ip("10.96.20.2"),
		ExternalTrafficPolicy: TrafficPolicyLocal,
		Ports:                 []ServicePort{{Name: "http", Protocol: ProtocolTCP, Port: 80, TargetPort: FromInt(8080), NodePort: 30080}}}
	add("nodeport-etp-local-with-local", cfg, Snapshot{
		Services:       []Service{np},
		EndpointSlices: []EndpointSlice{slice("ns2", "np", tcp("http", 8080), ep("10.244.1.9", "cka-w1"), ep("10.244.2.9", "cka-w2"))},
	})
	add("nodeport-etp-local-no-local", cfg, Snapshot{
		Services:       []Service{np},
		EndpointSlices: []EndpointSlice{slice("ns2", "np", tcp("http", 8080), ep("10.244.2.9", "cka-w2"))},
	})
	npc := np
	npc.ExternalTrafficPolicy = ""
	add("nodeport-cluster", cfg, Snapshot{
		Services:       []Service{npc},
		EndpointSlices: []EndpointSlice{slice("ns2", "np", tcp("http", 8080), ep("10.244.2.9", "cka-w2"))},
	})

	lb := Service{Namespace: "ns5", Name: "lb", Type: ServiceTypeLoadBalancer, ClusterIP: ip("10.96.50.5"),
		LoadBalancerIngress:      []netip.Addr{ip("192.168.122.200")},
		LoadBalancerSourceRanges: []netip.Prefix{pfx("203.0.113.0/25"), pfx("192.168.122.0/24")},
		Ports:                    []ServicePort{{Name: "https", Protocol: ProtocolTCP, Port: 443, TargetPort: FromInt(8443), NodePort: 31443}}}
	add("loadbalancer-source-ranges", cfg, Snapshot{
		Services:       []Service{lb},
		EndpointSlices: []EndpointSlice{slice("ns5", "lb", tcp("https", 8443), ep("10.244.1.20", "cka-w1"), ep("10.244.2.20", "cka-w2"))},
	})
	lbl := lb
	lbl.LoadBalancerSourceRanges = nil
	lbl.ExternalTrafficPolicy = TrafficPolicyLocal
	lbl.HealthCheckNodePort = 32000
	add("loadbalancer-etp-local-healthcheck", cfg, Snapshot{
		Services:       []Service{lbl},
		EndpointSlices: []EndpointSlice{slice("ns5", "lb", tcp("https", 8443), ep("10.244.1.20", "cka-w1"), ep("10.244.2.20", "cka-w2"))},
	})

	ext := Service{Namespace: "ns4", Name: "ext", ClusterIP: ip("10.96.40.4"),
		ExternalIPs: []netip.Addr{ip("192.168.99.22"), ip("192.168.99.23")},
		Ports:       []ServicePort{{Name: "p80", Protocol: ProtocolTCP, Port: 80}}}
	add("external-ips", cfg, Snapshot{
		Services:       []Service{ext},
		EndpointSlices: []EndpointSlice{slice("ns4", "ext", tcp("p80", 80), ep("10.180.0.4", "cka-w2"), ep("10.180.0.5", "cka-w1"))},
	})

	none := lb
	none.LoadBalancerSourceRanges = nil
	none.ExternalIPs = []netip.Addr{ip("192.168.99.30")}
	add("no-endpoints", cfg, Snapshot{
		Services: []Service{none, {Namespace: "ns6", Name: "dns", ClusterIP: ip("10.96.0.10"),
			Ports: []ServicePort{{Name: "dns", Protocol: ProtocolUDP, Port: 53}, {Name: "dns-tcp", Protocol: ProtocolTCP, Port: 53}}}},
		EndpointSlices: []EndpointSlice{slice("ns5", "lb", tcp("https", 8443), notReady("10.244.2.20", "cka-w2"))},
	})

	aff := webService()
	aff.SessionAffinity = SessionAffinityClientIP
	aff2 := Service{Namespace: "net", Name: "sticky", ClusterIP: ip("10.96.7.7"), SessionAffinity: SessionAffinityClientIP,
		ClientIPTimeoutSeconds: 600, Ports: []ServicePort{{Name: "udp", Protocol: ProtocolUDP, Port: 5000}}}
	add("session-affinity", cfg, Snapshot{
		Services: []Service{aff, aff2},
		EndpointSlices: []EndpointSlice{
			slice("net", "web", tcp("", 80), ep("10.244.1.5", "cka-w1"), ep("10.244.2.7", "cka-w2")),
			slice("net", "sticky", []EndpointPort{{Name: "udp", Protocol: ProtocolUDP, Port: 5000}}, ep("10.244.2.8", "cka-w2")),
		},
	})

	itp := webService()
	itp.InternalTrafficPolicy = TrafficPolicyLocal
	add("itp-local-no-local", cfg, Snapshot{
		Services:       []Service{itp},
		EndpointSlices: []EndpointSlice{slice("net", "web", tcp("", 80), ep("10.244.2.7", "cka-w2"))},
	})
	add("itp-local-with-local", cfg, Snapshot{
		Services:       []Service{itp},
		EndpointSlices: []EndpointSlice{slice("net", "web", tcp("", 80), ep("10.244.1.5", "cka-w1"), ep("10.244.1.6", "cka-w1"), ep("10.244.2.7", "cka-w2"))},
	})

	named := Service{Namespace: "shop", Name: "api", ClusterIP: ip("10.96.30.3"),
		Ports: []ServicePort{{Name: "http", Protocol: ProtocolTCP, Port: 80, TargetPort: FromString("web")}}}
	add("named-targetport", cfg, Snapshot{
		Services: []Service{named},
		EndpointSlices: []EndpointSlice{
			{Namespace: "shop", Name: "api-aaaaa", ServiceName: "api", Ports: tcp("http", 8080), Endpoints: []Endpoint{ep("10.244.1.30", "cka-w1")}},
			{Namespace: "shop", Name: "api-bbbbb", ServiceName: "api", Ports: tcp("http", 9090), Endpoints: []Endpoint{ep("10.244.2.30", "cka-w2")}},
		},
	})

	add("terminating-fallback", cfg, Snapshot{
		Services: []Service{np},
		EndpointSlices: []EndpointSlice{slice("ns2", "np", tcp("http", 8080),
			terminating("10.244.1.9", "cka-w1", true), terminating("10.244.1.10", "cka-w1", false), ep("10.244.2.9", "cka-w2"))},
	})

	opt := refConfig()
	opt.DisableLocalhostNodePorts = true
	opt.MasqueradeAll = true
	opt.ConntrackTCPBeLiberal = true
	opt.MasqueradeBit = 15
	add("options", opt, Snapshot{
		Services:       []Service{npc},
		EndpointSlices: []EndpointSlice{slice("ns2", "np", tcp("http", 8080), ep("10.244.2.9", "cka-w2"))},
	})
	addrs := refConfig()
	addrs.ClusterCIDR = netip.Prefix{}
	addrs.NodePortAddresses = []netip.Prefix{pfx("192.168.122.0/24"), pfx("127.0.0.0/8")}
	add("nodeport-addresses-no-detector", addrs, Snapshot{
		Services:       []Service{np},
		EndpointSlices: []EndpointSlice{slice("ns2", "np", tcp("http", 8080), ep("10.244.1.9", "cka-w1"))},
	})
	acct := refConfig()
	acct.NFAcct = true
	add("nfacct", acct, Snapshot{
		Services:       []Service{npc},
		EndpointSlices: []EndpointSlice{slice("ns2", "np", tcp("http", 8080), ep("10.244.2.9", "cka-w2"))},
	})
	sctp := Service{Namespace: "tel", Name: "sig", Type: ServiceTypeNodePort, ClusterIP: ip("10.96.9.9"),
		Ports: []ServicePort{{Name: "sctp", Protocol: ProtocolSCTP, Port: 3868, NodePort: 30868}}}
	add("sctp-nodeport", cfg, Snapshot{
		Services:       []Service{sctp},
		EndpointSlices: []EndpointSlice{slice("tel", "sig", []EndpointPort{{Name: "sctp", Protocol: ProtocolSCTP, Port: 3868}}, ep("10.244.2.40", "cka-w2"))},
	})
	return out
}
