package export

import (
	"fmt"
	"strings"

	"github.com/kubewalk/kubewalk/sim"
)

// kubeProxyScript is THE KUBE-PROXY INTEGRATION POINT of the export: it
// returns the commands that load node n's kube-proxy rules into the real
// namespace ns the way kube-proxy itself loads them (route_localnet=1 for
// localhost NodePorts, `iptables -N` and `iptables -I` for the jump rules in
// kube-proxy's order, the chains it ensures, then
// `iptables-restore --noflush --counters` of its restore input), or "" when
// the node has no rules (no kube-proxy sync has run). It reads the rules
// the cluster's last Sync stored in Node.ProxyRules, so the real namespace
// gets exactly the rules the simulator loaded.
func kubeProxyScript(ns string, n *sim.Node) string {
	r := n.ProxyRules
	if r == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ip netns exec %s sysctl -qw net.ipv4.conf.all.route_localnet=1\n", ns)
	for _, j := range r.JumpRules() {
		target := j.Args[len(j.Args)-1]
		fmt.Fprintf(&b, "ip netns exec %s iptables -w -t %s -N %s 2>/dev/null || true\n", ns, j.Table, target)
		fmt.Fprintf(&b, "ip netns exec %s iptables -w -t %s -I %s %s\n", ns, j.Table, j.Chain, shellArgs(j.Args))
	}
	for _, tbl := range []string{"mangle", "nat", "filter"} {
		for _, c := range r.EnsuredChains()[tbl] {
			fmt.Fprintf(&b, "ip netns exec %s iptables -w -t %s -N %s 2>/dev/null || true\n", ns, tbl, c)
		}
	}
	fmt.Fprintf(&b, "ip netns exec %s iptables-restore -w --noflush --counters <<'KUBEWALK_EOF'\n%sKUBEWALK_EOF\n", ns, r.RestoreInput())
	return b.String()
}

// shellArgs quotes arguments for sh: those with anything but safe
// characters go in single quotes.
func shellArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		safe := a != ""
		for _, c := range a {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=,+@%", c)) {
				safe = false
				break
			}
		}
		if safe {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
