package sim

import (
	"slices"
	"strings"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// SetProxyMode restarts kube-proxy on every node in mode m, as editing the
// kube-proxy ConfigMap's mode and deleting its pods does. The new
// kube-proxy first removes what the other modes left behind
// (cmd/kube-proxy platformCleanup): starting in nftables mode it deletes
// iptables mode's jump rules and KUBE- chains; starting in iptables (or
// ipvs) mode it deletes table ip kube-proxy. Then it syncs. Connection
// tracking entries survive the restart, so established connections keep
// their endpoints. An unknown mode is kube-proxy's validation error and
// changes nothing.
func (c *Cluster) SetProxyMode(m kubeproxy.Mode) error {
	mode, err := kubeproxy.ParseMode(string(m))
	if err != nil {
		return &ConfigError{Object: "configmap kube-system/kube-proxy", Field: "mode", Msg: err.Error()}
	}
	old := c.Config
	c.Config.ProxyMode = mode
	var pxs []kubeproxy.Proxier
	for _, n := range c.nodes {
		px, err := c.newProxier(n)
		if err != nil {
			c.Config = old
			return &ConfigError{Object: "node " + n.Name, Field: "kube-proxy", Msg: err.Error()}
		}
		pxs = append(pxs, px)
	}
	for i, n := range c.nodes {
		if err := cleanupLeftovers(n, mode); err != nil {
			return &ConfigError{Object: "node " + n.Name, Field: "kube-proxy", Msg: err.Error()}
		}
		n.Proxier = pxs[i]
	}
	return c.Sync()
}

// cleanupLeftovers is platformCleanup(mode, false) on one node.
func cleanupLeftovers(n *Node, mode kubeproxy.Mode) error {
	if mode == kubeproxy.ModeNFTables {
		// iptables.CleanupLeftovers: unlink kube-proxy's chains from the
		// built-in ones, then flush and delete them.
		if r := n.ProxyRules(); r != nil {
			for _, j := range r.JumpRules() {
				if ok, _ := n.Netfilter.Check(j.Table, j.Chain, j.Args...); ok {
					if err := n.Netfilter.Exec(j.Table, append([]string{"-D", j.Chain}, j.Args...)...); err != nil {
						return err
					}
				}
			}
		}
		for _, table := range []string{"nat", "filter"} {
			var del []string
			for _, ch := range n.Netfilter.Table(table).Chains() {
				if !ch.Builtin && strings.HasPrefix(ch.Name, "KUBE-") && !slices.Contains([]string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY"}, ch.Name) {
					del = append(del, ch.Name)
				}
			}
			for _, ch := range del {
				if err := n.Netfilter.Exec(table, "-F", ch); err != nil {
					return err
				}
			}
			for _, ch := range del {
				if err := n.Netfilter.Exec(table, "-X", ch); err != nil {
					return err
				}
			}
		}
		n.setProxyRules(nil, nil)
		return nil
	}
	// nftables.CleanupLeftovers: delete the whole table.
	if n.NFTables.Table("ip", kubeproxy.NFTTable) != nil {
		if err := n.NFTables.Apply("", "delete table ip kube-proxy\n"); err != nil {
			return err
		}
	}
	n.NFTRules = nil
	return nil
}
