package main

import (
	"github.com/kubewalk/kubewalk/sim/kubeproxy"

	"github.com/kubewalk/kubewalk/datapath/ipvs"

	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim"
)

const stateUsage = `Print a node's datapath state the way iproute2 and friends print it on a real
node, so the two can be set side by side. With no WHAT, print them all.

Usage:
  kubewalk state (--scenario NAME | -f FILE...) --node NODE [WHAT] [--from SOURCE --to DESTINATION]

With --from and --to (and -n, --proto, --port, as kubewalk trace takes
them), a walk runs first, so the neighbour, FDB and conntrack tables show
what it left behind.

WHAT is one of:
  ip-addr          ip -4 addr
  ip-route         ip route
  ip-neigh         ip neigh
  bridge-fdb       bridge fdb show
  ip-link-flannel  ip -d link show flannel.1
  iptables-save    iptables-save
  conntrack        conntrack -L
  nft-ruleset      nft list ruleset (nftables mode)
  ipvsadm          ipvsadm -Ln (ipvs mode)
  ipset-list       ipset list (ipvs mode)

Examples:
  # flannel's routes to the other nodes' pod ranges
  kubewalk state --scenario reference --node cka-w1 ip-route

  # The VXLAN forwarding entries: VTEP MAC -> node IP
  kubewalk state --scenario wrong-nic --node cka-w1 bridge-fdb

  # conntrack after a connection to a Service: original and reply tuples
  kubewalk state --scenario reference --node cka-w1 conntrack --from net/client --to service/net/web:80
`

var stateDumps = []struct {
	name, title string
	dump        func(n *sim.Node) (string, error)
}{
	{"ip-addr", "ip -4 addr", func(n *sim.Node) (string, error) { return n.Host.IPAddr(), nil }},
	{"ip-route", "ip route", func(n *sim.Node) (string, error) { return n.Host.IPRoute(), nil }},
	{"ip-neigh", "ip neigh", func(n *sim.Node) (string, error) { return n.Host.IPNeigh(""), nil }},
	{"bridge-fdb", "bridge fdb show", func(n *sim.Node) (string, error) { return n.Host.BridgeFDB(""), nil }},
	{"ip-link-flannel", "ip -d link show flannel.1", func(n *sim.Node) (string, error) {
		s := n.Host.IPLink("flannel.1", true)
		if s == "" {
			return "", fmt.Errorf("node %s has no flannel.1", n.Name)
		}
		return s, nil
	}},
	{"iptables-save", "iptables-save", func(n *sim.Node) (string, error) { return netfilterDump(n, "iptables-save") }},
	{"conntrack", "conntrack -L", func(n *sim.Node) (string, error) { return netfilterDump(n, "conntrack") }},
	{"nft-ruleset", "nft list ruleset", func(n *sim.Node) (string, error) {
		if n.NFTables == nil {
			return "", nil
		}
		return n.NFTables.ListRuleset(), nil
	}},
	{"ipvsadm", "ipvsadm -Ln", func(n *sim.Node) (string, error) {
		if p, ok := n.Proxier.(*sim.IPVSProxier); ok {
			return p.IPVS.List(), nil
		}
		return new(ipvs.IPVS).List(), nil // no virtual servers: the headers alone
	}},
	{"ipset-list", "ipset list", func(n *sim.Node) (string, error) {
		if p, ok := n.Proxier.(*sim.IPVSProxier); ok {
			return p.IPSets.List(), nil
		}
		return "", nil
	}},
}

// netfilterDump prints iptables-save or conntrack -L for a node's root
// namespace.
func netfilterDump(n *sim.Node, what string) (string, error) {
	if n.Netfilter == nil {
		return "", fmt.Errorf("node %s has no iptables tables", n.Name)
	}
	if what == "iptables-save" {
		return n.Netfilter.Save(netfilter.SaveOptions{}), nil
	}
	return n.Conntrack.Dump(), nil
}

func runState(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("state", stateUsage, help)
	scenario := scenarioFlags(fs)
	node := fs.String("node", "", "node name")
	seed := fs.Uint64("seed", 1, "random seed of the simulated world")
	proxyMode := fs.String("proxy-mode", "", "restart kube-proxy in this mode first: iptables, nftables or ipvs (default: the scenario's)")
	var walk traceFlags
	walk.walkFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := walk.checkWalk(fs); err != nil {
		return err
	}
	if (walk.from == "") != (walk.to == "") {
		return usagef("--from and --to go together")
	}
	if walk.from == "" {
		for _, name := range []string{"proto", "port", "source-port", "source-ip", "n", "namespace"} {
			if walk.given[name] {
				return flagConflict(name, "describes the walk --from and --to run first; give them too")
			}
		}
	}
	if len(pos) > 1 {
		return usagef("unexpected argument %q (one WHAT at a time)", pos[1])
	}
	var names []string
	for _, d := range stateDumps {
		names = append(names, d.name)
	}
	what := ""
	if len(pos) == 1 {
		what = pos[0]
		found := false
		for _, n := range names {
			found = found || n == what
		}
		if !found {
			return usagef("unknown state %q (one of: %s)", what, strings.Join(names, ", "))
		}
	}
	if *node == "" {
		return usagef("--node is required")
	}
	c, err := loadScenario(*scenario, *seed)
	if err != nil {
		return err
	}
	if *proxyMode != "" {
		if err := c.SetProxyMode(kubeproxy.Mode(*proxyMode)); err != nil {
			return usagef("--proxy-mode: %v", err)
		}
	}
	if walk.from != "" {
		if _, err := walk.walk(c, nil); err != nil {
			return err
		}
	}
	n := c.Node(*node)
	if n == nil {
		var known []string
		for _, x := range c.Nodes() {
			known = append(known, x.Name)
		}
		return usagef("node %q not found (nodes: %s)", *node, strings.Join(known, ", "))
	}
	for _, d := range stateDumps {
		if what != "" && d.name != what {
			continue
		}
		s, err := d.dump(n)
		if err != nil {
			if what != "" {
				return err
			}
			s = "# " + err.Error() + "\n"
		}
		if what == "" {
			fmt.Fprintf(out, "### %s: %s\n", n.Name, d.title)
		}
		out.WriteString(s)
	}
	return nil
}
