package kubeproxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// kube-proxy's nftables table, chains, sets and maps
// (pkg/proxy/nftables/proxier.go).
const (
	NFTTable                  = "kube-proxy"
	NFTServicesChain          = "services"
	NFTServiceIPsMap          = "service-ips"
	NFTServiceNodePortsMap    = "service-nodeports"
	NFTNodePortIPsSet         = "nodeport-ips"
	NFTClusterIPsSet          = "cluster-ips"
	NFTServiceEndpointsCheck  = "service-endpoints-check"
	NFTNodePortEndpointsCheck = "nodeport-endpoints-check"
	NFTNoEndpointServicesMap  = "no-endpoint-services"
	NFTNoEndpointNodePortsMap = "no-endpoint-nodeports"
	NFTRejectChain            = "reject-chain"
	NFTFirewallIPsMap         = "firewall-ips"
	NFTFirewallCheckChain     = "firewall-check"
	NFTClusterIPsCheckChain   = "cluster-ips-check"
	NFTMarkMasqChain          = "mark-for-masquerade"
	NFTMasqueradingChain      = "masquerading"
	NFTFilterPreroutingChain  = "filter-prerouting"
	NFTFilterInputChain       = "filter-input"
	NFTFilterForwardChain     = "filter-forward"
	NFTFilterOutputChain      = "filter-output"
	NFTFilterOutputPostDNAT   = "filter-output-post-dnat"
	NFTNATPreroutingChain     = "nat-prerouting"
	NFTNATOutputChain         = "nat-output"
	NFTNATPostroutingChain    = "nat-postrouting"
	NFTPrefixService          = "service-"
	NFTPrefixLocal            = "local-"
	NFTPrefixExternal         = "external-"
	NFTPrefixEndpoint         = "endpoint-"
	NFTPrefixAffinity         = "affinity-"
	NFTPrefixFirewall         = "firewall-"
	nftChainNameBaseLengthMax = 256 - 16
)

// nftBaseChains are kube-proxy's base chains: name, type, hook and the
// numeric priority knftables writes (dstnat-10 = -110, dstnat+10 = -90,
// dstnat = -100, srcnat = 100).
var nftBaseChains = []struct {
	name, typ, hook string
	prio            int
}{
	{NFTFilterPreroutingChain, "filter", "prerouting", -110},
	{NFTFilterInputChain, "filter", "input", -110},
	{NFTFilterForwardChain, "filter", "forward", -110},
	{NFTFilterOutputChain, "filter", "output", -110},
	{NFTFilterOutputPostDNAT, "filter", "output", -90},
	{NFTNATPreroutingChain, "nat", "prerouting", -100},
	{NFTNATOutputChain, "nat", "output", -100},
	{NFTNATPostroutingChain, "nat", "postrouting", 100},
}

// nftJumpChains are the jumps from base chains to kube-proxy's top-level
// chains, in the order it adds them.
var nftJumpChains = []struct{ dst, src, extra string }{
	{NFTNodePortEndpointsCheck, NFTFilterInputChain, "ct state new"},
	{NFTServiceEndpointsCheck, NFTFilterInputChain, "ct state new"},
	{NFTServiceEndpointsCheck, NFTFilterForwardChain, "ct state new"},
	{NFTServiceEndpointsCheck, NFTFilterOutputChain, "ct state new"},
	{NFTFirewallCheckChain, NFTFilterPreroutingChain, "ct state new"},
	{NFTFirewallCheckChain, NFTFilterOutputChain, "ct state new"},
	{NFTServicesChain, NFTNATOutputChain, ""},
	{NFTServicesChain, NFTNATPreroutingChain, ""},
	{NFTMasqueradingChain, NFTNATPostroutingChain, ""},
	{NFTClusterIPsCheckChain, NFTFilterForwardChain, "ct state new"},
	{NFTClusterIPsCheckChain, NFTFilterOutputPostDNAT, "ct state new"},
}

// NFTHashAndTruncate is kube-proxy's hashAndTruncate: the first 8
// characters of base32(sha256(name)), "-", name, cut to 240 characters
// with "..." when longer.
func NFTHashAndTruncate(name string) string {
	sum := sha256.Sum256([]byte(name))
	s := base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
	if len(s) > nftChainNameBaseLengthMax {
		s = s[:nftChainNameBaseLengthMax-3] + "..."
	}
	return s
}

