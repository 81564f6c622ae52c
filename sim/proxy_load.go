package sim

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kubewalk/kubewalk/datapath"
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
	// next one finds stale UDP flows and the Services changed since;
	// lastGen is its generation (0 when unknown).
	last    kubeproxy.Snapshot
	lastGen uint64
	// synced: the last sync succeeded, so the next may be partial
	// (kube-proxy's needFullSync is !synced); lastFull is when the last
	// full sync was.
	synced   bool
	lastFull time.Duration
	// cleaned: a sync deleted stale chains, the last at lastCleanup
	// (kube-proxy's lastIPTablesCleanup).
	cleaned     bool
	lastCleanup time.Duration
	// lastRun is when the last sync ran; armed: the sync runner's
	// maxInterval timer is pending.
	lastRun time.Duration
	armed   bool
	// onPartial: the last sync loaded the cluster's rulesets of the
	// partial syncs' lineage while they differed from a full sync's
	// (proxyCanon).
	onPartial bool
	// ensuredEdits is the node's netfilter edit count (Netfilter.Edits)
	// after the jump rules were last ensured, for ensuredCfg (the
	// configuration without the node).
	ensuredEdits uint64
	ensuredCfg   kubeproxy.Config
	// cfg is the node's configuration (Cluster.ProxyConfig) as of cfgIP
	// and cfgCIDR, made once rather than at every sync.
	cfg     kubeproxy.Config
	cfgIP   netip.Addr
	cfgCIDR netip.Prefix
	// lazy is what the last successful sync that loaded shared rulesets
	// generated from, and lazyFn its generation (the node's lazy rules,
	// made once per proxier rather than a closure per sync).
	lazy   lazyRules
	lazyFn func() *kubeproxy.Rules
}

// config is c.ProxyConfig(p.n), remade only when what it is made of
// changes. (Its NodeIPs are shared by the copies handed out: nothing
// writes them.)
func (p *iptablesProxier) config() kubeproxy.Config {
	n, c := p.n, p.c
	if p.cfg.NodeName != n.Name || p.cfgIP != n.InternalIP || p.cfgCIDR != c.Config.ClusterCIDR || p.cfg.NodeIPs == nil {
		p.cfg, p.cfgIP, p.cfgCIDR = c.ProxyConfig(n), n.InternalIP, c.Config.ClusterCIDR
	}
	return p.cfg
}

// ProxyMaxSyncInterval is the longest kube-proxy's iptables proxier goes
// without a sync: its sync runner (BoundedFrequencyRunner) runs
// syncProxyRules when the last run is this old, whatever changed
// (maxInterval: time.Hour in v1.28-v1.33, proxyutil.FullSyncPeriod
// since). That sync is full (the last full sync is at least as old), so
// every rule's counters start again. --iptables-sync-period (30 s) does
// not make it sync: it is the canary check's interval (a sync only if the
// KUBE-PROXY-CANARY chains were deleted), the retry delay after a failure
// and, in large-cluster mode, the stale-chain cleanup interval.
const ProxyMaxSyncInterval = time.Hour

// proxyMaxInterval is the sync runner's maxInterval timer of one node.
type proxyMaxInterval struct{ p *iptablesProxier }

// Fire implements datapath.Timer: sync now if nothing ran for
// ProxyMaxSyncInterval, else wait until then.
func (m proxyMaxInterval) Fire(*datapath.Walk) {
	p := m.p
	p.armed = false
	if p.n.Proxier != p || p.c.Node(p.n.Name) != p.n {
		return // kube-proxy restarted (another proxier) or the node is gone
	}
	now := p.c.World.Now()
	if due := p.lastRun + ProxyMaxSyncInterval; now < due {
		p.arm(due - now)
		return
	}
	if p.c.cp != nil {
		p.c.cp.proxy.wake(p.c.cp.proxy.named(p.n.Name), 0)
		return
	}
	_ = p.c.syncNode(p.n, p.c.snapshot())
}

// arm starts the maxInterval timer, to fire after d, unless it is pending.
// It is a background event: an idle cluster settles, and advancing the
// clock (RunFor) runs the syncs due on the way.
func (p *iptablesProxier) arm(d time.Duration) {
	if p.armed {
		return
	}
	p.armed = true
	p.c.World.Engine.ScheduleBackground(d, proxyMaxInterval{p})
}

// cleanupDue is kube-proxy's condition for deleting stale chains at a
// sync (syncProxyRules): always, except in large-cluster mode, where only
// when the last cleanup is more than --iptables-sync-period ago (time.Since
// > syncPeriod; the first sync cleans up).
func cleanupDue(large, cleaned bool, last, now time.Duration) bool {
	return !large || !cleaned || now-last > ProxySyncPeriod
}

// ProxyFullSyncPeriod is how often kube-proxy's iptables proxier makes a
// full sync when it could make a partial one (proxyutil.FullSyncPeriod,
// one hour, v1.28+): it rewrites every chain, which resets every rule's
// counters and ensures the jump rules again.
const ProxyFullSyncPeriod = time.Hour

var _ kubeproxy.Proxier = (*iptablesProxier)(nil)

// Mode implements kubeproxy.Proxier.
func (p *iptablesProxier) Mode() kubeproxy.Mode { return kubeproxy.ModeIPTables }

