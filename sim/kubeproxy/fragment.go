package kubeproxy

import (
	"fmt"
	"net/netip"
	"slices"
)

// genContext is what the rules of every service port depend on besides
// the port and its endpoints: the configuration and the large-cluster
// mode.
type genContext struct {
	cfg                 *Config
	localhostNodePorts  bool
	nodeIP              netip.Addr
	largeCluster        bool
	ifLocal, ifNotLocal []part
	// topChains are how many chains of the filter and nat tables begin
	// declared (the top-level ones).
	topChains [2]int
}

// newGenContext returns the context of a sync of ports.
func newGenContext(cfg *Config, ports []*svcPort, epMap map[svcPortKey][]*endpoint) *genContext {
	total := 0
	for _, sp := range ports {
		total += len(epMap[sp.key()])
	}
	return newGenContextTotal(cfg, total)
}

// newGenContextTotal is newGenContext for total endpoints.
func newGenContextTotal(cfg *Config, total int) *genContext {
	g := &genContext{cfg: cfg, localhostNodePorts: cfg.localhostNodePorts(), largeCluster: total > largeClusterEndpointsThreshold}
	if len(cfg.NodeIPs) > 0 {
		g.nodeIP = cfg.NodeIPs[0]
	}
	if cfg.ClusterCIDR.IsValid() {
		c := cfg.ClusterCIDR.Masked().String()
		g.ifLocal = []part{src(c, false)}
		g.ifNotLocal = []part{src(c, true)}
	}
	return g
}

// svcComment is the comment of endpoint rules, none in large-cluster mode.
func (g *genContext) svcComment(c string) []part {
	if g.largeCluster {
		return nil
	}
	return []part{comment(c)}
}

// key is the port's key in the endpoints map.
func (sp *svcPort) key() svcPortKey {
	return svcPortKey{sp.svc.Namespace, sp.svc.Name, sp.port.Name, sp.proto}
}

// portFrag is what one service port writes at a sync, in write order: its
// rules in the top-level chains (written at every sync), then its own
// chains (left out by a partial sync when the Service did not change),
// with the explanation of the port and its chains.
type portFrag struct {
	// filter and nat hold the port's rules (nat without a declared map:
	// a port declares a few chains, found in nat.chains).
	filter, nat table
	// natTop: nat.rules[:natTop] are top-level chains' rules.
	natTop int
	spr    ServicePortRules
	chains []ChainInfo
	// udp is the serving endpoint IPs of a UDP port (nil otherwise).
	udp map[netip.Addr]bool
}

