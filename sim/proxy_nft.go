package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// nftablesProxier is kube-proxy's nftables proxier on one node: every
// sync is one `nft -f` transaction on the node's table ip kube-proxy.
type nftablesProxier struct {
	c *Cluster
	n *Node
	// flushed: the first sync re-created the base chains.
	flushed bool
	// stale are service chains flushed as stale, with when; kube-proxy
	// deletes them at a sync at least a second later (kernels before 6.2
	// notice a dropped map reference to a chain only after a while).
	stale map[string]time.Duration
	last  kubeproxy.Snapshot
}

var _ kubeproxy.Proxier = (*nftablesProxier)(nil)

// Mode implements kubeproxy.Proxier.
func (p *nftablesProxier) Mode() kubeproxy.Mode { return kubeproxy.ModeNFTables }

// Sync implements kubeproxy.Proxier: generate the transaction, run it as
// nft -f does (atomically), clear stale UDP conntrack entries.
func (p *nftablesProxier) Sync(snap kubeproxy.Snapshot) error {
	n := p.n
	cfg := p.c.ProxyConfig(n)
	cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, p.c.Config.ServiceCIDR)
	rules, err := kubeproxy.GenerateNFT(cfg, snap)
	if err != nil {
		return err
	}
	st := kubeproxy.NFTSyncState{Flushed: p.flushed}
	now := p.c.World.Now()
	var deleting []string
	for _, c := range slices.Sorted(mapKeys(p.stale)) {
		if now-p.stale[c] >= time.Second && !slices.Contains(rules.ActiveChains, c) {
			deleting = append(deleting, c)
		}
	}
	st.StaleChains = deleting
	if t := n.NFTables.Table("ip", kubeproxy.NFTTable); t != nil {
		for _, c := range t.Chains() {
			st.ExistingChain = append(st.ExistingChain, c.Name)
		}
		for _, s := range t.Sets() {
			st.ExistingSets = append(st.ExistingSets, s.Name)
		}
	}
	tx, stale := rules.Transaction(st)
	if err := n.NFTables.Apply("/dev/stdin", tx); err != nil {
		return fmt.Errorf("kube-proxy on %s: nft -f: %w", n.Name, err)
	}
	p.flushed = true
	if p.stale == nil {
		p.stale = map[string]time.Duration{}
	}
	for _, c := range deleting {
		delete(p.stale, c)
	}
	for _, c := range rules.ActiveChains {
		delete(p.stale, c)
	}
	for _, c := range stale {
		if _, ok := p.stale[c]; !ok {
			p.stale[c] = now
		}
	}
	n.NFTRules = rules
	n.setProxyRules(nil, nil)
	clearStaleUDP(n, kubeproxy.StaleUDPFlowsAfterSync(cfg, p.last, snap))
	p.last = snap
	return nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