// Sync implements kubeproxy.Proxier: generate the rules, load them with
// iptables-restore semantics, clear stale UDP conntrack entries.
//
// As kube-proxy since v1.27 (MinimizeIPTablesRestore), a sync is partial
// when the last one succeeded and the last full sync is less than
// ProxyFullSyncPeriod ago: the restore input then holds the per-Service
// chains of the Services changed since the last successful sync only
// (kubeproxy.GeneratePartial), and the chains of the others stay in the
// kernel as they are, counters included. The first sync, the first after
// a failure and the hourly one are full: every chain is rewritten (and its
// counters reset), and the jump rules are ensured.
//
// Every node's kube-proxy writes the same text when the rules do not
// depend on the node (kubeproxy.NodeIndependent): then the text is
// generated and compiled once for all the nodes on the same previous
// rules (proxyShare), and each node loads the compiled rulesets
// (netfilter.RestoreShared, the same as restoring the text), keeping its
// own counters and chains.
func (p *iptablesProxier) Sync(snap kubeproxy.Snapshot) error {
	n := p.n
	cfg := p.config()
	gen, current := p.c.snapshotGen(snap)
	if !current {
		gen = 0
	}
	now := p.c.World.Now()
	full := !p.synced || now-p.lastFull >= ProxyFullSyncPeriod
	var changed map[string]bool
	changedSince := func() map[string]bool {
		if changed == nil && !full {
			changed = p.c.proxyChangedServices(p.last, p.lastGen, snap, gen)
		}
		return changed
	}
	p.synced = false // until this sync succeeds
	p.lastRun = now
	p.arm(ProxyMaxSyncInterval)
	cleaned := false
	clean := func(large bool) bool {
		cleaned = cleanupDue(large, p.cleaned, p.lastCleanup, now)
		return cleaned
	}
	// loaded ends a sync whose load returned err: the node keeps rules
	// (nil: generated again when asked for) and the sync is recorded.
	loaded := func(err error, rules *kubeproxy.Rules) error {
		if err != nil {
			return fmt.Errorf("kube-proxy on %s: %w", n.Name, err)
		}
		if rules != nil {
			n.setProxyRules(rules, nil)
		} else {
			// The rules of the last successful sync: the proxier's
			// lazy generation, now from this one's (a sync that fails
			// leaves it).
			p.lazy = lazyRules{cfg: cfg, snap: snap}
			if p.lazyFn == nil {
				p.lazyFn = p.lazy.generate
			}
			n.setProxyRules(nil, p.lazyFn)
		}
		p.succeeded(full, now, cleaned)
		p.clearStale(cfg, snap, gen)
		return nil
	}
	if gen != 0 && shareProxyRules && p.c.nodeIndependent(cfg, snap, gen) {
		if cn := p.c.proxyCanonFor(cfg, snap, gen); cn != nil {
			if ok, err := p.loadCanon(cn, cfg, full, clean); ok {
				return loaded(err, nil)
			}
		}
		var rules *kubeproxy.Rules
		var sets [2]*netfilter.Shared
		if full {
			rules, sets = p.c.sharedProxyRules(cfg, snap, gen, n, clean)
		} else if p.lastGen != 0 {
			rules, sets = p.c.sharedPartialProxyRules(cfg, snap, gen, p.lastGen, changedSince(), n, clean)
		}
		if rules != nil {
			var err error
			if full {
				err = loadSharedProxyRules(n, rules, sets)
			} else {
				err = n.Netfilter.RestoreShared(sets[0], sets[1])
			}
			return loaded(err, nil)
		}
	}
	cleaned = false
	var rules *kubeproxy.Rules
	var err error
	if full {
		rules, err = kubeproxy.Generate(cfg, snap)
	} else {
		changedSince()
		rules, err = kubeproxy.GeneratePartial(cfg, snap, writeChanged(changed))
	}
	if err != nil {
		return err
	}
	var stale []string
	if clean(rules.LargeCluster) {
		stale = rules.StaleChains(natChainNames(n))
	}
	if full {
		err = loadProxyRules(n, rules, stale)
	} else {
		err = n.Netfilter.Restore(rules.RestoreInputDeleting(stale), netfilter.RestoreOptions{Noflush: true, Counters: true})
	}
	if !full {
		rules = nil // kept only as a full sync's: a partial one's are regenerated when asked for
	}
	return loaded(err, rules)
}

// lazyRules generates a node's rules of a sync that loaded shared
// rulesets when they are asked for: cfg and snap generated without error
// for another node.
type lazyRules struct {
	cfg  kubeproxy.Config
	snap kubeproxy.Snapshot
}

func (l *lazyRules) generate() *kubeproxy.Rules {
	r, _ := kubeproxy.Generate(l.cfg, l.snap)
	return r
}

// succeeded records a successful sync (full or partial) at now, and
// whether it deleted stale chains.
func (p *iptablesProxier) succeeded(full bool, now time.Duration, cleaned bool) {
	p.synced = true
	if full {
		p.lastFull = now
	}
	if cleaned {
		p.cleaned, p.lastCleanup = true, now
	}
}

// natChainNames is the chains of n's nat table, as iptables-save lists
// them.
func natChainNames(n *Node) []string {
	t := n.Netfilter.Table("nat")
	return append(slices.Clone(t.Shared().ChainNames()), t.OwnChainNames()...)
}

