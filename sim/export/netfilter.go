package export

import (
	"fmt"
	"strings"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim"
)

// netfilterScript is THE KUBE-PROXY (AND FLANNEL) RULES INTEGRATION POINT
// of the export. It returns the commands that give node n's real namespace
// ns the iptables rules the simulator holds for it — kube-proxy's chains
// from its last sync and the FLANNEL-* rules flanneld adds — or "" when the
// node has no rules at all.
//
// The rules come from the simulator's own tables (Node.Netfilter, printed
// as iptables-save prints them) and are loaded with `iptables-restore`, so
// the kernel runs exactly the rules kubewalk ran, in the same order. When
// kube-proxy has synced (Node.ProxyRules is set) it also sets
// net.ipv4.conf.all.route_localnet=1, as kube-proxy does for localhost
// NodePorts.
func netfilterScript(ns string, n *sim.Node) string {
	if n.Netfilter == nil {
		return ""
	}
	save := n.Netfilter.Save(netfilter.SaveOptions{})
	if !strings.Contains(save, "\n-A ") {
		return ""
	}
	var b strings.Builder
	if n.ProxyRules != nil {
		fmt.Fprintf(&b, "ip netns exec %s sysctl -qw net.ipv4.conf.all.route_localnet=1\n", ns)
	}
	fmt.Fprintf(&b, "ip netns exec %s iptables-restore -w <<'KUBEWALK_EOF'\n%sKUBEWALK_EOF\n", ns, save)
	return b.String()
}
