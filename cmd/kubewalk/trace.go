package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/datapath/trace/diagram"
	"github.com/kubewalk/kubewalk/datapath/trace/pcap"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/miekg/dns"
)

const traceUsage = `Walk one packet exchange through a scenario and show every step.

TCP opens a connection (SYN, SYN-ACK, ACK), UDP sends one datagram from a
bound port, ICMP sends one echo request. The walk is deterministic: the
same scenario, seed and flags give the same output, byte for byte.

Usage:
  kubewalk trace (--scenario NAME | -f FILE...) --from SOURCE --to DESTINATION [flags]

SOURCE is a pod, a node or an outside host. A node sends from the address
its route to DESTINATION selects, as the kernel does (ip route get: the
route's src, else the out device's primary address; to a remote pod that
is flannel.1's 10.244.N.0); --source-ip binds another of its addresses.

Pods and Services are named as kubectl names them: namespace/name, or
pod/NAME, po/NAME, svc/NAME, service/NAME, or a bare NAME, in the
namespace -n gives ("default" without it); node/NAME names a node. A name
that could mean two things is accepted when only one exists.

DESTINATION is one of:
  net/web-2, pod/web-2    a pod (port: --port, default 80)
  10.244.2.2              an IP address (port: --port, default 80)
  10.244.2.2:80           an IP address and port
  svc/web:80              a Service's ClusterIP and port; without a port,
                          --port or the Service's only port
  svc/net/web:80          the same, with its namespace (also service/...)
  cka-w2:30080            a node's InternalIP and a NodePort
  cka-w2                  a node (or outside host) by name

A port given twice (in --to and with --port), --port 0, a port with
--proto icmp, and flags that do nothing with the others (--level with
--explore or -o other than text, --arp with -o other than mermaid or svg)
are refused.

Examples:
  # TCP handshake across nodes, summary text
  kubewalk trace --scenario reference --from net/client --to net/web-2 --port 80

  # Ping from a pod to a pod on the same node, every detail
  kubewalk trace --scenario reference --from net/client --to net/web-1 --proto icmp --level detailed

  # A DNS query (UDP 53) from the machine outside the cluster to a node
  # that serves no DNS: ICMP port unreachable
  kubewalk trace --scenario reference --from outside --to cka-w1 --proto udp --port 53

  # A pod in namespace net to a Service, kubectl-style
  kubewalk trace --scenario reference -n net --from pod/client --to svc/web

  # The walk as SVG, Mermaid, JSON or pcapng
  kubewalk trace --scenario reference --from net/client --to net/web-2 -o svg > walk.svg
  kubewalk trace --scenario reference --from net/client --to net/web-2 -o pcapng > walk.pcapng
`

type traceFlags struct {
	scenario                       source
	from, to, proto, level, output string
	sourceIP, namespace            string
	proxyMode                      string
	port, sport                    int
	seed                           uint64
	explore, arp                   bool
	given                          map[string]bool
}

// walkFlags defines the flags of a walk that trace and state share.
func (f *traceFlags) walkFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.from, "from", "", "where the packet starts: pod (NAMESPACE/NAME, pod/NAME, NAME with -n), node or outside host")
	fs.StringVar(&f.to, "to", "", "destination: pod, IP[:PORT], service/NAME[:PORT], svc/NAMESPACE/NAME[:PORT] or NODE[:NODEPORT]")
	fs.StringVar(&f.namespace, "n", "", "namespace of pods and Services named without one (default \"default\")")
	fs.StringVar(&f.namespace, "namespace", "", "same as -n")
	fs.StringVar(&f.proto, "proto", "tcp", "protocol: tcp, udp or icmp")
	fs.IntVar(&f.port, "port", 0, "destination port when --to does not give one (default: a Service's only port, else 80)")
	fs.IntVar(&f.sport, "source-port", 40000, "client source port (tcp, udp)")
	fs.StringVar(&f.sourceIP, "source-ip", "", "bind this local address of SOURCE instead of the one the route selects")
}