// staleShared returns the stale chains of a node whose nat table is on
// prev when the sync deletes them (clean), nil otherwise, and false when
// the node's own chains hold stale ones (it then restores its own text).
// The chains of prev are looked up once per ruleset and rules.
func staleShared(rules *kubeproxy.Rules, memo map[*netfilter.Shared][]string, prev *netfilter.Shared, n *Node, clean func(bool) bool) ([]string, bool) {
	if !clean(rules.LargeCluster) {
		return nil, true
	}
	if len(rules.StaleChains(n.Netfilter.Table("nat").OwnChainNames())) > 0 {
		return nil, false
	}
	stale, ok := memo[prev]
	if !ok {
		stale = rules.StaleChains(prev.ChainNames())
		memo[prev] = stale
	}
	return stale, true
}

// afterKey is a previous ruleset and the stale chains a sync onto it
// deletes.
type afterKey struct {
	prev  *netfilter.Shared
	stale string
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
	if gen != 0 && !p.c.proxyTracker().hasUDP(snap.Services) {
		// No UDP port in the cluster's snapshot: no flow is stale
		// (StaleUDPFlowsAfterSync would find none).
	} else if key := [2]uint64{p.lastGen, gen}; p.lastGen != 0 && gen != 0 {
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
	if proxyStaleFlows != nil {
		proxyStaleFlows(p.n, stale)
	}
	clearStaleUDP(p.n, stale)
	p.last, p.lastGen = snap, gen
}

// proxyStaleFlows, set by tests, is called with the stale UDP flows each
// iptables sync clears.
var proxyStaleFlows func(n *Node, flows []kubeproxy.StaleUDPFlow)

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
	after       [2]map[afterKey]*netfilter.Shared
	stale       map[*netfilter.Shared][]string
	unshareable bool
	// generated: the full sync's rules are (rules, input, fresh, after).
	generated bool
	// partial are the partial syncs to gen, by the Services changed
	// (sorted, one a line).
	partial map[string]*partialShare
}

var proxyTables = [2]string{"filter", "nat"}

// proxyShareFor is what the nodes share for snapshot generation gen. The
// rulesets of older generations are not asked for again: they are let go.
func (c *Cluster) proxyShareFor(gen uint64) *proxyShare {
	if c.proxyShare == nil || c.proxyShare.gen != gen {
		c.proxyShare = &proxyShare{gen: gen, stale: map[*netfilter.Shared][]string{}}
	}
	return c.proxyShare
}

// sharedProxyRules returns the compiled filter and nat rules of snapshot
// generation gen for node n's tables, or nil if they cannot be shared
// (the node then generates and restores its own, with the errors that
// gives).
func (c *Cluster) sharedProxyRules(cfg kubeproxy.Config, snap kubeproxy.Snapshot, gen uint64, n *Node, clean func(bool) bool) (*kubeproxy.Rules, [2]*netfilter.Shared) {
	sh := c.proxyShareFor(gen)
	if !sh.generated {
		sh.generated = true
		rules, err := c.trackedProxyRules(cfg, snap, gen, nil)
		if err != nil {
			sh.unshareable = true
		} else {
			sh.rules = rules
			for i, t := range proxyTables {
				sh.input[i] = rules.RestoreInputTable(t)
				// Only the chains that changed since the last
				// generation compiled are parsed.
				if f := c.proxyLastFresh[i]; f != nil && f.Input() == sh.input[i] {
					// The same text as the last full sync's (an event that
					// changed no rule): the same ruleset.
					sh.fresh[i], sh.after[i] = f, map[afterKey]*netfilter.Shared{}
					continue
				}
				s, err := netfilter.CompileSharedLike(t, nil, c.proxyLastShared[i], sh.input[i])
				if err != nil {
					sh.unshareable = true
					break
				}
				sh.fresh[i], sh.after[i] = s, map[afterKey]*netfilter.Shared{}
				c.proxyLastShared[i], c.proxyLastFresh[i] = s, s
			}
		}
	}
	var out [2]*netfilter.Shared
	if sh.unshareable {
		return nil, out
	}
	for i, t := range proxyTables {
		prev := n.Netfilter.Table(t).Shared()
		var stale []string
		if t == "nat" {
			var ok bool
			if stale, ok = staleShared(sh.rules, sh.stale, prev, n, clean); !ok {
				return nil, out
			}
		}
		if len(stale) == 0 && sh.fresh[i].Covers(prev) {
			out[i] = sh.fresh[i]
			continue
		}
		key := afterKey{prev, strings.Join(stale, " ")}
		s, ok := sh.after[i][key]
		if !ok {
			input := sh.input[i]
			if len(stale) > 0 {
				input = sh.rules.RestoreInputTableDeleting(t, stale)
			}
			if prev.Input() == input {
				s = prev // the same rules again (kube-proxy's periodic full sync)
			} else {
				var err error
				if s, err = netfilter.CompileSharedLike(t, prev, sh.fresh[i], input); err != nil {
					s = nil
				}
			}
			sh.after[i][key] = s
		}
		if s == nil {
			return nil, out
		}
		out[i] = s
	}
	return sh.rules, out
}

// partialShare is a partial sync to a snapshot generation with a given
// set of Services changed, generated once and compiled once per previous
// ruleset of the nodes making it.
type partialShare struct {
	input       [2]string
	rules       *kubeproxy.Rules
	after       [2]map[afterKey]*netfilter.Shared
	stale       map[*netfilter.Shared][]string
	unshareable bool
}