// port writes the rules of service port sp with endpoints allEps.
func (g *genContext) port(sp *svcPort, allEps []*endpoint) *portFrag {
	f := &portFrag{}
	clusterEps, localEps, reachable, hasEndpoints := categorize(allEps, sp)
	spn := sp.name
	p := sp.lproto
	ip := sp.clusterIP.String()
	portNum := sp.port.Port

	usesClusterChain := len(clusterEps) > 0 && sp.usesClusterEndpoints()
	usesLocalChain := len(localEps) > 0 && sp.usesLocalEndpoints()

	internalChain, hasInternal := policyChain(sp.internalPolicyLocal, sp.svcChain, sp.svlChain, hasEndpoints, len(localEps))
	externalPolicyChain, hasExternal := policyChain(sp.externalPolicyLocal, sp.svcChain, sp.svlChain, hasEndpoints, len(localEps))
	extChain := sp.extChain
	usesExtChain := hasEndpoints && sp.externallyAccessible()
	lbChain := extChain
	usesFW := hasEndpoints && len(sp.lbIPs) > 0 && len(sp.sourceRanges) > 0
	if usesFW {
		lbChain = sp.fwChain
	}

	var intVerdict, extVerdict Verdict
	var intComment, extComment string
	if !hasEndpoints {
		intVerdict, extVerdict = VerdictReject, VerdictReject
		intComment = spn + " has no endpoints"
		extComment = intComment
	} else {
		if !hasInternal {
			intVerdict = VerdictDrop
			intComment = spn + " has no local endpoints"
		}
		if !hasExternal {
			extVerdict = VerdictDrop
			extComment = spn + " has no local endpoints"
		}
	}

	// Cluster IP.
	if hasInternal {
		f.nat.add(ChainServices, comment(spn+" cluster IP"), proto(p), dst(ip, false), dport(portNum), jump(internalChain))
	} else {
		f.filter.add(ChainServices, comment(intComment), proto(p), dst(ip, false), dport(portNum), verdictPart(intVerdict))
	}
	// External IPs.
	for _, eip := range sp.externalIPs {
		if hasEndpoints {
			f.nat.add(ChainServices, comment(spn+" external IP"), proto(p), dst(eip.String(), false), dport(portNum), jump(extChain))
		}
		if !hasExternal {
			f.filter.add(ChainExternalServices, comment(extComment), proto(p), dst(eip.String(), false), dport(portNum), verdictPart(extVerdict))
		}
	}
	// Load-balancer ingress.
	for _, lb := range sp.lbIPs {
		if hasEndpoints {
			f.nat.add(ChainServices, comment(spn+" loadbalancer IP"), proto(p), dst(lb.String(), false), dport(portNum), jump(lbChain))
		}
		if usesFW {
			f.filter.add(ChainProxyFirewall, comment(fmt.Sprintf("%s traffic not accepted by %s", spn, sp.fwChain)), proto(p), dst(lb.String(), false), dport(portNum), jump("DROP"))
		}
	}
	if !hasExternal {
		for _, lb := range sp.lbIPs {
			f.filter.add(ChainExternalServices, comment(extComment), proto(p), dst(lb.String(), false), dport(portNum), verdictPart(extVerdict))
		}
	}
	// Node ports.
	if np := sp.port.NodePort; np != 0 {
		if hasEndpoints {
			if g.localhostNodePorts && g.cfg.NFAcct {
				f.nat.add(ChainNodePorts, comment(spn), proto(p), dst("127.0.0.0/8", false), dport(np),
					same("-m nfacct --nfacct-name "+NFAcctLocalhostNodePortAcc), jump(extChain))
			}
			f.nat.add(ChainNodePorts, comment(spn), proto(p), dport(np), jump(extChain))
		}
		if !hasExternal {
			f.filter.add(ChainExternalServices, comment(extComment), same("-m addrtype --dst-type LOCAL"), proto(p), dport(np), verdictPart(extVerdict))
		}
	}
	// Health-check node port.
	if sp.healthCheckNodePort != 0 {
		f.filter.add(ChainNodePorts, comment(spn+" health check node port"), proto("tcp"), dport(sp.healthCheckNodePort), jump("ACCEPT"))
	}

	// A partial sync leaves the chains of an unchanged Service out (it
	// still counted their endpoints for the large-cluster mode): what
	// follows is the Service's own.
	f.natTop = len(f.nat.rules)

	// Internal traffic masquerade.
	if hasInternal {
		base := []part{comment(spn + " cluster IP"), proto(p), dst(ip, false), dport(portNum)}
		if g.cfg.MasqueradeAll {
			f.nat.add(internalChain, append(base, jump(ChainMarkMasq))...)
		} else if len(g.ifNotLocal) > 0 {
			f.nat.add(internalChain, append(append(base, g.ifNotLocal...), jump(ChainMarkMasq))...)
		}
	}

	// External traffic chain.
	if usesExtChain {
		f.nat.chain(extChain)
		if !sp.externalPolicyLocal {
			f.nat.add(extChain, comment("masquerade traffic for "+spn+" external destinations"), jump(ChainMarkMasq))
		} else {
			if len(g.ifLocal) > 0 {
				f.nat.add(extChain, append([]part{comment("pod traffic for " + spn + " external destinations")}, append(g.ifLocal, jump(sp.svcChain))...)...)
			}
			f.nat.add(extChain, comment("masquerade LOCAL traffic for "+spn+" external destinations"), same("-m addrtype --src-type LOCAL"), jump(ChainMarkMasq))
			f.nat.add(extChain, comment("route LOCAL traffic for "+spn+" external destinations"), same("-m addrtype --src-type LOCAL"), jump(sp.svcChain))
		}
		if hasExternal {
			f.nat.add(extChain, jump(externalPolicyChain))
		}
	}

	// Firewall chain.
	if usesFW {
		f.nat.chain(sp.fwChain)
		allowFromNode := false
		for _, cidr := range sp.sourceRanges {
			f.nat.add(sp.fwChain, comment(spn+" loadbalancer IP"), src(cidr.String(), false), jump(extChain))
			if g.nodeIP.IsValid() && cidr.Contains(g.nodeIP) {
				allowFromNode = true
			}
		}
		if allowFromNode {
			for _, lb := range sp.lbIPs {
				f.nat.add(sp.fwChain, comment(spn+" loadbalancer IP"), src(lb.String(), false), jump(extChain))
			}
		}
		f.nat.add(sp.fwChain, comment("other traffic to "+spn+" will be dropped by KUBE-PROXY-FIREWALL"))
	}

	if usesClusterChain {
		f.nat.chain(sp.svcChain)
		writeServiceToEndpoints(&f.nat, sp, sp.svcChain, clusterEps, g.svcComment)
	}
	if usesLocalChain {
		f.nat.chain(sp.svlChain)
		writeServiceToEndpoints(&f.nat, sp, sp.svlChain, localEps, g.svcComment)
	}
	for _, ep := range reachable {
		f.nat.chain(ep.chain)
		c := g.svcComment(spn)
		f.nat.add(ep.chain, append(slices.Clone(c), src(ep.addr.Addr().String(), false), jump(ChainMarkMasq))...)
		parts := slices.Clone(c)
		if sp.affinity {
			parts = append(parts, match("-m recent --name "+ep.chain+" --set", "-m recent --set --name "+ep.chain+" --mask 255.255.255.255 --rsource"))
		}
		parts = append(parts, proto(p), jump("DNAT --to-destination "+ep.str))
		f.nat.add(ep.chain, parts...)
	}

	// Describe the service port.
	spr := ServicePortRules{
		ServicePortName: spn,
		Namespace:       sp.svc.Namespace,
		Name:            sp.svc.Name,
		PortName:        sp.port.Name,
		Protocol:        sp.proto,
		ClusterIP:       sp.clusterIP,
		Port:            portNum,
		NodePort:        sp.port.NodePort,
		ExternalIPs:     slices.Clone(sp.externalIPs),
		LoadBalancerIPs: slices.Clone(sp.lbIPs),
		HasEndpoints:    hasEndpoints,
		InternalVerdict: intVerdict,
		ExternalVerdict: extVerdict,
	}
	if usesClusterChain {
		spr.ClusterChain = sp.svcChain
		f.chains = append(f.chains, ChainInfo{sp.svcChain, ChainKindService, spn, netip.AddrPort{}, "picks one of " + spn + "'s cluster-wide endpoints (Cluster traffic policy)"})
	}
	if usesLocalChain {
		spr.LocalChain = sp.svlChain
		f.chains = append(f.chains, ChainInfo{sp.svlChain, ChainKindLocal, spn, netip.AddrPort{}, "picks one of " + spn + "'s endpoints on this node (Local traffic policy)"})
	}
	if usesExtChain {
		spr.ExternalChain = extChain
		f.chains = append(f.chains, ChainInfo{extChain, ChainKindExternal, spn, netip.AddrPort{}, "handles " + spn + " traffic to NodePort, external IPs and load-balancer IPs"})
	}
	if usesFW {
		spr.FirewallChain = sp.fwChain
		f.chains = append(f.chains, ChainInfo{sp.fwChain, ChainKindFirewall, spn, netip.AddrPort{}, "accepts " + spn + " load-balancer traffic only from loadBalancerSourceRanges"})
	}
	if hasInternal {
		spr.InternalChain = internalChain
	}
	inCluster := map[string]bool{}
	for _, ep := range clusterEps {
		inCluster[ep.str] = usesClusterChain
	}
	inLocal := map[string]bool{}
	for _, ep := range localEps {
		inLocal[ep.str] = usesLocalChain
	}
	inReach := map[string]bool{}
	for _, ep := range reachable {
		inReach[ep.str] = true
		f.chains = append(f.chains, ChainInfo{ep.chain, ChainKindEndpoint, spn, ep.addr, "DNATs " + spn + " traffic to " + ep.str + " (and marks hairpin traffic from it for masquerade)"})
	}
	for _, ep := range allEps {
		er := EndpointRules{
			Endpoint: ep.addr, Local: ep.local, Ready: ep.ready, Serving: ep.serving, Terminating: ep.terminating,
			InClusterChain: inCluster[ep.str], InLocalChain: inLocal[ep.str],
		}
		if inReach[ep.str] {
			er.Chain = ep.chain
		}
		spr.Endpoints = append(spr.Endpoints, er)
	}
	f.spr = spr

	// Conntrack reconciler state (UDP only): service IPs and NodePort
	// map to the serving endpoint IPs.
	if sp.proto == ProtocolUDP {
		set := map[netip.Addr]bool{}
		for _, ep := range allEps {
			if ep.serving {
				set[ep.addr.Addr()] = true
			}
		}
		f.udp = set
	}
	f.filter.render()
	f.nat.render()
	return f
}