// NFTServiceChainBase is "HASH-namespace/name/protocol/portName", the base
// of a service port's service-, local-, external- and firewall- chains.
func NFTServiceChainBase(namespace, name, portName string, protocol Protocol) string {
	return NFTHashAndTruncate(fmt.Sprintf("%s/%s/%s/%s", namespace, name, strings.ToLower(string(normProto(protocol))), portName))
}

// NFTEndpointChainBase is
// "HASH-namespace/name/protocol/portName__ip/port", the base of an
// endpoint's endpoint- chain and affinity- set.
func NFTEndpointChainBase(namespace, name, portName string, protocol Protocol, ep netip.AddrPort) string {
	return NFTHashAndTruncate(fmt.Sprintf("%s/%s/%s/%s__%s/%d", namespace, name, strings.ToLower(string(normProto(protocol))), portName, ep.Addr(), ep.Port()))
}

// NFTRules is one nftables-mode sync: the transaction kube-proxy hands to
// `nft -f` and what it chose, for explanations.
type NFTRules struct {
	// Services describe each service port (chains named as in nftables
	// mode: ClusterChain is the service- chain, and so on; Endpoints'
	// Chain is the endpoint- chain).
	Services []ServicePortRules
	// ActiveChains are the per-service and per-endpoint chains of this
	// sync, sorted; ActiveAffinitySets likewise.
	ActiveChains, ActiveAffinitySets []string
	tx                               []string // the transaction without the stale-object commands
	udpIPs                           map[netip.Addr]map[netip.Addr]bool
	udpNodePorts                     map[uint16]map[netip.Addr]bool
}

// NFTSyncState is what the proxier remembers between syncs: whether its
// first sync ran (it then re-creates the base chains once), and the
// table's current chains and sets, as `nft list chains/sets` would give
// them.
type NFTSyncState struct {
	Flushed       bool
	ExistingChain []string
	ExistingSets  []string
	// StaleChains are service chains flushed by an earlier sync, to
	// delete now (kube-proxy deletes them a second or more later).
	StaleChains []string
}

// Transaction returns the `nft -f` input of this sync for a proxier in
// state st, as knftables writes it (one command per line), and the
// service chains it flushes as stale (to be deleted by a later sync).
func (r *NFTRules) Transaction(st NFTSyncState) (tx string, stale []string) {
	var b strings.Builder
	for _, c := range st.StaleChains {
		b.WriteString("delete chain ip kube-proxy " + c + "\n")
	}
	for i, l := range r.tx {
		b.WriteString(l + "\n")
		if i == 0 && !st.Flushed {
			// After `add table`: re-create the base chains once per
			// kube-proxy process, so a changed priority takes effect.
			for _, bc := range nftBaseChains {
				b.WriteString("add chain ip kube-proxy " + bc.name + "\n")
				b.WriteString("delete chain ip kube-proxy " + bc.name + "\n")
			}
		}
	}
	active := make(map[string]bool, len(r.ActiveChains))
	for _, c := range r.ActiveChains {
		active[c] = true
	}
	for _, c := range st.StaleChains {
		active[c] = true
	}
	for _, c := range st.ExistingChain {
		if strings.Contains(c, "/") && !active[c] {
			b.WriteString("flush chain ip kube-proxy " + c + "\n")
			stale = append(stale, c)
		}
	}
	for _, s := range st.ExistingSets {
		if strings.HasPrefix(s, NFTPrefixAffinity) && !slices.Contains(r.ActiveAffinitySets, s) {
			b.WriteString("delete set ip kube-proxy " + s + "\n")
		}
	}
	return b.String(), stale
}

// Setup returns the transaction alone, for a fresh namespace: what
// kube-proxy's first sync writes.
func (r *NFTRules) Setup() string {
	tx, _ := r.Transaction(NFTSyncState{})
	return tx
}

// Service returns the rules of one service port.
func (r *NFTRules) Service(servicePortName string, protocol Protocol) (ServicePortRules, bool) {
	for _, s := range r.Services {
		if s.ServicePortName == servicePortName && s.Protocol == normProto(protocol) {
			return s, true
		}
	}
	return ServicePortRules{}, false
}

