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
// In nftables mode (Node.NFTRules set) the script also loads kube-proxy's
// table ip kube-proxy with `nft -f`, from the transaction kubewalk's
// proxier ran.
//
// The rules come from the simulator's own tables (Node.Netfilter, printed
// as iptables-save prints them) and are loaded with `iptables-restore`, so
// the kernel runs exactly the rules kubewalk ran, in the same order. When
// kube-proxy has synced (Node.ProxyRules is not nil) it also sets
// net.ipv4.conf.all.route_localnet=1, as kube-proxy does for localhost
// NodePorts.
//
// The rules travel in a quoted here-document, which the shell passes on
// unexpanded; a rule text holding the document's terminator line (a
// Service or comment crafted to end it early) is refused with an *Error.
func netfilterScript(ns string, n *sim.Node) (string, error) {
	if n.Netfilter == nil {
		return "", nil
	}
	save := n.Netfilter.Save(netfilter.SaveOptions{})
	if !strings.Contains(save, "\n-A ") && n.NFTRules == nil {
		return "", nil
	}
	var b strings.Builder
	if n.ProxyRules() != nil {
		fmt.Fprintf(&b, "ip netns exec %s sysctl -qw net.ipv4.conf.all.route_localnet=1\n", quote(ns))
	}
	doc, err := restoreCommand(ns, save)
	if err != nil {
		return "", &Error{Msg: "node " + n.Name + ": " + err.Error()}
	}
	b.WriteString(doc)
	if n.NFTRules != nil {
		// kube-proxy in nftables mode: its first sync's transaction, fed
		// to nft -f after the iptables rules, so its nat chains come
		// after iptables' in the NAT core as they do in kubewalk.
		tx := n.NFTRules.Setup()
		for _, l := range strings.Split(tx, "\n") {
			if l == heredocEnd {
				return "", &Error{Msg: "node " + n.Name + ": the nftables rules hold the line " + heredocEnd + " that would end the script's here-document"}
			}
		}
		fmt.Fprintf(&b, "ip netns exec %s nft -f - <<'%s'\n%s%s\n", quote(ns), heredocEnd, tx, heredocEnd)
	}
	return b.String(), nil
}

// restoreCommand is `ip netns exec NS iptables-restore -w` fed rules in a
// quoted here-document. Rules holding the document's terminator line are
// refused.
func restoreCommand(ns, rules string) (string, error) {
	for _, l := range strings.Split(rules, "\n") {
		if l == heredocEnd {
			return "", fmt.Errorf("the iptables rules hold the line %q that would end the script's here-document", heredocEnd)
		}
	}
	if rules != "" && !strings.HasSuffix(rules, "\n") {
		rules += "\n"
	}
	return fmt.Sprintf("ip netns exec %s iptables-restore -w <<'%s'\n%s%s\n", quote(ns), heredocEnd, rules, heredocEnd), nil
}

// heredocEnd ends the here-document that carries iptables-save text.
const heredocEnd = "KUBEWALK_EOF"
