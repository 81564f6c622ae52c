package kubeproxy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Top-level chains kube-proxy owns.
const (
	ChainServices         = "KUBE-SERVICES"
	ChainExternalServices = "KUBE-EXTERNAL-SERVICES"
	ChainNodePorts        = "KUBE-NODEPORTS"
	ChainPostrouting      = "KUBE-POSTROUTING"
	ChainMarkMasq         = "KUBE-MARK-MASQ"
	ChainForward          = "KUBE-FORWARD"
	ChainProxyFirewall    = "KUBE-PROXY-FIREWALL"
	ChainProxyCanary      = "KUBE-PROXY-CANARY"
	ChainKubeletFirewall  = "KUBE-FIREWALL"
)

// Names of the nfacct counters kube-proxy creates (metrics package).
const (
	NFAcctInvalidDropped       = "ct_state_invalid_dropped_packets_total"
	NFAcctLocalhostNodePortAcc = "localhost_nodeports_accepted_packets_total"
)

// largeClusterEndpointsThreshold: above this many endpoints kube-proxy drops
// the comments from KUBE-SVC/SVL endpoint rules and KUBE-SEP rules.
const largeClusterEndpointsThreshold = 1000

// svcPort is kube-proxy's servicePortInfo.
type svcPort struct {
	svc                     *Service
	port                    ServicePort
	name                    string // ns/name[:port]
	proto                   Protocol
	lproto                  string
	clusterIP               netip.Addr
	externalIPs, lbIPs      []netip.Addr
	sourceRanges            []netip.Prefix
	svcChain, svlChain      string
	extChain, fwChain       string
	externalPolicyLocal     bool
	internalPolicyLocal     bool
	affinity                bool
	stickySeconds           int
	healthCheckNodePort     int
	serviceExternallyAccess bool
}

func (sp *svcPort) externallyAccessible() bool {
	return sp.port.NodePort != 0 || len(sp.lbIPs) > 0 || len(sp.externalIPs) > 0
}

func (sp *svcPort) usesClusterEndpoints() bool {
	return !sp.internalPolicyLocal || (sp.externallyAccessible() && !sp.externalPolicyLocal)
}

func (sp *svcPort) usesLocalEndpoints() bool {
	return sp.internalPolicyLocal || (sp.externallyAccessible() && sp.externalPolicyLocal)
}

// policyChain is where traffic under one of the port's traffic policies
// goes (kube-proxy's internalPolicyChain and externalPolicyChain): the
// cluster chain, or under a Local policy the local chain, and whether it
// has endpoints (under Local, only those on this node count).
func policyChain(local bool, clusterChain, localChain string, hasEndpoints bool, localEps int) (string, bool) {
	if local {
		return localChain, hasEndpoints && localEps > 0
	}
	return clusterChain, hasEndpoints
}

// Verdict is what kube-proxy's filter rules do with traffic to a service
// address that has no usable endpoint.
type Verdict string

// Verdicts.
const (
	// VerdictNone: traffic is DNATed (there are endpoints).
	VerdictNone Verdict = ""
	// VerdictReject: no endpoints at all; ICMP port unreachable to the client.
	VerdictReject Verdict = "REJECT"
	// VerdictDrop: Local traffic policy and no endpoint on this node.
	VerdictDrop Verdict = "DROP"
)

// EndpointRules describes one endpoint of a service port and its chain.
type EndpointRules struct {
	// Endpoint is the DNAT destination.
	Endpoint netip.AddrPort
	// Chain is the KUBE-SEP chain; empty when no chain of this sync uses
	// the endpoint (not ready, or not local where only local ones count).
	Chain string
	// Local: the endpoint's nodeName is this node.
	Local bool
	// Ready, Serving, Terminating are the endpoint's conditions.
	Ready, Serving, Terminating bool
	// InClusterChain and InLocalChain say whether KUBE-SVC / KUBE-SVL jump to
	// Chain.
	InClusterChain, InLocalChain bool
}