// GenerateNFT builds what kube-proxy's nftables proxier writes for snap on
// the node described by cfg, in the layout of kube-proxy v1.33
// (kubernetes commit b0f823e: filter-output-post-dnat and
// cluster-ips-check present, nodeport-endpoints-check split from
// service-endpoints-check). It returns a *ValidationError for impossible
// input.
func GenerateNFT(cfg Config, snap Snapshot) (*NFTRules, error) {
	if err := validateConfig(&cfg); err != nil {
		return nil, err
	}
	for i := range snap.Services {
		if err := validateService(&cfg, &snap.Services[i]); err != nil {
			return nil, err
		}
	}
	for i := range snap.EndpointSlices {
		if err := validateSlice(&snap.EndpointSlices[i], i); err != nil {
			return nil, err
		}
	}
	ports := servicePorts(snap.Services)
	epMap := buildEndpointsMap(&cfg, snap.EndpointSlices)
	return generateNFT(&cfg, ports, epMap), nil
}

type nftTx struct{ lines []string }

func (t *nftTx) add(s string) { t.lines = append(t.lines, s) }

func (t *nftTx) rule(chain, rule, comment string) {
	s := "add rule ip kube-proxy " + chain + " " + rule
	if comment != "" {
		s += " comment " + strconv.Quote(comment)
	}
	t.add(s)
}

func (t *nftTx) chain(name string, created map[string]bool) {
	if created[name] {
		return
	}
	created[name] = true
	t.add("add chain ip kube-proxy " + name)
	t.add("flush chain ip kube-proxy " + name)
}

func (t *nftTx) elem(set string, key []string, comment string, value string) {
	s := "add element ip kube-proxy " + set + " { " + strings.Join(key, " . ")
	if comment != "" {
		s += " comment " + strconv.Quote(comment)
	}
	if value != "" {
		s += " : " + value
	}
	t.add(s + " }")
}

