// Package export turns a simulated cluster into a shell script that builds
// the same topology out of real Linux network namespaces, so that the
// kernel can serve as the oracle for kubewalk's walks.
//
// # What the script builds
//
// One network namespace per node, per pod and per external host, plus one
// underlay namespace holding a Linux bridge per underlay segment (never the
// host's namespace). In each namespace, the same devices with the same
// names, MACs and MTUs as the simulator's:
//
//   - a node's NICs are veth pairs whose far ends are ports of the underlay
//     bridge of their segment;
//   - pod eth0 and the node's veth<8 hex> are veth pairs; cni0 is a bridge
//     with the simulator's MAC and gateway address; hairpin flags are copied;
//   - flannel.1 is a real vxlan device: same VNI, dstport, local address,
//     underlay device, learning flag, MAC and MTU;
//   - the same addresses (with `brd +`, as the simulator computes the
//     broadcast address), non-kernel routes (with gateway, onlink, metric,
//     proto, src, type), PERMANENT and NOARP neighbour entries, vxlan FDB
//     entries and static bridge FDB entries;
//   - the sysctls the simulator models: net.ipv4.ip_forward,
//     ip_default_ttl, icmp_echo_ignore_broadcasts and
//     net.bridge.bridge-nf-call-iptables (written only where the namespace
//     has it: it exists once br_netfilter is loaded or built in, and is per
//     namespace since Linux 5.3; the script warns otherwise).
//
// Learned state is left out on purpose: ARP entries other than PERMANENT and
// NOARP ones, learned bridge FDB entries and conntrack. The kernel resolves
// and learns them itself, which is what a differential test compares.
// IPv6 is switched off in every namespace (kubewalk does not model it, and
// router solicitations, DAD and MLD reports would otherwise appear on every
// device), and rp_filter is set to 0 (not modelled).
//
// The iptables rules the simulator holds for a node (kube-proxy's chains,
// flannel's FLANNEL-* rules) are loaded in its namespace with
// iptables-restore; see netfilterScript.
//
// # Names
//
// Every namespace name starts with a prefix, by default "kw-" plus four hex
// digits of a hash of the topology, so that the names cannot collide with
// anything else on the machine, and two different clusters get different
// prefixes. Interface names are the simulator's (at most 15 characters, as
// IFNAMSIZ demands); only the underlay bridge and its ports, which have no
// counterpart in the simulator, get names of their own ("kwu<seg>" and
// "kwu<seg>p<port>"). The teardown script deletes every namespace the setup
// script creates, and with it every device.
//
// # What may reach the script
//
// The scripts run as root, so nothing a scenario or a user supplies may
// change what they do. Generate refuses, with an *Error naming the value,
// a prefix that is not lower-case letters, digits and '-' (ValidatePrefix),
// node, host, namespace and pod names that are not DNS-1123 names
// (ValidateName) and interface names the kernel would refuse or iproute2
// could misread (ValidateIfName); and it writes every value through one
// quoting function besides. iptables rules travel in a quoted
// here-document, which the shell does not expand.
package export

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/route"
	"github.com/kubewalk/kubewalk/sim"
)

// Options tune the export.
type Options struct {
	// Prefix starts every namespace name: lower-case letters, digits and
	// '-' (see ValidatePrefix). Empty means "kw-" followed by four hex
	// digits of a hash of the topology.
	Prefix string
}

// Key names a simulated network namespace: a node (or external host) and
// the namespace's name within it ("host" for the root namespace,
// "namespace/name" for a pod).
type Key struct {
	Node, Netns string
}

// Export is a cluster turned into scripts.
type Export struct {
	// Prefix is the prefix every namespace name starts with.
	Prefix string
	// Setup builds the topology; it is a POSIX sh script run as root.
	Setup string
	// Teardown deletes every namespace Setup creates. It may be run more
	// than once and after a partial Setup.
	Teardown string
	// Underlay is the name of the namespace that holds the underlay
	// bridges.
	Underlay string

	names map[Key]string
	order []string // namespaces in creation order
}

// Netns returns the real namespace name of a simulated one.
func (e *Export) Netns(node, netns string) (string, bool) {
	n, ok := e.names[Key{node, netns}]
	return n, ok
}

// Names returns the mapping from simulated namespaces to real namespace
// names. The map is a copy.
func (e *Export) Names() map[Key]string {
	m := make(map[Key]string, len(e.names))
	for k, v := range e.names {
		m[k] = v
	}
	return m
}

// Namespaces lists every real namespace the setup script creates, in
// creation order (the underlay first).
func (e *Export) Namespaces() []string { return slices.Clone(e.order) }

