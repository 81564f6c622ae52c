package main

import (
	"bytes"
	"encoding/json"
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
	"github.com/kubewalk/kubewalk/sim/packet"
)

const traceUsage = `Walk one packet exchange through a scenario and show every step.

TCP opens a connection (SYN, SYN-ACK, ACK), UDP sends one datagram from a
bound port, ICMP sends one echo request. The walk is deterministic: the
same scenario, seed and flags give the same output, byte for byte.

Usage:
  kubewalk trace --scenario NAME --from SOURCE --to DESTINATION [flags]

SOURCE is a pod (namespace/name), a node name or an outside host name. A
node sends from the address its route to DESTINATION selects, as the
kernel does (ip route get: the route's src, else the out device's primary
address; to a remote pod that is flannel.1's 10.244.N.0); --source-ip binds
another of its addresses.
DESTINATION is one of:
  namespace/name          a pod
  10.244.2.2              an IP address (with --port)
  10.244.2.2:80           an IP address and port
  service/ns/name:port    a Service's ClusterIP and port (also svc/ns/name:port)
  cka-w2:30080            a node's InternalIP and a NodePort
  cka-w2                  a node (or outside host) by name

Examples:
  # TCP handshake across nodes, summary text
  kubewalk trace --scenario reference --from net/client --to net/web-2 --port 80

  # Ping from a pod to a pod on the same node, every detail
  kubewalk trace --scenario reference --from net/client --to net/web-1 --proto icmp --level detailed

  # UDP from the machine outside the cluster to a node
  kubewalk trace --scenario reference --from outside --to cka-w1 --proto udp --port 53

  # The walk as SVG, Mermaid, JSON or pcapng
  kubewalk trace --scenario reference --from net/client --to net/web-2 -o svg > walk.svg
  kubewalk trace --scenario reference --from net/client --to net/web-2 -o pcapng > walk.pcapng
`

type traceFlags struct {
	scenario, from, to, proto, level, output string
	sourceIP                                 string
	port, sport                              int
	seed                                     uint64
	explore, arp                             bool
}

func runTrace(args []string, out *bytes.Buffer, help io.Writer) error {
	var f traceFlags
	fs := newFlagSet("trace", traceUsage, help)
	fs.StringVar(&f.scenario, "scenario", "", "scenario to walk through (see kubewalk scenarios)")
	fs.StringVar(&f.from, "from", "", "where the packet starts: pod ns/name, node or outside host")
	fs.StringVar(&f.to, "to", "", "destination: pod ns/name, ip, ip:port, service/ns/name:port or node:nodePort")
	fs.StringVar(&f.proto, "proto", "tcp", "protocol: tcp, udp or icmp")
	fs.IntVar(&f.port, "port", 0, "destination port when --to does not give one (default 80)")
	fs.IntVar(&f.sport, "source-port", 40000, "client source port (tcp, udp)")
	fs.StringVar(&f.sourceIP, "source-ip", "", "bind this local address of SOURCE instead of the one the route selects")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed of the simulated world (MACs, endpoint choice, ports)")
	fs.StringVar(&f.level, "level", "summary", "text detail: minimal, summary or detailed")
	fs.BoolVar(&f.explore, "explore", false, "enumerate every branch (random endpoint choice) with its probability")
	fs.BoolVar(&f.arp, "arp", false, "include ARP packets in mermaid and svg output")
	fs.StringVar(&f.output, "o", "text", "output format: text, json, mermaid, svg or pcapng")
	fs.StringVar(&f.output, "output", "text", "same as -o")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (give source and destination with --from and --to)", pos[0])
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
	switch f.proto {
	case "tcp", "udp", "icmp":
	default:
		return usagef("unknown --proto %q (want tcp, udp or icmp)", f.proto)
	}
	if f.port < 0 || f.port > 65535 || f.sport < 1 || f.sport > 65535 {
		return usagef("ports must be between 1 and 65535")
	}
	if f.from == "" || f.to == "" {
		return usagef("--from and --to are required")
	}
	if f.sourceIP != "" {
		if a, err := netip.ParseAddr(f.sourceIP); err != nil || !a.Is4() {
			return usagef("--source-ip: %q is not an IPv4 address", f.sourceIP)
		}
	}
	capture := f.output == "pcapng"
	walk := func(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error) {
		tr.Capture = capture
		return f.walk(c, tr)
	}
	if f.explore {
		if _, err := loadScenario(f.scenario, f.seed); err != nil {
			return err
		}
		return explore(&f, walk, out)
	}
	c, err := loadScenario(f.scenario, f.seed)
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

type endpoint struct {
	ns   *datapath.Netns
	ip   netip.Addr
	port uint16
}

func resolveSource(c *sim.Cluster, s string) (endpoint, error) {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		p := c.Pod(ns, name)
		if p == nil {
			return endpoint{}, usagef("--from: pod %q not found in this scenario", s)
		}
		return endpoint{ns: p.Netns, ip: p.IP}, nil
	}
	if n := c.Node(s); n != nil {
		// Unbound: the route to the destination picks the source.
		return endpoint{ns: n.Host}, nil
	}
	if h := c.ExternalHost(s); h != nil {
		return endpoint{ns: h.Netns, ip: h.IP}, nil
	}
	return endpoint{}, usagef("--from: %q is not a pod (namespace/name), node or outside host of this scenario", s)
}

