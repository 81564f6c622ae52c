package sim

import "github.com/kubewalk/kubewalk/sim/kubeproxy"

// loadProxyRules loads kube-proxy's rules into node n's netfilter tables
// with iptables-restore semantics.
func (c *Cluster) loadProxyRules(n *Node, rules *kubeproxy.Rules) error {
	return nil
}

// clearStaleUDP deletes the conntrack entries kube-proxy deletes after an
// endpoint change.
func (c *Cluster) clearStaleUDP(n *Node, stale []kubeproxy.StaleUDPFlow) {}