// ServicePortRules describes what kube-proxy built for one service port, so
// a simulator can explain which chain is which.
type ServicePortRules struct {
	// ServicePortName is "namespace/name[:port]", as in rule comments.
	ServicePortName string
	Namespace, Name string
	PortName        string
	Protocol        Protocol
	ClusterIP       netip.Addr
	Port            int
	NodePort        int
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr
	// Chain names. Each is empty when this sync did not create the chain:
	// no endpoints means no nat chains at all.
	ClusterChain  string // KUBE-SVC-*: Cluster-policy endpoint choice
	LocalChain    string // KUBE-SVL-*: Local-policy endpoint choice
	ExternalChain string // KUBE-EXT-*: entry for NodePort/externalIP/LB traffic
	FirewallChain string // KUBE-FW-*: loadBalancerSourceRanges filter
	// InternalChain is the chain cluster-IP traffic jumps to (ClusterChain,
	// or LocalChain with internalTrafficPolicy Local); empty if none.
	InternalChain string
	// HasEndpoints: some usable endpoint exists anywhere in the cluster.
	HasEndpoints bool
	// InternalVerdict / ExternalVerdict: REJECT or DROP when the filter
	// table refuses cluster-IP / external traffic instead of it being DNATed.
	InternalVerdict Verdict
	ExternalVerdict Verdict
	// Endpoints of the port, sorted by "ip:port".
	Endpoints []EndpointRules
}

// ChainKind classifies a chain for explanations.
type ChainKind string

// Chain kinds.
const (
	ChainKindBuiltin  ChainKind = "builtin"
	ChainKindTopLevel ChainKind = "top-level"
	ChainKindService  ChainKind = "service"       // KUBE-SVC
	ChainKindLocal    ChainKind = "service-local" // KUBE-SVL
	ChainKindExternal ChainKind = "external"      // KUBE-EXT
	ChainKindFirewall ChainKind = "firewall"      // KUBE-FW
	ChainKindEndpoint ChainKind = "endpoint"      // KUBE-SEP
)

// ChainInfo explains one chain of the generated rules.
type ChainInfo struct {
	Name string
	Kind ChainKind
	// ServicePortName is set for per-service and per-endpoint chains.
	ServicePortName string
	// Endpoint is set for KUBE-SEP chains.
	Endpoint netip.AddrPort
	// Description is one sentence on what the chain does.
	Description string
}

// JumpRule is a rule kube-proxy ensures in a built-in chain with
// `iptables -t <Table> -I <Chain> <Args...>` before each full sync (and
// whose target chain it creates with `iptables -N`).
type JumpRule struct {
	Table, Chain string
	Args         []string
}

// Rules is the result of one kube-proxy sync.
type Rules struct {
	filter, nat *table
	jumps       []jumpRule
	// Services lists every proxied service port, sorted by ServicePortName
	// then protocol.
	Services []ServicePortRules
	// MasqueradeMark is the SNAT mark as kube-proxy spells it in its restore
	// input (Go's %#08x: "0x00004000"); iptables-save prints 0x4000.
	MasqueradeMark string
	chains         map[string]ChainInfo
	// Partial: the rules of a partial sync (GeneratePartial).
	Partial bool
	// LargeCluster: kube-proxy's largeClusterMode (more than 1,000
	// endpoints): no comments on endpoint rules, and stale chains deleted
	// at most once per --iptables-sync-period.
	LargeCluster bool
	// frags are the service ports' rules, written or not; active the
	// chains they use (StaleChains).
	frags        []*portFrag
	active       map[string]bool
	udpIPs       map[netip.Addr]map[netip.Addr]bool
	udpNodePorts map[uint16]map[netip.Addr]bool
	// top counts the top-level chains of filter and nat (TopChains).
	top [2]int
}

// TopChains returns the chains of table ("filter" or "nat") that
// kube-proxy declares at every sync, full or partial: its top-level
// chains, in write order (the per-Service chains follow them).
func (r *Rules) TopChains(table string) []string {
	switch table {
	case "filter":
		return slices.Clone(r.filter.chains[:r.top[0]])
	case "nat":
		return slices.Clone(r.nat.chains[:r.top[1]])
	}
	return nil
}

// Save returns the filter and nat tables as iptables-save prints them (see
// the package documentation for what is normalised).
func (r *Rules) Save() string { return r.SaveFilter() + r.SaveNAT() }

// SaveNAT returns `iptables-save -t nat` without its comment lines.
func (r *Rules) SaveNAT() string { return r.nat.save(r.jumps) }

// SaveFilter returns `iptables-save -t filter` without its comment lines.
func (r *Rules) SaveFilter() string { return r.filter.save(r.jumps) }