// apply appends f to r; own says whether the port's own chains are written.
func (g *genContext) apply(r *Rules, f *portFrag, own bool) {
	r.frags = append(r.frags, f)
	r.filter.rules = append(r.filter.rules, f.filter.rules...)
	if !own {
		r.nat.rules = append(r.nat.rules, f.nat.rules[:f.natTop]...)
		return
	}
	g.applyOwn(r, f)
}

// applyOwn is apply's part for a port whose chains are written (its
// filter rules and fragment added by the caller).
func (g *genContext) applyOwn(r *Rules, f *portFrag) {
	r.nat.rules = append(r.nat.rules, f.nat.rules...)
	for _, c := range f.nat.chains {
		r.nat.chain(c)
	}
	for _, ci := range f.chains {
		r.chains[ci.Name] = ci
	}
	r.Services = append(r.Services, f.spr)
	if set := f.udp; set != nil {
		sp := &f.spr
		r.udpIPs[sp.ClusterIP] = set
		for _, a := range sp.LoadBalancerIPs {
			r.udpIPs[a] = set
		}
		for _, a := range sp.ExternalIPs {
			r.udpIPs[a] = set
		}
		if sp.NodePort != 0 {
			r.udpNodePorts[uint16(sp.NodePort)] = set
		}
	}
}
