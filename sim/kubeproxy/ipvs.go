package kubeproxy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// IPVS mode (pkg/proxy/ipvs/proxier.go, v1.33): every Service address is a
// virtual server of the kernel's IPVS with the Service's endpoints as real
// servers (Masq forwarding, weight 1); ClusterIPs, external IPs and
// load-balancer IPs are bound to the dummy device kube-ipvs0 so they are
// local addresses; NodePorts are virtual servers on every node address.
// iptables still does the masquerading and the filtering, with rules that
// match ipsets instead of one rule per Service.

// IPVS-mode chain and device names.
const (
	ChainNodePort              = "KUBE-NODE-PORT"
	ChainLoadBalancer          = "KUBE-LOAD-BALANCER"
	ChainSourceRangesFirewall  = "KUBE-SOURCE-RANGES-FIREWALL"
	ChainIPVSFilter            = "KUBE-IPVS-FILTER"
	ChainIPVSOutFilter         = "KUBE-IPVS-OUT-FILTER"
	DummyDevice                = "kube-ipvs0"
	DefaultIPVSScheduler       = "rr"
	ipvsHashSize, ipvsMaxElem  = 1024, 65536
	ipvsPortRange              = "0-65535"
	kubeHealthCheckNodePortSet = "KUBE-HEALTH-CHECK-NODE-PORT"
	kubeIPVSSet                = "KUBE-IPVS-IPS"
)

// IPSetSpec is one ipset kube-proxy's IPVS proxier keeps: its name, type,
// the comment its iptables rules carry, and this sync's entries in
// `ipset add` syntax, sorted.
type IPSetSpec struct {
	Name, Type, Comment string
	Entries             []string
}

// CreateArgs returns the `ipset create` words kube-proxy runs
// (utilipset createSet: hash types get family, hashsize and maxelem,
// bitmap:port a range), with -exist.
func (s IPSetSpec) CreateArgs() []string {
	args := []string{"create", s.Name, s.Type}
	if strings.HasPrefix(s.Type, "hash:") {
		args = append(args, "family", "inet", "hashsize", strconv.Itoa(ipvsHashSize), "maxelem", strconv.Itoa(ipvsMaxElem))
	} else {
		args = append(args, "range", ipvsPortRange)
	}
	return append(args, "-exist")
}