// RestoreInput returns the text kube-proxy passes to
// `iptables-restore --noflush --counters` (filter, then nat), in its write
// order with services sorted.
func (r *Rules) RestoreInput() string { return r.filter.restore() + r.nat.restore() }

// JumpRules returns, in the order kube-proxy ensures them, the rules it
// inserts at the top of built-in chains. Each is inserted with -I, so the
// last one ends up first in its chain.
func (r *Rules) JumpRules() []JumpRule {
	out := make([]JumpRule, len(r.jumps))
	for i, j := range r.jumps {
		out[i] = JumpRule{Table: j.table, Chain: j.chain, Args: j.args()}
	}
	return out
}

// EnsuredChains returns, per table, the chains kube-proxy creates outside
// iptables-restore: jump targets (iptables -N) and the KUBE-PROXY-CANARY
// chain its monitor creates in mangle, nat and filter.
func (r *Rules) EnsuredChains() map[string][]string {
	return map[string][]string{
		"mangle": {ChainProxyCanary},
		"nat":    slices.Clone(r.nat.ensured),
		"filter": slices.Clone(r.filter.ensured),
	}
}

// Chain explains a chain by name. Unknown names give ok false.
func (r *Rules) Chain(name string) (ChainInfo, bool) {
	ci, ok := r.chains[name]
	return ci, ok
}

// Service returns the rules of one service port by "ns/name[:port]" and
// protocol.
func (r *Rules) Service(servicePortName string, protocol Protocol) (ServicePortRules, bool) {
	for _, s := range r.Services {
		if s.ServicePortName == servicePortName && s.Protocol == normProto(protocol) {
			return s, true
		}
	}
	return ServicePortRules{}, false
}

var topLevelDescriptions = map[string]string{
	"PREROUTING":          "built-in chain",
	"INPUT":               "built-in chain",
	"FORWARD":             "built-in chain",
	"OUTPUT":              "built-in chain",
	"POSTROUTING":         "built-in chain",
	ChainServices:         "entry point: matches service IPs and ports (nat) or rejects services without endpoints (filter)",
	ChainExternalServices: "filter: rejects or drops external traffic (NodePort, externalIP, LB IP) to services without usable endpoints",
	ChainNodePorts:        "NodePort entry (nat) / health-check node ports accepted (filter)",
	ChainPostrouting:      "masquerades packets carrying the masquerade mark and clears the mark",
	ChainMarkMasq:         "sets the masquerade mark so KUBE-POSTROUTING SNATs the packet",
	ChainForward:          "filter FORWARD: drops conntrack INVALID, accepts marked and established traffic",
	ChainProxyFirewall:    "filter: drops LoadBalancer traffic not accepted by a KUBE-FW chain",
	ChainProxyCanary:      "empty canary chain kube-proxy watches to detect a flush of its rules",
	ChainKubeletFirewall:  "filter: blocks non-loopback traffic to 127.0.0.0/8 (route_localnet hole)",
}

// Generate builds the rules kube-proxy writes for snap on the node described
// by cfg. It returns a *ValidationError for impossible input.
func Generate(cfg Config, snap Snapshot) (*Rules, error) {
	if err := validateSnapshot(&cfg, snap); err != nil {
		return nil, err
	}
	ports := servicePorts(snap.Services)
	epMap := buildEndpointsMap(&cfg, snap.EndpointSlices)
	return generate(&cfg, ports, epMap, nil), nil
}

// validateSnapshot checks cfg and snap as Generate does.
func validateSnapshot(cfg *Config, snap Snapshot) error {
	if err := validateConfig(cfg); err != nil {
		return err
	}
	seenSvc := make(map[string]bool, len(snap.Services))
	for i := range snap.Services {
		s := &snap.Services[i]
		if err := validateService(cfg, s); err != nil {
			return err
		}
		k := s.Namespace + "/" + s.Name
		if seenSvc[k] {
			return &ValidationError{Kind: "Service", Object: k, Field: "metadata.name", Value: s.Name, Reason: "Duplicate value: a Service with this name already exists in the snapshot"}
		}
		seenSvc[k] = true
	}
	for i := range snap.EndpointSlices {
		if err := validateSlice(&snap.EndpointSlices[i], i); err != nil {
			return err
		}
	}
	return nil
}