// sharedPartialProxyRules is sharedProxyRules for a partial sync from
// snapshot generation lastGen (changed: the Services changed since).
// Compiled onto the node's previous ruleset, it reuses every chain of it
// the input leaves alone or writes the same, so that one endpoint change
// costs what its chains and the top-level chains cost.
func (c *Cluster) sharedPartialProxyRules(cfg kubeproxy.Config, snap kubeproxy.Snapshot, gen, lastGen uint64, changed map[string]bool, n *Node, clean func(bool) bool) (*kubeproxy.Rules, [2]*netfilter.Shared) {
	var out [2]*netfilter.Shared
	sh := c.proxyShareFor(gen)
	// Nodes that synced last at different generations write the same
	// input when the same Services changed since (a burst of events
	// between two syncs of every node): one generation and compile.
	key := c.changedKey(changed)
	ps := sh.partial[key]
	if ps == nil {
		ps = &partialShare{stale: map[*netfilter.Shared][]string{}}
		if sh.partial == nil {
			sh.partial = map[string]*partialShare{}
		}
		sh.partial[key] = ps
		rules, err := c.trackedProxyRules(cfg, snap, gen, changed)
		if err != nil {
			ps.unshareable = true
		} else {
			ps.rules = rules
			for i, t := range proxyTables {
				ps.input[i] = rules.RestoreInputTable(t)
				ps.after[i] = map[afterKey]*netfilter.Shared{}
			}
		}
	}
	if ps.unshareable {
		return nil, out
	}
	for i, t := range proxyTables {
		prev := n.Netfilter.Table(t).Shared()
		if prev == nil {
			return nil, out // the node's own chains: it restores the text
		}
		var stale []string
		if t == "nat" {
			var ok bool
			if stale, ok = staleShared(ps.rules, ps.stale, prev, n, clean); !ok {
				return nil, out
			}
		}
		key := afterKey{prev, strings.Join(stale, " ")}
		s, ok := ps.after[i][key]
		if !ok {
			input := ps.input[i]
			if len(stale) > 0 {
				input = ps.rules.RestoreInputTableDeleting(t, stale)
			}
			var err error
			if s, err = netfilter.CompileSharedLike(t, prev, prev, input); err != nil {
				s = nil
			}
			ps.after[i][key] = s
			if s != nil {
				c.proxyLastShared[i] = s
			}
		}
		if s == nil {
			return nil, out
		}
		out[i] = s
	}
	return ps.rules, out
}

// proxyTrack is the kubeproxy.Tracker of the rules the nodes share, with
// the snapshot (and its generation) it last generated, and the rulesets
// of the latest generation (canon).
type proxyTrack struct {
	tracker kubeproxy.Tracker
	// checks is the nodes' shared memo of iptables -C parses: every
	// kube-proxy checks the same jump rules at its first sync.
	checks netfilter.CheckMemo
	snap   kubeproxy.Snapshot
	gen    uint64
	canon  *proxyCanon
	// snapIdx indexes the recent snapshots by their first Service;
	// patchedSnaps counts the snapshots patched (for tests).
	snapIdx      map[*kubeproxy.Service]*snapIndex
	patchedSnaps int
	// sharedServices counts the patched snapshots that share the
	// Services of the one before (for tests).
	sharedServices int
	// udpOf and udpLen are the list of Services hasUDP answered udp for
	// last; udpScans counts the lists it scanned (for tests).
	udpOf    *kubeproxy.Service
	udpLen   int
	udp      bool
	udpScans int
	// canonLoads counts the syncs that loaded canon's rulesets, and
	// outOfStep those of nodes that synced last at another generation
	// than the rulesets before (for tests).
	canonLoads, outOfStep int
	// lastLarge is, by chain, the large-cluster mode canon's partial
	// lineage (proxyCanon.sets) last wrote it in, baseLarge that of the
	// chains it holds from before (the mode of its first ruleset): a
	// partial sync that declares a chain written in another mode than
	// the current one writes it otherwise than the lineage holds it.
	lastLarge map[string]bool
	baseLarge bool
	// slices memoizes proxySlice by informer object (each watch event
	// delivers a new one) and resource version.
	slices map[*discoveryv1.EndpointSlice]proxySliceMemo
}

// proxySliceMemo is one memoized proxySlice.
type proxySliceMemo struct {
	rv string
	es kubeproxy.EndpointSlice
}

// proxySliceOf is proxySlice(es), converted once per object the informer
// holds: a snapshot after one endpoint change converts that slice only.
// (The snapshots share the converted slices; nothing writes them.)
func (c *Cluster) proxySliceOf(es *discoveryv1.EndpointSlice) kubeproxy.EndpointSlice {
	pt := c.proxyTracker()
	if m, ok := pt.slices[es]; ok && m.rv == es.ResourceVersion {
		return m.es
	}
	if pt.slices == nil || len(pt.slices) > 2*len(c.services)+1024 {
		pt.slices = map[*discoveryv1.EndpointSlice]proxySliceMemo{} // objects let go
	}
	v := proxySlice(es)
	pt.slices[es] = proxySliceMemo{rv: es.ResourceVersion, es: v}
	return v
}