func parsePort(s, what string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, usagef("--to: malformed port %q in %q", s, what)
	}
	return uint16(n), nil
}

func resolveDestination(c *sim.Cluster, s string) (endpoint, error) {
	for _, pre := range []string{"service/", "svc/", "service ", "svc "} {
		if rest, ok := strings.CutPrefix(s, pre); ok {
			return parseService(c, strings.TrimSpace(rest))
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if !ap.Addr().Is4() {
			return endpoint{}, usagef("--to: %q is not IPv4 (only IPv4 is simulated)", s)
		}
		if ap.Port() == 0 {
			return endpoint{}, usagef("--to: port 0 in %q", s)
		}
		return endpoint{ip: ap.Addr(), port: ap.Port()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if !a.Is4() {
			return endpoint{}, usagef("--to: %q is not IPv4 (only IPv4 is simulated)", s)
		}
		return endpoint{ip: a}, nil
	}
	if ns, name, ok := strings.Cut(s, "/"); ok {
		if strings.Contains(name, ":") {
			return endpoint{}, usagef("--to: %q: a pod is namespace/name; give the port with --port (or use ip:port)", s)
		}
		p := c.Pod(ns, name)
		if p == nil {
			return endpoint{}, usagef("--to: pod %q not found in this scenario", s)
		}
		return endpoint{ip: p.IP}, nil
	}
	host, portStr, hasPort := strings.Cut(s, ":")
	var port uint16
	if hasPort {
		var err error
		if port, err = parsePort(portStr, s); err != nil {
			return endpoint{}, err
		}
	}
	if n := c.Node(host); n != nil {
		return endpoint{ip: n.InternalIP, port: port}, nil
	}
	if h := c.ExternalHost(host); h != nil {
		return endpoint{ip: h.IP, port: port}, nil
	}
	if looksLikeIP(host) {
		return endpoint{}, usagef("--to: malformed address %q", s)
	}
	return endpoint{}, usagef("--to: %q is not a pod (namespace/name), IP, service/ns/name:port or node of this scenario", s)
}

func looksLikeIP(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == "" || strings.Count(s, ".") == 3
}

// parseService checks the syntax of "ns/name:port" and resolves it.
func parseService(c *sim.Cluster, s string) (endpoint, error) {
	ref, portStr, ok := strings.Cut(s, ":")
	ns, name, ok2 := strings.Cut(ref, "/")
	if !ok || !ok2 || ns == "" || name == "" || strings.Contains(name, "/") {
		return endpoint{}, usagef("--to: malformed service %q (want service/namespace/name:port)", s)
	}
	port, err := parsePort(portStr, s)
	if err != nil {
		return endpoint{}, err
	}
	ip, err := resolveService(c, ns, name, port)
	if err != nil {
		return endpoint{}, err
	}
	return endpoint{ip: ip, port: port}, nil
}

// resolveService returns the ClusterIP of Service ns/name, checking that it
// has the given port.
func resolveService(c *sim.Cluster, ns, name string, port uint16) (netip.Addr, error) {
	svc := c.Service(ns, name)
	if svc == nil {
		return netip.Addr{}, usagef("--to: service %s/%s not found in this scenario", ns, name)
	}
	if _, ok := svc.PortNumber(int(port)); !ok {
		return netip.Addr{}, usagef("--to: service %s/%s has no port %d", ns, name, port)
	}
	if !svc.ClusterIP().IsValid() {
		return netip.Addr{}, usagef("--to: service %s/%s is headless (no ClusterIP)", ns, name)
	}
	return svc.ClusterIP(), nil
}

// explore runs the walk once per branch (random endpoint choice) on a
// fresh copy of the scenario and prints every outcome of the first packet
// with its probability.
func explore(f *traceFlags, walk func(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error), out *bytes.Buffer) error {
	if f.output != "text" && f.output != "json" {
		return usagef("--explore prints text or json, not %s", f.output)
	}
	var client netip.Addr
	branches, err := sim.Explore(func() (*sim.Cluster, error) { return loadScenario(f.scenario, f.seed) },
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

// walk sends the flags' packet exchange on c (traced into tr when tr is not
// nil) and runs the world; it returns the client's address.
func (f *traceFlags) walk(c *sim.Cluster, tr *trace.Trace) (netip.Addr, error) {
	src, err := resolveSource(c, f.from)
	if err != nil {
		return netip.Addr{}, err
	}
	dst, err := resolveDestination(c, f.to)
	if err != nil {
		return netip.Addr{}, err
	}
	port := dst.port
	if port == 0 {
		port = uint16(f.port)
	}
	if port == 0 {
		port = 80
	}
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
		ip, err := packet.UDP(packet.IP{Src: src.ip, Dst: dst.ip}, sport, port, []byte("kubewalk"))
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