// GeneratePartial builds what kube-proxy's iptables proxier writes at a
// partial sync (MinimizeIPTablesRestore, on by default since v1.27 and GA
// in v1.28): the same as Generate, except that the KUBE-SVC, KUBE-SVL,
// KUBE-EXT, KUBE-FW and KUBE-SEP chains of the service ports of every
// Service for which changed is false (its Service and EndpointSlices are
// as at the last successful sync) are neither declared nor written in the
// restore input, so the kernel keeps them as they are, counters included.
// The top-level chains (KUBE-SERVICES, KUBE-NODEPORTS, the filter chains,
// the masquerade chains) are written in full. A partial sync does not
// ensure the jump rules (kube-proxy does that at full syncs only).
//
// The result serves for its restore input only (RestoreInput,
// RestoreInputTable): Services describes only the changed service ports,
// and Save prints only the chains written.
func GeneratePartial(cfg Config, snap Snapshot, changed func(namespace, name string) bool) (*Rules, error) {
	if changed == nil {
		return Generate(cfg, snap)
	}
	if err := validateSnapshot(&cfg, snap); err != nil {
		return nil, err
	}
	ports := servicePorts(snap.Services)
	epMap := buildEndpointsMap(&cfg, snap.EndpointSlices)
	r := generate(&cfg, ports, epMap, func(sp *svcPort) bool { return !changed(sp.svc.Namespace, sp.svc.Name) })
	r.Partial = true
	return r, nil
}

func servicePorts(services []Service) []*svcPort {
	var out []*svcPort
	for i := range services {
		out = append(out, servicePortsOf(&services[i])...)
	}
	sortPorts(out)
	return out
}

// sortPorts sorts service ports as kube-proxy writes them.
func sortPorts(out []*svcPort) {
	slices.SortStableFunc(out, func(a, b *svcPort) int {
		return cmp.Or(strings.Compare(a.name, b.name), strings.Compare(string(a.proto), string(b.proto)))
	})
}

// servicePortsOf returns the service ports of s (none for a headless
// Service).
func servicePortsOf(s *Service) []*svcPort {
	var out []*svcPort
	if s.Headless {
		return nil
	}
	typ := s.Type
	if typ == "" {
		typ = ServiceTypeClusterIP
	}
	for _, p := range s.Ports {
		name := ServicePortName(s.Namespace, s.Name, p.Name)
		proto := normProto(p.Protocol)
		sp := &svcPort{
			svc:                     s,
			port:                    p,
			name:                    name,
			proto:                   proto,
			lproto:                  strings.ToLower(string(proto)),
			clusterIP:               s.ClusterIP,
			externalIPs:             s.ExternalIPs,
			lbIPs:                   s.LoadBalancerIngress,
			svcChain:                ServiceChainName(PrefixService, name, proto),
			svlChain:                ServiceChainName(PrefixServiceLocal, name, proto),
			extChain:                ServiceChainName(PrefixExternal, name, proto),
			fwChain:                 ServiceChainName(PrefixFirewall, name, proto),
			internalPolicyLocal:     s.InternalTrafficPolicy == TrafficPolicyLocal,
			affinity:                s.SessionAffinity == SessionAffinityClientIP,
			healthCheckNodePort:     s.HealthCheckNodePort,
			serviceExternallyAccess: typ != ServiceTypeClusterIP || len(s.ExternalIPs) > 0,
		}
		sp.externalPolicyLocal = sp.serviceExternallyAccess && s.ExternalTrafficPolicy == TrafficPolicyLocal
		for _, r := range s.LoadBalancerSourceRanges {
			sp.sourceRanges = append(sp.sourceRanges, r.Masked())
		}
		if sp.affinity {
			sp.stickySeconds = s.ClientIPTimeoutSeconds
			if sp.stickySeconds == 0 {
				sp.stickySeconds = DefaultClientIPTimeoutSeconds
			}
		}
		out = append(out, sp)
	}
	return out
}

// generate writes the rules; skip, if not nil, says which service ports'
// own nat chains a partial sync leaves out.
func generate(cfg *Config, ports []*svcPort, epMap map[svcPortKey][]*endpoint, skip func(*svcPort) bool) *Rules {
	g := newGenContext(cfg, ports, epMap)
	r := g.begin()
	for _, sp := range ports {
		g.apply(r, g.port(sp, epMap[sp.key()]), skip == nil || !skip(sp))
	}
	g.finish(r)
	return r
}