// ipsetInfo is the proxier's ipsetInfo table, in its order.
var ipsetInfo = []struct{ name, typ, comment string }{
	{"KUBE-LOOP-BACK", "hash:ip,port,ip", "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
	{"KUBE-CLUSTER-IP", "hash:ip,port", "Kubernetes service cluster ip + port for masquerade purpose"},
	{"KUBE-EXTERNAL-IP", "hash:ip,port", "Kubernetes service external ip + port for masquerade and filter purpose"},
	{"KUBE-EXTERNAL-IP-LOCAL", "hash:ip,port", "Kubernetes service external ip + port with externalTrafficPolicy=local"},
	{"KUBE-LOAD-BALANCER", "hash:ip,port", "Kubernetes service lb portal"},
	{"KUBE-LOAD-BALANCER-FW", "hash:ip,port", "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
	{"KUBE-LOAD-BALANCER-LOCAL", "hash:ip,port", "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
	{"KUBE-LOAD-BALANCER-SOURCE-IP", "hash:ip,port,ip", "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
	{"KUBE-LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net", "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
	{"KUBE-NODE-PORT-TCP", "bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose"},
	{"KUBE-NODE-PORT-LOCAL-TCP", "bitmap:port", "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
	{"KUBE-NODE-PORT-UDP", "bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose"},
	{"KUBE-NODE-PORT-LOCAL-UDP", "bitmap:port", "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
	{"KUBE-NODE-PORT-SCTP-HASH", "hash:ip,port", "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
	{"KUBE-NODE-PORT-LOCAL-SCTP-HASH", "hash:ip,port", "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
	{kubeHealthCheckNodePortSet, "bitmap:port", "Kubernetes health check node port"},
	{kubeIPVSSet, "hash:ip", "Addresses on the ipvs interface"},
}

// ipsetWithIptablesChain is the proxier's table of rules that only match a
// set: table, chain, target, direction flags, protocol.
var ipsetWithIptablesChain = []struct{ name, table, from, to, matchType, proto string }{
	{"KUBE-LOOP-BACK", "nat", ChainPostrouting, "MASQUERADE", "dst,dst,src", ""},
	{"KUBE-LOAD-BALANCER", "nat", ChainServices, ChainLoadBalancer, "dst,dst", ""},
	{"KUBE-LOAD-BALANCER-LOCAL", "nat", ChainLoadBalancer, "RETURN", "dst,dst", ""},
	{"KUBE-NODE-PORT-LOCAL-TCP", "nat", ChainNodePort, "RETURN", "dst", "tcp"},
	{"KUBE-NODE-PORT-TCP", "nat", ChainNodePort, ChainMarkMasq, "dst", "tcp"},
	{"KUBE-NODE-PORT-LOCAL-UDP", "nat", ChainNodePort, "RETURN", "dst", "udp"},
	{"KUBE-NODE-PORT-UDP", "nat", ChainNodePort, ChainMarkMasq, "dst", "udp"},
	{"KUBE-NODE-PORT-LOCAL-SCTP-HASH", "nat", ChainNodePort, "RETURN", "dst,dst", "sctp"},
	{"KUBE-NODE-PORT-SCTP-HASH", "nat", ChainNodePort, ChainMarkMasq, "dst,dst", "sctp"},
	{"KUBE-LOAD-BALANCER-FW", "filter", ChainProxyFirewall, ChainSourceRangesFirewall, "dst,dst", ""},
	{"KUBE-LOAD-BALANCER-SOURCE-CIDR", "filter", ChainSourceRangesFirewall, "RETURN", "dst,dst,src", ""},
	{"KUBE-LOAD-BALANCER-SOURCE-IP", "filter", ChainSourceRangesFirewall, "RETURN", "dst,dst,src", ""},
}

// ipvsJumpChains is iptablesJumpChain: the rules ensured (-I, so the last
// of a chain ends up first) in built-in chains.
var ipvsJumpChains = []JumpRule{
	{"nat", "OUTPUT", []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", ChainServices}},
	{"nat", "PREROUTING", []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", ChainServices}},
	{"nat", "POSTROUTING", []string{"-m", "comment", "--comment", "kubernetes postrouting rules", "-j", ChainPostrouting}},
	{"filter", "FORWARD", []string{"-m", "comment", "--comment", "kubernetes forwarding rules", "-j", ChainForward}},
	{"filter", "INPUT", []string{"-m", "comment", "--comment", "kubernetes health check rules", "-j", ChainNodePort}},
	{"filter", "INPUT", []string{"-m", "comment", "--comment", "kube-proxy firewall rules", "-j", ChainProxyFirewall}},
	{"filter", "FORWARD", []string{"-m", "comment", "--comment", "kube-proxy firewall rules", "-j", ChainProxyFirewall}},
	{"filter", "INPUT", []string{"-m", "comment", "--comment", "kubernetes ipvs access filter", "-j", ChainIPVSFilter}},
	{"filter", "OUTPUT", []string{"-m", "comment", "--comment", "kubernetes ipvs access filter", "-j", ChainIPVSOutFilter}},
}

var ipvsChains = map[string][]string{
	"nat":    {ChainServices, ChainPostrouting, ChainNodePort, ChainLoadBalancer, ChainMarkMasq},
	"filter": {ChainForward, ChainNodePort, ChainProxyFirewall, ChainSourceRangesFirewall, ChainIPVSFilter, ChainIPVSOutFilter},
}

// ipvsSchedulers is what kube-proxy's configuration validation accepts
// (validateIPVSSchedulerMethod; "" means rr). mh is handled by the
// proxier but not in the v1.33 validation list, so it is refused.
var ipvsSchedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", ""}

// SchedulerError is kube-proxy's validation error for an ipvs.scheduler it
// does not accept.
type SchedulerError struct{ Value string }

// Error implements error in kube-proxy's words.
func (e *SchedulerError) Error() string {
	return fmt.Sprintf("KubeProxyConfiguration.KubeProxyIPVSConfiguration.Scheduler.Scheduler: Invalid value: %q: must be in %v, blank means the default algorithm method (currently rr)",
		e.Value, ipvsSchedulers)
}

// ParseIPVSScheduler validates ipvs.scheduler as kube-proxy does and
// returns the scheduler it runs ("" is rr).
func ParseIPVSScheduler(s string) (string, error) {
	if !slices.Contains(ipvsSchedulers, s) {
		return "", &SchedulerError{Value: s}
	}
	return cmp.Or(s, DefaultIPVSScheduler), nil
}

// VirtualServerKind says which Service address a virtual server serves.
type VirtualServerKind string

// Virtual server kinds.
const (
	VSClusterIP    VirtualServerKind = "cluster IP"
	VSExternalIP   VirtualServerKind = "external IP"
	VSLoadBalancer VirtualServerKind = "load balancer IP"
	VSNodePort     VirtualServerKind = "node port"
)

// VirtualServer is one IPVS service kube-proxy programs, with its real
// servers.
type VirtualServer struct {
	ServicePortName string
	Kind            VirtualServerKind
	Protocol        Protocol
	Addr            netip.Addr
	Port            int
	Scheduler       string
	// Persistent and Timeout model sessionAffinity ClientIP (the service
	// is persistent for stickyMaxAgeSeconds).
	Persistent bool
	Timeout    int
	// SourceHash is IP_VS_SVC_F_SCHED_SH1, set for the mh scheduler.
	SourceHash bool
	// Bind: the address goes on kube-ipvs0.
	Bind bool
	// Dests are the real servers, sorted.
	Dests []netip.AddrPort
	// LocalOnly: the endpoints are the node's own (Local traffic policy
	// with local endpoints).
	LocalOnly bool
}

// IPVSRules is the result of one IPVS-mode sync.
type IPVSRules struct {
	Scheduler      string
	Sets           []IPSetSpec
	VirtualServers []VirtualServer
	// BindAddrs are the addresses on kube-ipvs0, sorted.
	BindAddrs []netip.Addr
	restore   string
}

// RestoreInput is the text kube-proxy hands to `iptables-restore --noflush
// --counters` (nat, then filter).
func (r *IPVSRules) RestoreInput() string { return r.restore }

// JumpRules are the rules kube-proxy ensures in built-in chains before the
// restore, in order (each with -I).
func (r *IPVSRules) JumpRules() []JumpRule {
	out := make([]JumpRule, len(ipvsJumpChains))
	for i, j := range ipvsJumpChains {
		out[i] = JumpRule{j.Table, j.Chain, slices.Clone(j.Args)}
	}
	return out
}

// EnsuredChains are the chains kube-proxy creates (iptables -N) before
// the restore, per table.
func (r *IPVSRules) EnsuredChains() map[string][]string {
	return map[string][]string{"nat": slices.Clone(ipvsChains["nat"]), "filter": slices.Clone(ipvsChains["filter"])}
}

// Set returns the set named name, or false.
func (r *IPVSRules) Set(name string) (IPSetSpec, bool) {
	for _, s := range r.Sets {
		if s.Name == name {
			return s, true
		}
	}
	return IPSetSpec{}, false
}

// VirtualServer finds the virtual server for proto, addr and port.
func (r *IPVSRules) VirtualServer(proto Protocol, addr netip.Addr, port int) (VirtualServer, bool) {
	for _, v := range r.VirtualServers {
		if v.Protocol == proto && v.Addr == addr && v.Port == port {
			return v, true
		}
	}
	return VirtualServer{}, false
}

// GenerateIPVS builds what kube-proxy's IPVS proxier programs on a node
// for snap: nodeAddrs are the node's addresses outside kube-ipvs0
// (loopback and link-local excluded, as GetAllLocalAddressesExcept and
// isValidForSet do), where NodePort virtual servers go. scheduler is
// ipvs.scheduler as configured.
func GenerateIPVS(cfg Config, snap Snapshot, scheduler string, nodeAddrs []netip.Addr) (*IPVSRules, error) {
	sched, err := ParseIPVSScheduler(scheduler)
	if err != nil {
		return nil, err
	}
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
	r := &IPVSRules{Scheduler: sched}
	active := map[string]map[string]bool{}
	add := func(set, entry string) {
		if active[set] == nil {
			active[set] = map[string]bool{}
		}
		active[set][entry] = true
	}
	var nodeIPs []netip.Addr
	for _, a := range nodeAddrs {
		if a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			nodeIPs = append(nodeIPs, a)
		}
	}
	slices.SortFunc(nodeIPs, netip.Addr.Compare)
	nodeIPs = slices.Compact(nodeIPs)
	isNodeAddr := func(a netip.Addr) bool { return slices.Contains(nodeIPs, a) }
	var nodeIP netip.Addr
	if len(cfg.NodeIPs) > 0 {
		nodeIP = cfg.NodeIPs[0]
	}
	var lbNoNodeAccess []noNode
	bind := map[netip.Addr]bool{}

	for _, sp := range ports {
		eps := epMap[svcPortKey{sp.svc.Namespace, sp.svc.Name, sp.port.Name, sp.proto}]
		p := sp.lproto
		port := sp.port.Port
		for _, ep := range eps {
			if ep.local && ep.addr.Port() != 0 {
				a := ep.addr.Addr().String()
				add("KUBE-LOOP-BACK", fmt.Sprintf("%s,%s:%d,%s", a, p, ep.addr.Port(), a))
			}
		}
		clusterEps, localEps, _, _ := categorize(eps, sp)
		destsFor := func(onlyLocal bool) ([]netip.AddrPort, bool) {
			use := clusterEps
			local := false
			if onlyLocal {
				if len(localEps) > 0 {
					use, local = localEps, true
				}
			}
			out := make([]netip.AddrPort, 0, len(use))
			for _, ep := range use {
				out = append(out, ep.addr)
			}
			slices.SortFunc(out, netip.AddrPort.Compare)
			return slices.Compact(out), local
		}
		vs := func(kind VirtualServerKind, addr netip.Addr, port int, bindIt, onlyLocal bool) {
			v := VirtualServer{ServicePortName: sp.name, Kind: kind, Protocol: sp.proto, Addr: addr, Port: port,
				Scheduler: sched, Bind: bindIt, SourceHash: sched == "mh"}
			if sp.affinity {
				v.Persistent, v.Timeout = true, sp.stickySeconds
			}
			v.Dests, v.LocalOnly = destsFor(onlyLocal)
			if bindIt {
				bind[addr] = true
			}
			r.VirtualServers = append(r.VirtualServers, v)
		}
		entry := func(ip netip.Addr) string { return fmt.Sprintf("%s,%s:%d", ip, p, port) }

		add("KUBE-CLUSTER-IP", entry(sp.clusterIP))
		vs(VSClusterIP, sp.clusterIP, port, true, sp.internalPolicyLocal)

		for _, eip := range sp.externalIPs {
			if sp.externalPolicyLocal {
				add("KUBE-EXTERNAL-IP-LOCAL", entry(eip))
			} else {
				add("KUBE-EXTERNAL-IP", entry(eip))
			}
			vs(VSExternalIP, eip, port, !isNodeAddr(eip), sp.externalPolicyLocal)
		}
		for _, lb := range sp.lbIPs {
			add("KUBE-LOAD-BALANCER", entry(lb))
			if sp.externalPolicyLocal {
				add("KUBE-LOAD-BALANCER-LOCAL", entry(lb))
			}
			if len(sp.sourceRanges) > 0 {
				add("KUBE-LOAD-BALANCER-FW", entry(lb))
				allowFromNode := false
				for _, cidr := range sp.sourceRanges {
					add("KUBE-LOAD-BALANCER-SOURCE-CIDR", fmt.Sprintf("%s,%s:%d,%s", lb, p, port, cidrEntry(cidr)))
					if nodeIP.IsValid() && cidr.Contains(nodeIP) {
						allowFromNode = true
					}
				}
				if allowFromNode {
					add("KUBE-LOAD-BALANCER-SOURCE-IP", fmt.Sprintf("%s,%s:%d,%s", lb, p, port, lb))
				} else {
					lbNoNodeAccess = append(lbNoNodeAccess, noNode{lb.String(), p, port})
				}
			}
			vs(VSLoadBalancer, lb, port, !isNodeAddr(lb), sp.externalPolicyLocal)
		}
		if np := sp.port.NodePort; np != 0 && len(nodeIPs) > 0 {
			var set, localSet string
			var entries []string
			switch sp.proto {
			case ProtocolTCP:
				set, localSet, entries = "KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT-LOCAL-TCP", []string{strconv.Itoa(np)}
			case ProtocolUDP:
				set, localSet, entries = "KUBE-NODE-PORT-UDP", "KUBE-NODE-PORT-LOCAL-UDP", []string{strconv.Itoa(np)}
			case ProtocolSCTP:
				set, localSet = "KUBE-NODE-PORT-SCTP-HASH", "KUBE-NODE-PORT-LOCAL-SCTP-HASH"
				for _, ip := range nodeIPs {
					entries = append(entries, fmt.Sprintf("%s,%s:%d", ip, p, np))
				}
			}
			for _, e := range entries {
				add(set, e)
				if sp.externalPolicyLocal {
					add(localSet, e)
				}
			}
			for _, ip := range nodeIPs {
				vs(VSNodePort, ip, np, false, sp.externalPolicyLocal)
			}
		}
		if sp.healthCheckNodePort != 0 {
			add(kubeHealthCheckNodePortSet, strconv.Itoa(sp.healthCheckNodePort))
		}
	}
	for a := range bind {
		r.BindAddrs = append(r.BindAddrs, a)
		add(kubeIPVSSet, a.String())
	}
	slices.SortFunc(r.BindAddrs, netip.Addr.Compare)
	slices.SortFunc(r.VirtualServers, func(a, b VirtualServer) int {
		return cmp.Or(strings.Compare(string(a.Protocol), string(b.Protocol)), a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
	})
	// Two Services cannot share a virtual server; a later one would
	// update the first. Keep the first, as the proxier's second
	// syncService is an update to the same values.
	r.VirtualServers = slices.CompactFunc(r.VirtualServers, func(a, b VirtualServer) bool {
		return a.Protocol == b.Protocol && a.Addr == b.Addr && a.Port == b.Port
	})
	for _, info := range ipsetInfo {
		s := IPSetSpec{Name: info.name, Type: info.typ, Comment: info.comment}
		for e := range active[info.name] {
			s.Entries = append(s.Entries, e)
		}
		slices.Sort(s.Entries)
		r.Sets = append(r.Sets, s)
	}
	r.restore = r.writeIptables(&cfg, lbNoNodeAccess)
	return r, nil
}

// noNode is an LB address:port the node itself must not reach (its
// source ranges leave the node out), for KUBE-IPVS-OUT-FILTER.
type noNode struct {
	ip    string
	proto string
	port  int
}

// cidrEntry prints a source range as ipset takes it.
func cidrEntry(p netip.Prefix) string { return p.Masked().String() }

func (r *IPVSRules) nonEmpty(name string) bool {
	s, ok := r.Set(name)
	return ok && len(s.Entries) > 0
}

// writeIptables is writeIptablesRules: the restore text, nat then filter.
func (r *IPVSRules) writeIptables(cfg *Config, lbNoNode []noNode) string {
	mark := fmt.Sprintf("%#08x", 1<<uint(cfg.masqueradeBit()))
	var nat, filter []string
	q := func(s string) string { return `"` + s + `"` }
	comment := func(name string) string { s, _ := r.Set(name); return q(s.Comment) }
	nat = append(nat, "-A "+ChainServices+" -s 127.0.0.0/8 -j RETURN")
	for _, s := range ipsetWithIptablesChain {
		if !r.nonEmpty(s.name) {
			continue
		}
		line := "-A " + s.from
		if s.proto != "" {
			line += " -p " + s.proto
		}
		line += " -m comment --comment " + comment(s.name) + " -m set --match-set " + s.name + " " + s.matchType + " -j " + s.to
		if s.table == "filter" {
			filter = append(filter, line)
		} else {
			nat = append(nat, line)
		}
	}
	if r.nonEmpty("KUBE-CLUSTER-IP") {
		base := "-A " + ChainServices + " -m comment --comment " + comment("KUBE-CLUSTER-IP") + " -m set --match-set KUBE-CLUSTER-IP"
		switch {
		case cfg.MasqueradeAll:
			nat = append(nat, base+" dst,dst -j "+ChainMarkMasq)
		case cfg.ClusterCIDR.IsValid():
			nat = append(nat, base+" dst,dst ! -s "+cfg.ClusterCIDR.Masked().String()+" -j "+ChainMarkMasq)
		default:
			nat = append(nat, base+" src,dst -j "+ChainMarkMasq)
		}
	}
	externalIPRules := func(args string) {
		nat = append(nat, args+" -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT")
		nat = append(nat, args+" -m addrtype --dst-type LOCAL -j ACCEPT")
	}
	if r.nonEmpty("KUBE-EXTERNAL-IP") {
		args := "-A " + ChainServices + " -m comment --comment " + comment("KUBE-EXTERNAL-IP") + " -m set --match-set KUBE-EXTERNAL-IP dst,dst"
		nat = append(nat, args+" -j "+ChainMarkMasq)
		externalIPRules(args)
	}
	if r.nonEmpty("KUBE-EXTERNAL-IP-LOCAL") {
		externalIPRules("-A " + ChainServices + " -m comment --comment " + comment("KUBE-EXTERNAL-IP-LOCAL") + " -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst")
	}
	nat = append(nat, "-A "+ChainServices+" -m addrtype --dst-type LOCAL -j "+ChainNodePort)
	nat = append(nat, "-A "+ChainLoadBalancer+" -j "+ChainMarkMasq)
	filter = append(filter, "-A "+ChainSourceRangesFirewall+" -j DROP")
	for _, e := range lbNoNode {
		filter = append(filter, fmt.Sprintf("-A %s -s %s -m ipvs --vaddr %s --vproto %s --vport %d -j DROP", ChainIPVSOutFilter, e.ip, e.ip, e.proto, e.port))
	}
	for _, set := range []string{"KUBE-CLUSTER-IP", "KUBE-LOAD-BALANCER"} {
		if r.nonEmpty(set) {
			nat = append(nat, "-A "+ChainServices+" -m set --match-set "+set+" dst,dst -j ACCEPT")
		}
	}
	filter = append(filter,
		"-A "+ChainForward+` -m comment --comment "kubernetes forwarding rules" -m mark --mark `+mark+"/"+mark+" -j ACCEPT",
		"-A "+ChainForward+` -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
		"-A "+ChainNodePort+" -m comment --comment "+comment(kubeHealthCheckNodePortSet)+" -m set --match-set "+kubeHealthCheckNodePortSet+" dst -j ACCEPT",
		"-A "+ChainIPVSFilter+" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN",
		"-A "+ChainIPVSFilter+" -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN",
		"-A "+ChainIPVSFilter+" -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN",
		"-A "+ChainIPVSFilter+" -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN",
		"-A "+ChainIPVSFilter+" -m set --match-set "+kubeHealthCheckNodePortSet+" dst -j RETURN",
		"-A "+ChainIPVSFilter+" -m conntrack --ctstate NEW -m set --match-set "+kubeIPVSSet+" dst -j REJECT",
	)
	nat = append(nat,
		"-A "+ChainPostrouting+" -m mark ! --mark "+mark+"/"+mark+" -j RETURN",
		"-A "+ChainPostrouting+" -j MARK --xor-mark "+mark,
		"-A "+ChainPostrouting+` -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`,
		"-A "+ChainMarkMasq+" -j MARK --or-mark "+mark,
	)
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, c := range ipvsChains["nat"] {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, l := range nat {
		b.WriteString(l + "\n")
	}
	b.WriteString("COMMIT\n*filter\n")
	for _, c := range ipvsChains["filter"] {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, l := range filter {
		b.WriteString(l + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