func generateNFT(cfg *Config, ports []*svcPort, epMap map[svcPortKey][]*endpoint) *NFTRules {
	mark := fmt.Sprintf("%#08x", 1<<uint(cfg.masqueradeBit()))
	tx := &nftTx{}
	r := &NFTRules{udpIPs: map[netip.Addr]map[netip.Addr]bool{}, udpNodePorts: map[uint16]map[netip.Addr]bool{}}
	matchAll := len(cfg.NodePortAddresses) == 0
	const noLocalhost = "ip daddr != 127.0.0.0/8"

	// setupNFTables.
	tx.add(`add table ip kube-proxy { comment "rules for kube-proxy" ; }`)
	for _, bc := range nftBaseChains {
		tx.add(fmt.Sprintf("add chain ip kube-proxy %s { type %s hook %s priority %d ; }", bc.name, bc.typ, bc.hook, bc.prio))
		tx.add("flush chain ip kube-proxy " + bc.name)
	}
	created := map[string]bool{}
	for _, j := range nftJumpChains {
		tx.chain(j.dst, created)
		rule := "jump " + j.dst
		if j.extra != "" {
			rule = j.extra + " " + rule
		}
		tx.rule(j.src, rule, "")
	}
	for _, c := range []string{NFTServicesChain, NFTClusterIPsCheckChain, NFTMasqueradingChain, NFTMarkMasqChain} {
		tx.chain(c, created)
	}
	tx.rule(NFTMarkMasqChain, "mark set mark or "+mark, "")
	tx.rule(NFTMasqueradingChain, "mark and "+mark+" == 0 return", "")
	tx.rule(NFTMasqueradingChain, "mark set mark xor "+mark, "")
	tx.rule(NFTMasqueradingChain, "masquerade fully-random", "")
	tx.add(`add set ip kube-proxy cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }`)
	tx.rule(NFTClusterIPsCheckChain, "ip daddr @cluster-ips reject", "Reject traffic to invalid ports of ClusterIPs")
	if len(cfg.ServiceCIDRs) > 0 {
		var cidrs []string
		for _, p := range cfg.ServiceCIDRs {
			cidrs = append(cidrs, p.Masked().String())
		}
		tx.rule(NFTClusterIPsCheckChain, "ip daddr { "+strings.Join(cidrs, ",")+" } drop", "Drop traffic to unallocated ClusterIPs")
	}
	tx.add(`add set ip kube-proxy nodeport-ips { type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }`)
	if matchAll {
		tx.add("delete set ip kube-proxy nodeport-ips")
	} else {
		tx.add("flush set ip kube-proxy nodeport-ips")
		for _, ip := range nodePortIPs(cfg) {
			if ip.IsLoopback() {
				continue
			}
			tx.elem(NFTNodePortIPsSet, []string{ip.String()}, "", "")
		}
	}
	tx.add(`add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }`)
	tx.add(`add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }`)
	tx.add(`add chain ip kube-proxy reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }`)
	tx.add("flush chain ip kube-proxy reject-chain")
	tx.rule(NFTRejectChain, "reject", "")
	tx.rule(NFTServiceEndpointsCheck, "ip daddr . meta l4proto . th dport vmap @no-endpoint-services", "")
	if matchAll {
		tx.rule(NFTNodePortEndpointsCheck, noLocalhost+" meta l4proto . th dport vmap @no-endpoint-nodeports", "")
	} else {
		tx.rule(NFTNodePortEndpointsCheck, "ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports", "")
	}
	tx.add(`add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }`)
	tx.chain(NFTFirewallCheckChain, created)
	tx.rule(NFTFirewallCheckChain, "ip daddr . meta l4proto . th dport vmap @firewall-ips", "")
	tx.add(`add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }`)
	tx.add(`add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }`)
	tx.rule(NFTServicesChain, "ip daddr . meta l4proto . th dport vmap @service-ips", "")
	if matchAll {
		tx.rule(NFTServicesChain, "fib daddr type local "+noLocalhost+" meta l4proto . th dport vmap @service-nodeports", "")
	} else {
		tx.rule(NFTServicesChain, "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports", "")
	}
	for _, m := range []string{"set ip kube-proxy cluster-ips", "map ip kube-proxy service-ips", "map ip kube-proxy firewall-ips",
		"map ip kube-proxy no-endpoint-services", "map ip kube-proxy no-endpoint-nodeports", "map ip kube-proxy service-nodeports"} {
		tx.add("flush " + m)
	}

	// Elements are written per container in the order kube-proxy's
	// element storage adds them; collect them first.
	type el struct {
		set, comment, value string
		key                 []string
	}
	var elems []el
	addElem := func(set string, key []string, comment, value string) {
		elems = append(elems, el{set, comment, value, key})
	}
	active := map[string]bool{}
	affinity := map[string]bool{}
	var body nftTx
	ensure := func(name string) {
		if active[name] {
			return
		}
		active[name] = true
		body.add("add chain ip kube-proxy " + name)
		body.add("flush chain ip kube-proxy " + name)
	}

	var ifLocal, ifNotLocal string
	if cfg.ClusterCIDR.IsValid() {
		ifLocal = "ip saddr " + cfg.ClusterCIDR.Masked().String()
		ifNotLocal = "ip saddr != " + cfg.ClusterCIDR.Masked().String()
	}
	var nodeIP netip.Addr
	if len(cfg.NodeIPs) > 0 {
		nodeIP = cfg.NodeIPs[0]
	}

	for _, sp := range ports {
		allEps := epMap[svcPortKey{sp.svc.Namespace, sp.svc.Name, sp.port.Name, sp.proto}]
		clusterEps, localEps, reachable, hasEndpoints := categorize(allEps, sp)
		proto := sp.lproto
		spn := sp.name
		base := NFTServiceChainBase(sp.svc.Namespace, sp.svc.Name, sp.port.Name, sp.proto)
		clusterChain := NFTPrefixService + base
		localChain := NFTPrefixLocal + base
		extChain := NFTPrefixExternal + base
		fwChain := NFTPrefixFirewall + base
		epChain := func(ep *endpoint) string {
			return NFTPrefixEndpoint + NFTEndpointChainBase(sp.svc.Namespace, sp.svc.Name, sp.port.Name, sp.proto, ep.addr)
		}
		affSet := func(ep *endpoint) string {
			return NFTPrefixAffinity + NFTEndpointChainBase(sp.svc.Namespace, sp.svc.Name, sp.port.Name, sp.proto, ep.addr)
		}
		for _, ep := range reachable {
			ensure(epChain(ep))
			if sp.affinity {
				affinity[affSet(ep)] = true
			}
		}
		usesCluster := len(clusterEps) > 0 && sp.usesClusterEndpoints()
		if usesCluster {
			ensure(clusterChain)
		}
		usesLocal := len(localEps) > 0 && sp.usesLocalEndpoints()
		if usesLocal {
			ensure(localChain)
		}
		internalChain, hasInternal := policyChain(sp.internalPolicyLocal, clusterChain, localChain, hasEndpoints, len(localEps))
		externalPolicyChain, hasExternal := policyChain(sp.externalPolicyLocal, clusterChain, localChain, hasEndpoints, len(localEps))
		usesExt := hasEndpoints && sp.externallyAccessible()
		if usesExt {
			ensure(extChain)
		}
		var intVerdict, extVerdict string
		var intV, extV Verdict
		if !hasEndpoints {
			intVerdict, extVerdict = "goto "+NFTRejectChain, "goto "+NFTRejectChain
			intV, extV = VerdictReject, VerdictReject
		} else {
			if !hasInternal {
				intVerdict, intV = "drop", VerdictDrop
			}
			if !hasExternal {
				extVerdict, extV = "drop", VerdictDrop
			}
		}
		port := strconv.Itoa(sp.port.Port)
		cip := sp.clusterIP.String()
		addElem(NFTClusterIPsSet, []string{cip}, "", "")
		if hasInternal {
			addElem(NFTServiceIPsMap, []string{cip, proto, port}, "", "goto "+internalChain)
		} else {
			addElem(NFTNoEndpointServicesMap, []string{cip, proto, port}, spn, intVerdict)
		}
		for _, eip := range sp.externalIPs {
			if hasEndpoints {
				addElem(NFTServiceIPsMap, []string{eip.String(), proto, port}, "", "goto "+extChain)
			}
			if !hasExternal {
				addElem(NFTNoEndpointServicesMap, []string{eip.String(), proto, port}, spn, extVerdict)
			}
		}
		usesFW := len(sp.lbIPs) > 0 && len(sp.sourceRanges) > 0
		if usesFW {
			ensure(fwChain)
		}
		for _, lb := range sp.lbIPs {
			if hasEndpoints {
				addElem(NFTServiceIPsMap, []string{lb.String(), proto, port}, "", "goto "+extChain)
			}
			if usesFW {
				addElem(NFTFirewallIPsMap, []string{lb.String(), proto, port}, "", "goto "+fwChain)
			}
		}
		if !hasExternal {
			for _, lb := range sp.lbIPs {
				addElem(NFTNoEndpointServicesMap, []string{lb.String(), proto, port}, spn, extVerdict)
			}
		}
		if np := sp.port.NodePort; np != 0 {
			if hasEndpoints {
				addElem(NFTServiceNodePortsMap, []string{proto, strconv.Itoa(np)}, "", "goto "+extChain)
			}
			if !hasExternal {
				addElem(NFTNoEndpointNodePortsMap, []string{proto, strconv.Itoa(np)}, spn, extVerdict)
			}
		}

		if hasInternal {
			if cfg.MasqueradeAll {
				body.rule(internalChain, "ip daddr "+cip+" "+proto+" dport "+port+" jump "+NFTMarkMasqChain, "")
			} else if ifNotLocal != "" {
				body.rule(internalChain, "ip daddr "+cip+" "+proto+" dport "+port+" "+ifNotLocal+" jump "+NFTMarkMasqChain, "")
			}
		}
		if usesExt {
			if !sp.externalPolicyLocal {
				body.rule(extChain, "jump "+NFTMarkMasqChain, "")
			} else {
				if ifLocal != "" {
					body.rule(extChain, ifLocal+" goto "+clusterChain, "short-circuit pod traffic")
				}
				body.rule(extChain, "fib saddr type local jump "+NFTMarkMasqChain, "masquerade local traffic")
				body.rule(extChain, "fib saddr type local goto "+clusterChain, "short-circuit local traffic")
			}
			if hasExternal {
				body.rule(extChain, "goto "+externalPolicyChain, "")
			}
		}
		if usesFW {
			var sources []string
			allowFromNode := false
			for _, c := range sp.sourceRanges {
				sources = append(sources, c.String())
				if nodeIP.IsValid() && c.Contains(nodeIP) {
					allowFromNode = true
				}
			}
			if allowFromNode {
				for _, lb := range sp.lbIPs {
					sources = append(sources, lb.String())
				}
			}
			body.rule(fwChain, "ip saddr != { "+strings.Join(sources, " , ")+" } drop", "")
		}
		if sp.affinity {
			for _, ep := range reachable {
				body.add(fmt.Sprintf("add set ip kube-proxy %s { type ipv4_addr ; flags dynamic,timeout ; timeout %ds ; }", affSet(ep), sp.stickySeconds))
			}
		}
		writeEps := func(chain string, eps []*endpoint) {
			if sp.affinity {
				for _, ep := range eps {
					body.rule(chain, "ip saddr @"+affSet(ep)+" goto "+epChain(ep), "")
				}
			}
			var parts []string
			for i, ep := range eps {
				parts = append(parts, strconv.Itoa(i)+" : goto "+epChain(ep))
			}
			body.rule(chain, "numgen random mod "+strconv.Itoa(len(eps))+" vmap { "+strings.Join(parts, " , ")+" }", "")
		}
		if usesCluster {
			writeEps(clusterChain, clusterEps)
		}
		if usesLocal {
			writeEps(localChain, localEps)
		}
		for _, ep := range reachable {
			c := epChain(ep)
			body.rule(c, "ip saddr "+ep.addr.Addr().String()+" jump "+NFTMarkMasqChain, "")
			if sp.affinity {
				body.rule(c, "update @"+affSet(ep)+" { ip saddr }", "")
			}
			body.rule(c, "meta l4proto "+proto+" dnat to "+ep.str, "")
		}

		spr := ServicePortRules{ServicePortName: spn, Namespace: sp.svc.Namespace, Name: sp.svc.Name, PortName: sp.port.Name,
			Protocol: sp.proto, ClusterIP: sp.clusterIP, Port: sp.port.Port, NodePort: sp.port.NodePort,
			ExternalIPs: slices.Clone(sp.externalIPs), LoadBalancerIPs: slices.Clone(sp.lbIPs), HasEndpoints: hasEndpoints,
			InternalVerdict: intV, ExternalVerdict: extV}
		if usesCluster {
			spr.ClusterChain = clusterChain
		}
		if usesLocal {
			spr.LocalChain = localChain
		}
		if usesExt {
			spr.ExternalChain = extChain
		}
		if usesFW {
			spr.FirewallChain = fwChain
		}
		if hasInternal {
			spr.InternalChain = internalChain
		}
		inReach := map[string]bool{}
		for _, ep := range reachable {
			inReach[ep.str] = true
		}
		inC, inL := map[string]bool{}, map[string]bool{}
		for _, ep := range clusterEps {
			inC[ep.str] = usesCluster
		}
		for _, ep := range localEps {
			inL[ep.str] = usesLocal
		}
		for _, ep := range allEps {
			er := EndpointRules{Endpoint: ep.addr, Local: ep.local, Ready: ep.ready, Serving: ep.serving, Terminating: ep.terminating,
				InClusterChain: inC[ep.str], InLocalChain: inL[ep.str]}
			if inReach[ep.str] {
				er.Chain = epChain(ep)
			}
			spr.Endpoints = append(spr.Endpoints, er)
		}
		r.Services = append(r.Services, spr)
		if sp.proto == ProtocolUDP {
			set := map[netip.Addr]bool{}
			for _, ep := range allEps {
				if ep.serving {
					set[ep.addr.Addr()] = true
				}
			}
			r.udpIPs[sp.clusterIP] = set
			for _, a := range append(slices.Clone(sp.lbIPs), sp.externalIPs...) {
				r.udpIPs[a] = set
			}
			if sp.port.NodePort != 0 {
				r.udpNodePorts[uint16(sp.port.NodePort)] = set
			}
		}
	}
	// Element storage: kube-proxy adds elements per service as it goes;
	// their order does not show in the kernel (hash sets). Duplicates
	// (a cluster IP shared by two ports) are added once.
	seen := map[string]bool{}
	var elemLines []string
	for _, e := range elems {
		k := e.set + " " + strings.Join(e.key, " . ")
		if seen[k] {
			continue
		}
		seen[k] = true
		var t nftTx
		t.elem(e.set, e.key, e.comment, e.value)
		elemLines = append(elemLines, t.lines...)
	}
	// Per-service chains and affinity sets come before the elements that
	// point at them.
	r.tx = append(append(tx.lines, body.lines...), elemLines...)
	for c := range active {
		r.ActiveChains = append(r.ActiveChains, c)
	}
	slices.Sort(r.ActiveChains)
	for s := range affinity {
		r.ActiveAffinitySets = append(r.ActiveAffinitySets, s)
	}
	slices.Sort(r.ActiveAffinitySets)
	return r
}