// checkWalk refuses walk flags that are malformed, or given where they
// mean nothing.
func (f *traceFlags) checkWalk(fs *flag.FlagSet) error {
	f.given = given(fs)
	switch f.proto {
	case "tcp", "udp", "icmp":
	default:
		return usagef("unknown --proto %q (want tcp, udp or icmp)", f.proto)
	}
	if f.given["port"] && (f.port < 1 || f.port > 65535) {
		return usagef("--port %d: a port is between 1 and 65535", f.port)
	}
	if f.sport < 1 || f.sport > 65535 {
		return usagef("--source-port %d: a port is between 1 and 65535", f.sport)
	}
	if f.proto == "icmp" {
		for _, name := range []string{"port", "source-port"} {
			if f.given[name] {
				return flagConflict(name, "means nothing for --proto icmp (ICMP has no ports)")
			}
		}
	}
	if f.given["n"] && f.given["namespace"] {
		return usagef("-n and --namespace are the same flag: give one")
	}
	if f.sourceIP != "" {
		if a, err := netip.ParseAddr(f.sourceIP); err != nil || !a.Is4() {
			return usagef("--source-ip: %q is not an IPv4 address", f.sourceIP)
		}
	}
	return nil
}

func runTrace(args []string, out *bytes.Buffer, help io.Writer) error {
	var f traceFlags
	fs := newFlagSet("trace", traceUsage, help)
	f.scenario = *scenarioFlags(fs)
	f.walkFlags(fs)
	fs.Uint64Var(&f.seed, "seed", 1, "random seed of the simulated world (MACs, endpoint choice, ports)")
	fs.StringVar(&f.proxyMode, "proxy-mode", "", "restart kube-proxy in this mode first: iptables, nftables or ipvs (default: the scenario's)")
	fs.StringVar(&f.level, "level", "summary", "text detail: minimal, summary or detailed")
	fs.BoolVar(&f.explore, "explore", false, "enumerate every branch (random endpoint choice) with its probability")
	fs.BoolVar(&f.arp, "arp", false, "include ARP packets in mermaid and svg output")
	fs.StringVar(&f.output, "o", "text", "output format: text, json, mermaid, svg or pcapng")
	fs.StringVar(&f.output, "output", "text", "same as -o")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noPositionals(pos, "give source and destination with --from and --to"); err != nil {
		return err
	}
	if err := f.checkWalk(fs); err != nil {
		return err
	}
	if f.given["o"] && f.given["output"] {
		return usagef("-o and --output are the same flag: give one")
	}
	lvl, err := trace.ParseLevel(f.level)
	if err != nil {
		return usagef("unknown --level %q (want minimal, summary or detailed)", f.level)
	}
	switch f.output {
	case "text", "json", "mermaid", "svg", "pcapng":
	default:
		return usagef("unknown output format %q (want text, json, mermaid, svg or pcapng)", f.output)
	}
	if f.explore && f.output != "text" && f.output != "json" {
		return usagef("--explore prints text or json, not %s", f.output)
	}
	switch {
	case f.given["level"] && f.explore:
		return flagConflict("level", "applies to a walk's text, not to --explore's table of branches")
	case f.given["level"] && f.output != "text":
		return flagConflict("level", "applies to -o text, not -o "+f.output)
	case f.arp && f.output != "mermaid" && f.output != "svg":
		return flagConflict("arp", "applies to -o mermaid and -o svg (text, json and pcapng always hold ARP)")
	}
	if f.from == "" || f.to == "" {
		return usagef("--from and --to are required")
	}
	capture := f.output == "pcapng"
	walk := func(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error) {
		tr.Capture = capture
		return f.walk(c, tr)
	}
	if f.explore {
		if _, err := f.load(); err != nil {
			return err
		}
		return explore(&f, walk, out)
	}
	c, err := f.load()
	if err != nil {
		return err
	}
	tr := &trace.Trace{}
	if _, err := walk(c, tr); err != nil {
		return err
	}
	switch f.output {
	case "text":
		return tr.WriteText(out, lvl)
	case "json":
		return tr.WriteJSON(out)
	case "mermaid":
		return diagram.Build(tr, diagram.Options{ARP: f.arp}).WriteMermaid(out)
	case "svg":
		return diagram.Build(tr, diagram.Options{ARP: f.arp}).WriteSVG(out)
	default:
		return pcap.WriteNG(out, tr)
	}
}