// begin writes the rules of a sync that come before the service ports'.
func (g *genContext) begin() *Rules {
	cfg := g.cfg
	bit := cfg.masqueradeBit()
	markVal := 1 << uint(bit)
	mark := fmt.Sprintf("%#08x", markVal)
	markSave := fmt.Sprintf("0x%x", markVal)
	localhostNodePorts := g.localhostNodePorts

	filter := newTable("filter", "INPUT", "FORWARD", "OUTPUT")
	nat := newTable("nat", "PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")
	r := &Rules{
		LargeCluster:   g.largeCluster,
		filter:         filter,
		nat:            nat,
		MasqueradeMark: mark,
		chains:         map[string]ChainInfo{},
		udpIPs:         map[netip.Addr]map[netip.Addr]bool{},
		udpNodePorts:   map[uint16]map[netip.Addr]bool{},
	}

	// Jump rules from built-in chains, in iptablesJumpChains order followed
	// by the kubelet duplicates.
	r.jumps = []jumpRule{
		{"filter", "INPUT", ChainExternalServices, true, "kubernetes externally-visible service portals"},
		{"filter", "FORWARD", ChainExternalServices, true, "kubernetes externally-visible service portals"},
		{"filter", "INPUT", ChainNodePorts, false, "kubernetes health check service ports"},
		{"filter", "FORWARD", ChainServices, true, "kubernetes service portals"},
		{"filter", "OUTPUT", ChainServices, true, "kubernetes service portals"},
		{"filter", "FORWARD", ChainForward, false, "kubernetes forwarding rules"},
		{"filter", "INPUT", ChainProxyFirewall, true, "kubernetes load balancer firewall"},
		{"filter", "OUTPUT", ChainProxyFirewall, true, "kubernetes load balancer firewall"},
		{"filter", "FORWARD", ChainProxyFirewall, true, "kubernetes load balancer firewall"},
		{"nat", "OUTPUT", ChainServices, false, "kubernetes service portals"},
		{"nat", "PREROUTING", ChainServices, false, "kubernetes service portals"},
		{"nat", "POSTROUTING", ChainPostrouting, false, "kubernetes postrouting rules"},
		{"filter", "INPUT", ChainKubeletFirewall, false, ""},
		{"filter", "OUTPUT", ChainKubeletFirewall, false, ""},
	}
	for _, j := range r.jumps {
		t := filter
		if j.table == "nat" {
			t = nat
		}
		t.ensure(j.dst)
	}
	filter.ensure(ChainProxyCanary)
	nat.ensure(ChainProxyCanary)

	for _, c := range []string{ChainServices, ChainExternalServices, ChainForward, ChainNodePorts, ChainProxyFirewall} {
		filter.chain(c)
	}
	for _, c := range []string{ChainServices, ChainNodePorts, ChainPostrouting, ChainMarkMasq} {
		nat.chain(c)
	}

	nat.add(ChainPostrouting,
		match("-m mark ! --mark "+mark+"/"+mark, "-m mark ! --mark "+markSave+"/"+markSave),
		jump("RETURN"))
	nat.add(ChainPostrouting, target("MARK --xor-mark "+mark, "MARK --set-xmark "+markSave+"/0x0"))
	nat.add(ChainPostrouting,
		comment("kubernetes service traffic requiring SNAT"),
		jump("MASQUERADE --random-fully"))
	nat.add(ChainMarkMasq, target("MARK --or-mark "+mark, "MARK --set-xmark "+markSave+"/"+markSave))

	if localhostNodePorts {
		filter.chain(ChainKubeletFirewall)
		filter.add(ChainKubeletFirewall,
			comment("block incoming localnet connections"),
			dst("127.0.0.0/8", false),
			src("127.0.0.0/8", true),
			same("-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT"),
			jump("DROP"))
	}

	g.topChains = [2]int{len(filter.chains), len(nat.chains)}
	r.top = g.topChains
	return r
}