// Script returns the setup and teardown scripts for c. It is Generate for
// callers that only need the text.
func Script(c *sim.Cluster, opts Options) (setup, teardown string, err error) {
	e, err := Generate(c, opts)
	if err != nil {
		return "", "", err
	}
	return e.Setup, e.Teardown, nil
}

// Error reports a cluster that cannot be exported.
type Error struct{ Msg string }

// Error implements the error interface.
func (e *Error) Error() string { return "export: " + e.Msg }

// placeholder stands for the prefix while the script is generated, so the
// default prefix can hash the script itself.
const placeholder = "@KWPREFIX@"

type nsRef struct {
	key Key
	ns  *datapath.Netns
}

// Generate builds the scripts and the name mapping for c. It refuses, with
// an *Error naming the value, a prefix ValidatePrefix rejects and any name
// that would reach the script and is not a valid name of its kind (see
// ValidateName and ValidateIfName), so that no value from a scenario can
// change what the script does; every value is quoted besides.
func Generate(c *sim.Cluster, opts Options) (*Export, error) {
	if opts.Prefix != "" {
		if err := ValidatePrefix(opts.Prefix); err != nil {
			return nil, err
		}
	}
	var refs []nsRef
	for _, n := range c.Nodes() {
		refs = append(refs, nsRef{Key{n.Name, "host"}, n.Host})
	}
	for _, h := range c.ExternalHosts() {
		refs = append(refs, nsRef{Key{h.Name, "host"}, h.Netns})
	}
	for _, p := range c.Pods() {
		if p.Spec.HostNetwork {
			continue
		}
		refs = append(refs, nsRef{Key{p.Node.Name, p.Netns.Name}, p.Netns})
	}
	g := &gen{names: map[Key]string{}, real: map[*datapath.Netns]string{}, made: map[*datapath.Device]bool{}, underlay: placeholder + "-underlay"}
	used := map[string]Key{g.underlay: {}}
	for _, r := range refs {
		if err := checkRef(r); err != nil {
			return nil, err
		}
		name := placeholder + "-" + r.key.Node
		if r.key.Netns != "host" {
			name += "-" + strings.ReplaceAll(r.key.Netns, "/", ".")
		}
		if k, dup := used[name]; dup {
			return nil, &Error{Msg: fmt.Sprintf("namespaces %v and %v map to the same name %s", k, r.key, name)}
		}
		used[name] = r.key
		g.names[r.key] = name
		g.real[r.ns] = name
		g.order = append(g.order, name)
	}
	if err := g.build(c, refs); err != nil {
		return nil, err
	}
	setup, teardown := g.setup.String(), g.teardown()
	prefix := opts.Prefix
	if prefix == "" {
		h := fnv.New32a()
		h.Write([]byte(setup))
		prefix = fmt.Sprintf("kw-%04x", h.Sum32()&0xffff)
	}
	for _, n := range g.order {
		if l := len(n) - len(placeholder) + len(prefix); l > nameMax {
			return nil, &Error{Msg: fmt.Sprintf("namespace name %s is %d bytes long; the kernel allows %d",
				strings.ReplaceAll(n, placeholder, prefix), l, nameMax)}
		}
	}
	e := &Export{Prefix: prefix, names: map[Key]string{}}
	sub := func(s string) string { return strings.ReplaceAll(s, placeholder, prefix) }
	e.Setup, e.Teardown, e.Underlay = sub(setup), sub(teardown), sub(g.underlay)
	for k, v := range g.names {
		e.names[k] = sub(v)
	}
	e.order = append(e.order, e.Underlay)
	for _, n := range g.order {
		e.order = append(e.order, sub(n))
	}
	return e, nil
}

type gen struct {
	setup    strings.Builder
	names    map[Key]string
	real     map[*datapath.Netns]string
	order    []string
	underlay string
	made     map[*datapath.Device]bool
}

// cmd writes one line of the setup script: format is script text the
// generator wrote itself; every argument is written through quote, as one
// shell word (a words value as several), whatever it holds.
func (g *gen) cmd(format string, args ...any) {
	fmt.Fprintf(&g.setup, format+"\n", quoteArgs(args)...)
}

// comment writes a comment line; bytes a comment cannot carry (a newline
// would end it) are written as '?'.
func (g *gen) comment(s string) { g.setup.WriteString("\n# " + commentSafe(s) + "\n") }

func (g *gen) teardown() string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Generated by kubewalk sim/export: deletes every namespace the setup script creates.\n")
	for _, n := range slices.Backward(g.order) {
		fmt.Fprintf(&b, "ip netns del %s 2>/dev/null || true\n", quote(n))
	}
	fmt.Fprintf(&b, "ip netns del %s 2>/dev/null || true\n", quote(g.underlay))
	return b.String()
}

func b01(v bool) int {
	if v {
		return 1
	}
	return 0
}