// load builds the scenario and, with --proxy-mode, restarts kube-proxy in
// that mode (as editing the kube-proxy ConfigMap and deleting its pods
// does).
func (f *traceFlags) load() (*sim.Cluster, error) {
	c, err := loadScenario(f.scenario, f.seed)
	if err != nil || f.proxyMode == "" {
		return c, err
	}
	if err := c.SetProxyMode(kubeproxy.Mode(f.proxyMode)); err != nil {
		return nil, usagef("--proxy-mode: %v", err)
	}
	return c, nil
}

// endpoint is where a walk starts or ends.
type endpoint struct {
	ns   *datapath.Netns
	ip   netip.Addr
	port uint16 // the port the reference gave, 0 for none
	// effective is the port a walk to it uses before --port and the
	// default: port, or the port of a Service chosen by --port or as its
	// only one.
	effective uint16
	// what names it for messages: "pod net/client", "node cka-w1".
	what string
	node bool
}

// refOptions are the flags a reference is read with.
type refOptions struct {
	// flag names the flag the reference came from, for messages: "--from".
	flag string
	// namespace is -n; "" means not given (kubectl's "default").
	namespace string
	// port is --port; 0 when not given.
	port uint16
	// proto is --proto, to check a Service has the port for it.
	proto string
}

func (o refOptions) ns() string {
	if o.namespace == "" {
		return "default"
	}
	return o.namespace
}

// resourceKinds maps the resource type names and short names kubectl
// accepts (kubectl api-resources) to the kind a reference can name.
var resourceKinds = map[string]string{
	"pod": "pod", "pods": "pod", "po": "pod",
	"service": "service", "services": "service", "svc": "service",
	"node": "node", "nodes": "node", "no": "node",
}

// splitKind splits a kubectl-style "TYPE/NAME" (pod/client, svc/web,
// no/cka-w1) into its kind and the rest; ok is false when the part before
// the first slash is not a resource type.
func splitKind(s string) (kind, rest string, ok bool) {
	t, rest, found := strings.Cut(s, "/")
	if !found {
		return "", s, false
	}
	kind, ok = resourceKinds[t]
	return kind, rest, ok
}

// splitPort cuts a trailing ":PORT" off a reference.
func splitPort(s string, o refOptions) (string, uint16, error) {
	host, portStr, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err := parsePort(portStr, s, o.flag)
	return host, port, err
}

func parsePort(s, what, flag string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, usagef("%s: malformed port %q in %q", flag, s, what)
	}
	return uint16(n), nil
}

// candidate is one reading of an ambiguous reference.
type candidate struct {
	ep  endpoint
	err error
}

// pick returns the only reading that names an object of the scenario;
// with none, the first reading's error; with several, an error listing
// them.
func pick(o refOptions, s string, cands []candidate) (endpoint, error) {
	var found []endpoint
	for _, c := range cands {
		if c.err == nil {
			found = append(found, c.ep)
		}
	}
	switch len(found) {
	case 0:
		return endpoint{}, cands[0].err
	case 1:
		return found[0], nil
	}
	var whats []string
	for _, f := range found {
		whats = append(whats, f.what)
	}
	return endpoint{}, usagef("%s: %q is ambiguous: it names %s (say which, e.g. pod/NAME or node/NAME)", o.flag, s, strings.Join(whats, " and "))
}

// podRef resolves pod ns/name, refusing a namespace that contradicts -n.
func podRef(c *sim.Cluster, o refOptions, ns, name string) (endpoint, error) {
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return endpoint{}, usagef("%s: malformed pod %q (want NAME with -n NAMESPACE, NAMESPACE/NAME or pod/NAME)", o.flag, ns+"/"+name)
	}
	if o.namespace != "" && ns != o.namespace {
		return endpoint{}, usagef("%s: pod %s/%s is not in namespace %q given with -n", o.flag, ns, name, o.namespace)
	}
	p := c.Pod(ns, name)
	if p == nil {
		msg := fmt.Sprintf("%s: pod %q not found in this scenario", o.flag, ns+"/"+name)
		var elsewhere []string
		for _, q := range c.Pods() {
			if q.Spec.Name == name {
				elsewhere = append(elsewhere, q.Spec.Namespace+"/"+q.Spec.Name)
			}
		}
		if len(elsewhere) > 0 {
			msg += " (there is " + strings.Join(elsewhere, ", ") + ": use -n or NAMESPACE/NAME)"
		}
		return endpoint{}, usagef("%s", msg)
	}
	return endpoint{ns: p.Netns, ip: p.IP, what: "pod " + ns + "/" + name}, nil
}