// finish writes the rules of a sync that come after the service ports'.
func (g *genContext) finish(r *Rules) {
	cfg := g.cfg
	filter, nat := r.filter, r.nat
	bit := cfg.masqueradeBit()
	markVal := 1 << uint(bit)
	mark := fmt.Sprintf("%#08x", markVal)
	markSave := fmt.Sprintf("0x%x", markVal)
	localhostNodePorts := g.localhostNodePorts
	// Tail call to KUBE-NODEPORTS; must be the last rule of KUBE-SERVICES.
	// (kube-proxy writes its stale-chain deletions just before.)
	nat.tail = len(nat.rules)
	const npComment = "kubernetes service nodeports; NOTE: this must be the last rule in this chain"
	if len(cfg.NodePortAddresses) == 0 {
		parts := []part{comment(npComment), same("-m addrtype --dst-type LOCAL")}
		if !localhostNodePorts {
			parts = append(parts, dst("127.0.0.0/8", true))
		}
		nat.add(ChainServices, append(parts, jump(ChainNodePorts))...)
	} else {
		for _, ip := range nodePortIPs(cfg) {
			if ip.IsLoopback() && !localhostNodePorts {
				continue
			}
			nat.add(ChainServices, comment(npComment), dst(ip.String(), false), jump(ChainNodePorts))
		}
	}

	if !cfg.ConntrackTCPBeLiberal {
		parts := []part{same("-m conntrack --ctstate INVALID")}
		if cfg.NFAcct {
			parts = append(parts, same("-m nfacct --nfacct-name "+NFAcctInvalidDropped))
		}
		filter.add(ChainForward, append(parts, jump("DROP"))...)
	}
	filter.add(ChainForward, comment("kubernetes forwarding rules"),
		match("-m mark --mark "+mark+"/"+mark, "-m mark --mark "+markSave+"/"+markSave), jump("ACCEPT"))
	filter.add(ChainForward, comment("kubernetes forwarding conntrack rule"),
		same("-m conntrack --ctstate RELATED,ESTABLISHED"), jump("ACCEPT"))

	// Explanations of the fixed chains.
	// (The chains declared by the service ports have theirs.)
	for i, t := range []*table{filter, nat} {
		for _, c := range append(append(slices.Clone(t.builtins), t.chains[:g.topChains[i]]...), t.ensured...) {
			if _, ok := r.chains[c]; ok {
				continue
			}
			kind := ChainKindTopLevel
			if slices.Contains(t.builtins, c) {
				kind = ChainKindBuiltin
			}
			r.chains[c] = ChainInfo{Name: c, Kind: kind, Description: topLevelDescriptions[c]}
		}
	}
}

func verdictPart(v Verdict) part {
	if v == VerdictReject {
		return reject()
	}
	return jump(string(v))
}

// writeServiceToEndpoints writes the session-affinity rules then the
// probability rules of a KUBE-SVC or KUBE-SVL chain.
func writeServiceToEndpoints(nat *table, sp *svcPort, chain string, eps []*endpoint, svcComment func(string) []part) {
	if sp.affinity {
		for _, ep := range eps {
			parts := svcComment(sp.name + " -> " + ep.str)
			secs := strconv.Itoa(sp.stickySeconds)
			parts = append(parts,
				match("-m recent --name "+ep.chain+" --rcheck --seconds "+secs+" --reap",
					"-m recent --rcheck --seconds "+secs+" --reap --name "+ep.chain+" --mask 255.255.255.255 --rsource"),
				jump(ep.chain))
			nat.add(chain, parts...)
		}
	}
	n := len(eps)
	for i, ep := range eps {
		parts := svcComment(sp.name + " -> " + ep.str)
		if i < n-1 {
			parts = append(parts, statistic(n-i))
		}
		nat.add(chain, append(parts, jump(ep.chain))...)
	}
}