// hasUDP is kubeproxy.HasUDPPort(svcs), remembered for the last list
// asked about (the snapshots patched after EndpointSlice events share
// their Services; a list of a snapshot is not changed once made).
func (pt *proxyTrack) hasUDP(svcs []kubeproxy.Service) bool {
	if len(svcs) == 0 {
		return false
	}
	if pt.udpOf != &svcs[0] || pt.udpLen != len(svcs) {
		pt.udpOf, pt.udpLen, pt.udp = &svcs[0], len(svcs), kubeproxy.HasUDPPort(svcs)
		pt.udpScans++
	}
	return pt.udp
}

// proxyTracker returns the cluster's proxyTrack.
func (c *Cluster) proxyTracker() *proxyTrack {
	if c.proxyTrack == nil {
		pt := &proxyTrack{tracker: kubeproxy.Tracker{AnyNode: true}}
		pt.tracker.Index = pt.place
		c.proxyTrack = pt
	}
	return c.proxyTrack
}

// place is the tracker's Index: where Service namespace/name's entries
// are in snap, from the snapshot's index (snapshot() lists each Service
// once, its EndpointSlices one after another, and a patched snapshot
// keeps the places).
func (pt *proxyTrack) place(snap kubeproxy.Snapshot, namespace, name string) (svc, first, n int, ok bool) {
	idx := pt.indexOf(snap)
	if idx == nil {
		return 0, 0, 0, false
	}
	k := namespace + "/" + name
	svc, found := idx.svc[k]
	if !found {
		svc = -1
	}
	r := idx.slices[k]
	return svc, r[0], r[1], true
}

// trackedProxyRules is kubeproxy.GeneratePartial(cfg, snap, write) (the
// Services "namespace/name" in write; Generate when write is nil) for
// snapshot generation gen, whose rules do not depend on the node: the
// cluster's tracker recomputes only the Services changed since the
// generation it generated last (and hands back its last rules when they
// come out the same).
func (c *Cluster) trackedProxyRules(cfg kubeproxy.Config, snap kubeproxy.Snapshot, gen uint64, write map[string]bool) (*kubeproxy.Rules, error) {
	pt := c.proxyTracker()
	var since map[string]bool
	if pt.gen != 0 {
		since = c.proxyChangedServices(pt.snap, pt.gen, snap, gen)
	}
	rules, err := pt.tracker.GenerateWriting(cfg, snap, since, write)
	if err != nil {
		pt.gen = 0
		return nil, err
	}
	pt.snap, pt.gen = snap, gen
	return rules, nil
}

// writeChanged is the write function of a partial sync writing the
// Services of changed ("namespace/name"): asked once per service port of
// the cluster, it looks each up without making its key.
func writeChanged(changed map[string]bool) func(ns, name string) bool {
	var buf []byte
	return func(ns, name string) bool {
		buf = append(append(append(buf[:0], ns...), '/'), name...)
		return changed[string(buf)]
	}
}

// proxyChangedServices returns the Services ("namespace/name") whose
// Service or EndpointSlices differ between the snapshots of generations
// lastGen and gen (0: unknown), as kube-proxy's change trackers find them
// (a change undone before the sync is no change). The candidates are the
// Services the informers saw an event for in between (all of them when a
// generation is unknown); the answer is shared by every node making the
// same step.
func (c *Cluster) proxyChangedServices(last kubeproxy.Snapshot, lastGen uint64, snap kubeproxy.Snapshot, gen uint64) map[string]bool {
	key := [2]uint64{lastGen, gen}
	known := lastGen != 0 && gen != 0 && lastGen >= c.proxyLogFrom
	if known {
		if m, ok := c.proxyChanged[key]; ok {
			return m
		}
	}
	var cand map[string]bool
	if known {
		cand = map[string]bool{}
		i := sort.Search(len(c.proxyLog), func(i int) bool { return c.proxyLog[i].gen >= lastGen })
		for _, e := range c.proxyLog[i:] {
			if e.gen < gen {
				cand[e.key] = true
			}
		}
	}
	type state struct {
		svc    *kubeproxy.Service
		slices []*kubeproxy.EndpointSlice
	}
	pt := c.proxyTracker()
	collect := func(s kubeproxy.Snapshot) map[string]*state {
		m := map[string]*state{}
		if idx := pt.indexOf(s); cand != nil && idx != nil {
			// The candidates' entries only.
			for k := range cand {
				st := &state{}
				if i, ok := idx.svc[k]; ok {
					st.svc = &s.Services[i]
				}
				r := idx.slices[k]
				for j := r[0]; j < r[0]+r[1]; j++ {
					st.slices = append(st.slices, &s.EndpointSlices[j])
				}
				if st.svc != nil || len(st.slices) > 0 {
					m[k] = st
				}
			}
			return m
		}
		for i := range s.Services {
			k := s.Services[i].Namespace + "/" + s.Services[i].Name
			if cand == nil || cand[k] {
				m[k] = &state{svc: &s.Services[i]}
			}
		}
		for i := range s.EndpointSlices {
			es := &s.EndpointSlices[i]
			k := es.Namespace + "/" + es.ServiceName
			if cand == nil || cand[k] {
				st := m[k]
				if st == nil {
					st = &state{}
					m[k] = st
				}
				st.slices = append(st.slices, es)
			}
		}
		return m
	}
	a, b := collect(last), collect(snap)
	out := map[string]bool{}
	for k, sa := range a {
		if sb := b[k]; sb == nil || !reflect.DeepEqual(sa, sb) {
			out[k] = true
		}
	}
	for k := range b {
		if a[k] == nil {
			out[k] = true
		}
	}
	if known {
		if c.proxyChanged == nil || len(c.proxyChanged) > 64 {
			c.proxyChanged = map[[2]uint64]map[string]bool{}
		}
		c.proxyChanged[key] = out
	}
	return out
}