// hostRef resolves a node (or, unless nodeOnly, an outside host) by name.
func hostRef(c *sim.Cluster, o refOptions, name string, nodeOnly bool) (endpoint, error) {
	if n := c.Node(name); n != nil {
		return endpoint{ns: n.Host, ip: n.InternalIP, what: "node " + name, node: true}, nil
	}
	if h := c.ExternalHost(name); h != nil && !nodeOnly {
		return endpoint{ns: h.Netns, ip: h.IP, what: "outside host " + name}, nil
	}
	if nodeOnly {
		return endpoint{}, usagef("%s: node %q not found in this scenario", o.flag, name)
	}
	return endpoint{}, usagef("%s: %q is not a pod (NAMESPACE/NAME, or NAME with -n), node or outside host of this scenario", o.flag, name)
}

// objectRef resolves a reference kubectl-style: NAMESPACE/NAME,
// pod/NAME, po/NAME, pod/NAMESPACE/NAME, node/NAME, a bare NAME (a node,
// an outside host, or a pod in the -n namespace) and, for a destination,
// service/NAME, svc/NAME and svc/NAMESPACE/NAME. A reference that reads
// two ways ("svc/web" when there is a namespace "svc") is accepted when
// only one reading names something in the scenario. port is the ":PORT"
// cut off a destination, 0 when none.
func objectRef(c *sim.Cluster, s string, port uint16, o refOptions, dest bool) (endpoint, error) {
	if s == "" {
		return endpoint{}, usagef("%s: empty reference", o.flag)
	}
	var cands []candidate
	add := func(ep endpoint, err error) {
		ep.port, ep.effective = port, port
		cands = append(cands, candidate{ep, err})
	}
	bare := func() {
		pod := func() { add(podRef(c, o, o.ns(), s)) }
		if o.namespace != "" {
			pod() // with -n, a bare name is first of all a pod
		}
		add(hostRef(c, o, s, false))
		if o.namespace == "" && len(c.Pods()) > 0 {
			pod()
		}
	}
	if kind, rest, ok := splitKind(s); ok {
		switch kind {
		case "pod":
			if ns, name, two := strings.Cut(rest, "/"); two {
				add(podRef(c, o, ns, name))
			} else {
				add(podRef(c, o, o.ns(), rest))
			}
		case "node":
			add(hostRef(c, o, rest, true))
		case "service":
			if !dest {
				return endpoint{}, usagef("%s: %q is a Service; a walk starts at a pod, node or outside host", o.flag, s)
			}
			ep, err := serviceRef(c, rest, port, o)
			cands = append(cands, candidate{ep, err})
		}
	}
	if ns, name, ok := strings.Cut(s, "/"); ok {
		if len(cands) == 0 || hasNamespace(c, ns) {
			add(podRef(c, o, ns, name))
		}
	} else {
		bare()
	}
	return pick(o, s, cands)
}

func resolveSource(c *sim.Cluster, s string, o refOptions) (endpoint, error) {
	o.flag = "--from"
	if strings.Contains(s, ":") {
		return endpoint{}, usagef("--from: %q: a source has no port here (see --source-port)", s)
	}
	ep, err := objectRef(c, s, 0, o, false)
	if ep.node {
		ep.ip = netip.Addr{} // unbound: the route to the destination picks the source
	}
	return ep, err
}

