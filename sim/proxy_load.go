package sim

import (
	"fmt"
	"slices"

	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/datapath/nftables"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// newProxier starts kube-proxy on n in the cluster's mode.
func (c *Cluster) newProxier(n *Node) (kubeproxy.Proxier, error) {
	return c.newProxierMode(n, c.Config.ProxyMode)
}

// newProxierMode starts kube-proxy on n in mode.
func (c *Cluster) newProxierMode(n *Node, mode kubeproxy.Mode) (kubeproxy.Proxier, error) {
	switch mode {
	case kubeproxy.ModeIPTables:
		return &iptablesProxier{c: c, n: n}, nil
	case kubeproxy.ModeNFTables:
		return &nftablesProxier{c: c, n: n}, nil
	case kubeproxy.ModeIPVS:
		return c.newIPVSProxier(n)
	}
	return nil, fmt.Errorf("proxy mode %q is not modelled yet", mode)
}

// iptablesProxier is kube-proxy's iptables proxier on one node.
type iptablesProxier struct {
	c *Cluster
	n *Node
	// last is the snapshot of the last successful sync, against which the
	// next one finds stale UDP flows.
	last kubeproxy.Snapshot
}

var _ kubeproxy.Proxier = (*iptablesProxier)(nil)

// Mode implements kubeproxy.Proxier.
func (p *iptablesProxier) Mode() kubeproxy.Mode { return kubeproxy.ModeIPTables }

// Sync implements kubeproxy.Proxier: generate the rules, load them with
// iptables-restore semantics, clear stale UDP conntrack entries.
func (p *iptablesProxier) Sync(snap kubeproxy.Snapshot) error {
	n := p.n
	cfg := p.c.ProxyConfig(n)
	rules, err := kubeproxy.Generate(cfg, snap)
	if err != nil {
		return err
	}
	if err := loadProxyRules(n, rules); err != nil {
		return fmt.Errorf("kube-proxy on %s: %w", n.Name, err)
	}
	n.ProxyRules = rules
	// Both snapshots generated without error (this sync and the last):
	// do not generate them again.
	clearStaleUDP(n, kubeproxy.StaleUDPFlowsAfterSync(cfg, p.last, snap))
	p.last = snap
	return nil
}

// loadProxyRules does what kube-proxy's iptables proxier does at each full
// sync: create the jump-target chains (iptables -N), ensure the jump rules
// at the top of the built-in chains (iptables -C, else -I), then load its
// chains with `iptables-restore --noflush --counters`.
func loadProxyRules(n *Node, rules *kubeproxy.Rules) error {
	nf := n.Netfilter
	ensured := rules.EnsuredChains()
	for _, table := range []string{"mangle", "filter", "nat"} {
		for _, ch := range ensured[table] {
			if nf.Table(table).Chain(ch) == nil {
				if err := nf.Exec(table, "-N", ch); err != nil {
					return err
				}
			}
		}
	}
	for _, j := range rules.JumpRules() {
		ok, err := nf.Check(j.Table, j.Chain, j.Args...)
		if err != nil {
			return err
		}
		if !ok {
			if err := nf.Exec(j.Table, append([]string{"-I", j.Chain}, j.Args...)...); err != nil {
				return err
			}
		}
	}
	return nf.Restore(rules.RestoreInput(), netfilter.RestoreOptions{Noflush: true, Counters: true})
}

// clearStaleUDP deletes the conntrack entries kube-proxy deletes after an
// endpoint change (`conntrack -D -p udp --orig-dst IP --reply-src EP`, or
// by node port).
func clearStaleUDP(n *Node, stale []kubeproxy.StaleUDPFlow) {
	for _, f := range stale {
		flt := conntrack.Filter{Proto: 17, ReplySrc: f.Endpoint}
		if f.NodePort {
			flt.OrigDport = uint16(f.Port)
		} else {
			flt.OrigDst = f.OrigDst
		}
		n.Conntrack.Delete(flt)
	}
}

// installNetfilter gives a node's root namespace connection tracking and
// the four iptables tables, then the rules flanneld adds at start-up.
func (c *Cluster) installNetfilter(n *Node) error {
	n.Conntrack = conntrack.Install(n.Host, conntrack.Config{})
	n.Netfilter = netfilter.Install(n.Host, n.Conntrack)
	n.NFTables = nftables.Install(n.Host, n.Netfilter)
	if n.Flannel == nil {
		return nil
	}
	for _, cmd := range n.Flannel.IPTablesRules(c.Flannel.Config) {
		args := slices.Clone(cmd[1:])
		if err := n.Netfilter.Exec(cmd[0], args...); err != nil {
			return err
		}
	}
	return nil
}
