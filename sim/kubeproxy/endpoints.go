package kubeproxy

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
)

type svcPortKey struct {
	namespace, name, port string
	proto                 Protocol
}

// endpoint is one entry of kube-proxy's EndpointsMap for a service port.
type endpoint struct {
	addr        netip.AddrPort
	str         string // "ip:port", the sort key and hash input
	local       bool
	ready       bool
	serving     bool
	terminating bool
	chain       string
}

// buildEndpointsMap mirrors kube-proxy's EndpointSliceCache: one entry per
// (slice port, endpoint) using only the endpoint's first address, ports
// without a number skipped, duplicates by "ip:port" merged (a local copy wins),
// and each list sorted by the string "ip:port".
func buildEndpointsMap(cfg *Config, slicesIn []EndpointSlice) map[svcPortKey][]*endpoint {
	order := make([]int, len(slicesIn))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := &slicesIn[a], &slicesIn[b]
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.ServiceName, y.ServiceName), strings.Compare(x.Name, y.Name))
	})
	sets := map[svcPortKey]map[string]*endpoint{}
	for _, i := range order {
		s := &slicesIn[i]
		for _, p := range s.Ports {
			if p.Port == 0 {
				continue
			}
			k := svcPortKey{s.Namespace, s.ServiceName, p.Name, normProto(p.Protocol)}
			set := sets[k]
			if set == nil {
				set = map[string]*endpoint{}
				sets[k] = set
			}
			for _, e := range s.Endpoints {
				if len(e.Addresses) == 0 {
					continue
				}
				ap := netip.AddrPortFrom(e.Addresses[0], uint16(p.Port))
				ep := &endpoint{
					addr:        ap,
					str:         ap.String(),
					local:       e.NodeName != "" && e.NodeName == cfg.NodeName,
					ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
					serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
					terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
				}
				if _, dup := set[ep.str]; !dup || ep.local {
					set[ep.str] = ep
				}
			}
		}
	}
	out := make(map[svcPortKey][]*endpoint, len(sets))
	for k, set := range sets {
		list := make([]*endpoint, 0, len(set))
		for _, ep := range set {
			ep.chain = EndpointChainName(ServicePortName(k.namespace, k.name, k.port), k.proto, ep.str)
			list = append(list, ep)
		}
		slices.SortFunc(list, func(a, b *endpoint) int { return strings.Compare(a.str, b.str) })
		out[k] = list
	}
	return out
}

func filterEndpoints(eps []*endpoint, keep func(*endpoint) bool) []*endpoint {
	var out []*endpoint
	for _, ep := range eps {
		if keep(ep) {
			out = append(out, ep)
		}
	}
	return out
}

// categorize mirrors proxy.CategorizeEndpoints (without topology hints):
// cluster endpoints are the ready ones, falling back to serving+terminating
// ones when none is ready; local endpoints are the node's ready ones, falling
// back to its serving+terminating ones. allReachable is every endpoint some
// chain of this service uses, sorted by "ip:port".
func categorize(eps []*endpoint, sp *svcPort) (cluster, local, allReachable []*endpoint, hasAny bool) {
	useServingTerminating := false
	if sp.usesClusterEndpoints() {
		cluster = filterEndpoints(eps, func(ep *endpoint) bool { return ep.ready })
		if len(cluster) == 0 {
			cluster = filterEndpoints(eps, func(ep *endpoint) bool { return ep.serving && ep.terminating })
		}
		if len(cluster) > 0 {
			hasAny = true
		}
	}
	if !sp.usesLocalEndpoints() {
		return cluster, nil, cluster, hasAny
	}
	var localReady, localST bool
	for _, ep := range eps {
		if ep.ready {
			hasAny = true
			if ep.local {
				localReady = true
			}
		} else if ep.serving && ep.terminating {
			hasAny = true
			if ep.local {
				localST = true
			}
		}
	}
	if localReady {
		local = filterEndpoints(eps, func(ep *endpoint) bool { return ep.local && ep.ready })
	} else if localST {
		useServingTerminating = true
		local = filterEndpoints(eps, func(ep *endpoint) bool { return ep.local && ep.serving && ep.terminating })
	}
	if !sp.usesClusterEndpoints() {
		return nil, local, local, hasAny
	}
	if !useServingTerminating {
		return cluster, local, cluster, hasAny
	}
	seen := map[string]bool{}
	for _, ep := range cluster {
		seen[ep.str] = true
		allReachable = append(allReachable, ep)
	}
	for _, ep := range local {
		if !seen[ep.str] {
			allReachable = append(allReachable, ep)
		}
	}
	slices.SortFunc(allReachable, func(a, b *endpoint) int { return strings.Compare(a.str, b.str) })
	return cluster, local, allReachable, hasAny
}