// sysctls writes the namespace's sysctls.
func (g *gen) sysctls(name string, s datapath.Sysctls) {
	g.cmd("ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 "+
		"net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 "+
		"net.ipv4.ip_forward=%d net.ipv4.ip_default_ttl=%d net.ipv4.icmp_echo_ignore_broadcasts=%d",
		name, b01(s.IPForward), s.DefaultTTL, b01(s.EchoIgnoreBroadcasts))
	g.cmd("ip netns exec %s sh -c 'f=/proc/sys/net/bridge/bridge-nf-call-iptables; "+
		"if [ -w $f ]; then echo $2 > $f; else echo \"$1: no $f (br_netfilter not loaded?); bridged frames skip iptables\" >&2; fi' sh %s %d",
		name, name, b01(s.BridgeNFCallIPTables))
}

func (g *gen) build(c *sim.Cluster, refs []nsRef) error {
	g.setup.WriteString("#!/bin/sh\n" +
		"# Generated by kubewalk sim/export: the simulated cluster in real network namespaces.\n" +
		"# Run as root; undo with the matching teardown script.\n" +
		"set -e\n")

	g.comment("Namespaces")
	g.cmd("ip netns add %s", g.underlay)
	for _, n := range g.order {
		g.cmd("ip netns add %s", n)
	}
	g.comment("Sysctls (IPv6 and rp_filter are not modelled: off)")
	g.sysctls(g.underlay, datapath.Sysctls{DefaultTTL: 64, EchoIgnoreBroadcasts: true})
	for _, r := range refs {
		g.sysctls(g.real[r.ns], r.ns.Sysctl)
	}
	g.cmd("ip -n %s link set lo up", g.underlay)
	for _, n := range g.order {
		g.cmd("ip -n %s link set lo up", n)
	}

	// The underlay: one bridge per segment, one port per NIC.
	g.comment("Underlay segments: a bridge each, in " + g.underlay)
	port := map[*datapath.Device]uplink{}
	for si, s := range c.Segments() {
		br := fmt.Sprintf("kwu%d", si)
		g.setup.WriteString("# segment " + commentSafe(s.Name) + "\n")
		g.cmd("ip -n %s link add %s type bridge", g.underlay, br)
		g.cmd("ip -n %s link set %s up", g.underlay, br)
		for pi, d := range s.Ports() {
			port[d] = uplink{bridge: br, port: fmt.Sprintf("kwu%dp%d", si, pi)}
		}
	}

	// Devices, namespace by namespace, in ifindex order. Pods' eth0 are
	// created from the pod side, with the node-side peer.
	for _, r := range refs {
		name := g.real[r.ns]
		g.comment(fmt.Sprintf("%s/%s: devices", r.key.Node, r.key.Netns))
		for _, d := range r.ns.Devices() {
			if err := g.device(name, r.ns, d, port); err != nil {
				return err
			}
		}
	}
	// Bridge ports, hairpin, up: after every device exists.
	for _, r := range refs {
		name := g.real[r.ns]
		for _, d := range r.ns.Devices() {
			if m := d.Master(); m != nil {
				g.cmd("ip -n %s link set %s master %s", name, d.Name, m.Name)
				if d.Hairpin() {
					g.cmd("bridge -n %s link set dev %s hairpin on", name, d.Name)
				}
			}
		}
		for _, d := range r.ns.Devices() {
			if d.Kind != datapath.KindLoopback && d.Up() {
				g.cmd("ip -n %s link set %s up", name, d.Name)
			}
		}
	}
	for _, r := range refs {
		name := g.real[r.ns]
		g.comment(fmt.Sprintf("%s/%s: addresses", r.key.Node, r.key.Netns))
		for _, a := range r.ns.Addrs() {
			if a.Dev.Kind == datapath.KindLoopback {
				continue
			}
			addr := words{a.Prefix.String()}
			if a.Prefix.Bits() < 31 {
				addr = append(addr, "brd", "+")
			}
			g.cmd("ip -n %s addr add %s dev %s", name, addr, a.Dev.Name)
		}
	}
	for _, r := range refs {
		name := g.real[r.ns]
		g.comment(fmt.Sprintf("%s/%s: routes, neighbours, FDB", r.key.Node, r.key.Netns))
		for _, rt := range r.ns.Routes.List() {
			if rt.Proto == route.ProtoKernel {
				continue
			}
			g.cmd("ip -n %s route add %s", name, words(strings.Fields(rt.String()))) // ip route show syntax is ip route add syntax
		}
		for _, n := range r.ns.Neighbors() {
			var nud string
			switch n.State {
			case datapath.NeighPermanent:
				nud = "permanent"
			case datapath.NeighNoARP:
				nud = "noarp"
			default:
				continue // learned: the kernel resolves it itself
			}
			g.cmd("ip -n %s neigh replace %s dev %s lladdr %s nud %s", name, n.IP, n.Dev, n.MAC, nud)
		}
		for _, d := range r.ns.Devices() {
			if v := d.VXLAN(); v != nil {
				for _, e := range v.FDB() {
					g.cmd("bridge -n %s fdb append %s dev %s dst %s self permanent", name, e.MAC, d.Name, e.Dst)
				}
			}
			if d.Kind == datapath.KindBridge {
				for _, e := range d.FDB(r.ns.Engine().Now()) {
					if e.Static && !e.Local {
						g.cmd("bridge -n %s fdb add %s dev %s master static", name, e.MAC, e.Port)
					}
				}
			}
		}
	}
	for _, n := range c.Nodes() {
		s, err := netfilterScript(g.real[n.Host], n)
		if err != nil {
			return err
		}
		if s != "" {
			g.comment(n.Name + ": iptables (kube-proxy, flannel)")
			g.setup.WriteString(s)
		}
	}
	return nil
}

