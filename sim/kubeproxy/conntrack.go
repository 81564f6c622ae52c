package kubeproxy

import (
	"net/netip"
	"slices"
	"strconv"
)

// StaleUDPEntry reports whether kube-proxy's conntrack reconciler (v1.31+,
// pkg/proxy/conntrack CleanStaleEntries, run after a sync that changed UDP
// endpoints) deletes a UDP conntrack entry with this original destination
// address and port and this reply source (the DNATed endpoint, or the
// original destination if the entry was not DNATed):
//
//   - if origDst is the cluster IP, an external IP or a load-balancer IP of
//     a UDP service port and replySrc is not a serving endpoint of that
//     port, the entry is deleted (whatever the port: kube-proxy matches the
//     address only);
//   - if origDstPort is the NodePort of a UDP service port and replySrc is
//     not one of its serving endpoints, the entry is deleted.
//
// When two UDP service ports share an address, kube-proxy's map keeps the
// endpoints of whichever it visits last (Go map order); kubewalk keeps the
// last in sorted service-port order. TCP and SCTP entries are never deleted.
func (r *Rules) StaleUDPEntry(origDst netip.Addr, origDstPort uint16, replySrc netip.Addr) bool {
	if set, ok := r.udpIPs[origDst]; ok && !set[replySrc] {
		return true
	}
	if set, ok := r.udpNodePorts[origDstPort]; ok && !set[replySrc] {
		return true
	}
	return false
}

// StaleUDPFlow names the UDP conntrack entries kube-proxy deletes because an
// endpoint of a UDP service port stopped serving: entries whose original
// destination is OrigDst (any port) — or, for a NodePort, whose original
// destination port is NodePort — and whose reply source is Endpoint.
type StaleUDPFlow struct {
	// ServicePortName is "namespace/name[:port]".
	ServicePortName string
	// OrigDst is the cluster IP, external IP or load-balancer IP; invalid
	// for a NodePort flow.
	OrigDst netip.Addr
	// Port is the service port (informational: kube-proxy does not match
	// it) or, for a NodePort flow, the node port.
	Port int
	// NodePort is true when the flow is matched by destination port
	// (any node address) rather than by OrigDst.
	NodePort bool
	// Endpoint is the removed endpoint IP (the entry's reply source).
	Endpoint netip.Addr
}

// String renders the flow as the equivalent conntrack(8) command.
func (f StaleUDPFlow) String() string {
	if f.NodePort {
		return "conntrack -D -p udp --orig-port-dst " + strconv.Itoa(f.Port) + " --reply-src " + f.Endpoint.String()
	}
	return "conntrack -D -p udp --orig-dst " + f.OrigDst.String() + " --reply-src " + f.Endpoint.String()
}

// StaleUDPFlows compares two snapshots seen by the same node and lists, for
// every UDP service port of the new snapshot, the flows of endpoints that were
// serving before and are not serving (or gone) now, once per service address
// (cluster IP, external IPs, load-balancer IPs) and NodePort. These are the
// entries the reconciler (see Rules.StaleUDPEntry) removes because of the
// change; entries of a deleted Service are left to time out, as in
// kube-proxy. The result is sorted by service port, endpoint, then address.
// Both snapshots are validated by generating their rules.
func StaleUDPFlows(cfg Config, old, cur Snapshot) ([]StaleUDPFlow, error) {
	if _, err := Generate(cfg, old); err != nil {
		return nil, err
	}
	if _, err := Generate(cfg, cur); err != nil {
		return nil, err
	}
	return StaleUDPFlowsAfterSync(cfg, old, cur), nil
}

// StaleUDPFlowsAfterSync is StaleUDPFlows for a proxier that has already
// generated the rules of both snapshots with cfg without error (its last
// sync and this one), so they are not generated again: kube-proxy, too,
// finds stale flows from the endpoint maps it built for the sync, not by
// regenerating its rules.
func StaleUDPFlowsAfterSync(cfg Config, old, cur Snapshot) []StaleUDPFlow {
	// Only Services with a UDP port can have stale flows: look at those
	// and their slices alone (a cluster has thousands of TCP Services).
	var udp []Service
	names := map[[2]string]bool{}
	for i := range cur.Services {
		if s := &cur.Services[i]; hasUDPPort(s) {
			udp = append(udp, *s)
			names[[2]string{s.Namespace, s.Name}] = true
		}
	}
	if len(udp) == 0 {
		return nil
	}
	slicesOf := func(in []EndpointSlice) []EndpointSlice {
		var out []EndpointSlice
		for _, es := range in {
			if names[[2]string{es.Namespace, es.ServiceName}] {
				out = append(out, es)
			}
		}
		return out
	}
	oldEps := buildEndpointsMap(&cfg, slicesOf(old.EndpointSlices))
	newEps := buildEndpointsMap(&cfg, slicesOf(cur.EndpointSlices))
	var out []StaleUDPFlow
	for _, sp := range servicePorts(udp) {
		if sp.proto != ProtocolUDP {
			continue
		}
		k := svcPortKey{sp.svc.Namespace, sp.svc.Name, sp.port.Name, sp.proto}
		serving := func(eps []*endpoint) map[netip.Addr]bool {
			m := map[netip.Addr]bool{}
			for _, ep := range eps {
				if ep.serving {
					m[ep.addr.Addr()] = true
				}
			}
			return m
		}
		before, after := serving(oldEps[k]), serving(newEps[k])
		var removed []netip.Addr
		for a := range before {
			if !after[a] {
				removed = append(removed, a)
			}
		}
		slices.SortFunc(removed, func(a, b netip.Addr) int { return a.Compare(b) })
		addrs := append(append([]netip.Addr{sp.clusterIP}, sp.externalIPs...), sp.lbIPs...)
		for _, ep := range removed {
			for _, a := range addrs {
				out = append(out, StaleUDPFlow{ServicePortName: sp.name, OrigDst: a, Port: sp.port.Port, Endpoint: ep})
			}
			if sp.port.NodePort != 0 {
				out = append(out, StaleUDPFlow{ServicePortName: sp.name, Port: sp.port.NodePort, NodePort: true, Endpoint: ep})
			}
		}
	}
	return out
}

// HasUDPPort reports whether one of services has a UDP port: without
// one, StaleUDPFlowsAfterSync finds no stale flow whatever the snapshots'
// EndpointSlices (a caller that knows the answer for a list of Services
// need not ask again).
func HasUDPPort(services []Service) bool {
	for i := range services {
		if hasUDPPort(&services[i]) {
			return true
		}
	}
	return false
}

// hasUDPPort reports whether s has a UDP port.
func hasUDPPort(s *Service) bool {
	for _, p := range s.Ports {
		if normProto(p.Protocol) == ProtocolUDP {
			return true
		}
	}
	return false
}