// logProxyChange records that the informers saw an event for Service key
// (a Service or one of its EndpointSlices) at the current snapshot
// generation, for the partial syncs to find the Services changed. Entries
// no node's last sync predates are dropped once the log grows.
func (c *Cluster) logProxyChange(key string) {
	c.proxyLog = append(c.proxyLog, proxyChange{gen: c.snapGen + 1, key: key})
	if len(c.proxyLog) < max(4096, c.proxyLogCompactAt) {
		return
	}
	low := c.snapGen + 1
	for _, n := range c.nodes {
		if p, ok := n.Proxier.(*iptablesProxier); ok && p.lastGen != 0 {
			low = min(low, p.lastGen)
		}
	}
	c.proxyLog = slices.DeleteFunc(c.proxyLog, func(e proxyChange) bool { return e.gen < low })
	c.proxyLogFrom = max(c.proxyLogFrom, low)
	c.proxyLogCompactAt = 2 * len(c.proxyLog)
}

// proxyChange is one entry of the informers' event log.
type proxyChange struct {
	gen uint64
	key string
}

// nodeIndependent is kubeproxy.NodeIndependent, once per snapshot
// generation for the configuration every node shares.
func (c *Cluster) nodeIndependent(cfg kubeproxy.Config, snap kubeproxy.Snapshot, gen uint64) bool {
	if c.nodeIndepGen != gen {
		c.nodeIndepGen, c.nodeIndep = gen, kubeproxy.NodeIndependent(cfg, snap)
	}
	return c.nodeIndep
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
func loadProxyRules(n *Node, rules *kubeproxy.Rules, stale []string) error {
	if err := ensureProxyJumps(n, rules); err != nil {
		return err
	}
	return n.Netfilter.Restore(rules.RestoreInputDeleting(stale), netfilter.RestoreOptions{Noflush: true, Counters: true})
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
	n.Netfilter.ShareChecks(&c.proxyTracker().checks)
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

// proxyCanon is kube-proxy's rulesets at one snapshot generation when
// they do not depend on the node: compiled once for every node, patched
// from the previous generation's with the chains that changed (the
// Services changed since, as a partial sync writes them, and the stale
// chains deleted), so that every node that syncs to the generation,
// whatever generation it synced last, loads the same rulesets
// (netfilter.LoadShared), declaring what its own sync's input declares:
// every chain at a full sync; at a partial one the top-level chains and
// those of the Services changed since its last sync. The chains it
// leaves out keep their counters; they are unchanged since (the rulesets'
// lineage says so, or the node restores its text as before).
//
// When kube-proxy's large-cluster mode changes, every endpoint rule's
// comment does, but a partial sync writes only the Services changed: the
// nodes that made a full sync since hold other rules than those that did
// not. Then sets are the latter's (patched on), and full the former's
// (made at the first full sync, patched on too), until no node is left on
// sets' lineage.
type proxyCanon struct {
	gen uint64
	// prevGen is the generation of the rulesets cn was patched from (0:
	// none).
	prevGen    uint64
	snap       kubeproxy.Snapshot
	cfg        kubeproxy.Config // as generated with (no node)
	rules      *kubeproxy.Rules
	sets, full [2]*netfilter.Shared // filter, nat
	// exact: sets are what a full sync writes (full is not needed).
	exact bool
	fails bool     // not built: the nodes take the other ways
	top   []string // nat's top-level chains
	// decl is what a partial sync declares in nat, by the generation of
	// the node's last sync; stale the chains a node on a ruleset deletes
	// when it cleans up, by that ruleset.
	decl  map[uint64]*netfilter.Declared
	stale map[*netfilter.Shared][]string
	// otherMode marks the declarations of decl that declare a chain sets
	// holds as written in the other large-cluster mode: not loadable
	// from sets.
	otherMode map[*netfilter.Declared]bool
}

// everyChain is what a full sync declares, and any sync in filter (whose
// chains are all top-level).
var everyChain = &netfilter.Declared{All: true}

// proxyCanonFor returns the rulesets of generation gen (built at the
// first sync to it), or nil when they cannot be built.
func (c *Cluster) proxyCanonFor(cfg kubeproxy.Config, snap kubeproxy.Snapshot, gen uint64) *proxyCanon {
	pt := c.proxyTracker()
	prev := pt.canon
	if prev != nil && prev.gen == gen {
		if prev.fails {
			return nil
		}
		return prev
	}
	gcfg := cfg
	gcfg.NodeName, gcfg.NodeIPs = "", nil
	cn := &proxyCanon{gen: gen, snap: snap, cfg: gcfg, decl: map[uint64]*netfilter.Declared{}, stale: map[*netfilter.Shared][]string{},
		otherMode: map[*netfilter.Declared]bool{}}
	pt.canon = cn
	ok := prev != nil && !prev.fails && reflect.DeepEqual(prev.cfg, gcfg) && c.patchCanon(cn, prev, cfg)
	if !ok {
		ok = c.freshCanon(cn, cfg)
	}
	if !ok {
		cn.fails = true
		return nil
	}
	cn.top = cn.rules.TopChains("nat")
	c.proxyLastShared = cn.sets
	return cn
}

// patchCanon builds cn from prev: the partial sync from prev's
// generation, deleting the chains stale, compiled onto prev's rulesets.
func (c *Cluster) patchCanon(cn, prev *proxyCanon, cfg kubeproxy.Config) bool {
	changed := c.proxyChangedServices(prev.snap, prev.gen, cn.snap, cn.gen)
	// The chains the Services changed had: those they no longer have are
	// stale (the rulesets before hold no other).
	pt := c.proxyTracker()
	var had []string
	if pt.gen == prev.gen {
		for k := range changed {
			ns, name, _ := strings.Cut(k, "/")
			had = append(had, pt.tracker.ServiceChains(ns, name)...)
		}
	}
	trackedGen := pt.gen
	rules, err := c.trackedProxyRules(cfg, cn.snap, cn.gen, changed)
	if err != nil {
		return false
	}
	flip := rules.LargeCluster != prev.rules.LargeCluster
	base, other := prev.sets, prev.full
	cn.exact = prev.exact && !flip
	if !prev.exact && other[1] != nil && !c.nodesOnPartialLineage() {
		// Every node made a full sync since the mode changed.
		base, other, cn.exact = other, [2]*netfilter.Shared{}, !flip
		pt.lastLarge, pt.baseLarge = nil, prev.rules.LargeCluster
	}
	if flip {
		other = [2]*netfilter.Shared{} // its nodes restore their own until their next full sync
	}
	now := map[string]bool{}
	for k := range changed {
		ns, name, _ := strings.Cut(k, "/")
		for _, ch := range pt.tracker.ServiceChains(ns, name) {
			now[ch] = true
			if pt.lastLarge == nil {
				pt.lastLarge = map[string]bool{}
			}
			pt.lastLarge[ch] = rules.LargeCluster
		}
	}
	var stale []string
	if trackedGen == prev.gen {
		for _, ch := range had {
			if !now[ch] && base[1].Has(ch) {
				stale = append(stale, ch)
			}
		}
		slices.Sort(stale)
		stale = slices.Compact(stale)
	} else {
		stale = rules.StaleChains(base[1].ChainNames())
	}
	for i, t := range proxyTables {
		in := chainInput(rules, t, stale)
		s, err := compileOnto(t, base[i], in)
		if err != nil {
			return false
		}
		cn.sets[i] = s
		if other[i] != nil {
			if cn.full[i], err = compileOnto(t, other[i], in); err != nil {
				return false
			}
		}
	}
	cn.rules, cn.prevGen = rules, prev.gen
	return true
}

// chainInput is rules' restore input for table t, deleting the chains
// stale, by its chains (its text made only when asked for); Lines nil
// when the chains do not say all of it (compileOnto then compiles the
// text).
func chainInput(rules *kubeproxy.Rules, t string, stale []string) netfilter.ChainLines {
	in := netfilter.ChainLines{Text: func() string { return rules.RestoreInputTableDeleting(t, stale) }}
	if lines, declared, deleted, ok := rules.ChainLinesTable(t, stale); ok {
		in.Lines, in.Declared, in.Deleted = lines, declared, deleted
	}
	return in
}

// compileOnto compiles in onto prev's rulesets (netfilter.CompileSharedLike
// with prev as like), from its chains when it has them.
func compileOnto(t string, prev *netfilter.Shared, in netfilter.ChainLines) (*netfilter.Shared, error) {
	if in.Lines == nil {
		return netfilter.CompileSharedLike(t, prev, prev, in.Text())
	}
	return netfilter.CompileSharedLines(t, prev, prev, in)
}

// nodesOnPartialLineage reports whether some node's last sync loaded the
// rulesets of the partial syncs' lineage while they were not a full
// sync's.
func (c *Cluster) nodesOnPartialLineage() bool {
	for _, n := range c.nodes {
		if p, ok := n.Proxier.(*iptablesProxier); ok && p.onPartial {
			return true
		}
	}
	return false
}

// freshCanon builds cn from a full sync's rules, compiled onto nothing
// (reusing the chains of the last rulesets compiled).
func (c *Cluster) freshCanon(cn *proxyCanon, cfg kubeproxy.Config) bool {
	rules, err := c.trackedProxyRules(cfg, cn.snap, cn.gen, nil)
	if err != nil {
		return false
	}
	for i, t := range proxyTables {
		s, err := netfilter.CompileSharedLike(t, nil, c.proxyLastShared[i], rules.RestoreInputTable(t))
		if err != nil {
			return false
		}
		cn.sets[i] = s
	}
	cn.rules, cn.exact = rules, true
	pt := c.proxyTracker()
	pt.lastLarge, pt.baseLarge = nil, rules.LargeCluster
	return true
}

// fullSets returns the rulesets a full sync at cn's generation loads
// (nil when they cannot be built): sets when exact, else full, compiled
// at the first full sync from its rules onto sets (the chains whose
// rules differ).
func (c *Cluster) fullSets(cn *proxyCanon, cfg kubeproxy.Config) *[2]*netfilter.Shared {
	if cn.exact {
		return &cn.sets
	}
	if cn.full[1] == nil {
		rules, err := c.trackedProxyRules(cfg, cn.snap, cn.gen, nil)
		if err != nil {
			return nil
		}
		var full [2]*netfilter.Shared
		for i, t := range proxyTables {
			if full[i], err = compileOnto(t, cn.sets[i], chainInput(rules, t, nil)); err != nil {
				return nil
			}
		}
		cn.full = full
	}
	return &cn.full
}

// declaredSince is what a partial sync to cn from the snapshot last
// (generation lastGen) declares in nat: the top-level chains, and the
// chains of the Services changed since, as cn's generation writes them;
// nil when unknown. One answer serves every node that synced last at
// lastGen.
func (c *Cluster) declaredSince(cn *proxyCanon, last kubeproxy.Snapshot, lastGen uint64) *netfilter.Declared {
	if d, ok := cn.decl[lastGen]; ok {
		return d
	}
	pt := c.proxyTracker()
	if lastGen == 0 || pt.gen != cn.gen {
		return nil
	}
	changed := c.proxyChangedServices(last, lastGen, cn.snap, cn.gen)
	m := make(map[string]bool, len(cn.top)+4*len(changed))
	for _, ch := range cn.top {
		m[ch] = true
	}
	for k := range changed {
		ns, name, _ := strings.Cut(k, "/")
		for _, ch := range pt.tracker.ServiceChains(ns, name) {
			m[ch] = true
		}
	}
	d := &netfilter.Declared{Chains: m}
	if len(cn.decl) > 64 {
		clear(cn.decl)
	}
	cn.decl[lastGen] = d
	if !cn.exact {
		for ch := range m {
			if mode, ok := pt.lastLarge[ch]; kubeproxy.IsServiceChain(ch) && (ok && mode != cn.rules.LargeCluster || !ok && pt.baseLarge != cn.rules.LargeCluster) {
				cn.otherMode[d] = true // the partial lineage holds ch as written in the other mode
				break
			}
		}
	}
	return d
}

// staleIn returns the chains of the nat table t that a cleanup loading
// the nat ruleset s deletes: kube-proxy's per-Service chains s does not
// hold (from t's ruleset, memoized by it, and t's own chains).
func (cn *proxyCanon) staleIn(t *netfilter.Table, s *netfilter.Shared) []string {
	b := t.Shared()
	out, ok := cn.stale[b]
	if !ok {
		for _, name := range s.Gone(b) {
			if kubeproxy.IsServiceChain(name) {
				out = append(out, name)
			}
		}
		if len(cn.stale) > 64 {
			clear(cn.stale)
		}
		cn.stale[b] = out
	}
	own := t.OwnChainNamesWhere(func(name string) bool { return kubeproxy.IsServiceChain(name) && !s.Has(name) })
	if len(own) == 0 {
		return out
	}
	return append(slices.Clone(out), own...)
}

// loadCanon is a sync of p's node onto cn's rulesets; false when the node
// cannot load them as its sync would leave its tables (it then takes the
// other ways; nothing changed, but for the jump rules a full sync ensures).
func (p *iptablesProxier) loadCanon(cn *proxyCanon, cfg kubeproxy.Config, full bool, clean func(bool) bool) (bool, error) {
	n := p.n
	d := everyChain
	var buf [2]*[2]*netfilter.Shared // (tries, made on the stack)
	tries := buf[:0]
	if full {
		sets := p.c.fullSets(cn, cfg)
		if sets == nil {
			return false, nil
		}
		tries = append(tries, sets)
	} else {
		if d = p.c.declaredSince(cn, p.last, p.lastGen); d == nil {
			return false, nil
		}
		// The lineage the node was on first.
		tries = append(tries, &cn.sets, &cn.full)
		if !p.onPartial && cn.full[1] != nil {
			tries[0], tries[1] = tries[1], tries[0]
		}
		if cn.otherMode[d] {
			tries = slices.DeleteFunc(tries, func(t *[2]*netfilter.Shared) bool { return t == &cn.sets })
		}
	}
	nat := n.Netfilter.Table("nat")
	ensured := false
	for _, sets := range tries {
		if sets[1] == nil {
			continue
		}
		dn := d
		if clean(cn.rules.LargeCluster) {
			if stale := cn.staleIn(nat, sets[1]); len(stale) > 0 {
				dd := *d
				dd.Deleted = stale
				dn = &dd
			}
		}
		if full && !ensured {
			// The jump rules are there (iptables -C finds them) when no
			// command changed the node's tables since they were ensured
			// for the same configuration.
			if p.ensuredEdits != n.Netfilter.Edits() || !reflect.DeepEqual(p.ensuredCfg, cn.cfg) || p.ensuredEdits == 0 {
				if err := ensureProxyJumps(n, cn.rules); err != nil {
					return true, err
				}
				p.ensuredEdits, p.ensuredCfg = n.Netfilter.Edits(), cn.cfg
			}
			ensured = true
		}
		err := n.Netfilter.LoadShared(netfilter.Load{Set: sets[0], Declared: everyChain}, netfilter.Load{Set: sets[1], Declared: dn})
		if err == netfilter.ErrNotLoaded {
			continue
		}
		if err == nil {
			pt := p.c.proxyTracker()
			pt.canonLoads++
			if !full && cn.prevGen != p.lastGen {
				pt.outOfStep++
			}
			p.onPartial = sets == &cn.sets && !cn.exact
		}
		return true, err
	}
	p.onPartial = false
	return false, nil
}