// uplink is the underlay bridge port a NIC's veth peer becomes.
type uplink struct{ bridge, port string }

// device writes the commands that create d in namespace name.
func (g *gen) device(name string, ns *datapath.Netns, d *datapath.Device, port map[*datapath.Device]uplink) error {
	switch d.Kind {
	case datapath.KindLoopback:
		if d.MTU() != 65536 {
			g.cmd("ip -n %s link set lo mtu %d", name, d.MTU())
		}
	case datapath.KindNIC:
		p, ok := port[d]
		if !ok {
			return &Error{Msg: fmt.Sprintf("NIC %s in %s is on no segment", d.Name, ns.Name)}
		}
		g.cmd("ip -n %s link add %s address %s mtu %d type veth peer name %s mtu %d netns %s",
			name, d.Name, d.MAC(), d.MTU(), p.port, d.MTU(), g.underlay)
		g.cmd("ip -n %s link set %s master %s up", g.underlay, p.port, p.bridge)
	case datapath.KindVeth:
		peer := d.Peer()
		if peer == nil {
			return &Error{Msg: fmt.Sprintf("veth %s in %s has no peer", d.Name, ns.Name)}
		}
		pn, ok := g.real[peer.Netns()]
		if !ok {
			return &Error{Msg: fmt.Sprintf("veth %s in %s: peer namespace %s is not exported", d.Name, ns.Name, peer.Netns().Name)}
		}
		// Create each pair once, from the end in the namespace exported
		// later (the pod), so both namespaces exist.
		if g.created(peer) {
			return nil
		}
		g.cmd("ip -n %s link add %s address %s mtu %d type veth peer name %s address %s mtu %d netns %s",
			name, d.Name, d.MAC(), d.MTU(), peer.Name, peer.MAC(), peer.MTU(), pn)
	case datapath.KindBridge:
		g.cmd("ip -n %s link add %s address %s mtu %d type bridge ageing_time %d",
			name, d.Name, d.MAC(), d.MTU(), bridgeAgeing(d))
	case datapath.KindVXLAN:
		v := d.VXLAN()
		args := words{"id", fmt.Sprint(v.VNI), "local", v.Local.String()}
		if v.Dev != "" {
			if err := checkIfName(v.Dev); err != nil {
				return &Error{Msg: fmt.Sprintf("vxlan %s in %s: underlay device: %v", d.Name, ns.Name, err)}
			}
			args = append(args, "dev", v.Dev)
		}
		if v.SrcPortMin != 32768 || v.SrcPortMax != 60999 {
			args = append(args, "srcport", fmt.Sprint(v.SrcPortMin), fmt.Sprint(v.SrcPortMax))
		}
		args = append(args, "dstport", fmt.Sprint(v.Port))
		if !v.Learning {
			args = append(args, "nolearning")
		}
		g.cmd("ip -n %s link add %s address %s mtu %d type vxlan %s", name, d.Name, d.MAC(), d.MTU(), args)
	default:
		return &Error{Msg: fmt.Sprintf("device %s in %s: kind %s cannot be exported", d.Name, ns.Name, d.Kind)}
	}
	g.mark(d)
	return nil
}

func (g *gen) created(d *datapath.Device) bool { return g.made[d] }
func (g *gen) mark(d *datapath.Device)         { g.made[d] = true }

func bridgeAgeing(d *datapath.Device) int64 {
	// `ip -d link` prints ageing_time in centiseconds; so does ip link add.
	line := d.Netns().IPLink(d.Name, true)
	var cs int64 = 30000
	if i := strings.Index(line, "ageing_time "); i >= 0 {
		fmt.Sscanf(line[i+len("ageing_time "):], "%d", &cs)
	}
	return cs
}