// resolveDestination reads --to: an IP address with or without a port,
// or what objectRef reads, with an optional :PORT.
func resolveDestination(c *sim.Cluster, s string, o refOptions) (endpoint, error) {
	o.flag = "--to"
	for _, pre := range []string{"service ", "svc "} {
		if rest, ok := strings.CutPrefix(s, pre); ok {
			s = "service/" + strings.TrimSpace(rest)
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if !ap.Addr().Is4() {
			return endpoint{}, usagef("--to: %q is not IPv4 (only IPv4 is simulated)", s)
		}
		if ap.Port() == 0 {
			return endpoint{}, usagef("--to: port 0 in %q", s)
		}
		return endpoint{ip: ap.Addr(), port: ap.Port(), effective: ap.Port(), what: s}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if !a.Is4() {
			return endpoint{}, usagef("--to: %q is not IPv4 (only IPv4 is simulated)", s)
		}
		return endpoint{ip: a, what: s}, nil
	}
	ref, port, err := splitPort(s, o)
	if err != nil {
		return endpoint{}, err
	}
	if looksLikeIP(ref) {
		return endpoint{}, usagef("--to: malformed address %q", s)
	}
	ep, err := objectRef(c, ref, port, o, true)
	ep.ns = nil
	return ep, err
}

// hasNamespace reports whether some pod or Service of c is in namespace ns.
func hasNamespace(c *sim.Cluster, ns string) bool {
	for _, p := range c.Pods() {
		if p.Spec.Namespace == ns {
			return true
		}
	}
	for _, svc := range c.Services() {
		if svc.Spec.Namespace == ns {
			return true
		}
	}
	return false
}

func looksLikeIP(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == "" || strings.Count(s, ".") == 3
}

// serviceRef resolves "NAME" (in the -n namespace) or "NAMESPACE/NAME"
// with the port cut off the reference (0 for none): the port used is that
// one, else --port, else the Service's only port.
func serviceRef(c *sim.Cluster, ref string, port uint16, o refOptions) (endpoint, error) {
	ns, name, two := strings.Cut(ref, "/")
	if !two {
		ns, name = o.ns(), ref
	} else if o.namespace != "" && ns != o.namespace {
		return endpoint{}, usagef("--to: service %s/%s is not in namespace %q given with -n", ns, name, o.namespace)
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return endpoint{}, usagef("--to: malformed service %q (want service/NAME[:PORT] with -n NAMESPACE, or service/NAMESPACE/NAME[:PORT])", ref)
	}
	svc := c.Service(ns, name)
	if svc == nil {
		return endpoint{}, usagef("--to: service %s/%s not found in this scenario", ns, name)
	}
	if !svc.ClusterIP().IsValid() {
		return endpoint{}, usagef("--to: service %s/%s is headless (no ClusterIP)", ns, name)
	}
	use := cmp.Or(port, o.port)
	if use == 0 {
		if len(svc.Spec.Ports) != 1 {
			var ps []string
			for _, p := range svc.Spec.Ports {
				ps = append(ps, strconv.Itoa(p.Port))
			}
			return endpoint{}, usagef("--to: service %s/%s has ports %s: say which (service/%s/%s:PORT or --port)", ns, name, strings.Join(ps, ", "), ns, name)
		}
		use = uint16(svc.Spec.Ports[0].Port)
	}
	sp, ok := svc.PortNumber(int(use))
	if !ok {
		return endpoint{}, usagef("--to: service %s/%s has no port %d", ns, name, use)
	}
	if o.proto == "tcp" || o.proto == "udp" {
		if !strings.EqualFold(string(sp.Protocol), o.proto) {
			return endpoint{}, usagef("--to: port %d of service %s/%s is %s, not %s (see --proto)", use, ns, name, sp.Protocol, strings.ToUpper(o.proto))
		}
	}
	return endpoint{ip: svc.ClusterIP(), port: port, effective: use, what: "service " + ns + "/" + name}, nil
}

// explore runs the walk once per branch (random endpoint choice) on a
// fresh copy of the scenario and prints every outcome of the first packet
// with its probability.
func explore(f *traceFlags, walk func(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error), out *bytes.Buffer) error {
	var client netip.Addr
	branches, err := sim.Explore(func() (*sim.Cluster, error) { return f.load() },
		func(c *sim.Cluster, tr *trace.Trace) error {
			ip, err := walk(c, tr)
			client = ip
			return err
		})
	if err != nil {
		return err
	}
	type row struct {
		Probability float64 `json:"probability"`
		Choices     []bool  `json:"choices"`
		Outcome     string  `json:"outcome"`
		Masquerade  bool    `json:"masquerade"`
	}
	rows := make([]row, len(branches))
	for i, b := range branches {
		o := scenarios.OutcomeOf(b.Trace, client)
		rows[i] = row{Probability: b.Probability, Choices: b.Choices, Outcome: o.Endpoint, Masquerade: o.Masquerade}
	}
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"schema": "kubewalk.explore", "version": 1, "branches": rows})
	}
	fmt.Fprintf(out, "%d branch(es) for the first packet from %s to %s:\n", len(rows), f.from, f.to)
	for _, r := range rows {
		masq := ""
		if r.Masquerade {
			masq = " (source masqueraded)"
		}
		fmt.Fprintf(out, "%7.3f%%  %s%s\n", 100*r.Probability, r.Outcome, masq)
	}
	return nil
}

