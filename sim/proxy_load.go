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
	// next one finds stale UDP flows; lastGen is its generation (0 when
	// unknown).
	last    kubeproxy.Snapshot
	lastGen uint64
}

var _ kubeproxy.Proxier = (*iptablesProxier)(nil)

// Mode implements kubeproxy.Proxier.
func (p *iptablesProxier) Mode() kubeproxy.Mode { return kubeproxy.ModeIPTables }

// Sync implements kubeproxy.Proxier: generate the rules, load them with
// iptables-restore semantics, clear stale UDP conntrack entries.
//
// Every node's kube-proxy writes the same text when the rules do not
// depend on the node (kubeproxy.NodeIndependent): then the text is
// generated and compiled once for all the nodes on the same previous
// rules (proxyShare), and each node loads the compiled rulesets
// (netfilter.RestoreShared, the same as restoring the text), keeping its
// own counters and chains.
func (p *iptablesProxier) Sync(snap kubeproxy.Snapshot) error {
	n := p.n
	cfg := p.c.ProxyConfig(n)
	gen, current := p.c.snapshotGen(snap)
	if current && shareProxyRules && kubeproxy.NodeIndependent(cfg, snap) {
		if rules, sets := p.c.sharedProxyRules(cfg, snap, gen, n); rules != nil {
			if err := loadSharedProxyRules(n, rules, sets); err != nil {
				return fmt.Errorf("kube-proxy on %s: %w", n.Name, err)
			}
			n.setProxyRules(nil, func() *kubeproxy.Rules {
				r, _ := kubeproxy.Generate(cfg, snap) // generated without error for another node
				return r
			})
			p.clearStale(cfg, snap, gen)
			return nil
		}
	}
	rules, err := kubeproxy.Generate(cfg, snap)
	if err != nil {
		return err
	}
	if err := loadProxyRules(n, rules); err != nil {
		return fmt.Errorf("kube-proxy on %s: %w", n.Name, err)
	}
	n.setProxyRules(rules, nil)
	if !current {
		gen = 0
	}
	p.clearStale(cfg, snap, gen)
	return nil
}

// shareProxyRules turns the compiled rulesets shared between nodes on (a
// variable so that a test can build the same cluster restoring text).
var shareProxyRules = true

// clearStale clears the UDP flows stale since the last sync, and makes snap
// the last. Both snapshots generated without error (the last sync and this
// one): they are not generated again. The flows do not depend on the node:
// one list per pair of snapshot generations serves every node.
func (p *iptablesProxier) clearStale(cfg kubeproxy.Config, snap kubeproxy.Snapshot, gen uint64) {
	var stale []kubeproxy.StaleUDPFlow
	if key := [2]uint64{p.lastGen, gen}; p.lastGen != 0 && gen != 0 {
		var ok bool
		if stale, ok = p.c.staleUDP[key]; !ok {
			stale = kubeproxy.StaleUDPFlowsAfterSync(cfg, p.last, snap)
			if p.c.staleUDP == nil || len(p.c.staleUDP) > 8 {
				p.c.staleUDP = map[[2]uint64][]kubeproxy.StaleUDPFlow{}
			}
			p.c.staleUDP[key] = stale
		}
	} else {
		stale = kubeproxy.StaleUDPFlowsAfterSync(cfg, p.last, snap)
	}
	clearStaleUDP(p.n, stale)
	p.last, p.lastGen = snap, gen
}

// proxyShare is kube-proxy's rules for one snapshot generation, generated
// once and compiled once for every node whose tables the rulesets serve
// (netfilter.Shared.Covers): a ruleset compiled onto no previous one
// serves every node whose previous kube-proxy chains the new rules all
// declare; a node holding chains they leave out (a Service deleted since)
// gets one compiled onto its previous ruleset, shared with the nodes on
// the same one.
type proxyShare struct {
	gen         uint64
	rules       *kubeproxy.Rules
	input       [2]string // filter, nat
	fresh       [2]*netfilter.Shared
	after       [2]map[*netfilter.Shared]*netfilter.Shared
	unshareable bool
}

var proxyTables = [2]string{"filter", "nat"}

// sharedProxyRules returns the compiled filter and nat rules of snapshot
// generation gen for node n's tables, or nil if they cannot be shared
// (the node then generates and restores its own, with the errors that
// gives).
func (c *Cluster) sharedProxyRules(cfg kubeproxy.Config, snap kubeproxy.Snapshot, gen uint64, n *Node) (*kubeproxy.Rules, [2]*netfilter.Shared) {
	sh := c.proxyShare
	if sh == nil || sh.gen != gen {
		old := sh
		// The rulesets of older generations are not asked for again:
		// let them go.
		sh = &proxyShare{gen: gen}
		c.proxyShare = sh
		rules, err := kubeproxy.Generate(cfg, snap)
		if err != nil {
			sh.unshareable = true
		} else {
			sh.rules = rules
			for i, t := range proxyTables {
				sh.input[i] = rules.RestoreInputTable(t)
				// Only the chains that changed since the last
				// generation compiled are parsed.
				var like *netfilter.Shared
				if old != nil {
					like = old.fresh[i]
				}
				if like != nil && like.Input() == sh.input[i] {
					// The same text as the last generation's (an event that
					// changed no rule): the same ruleset.
					sh.fresh[i], sh.after[i] = like, map[*netfilter.Shared]*netfilter.Shared{}
					continue
				}
				s, err := netfilter.CompileSharedLike(t, nil, like, sh.input[i])
				if err != nil {
					sh.unshareable = true
					break
				}
				sh.fresh[i], sh.after[i] = s, map[*netfilter.Shared]*netfilter.Shared{}
			}
		}
	}
	var out [2]*netfilter.Shared
	if sh.unshareable {
		return nil, out
	}
	for i, t := range proxyTables {
		prev := n.Netfilter.Table(t).Shared()
		if sh.fresh[i].Covers(prev) {
			out[i] = sh.fresh[i]
			continue
		}
		s, ok := sh.after[i][prev]
		if !ok {
			if prev.Input() == sh.input[i] {
				s = prev // the same rules again (kube-proxy's periodic full sync)
			} else {
				var err error
				if s, err = netfilter.CompileSharedLike(t, prev, sh.fresh[i], sh.input[i]); err != nil {
					s = nil
				}
			}
			sh.after[i][prev] = s
		}
		if s == nil {
			return nil, out
		}
		out[i] = s
	}
	return sh.rules, out
}

// loadSharedProxyRules is loadProxyRules with the compiled rulesets.
func loadSharedProxyRules(n *Node, rules *kubeproxy.Rules, sets [2]*netfilter.Shared) error {
	if err := ensureProxyJumps(n, rules); err != nil {
		return err
	}
	return n.Netfilter.RestoreShared(sets[0], sets[1])
}

// loadProxyRules does what kube-proxy's iptables proxier does at each full
// sync: create the jump-target chains (iptables -N), ensure the jump rules
// at the top of the built-in chains (iptables -C, else -I), then load its
// chains with `iptables-restore --noflush --counters`.
func loadProxyRules(n *Node, rules *kubeproxy.Rules) error {
	if err := ensureProxyJumps(n, rules); err != nil {
		return err
	}
	return n.Netfilter.Restore(rules.RestoreInput(), netfilter.RestoreOptions{Noflush: true, Counters: true})
}

// ensureProxyJumps creates the chains kube-proxy's jump rules target and
// ensures the jump rules.
func ensureProxyJumps(n *Node, rules *kubeproxy.Rules) error {
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
	return nil
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