// nodePortIPs returns the node addresses inside --nodeport-addresses, sorted.
func nodePortIPs(cfg *Config) []netip.Addr {
	var out []netip.Addr
	cands := append([]netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}, cfg.NodeIPs...)
	for _, a := range cands {
		for _, p := range cfg.NodePortAddresses {
			if p.Contains(a) {
				out = append(out, a)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return slices.Compact(out)
}

// Probability returns the `--probability` kube-proxy writes for rule i
// (from 0) of n endpoint rules, and what iptables-save prints for it. The
// last rule (i == n-1) has no statistic match: both strings are empty.
func Probability(i, n int) (kubeProxy, iptablesSave string) {
	if n <= 0 || i < 0 || i >= n-1 {
		return "", ""
	}
	r := probabilityRestore(n - i)
	return r, probabilitySave(r)
}

// IsServiceChain reports whether name is one of kube-proxy's per-Service
// chains (KUBE-SVC-, KUBE-SVL-, KUBE-EXT-, KUBE-FW-, KUBE-SEP-), the only
// chains its stale-chain cleanup deletes (isServiceChainName).
func IsServiceChain(name string) bool {
	for _, p := range []string{PrefixService, PrefixServiceLocal, PrefixExternal, PrefixFirewall, PrefixEndpoint} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// StaleChains returns, sorted, the chains of existing (the nat table's
// chains before the sync, as iptables-save lists them) that kube-proxy
// deletes at this sync when it cleans up: its per-Service chains that no
// service port uses any more (a partial sync counts the chains of the
// Services it leaves out as used). kube-proxy cleans up at every sync,
// or, in large-cluster mode (LargeCluster), when the last cleanup is more
// than --iptables-sync-period ago; it writes each stale chain's
// declaration (which flushes it) and `-X` (RestoreInputDeleting). The
// real proxier writes them in map order; they are sorted here.
func (r *Rules) StaleChains(existing []string) []string {
	var out []string
	for _, name := range existing {
		if !IsServiceChain(name) {
			continue
		}
		if r.active == nil {
			r.active = map[string]bool{}
			for _, f := range r.frags {
				for _, c := range f.nat.chains {
					r.active[c] = true
				}
			}
		}
		if !r.active[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// RestoreInputDeleting is RestoreInput deleting the stale chains too
// (StaleChains): their declarations after the others, their `-X` lines
// after the service ports' rules, before KUBE-SERVICES' last rule.
func (r *Rules) RestoreInputDeleting(stale []string) string {
	return r.filter.restore() + r.nat.restoreDeleting(stale)
}

// RestoreInputTableDeleting is RestoreInputTable deleting the stale
// chains (nat only).
func (r *Rules) RestoreInputTableDeleting(table string, stale []string) string {
	if table == "nat" && len(stale) > 0 {
		return r.nat.restoreDeleting(stale)
	}
	return r.RestoreInputTable(table)
}

// ChainLinesTable is RestoreInputTableDeleting(table, stale) by its
// chains rather than its text: the "-A" lines of each chain, in order,
// the chains declared and those deleted (nil when none), as
// netfilter.ChainLines takes them; false for a table other than filter
// and nat, or an input whose chains do not say all of it (a chain
// deleted after rules of its own).
func (r *Rules) ChainLinesTable(name string, stale []string) (lines map[string][]string, declared, deleted map[string]bool, ok bool) {
	var t *table
	switch name {
	case "filter":
		t, stale = r.filter, nil
	case "nat":
		t = r.nat
	default:
		return nil, nil, nil, false
	}
	return t.chainLines(stale)
}

// RestoreInputTable returns the part of RestoreInput for one table
// ("filter" or "nat"), or "" for another.
func (r *Rules) RestoreInputTable(table string) string {
	switch table {
	case "filter":
		return r.filter.restore()
	case "nat":
		return r.nat.restore()
	}
	return ""
}

// NodeIndependent reports whether the rule text Generate writes for snap
// is the same on every node whose configuration differs from cfg only in
// NodeName and NodeIPs: no service port uses node-local endpoints
// (internalTrafficPolicy Local, or externalTrafficPolicy Local on an
// externally reachable Service), none has loadBalancerSourceRanges (which
// allow the node's own IP), and --nodeport-addresses is not set (which
// selects node IPs). Then kube-proxy on every node writes the same chains,
// and a simulator may generate and compile them once. Only the
// explanation of which endpoints are local (Rules.Services) still differs.
func NodeIndependent(cfg Config, snap Snapshot) bool {
	if len(cfg.NodePortAddresses) > 0 {
		return false
	}
	for i := range snap.Services {
		s := &snap.Services[i]
		if s.InternalTrafficPolicy == TrafficPolicyLocal || s.ExternalTrafficPolicy == TrafficPolicyLocal || len(s.LoadBalancerSourceRanges) > 0 {
			return false
		}
	}
	return true
}