// dnsQueryName is the name the UDP walk to port 53 asks for: the API
// server's Service, which every cluster's DNS answers.
const dnsQueryName = "kubernetes.default.svc.cluster.local."

// udpPayload is what the UDP walk sends to port: to 53, a real DNS query
// (A record of dnsQueryName, recursion desired, a fixed ID so the walk
// stays deterministic), so that a capture decodes as DNS, not as
// malformed DNS; elsewhere the bytes "kubewalk".
func udpPayload(port uint16) ([]byte, error) {
	if port != 53 {
		return []byte("kubewalk"), nil
	}
	m := new(dns.Msg)
	m.SetQuestion(dnsQueryName, dns.TypeA)
	m.Id = 0x6b77 // "kw"
	return m.Pack()
}

// walk sends the flags' packet exchange on c (traced into tr when tr is not
// nil) and runs the world; it returns the client's address.
func (f *traceFlags) walk(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error) {
	o := refOptions{namespace: f.namespace, proto: f.proto}
	if f.given["port"] {
		o.port = uint16(f.port)
	}
	src, err := resolveSource(c, f.from, o)
	if err != nil {
		return netip.Addr{}, err
	}
	dst, err := resolveDestination(c, f.to, o)
	if err != nil {
		return netip.Addr{}, err
	}
	if dst.port != 0 && f.proto == "icmp" {
		return netip.Addr{}, usagef("--to %s: a port means nothing for --proto icmp (ICMP has no ports)", f.to)
	}
	if dst.port != 0 && o.port != 0 {
		return netip.Addr{}, flagConflict("port", fmt.Sprintf("%d conflicts with the port %d in --to %s: give one", o.port, dst.port, f.to))
	}
	port := cmp.Or(dst.effective, o.port, 80)
	sport := uint16(f.sport)
	if f.sourceIP != "" {
		a := netip.MustParseAddr(f.sourceIP)
		if !src.ns.IsLocal(a.As4()) {
			return netip.Addr{}, usagef("--source-ip: %s is not an address of %s", a, f.from)
		}
		src.ip = a
	}
	if !src.ip.IsValid() && f.proto != "tcp" {
		r, err := src.ns.RouteGet(dst.ip)
		if err != nil {
			return src.ip, fmt.Errorf("%s to %s: %w", f.from, dst.ip, err)
		}
		src.ip = r.Src
	}
	switch f.proto {
	case "tcp":
		c, err := src.ns.DialTCP(src.ip, dst.ip, sport, port, 1000, tr)
		if err != nil {
			return src.ip, err
		}
		src.ip = netip.AddrFrom4(c.Src)
	case "udp":
		if _, err := src.ns.ListenUDP(sport, false); err != nil {
			return src.ip, fmt.Errorf("binding UDP port %d on %s: %w", sport, f.from, err)
		}
		payload, err := udpPayload(port)
		if err != nil {
			return src.ip, err
		}
		ip, err := packet.UDP(packet.IP{Src: src.ip, Dst: dst.ip}, sport, port, payload)
		if err != nil {
			return src.ip, err
		}
		if err := c.World.Send(src.ns, ip, tr); err != nil {
			return src.ip, err
		}
	case "icmp":
		ip, err := packet.ICMPEcho(packet.IP{Src: src.ip, Dst: dst.ip}, 1, 1, []byte("kubewalk"))
		if err != nil {
			return src.ip, err
		}
		if err := c.World.Send(src.ns, ip, tr); err != nil {
			return src.ip, err
		}
	}
	return src.ip, c.World.Run()
}
