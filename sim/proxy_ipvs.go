package sim

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/ipset"
	"github.com/kubewalk/kubewalk/datapath/ipvs"
	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// IPVSProxier is kube-proxy's IPVS proxier on one node (v1.33,
// pkg/proxy/ipvs): it owns the node's IPVS table and ipsets and the
// iptables rules IPVS mode writes.
type IPVSProxier struct {
	c *Cluster
	n *Node
	// IPVS and IPSets are the node's kernel IPVS state and IP sets.
	IPVS   *ipvs.IPVS
	IPSets *ipset.Registry
	// Rules is what the last successful sync programmed.
	Rules *kubeproxy.IPVSRules
	// Scheduler is ipvs.scheduler after defaulting ("" is rr).
	Scheduler string
	last      kubeproxy.Snapshot
}

var _ kubeproxy.Proxier = (*IPVSProxier)(nil)

// newIPVSProxier is NewProxier: validate the scheduler, load IPVS with the
// sysctls kube-proxy sets (net.ipv4.vs.conntrack=1, expire_nodest_conn=1,
// expire_quiescent_template=1, ip_forward=1), and give iptables the ipsets.
func (c *Cluster) newIPVSProxier(n *Node) (*IPVSProxier, error) {
	sched, err := kubeproxy.ParseIPVSScheduler(c.Config.IPVSScheduler)
	if err != nil {
		return nil, err
	}
	p := &IPVSProxier{c: c, n: n, Scheduler: sched, IPSets: ipset.NewRegistry()}
	p.IPVS = ipvs.Install(n.Host, n.Conntrack)
	p.IPVS.Conntrack, p.IPVS.ExpireNoDestConn = true, true
	n.Host.Sysctl.IPForward = true
	n.Netfilter.UseIPSets(p.IPSets)
	n.Netfilter.UseIPVS(p.IPVS.Virtual)
	return p, nil
}

// Mode implements kubeproxy.Proxier.
func (p *IPVSProxier) Mode() kubeproxy.Mode { return kubeproxy.ModeIPVS }

func protoNum(pr kubeproxy.Protocol) uint8 {
	if pr == kubeproxy.ProtocolUDP {
		return datapath.ProtoUDP
	}
	return datapath.ProtoTCP
}

// Sync implements kubeproxy.Proxier as syncProxyRules does: ensure the
// chains and jumps and the kube-ipvs0 dummy device, create the ipsets and
// set their entries, add or update every virtual server and its real
// servers (binding ClusterIPs, external and LB IPs to kube-ipvs0),
// iptables-restore the rules, then remove addresses and virtual servers no
// longer wanted and clear stale UDP conntrack entries.
func (p *IPVSProxier) Sync(snap kubeproxy.Snapshot) error {
	n := p.n
	cfg := p.c.ProxyConfig(n)
	var nodeAddrs []netip.Addr
	for _, a := range n.Host.Addrs() {
		if a.Dev.Name != kubeproxy.DummyDevice {
			nodeAddrs = append(nodeAddrs, a.Prefix.Addr())
		}
	}
	rules, err := kubeproxy.GenerateIPVS(cfg, snap, p.Scheduler, nodeAddrs)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("kube-proxy on %s: %w", n.Name, err) }
	nf := n.Netfilter
	for _, table := range []string{"nat", "filter"} {
		for _, ch := range rules.EnsuredChains()[table] {
			if nf.Table(table).Chain(ch) == nil {
				if err := nf.Exec(table, "-N", ch); err != nil {
					return fail(err)
				}
			}
		}
	}
	for _, j := range rules.JumpRules() {
		ok, err := nf.Check(j.Table, j.Chain, j.Args...)
		if err != nil {
			return fail(err)
		}
		if !ok {
			if err := nf.Exec(j.Table, append([]string{"-I", j.Chain}, j.Args...)...); err != nil {
				return fail(err)
			}
		}
	}
	if n.Host.Device(kubeproxy.DummyDevice) == nil {
		if _, err := n.Host.AddDummy(kubeproxy.DummyDevice); err != nil {
			return fail(err)
		}
	}
	// ipset restore: create -exist, then del/add the difference.
	for _, s := range rules.Sets {
		if err := p.IPSets.Exec(s.CreateArgs()...); err != nil {
			return fail(err)
		}
		set := p.IPSets.Get(s.Name)
		want := map[string]bool{}
		for _, e := range s.Entries {
			want[e] = true
		}
		for _, e := range currentEntries(set) {
			if !want[e] {
				if err := p.IPSets.Del(s.Name, e, true); err != nil {
					return fail(err)
				}
			}
		}
		for _, e := range s.Entries {
			if err := p.IPSets.Add(s.Name, e, "", false, true); err != nil {
				return fail(err)
			}
		}
	}
	// Virtual servers and their destinations.
	bound := map[netip.Addr]bool{}
	for _, a := range n.Host.Addrs() {
		if a.Dev.Name == kubeproxy.DummyDevice {
			bound[a.Prefix.Addr()] = true
		}
	}
	active := map[*ipvs.Service]bool{}
	for _, vs := range rules.VirtualServers {
		spec := ipvs.ServiceSpec{Proto: protoNum(vs.Protocol), Addr: vs.Addr, Port: uint16(vs.Port), Scheduler: vs.Scheduler,
			Persistent: vs.Persistent, Timeout: uint32(vs.Timeout)}
		if vs.SourceHash {
			spec.Flags |= ipvs.FlagSchedSH1
		}
		s := p.IPVS.Service(spec.Proto, vs.Addr, spec.Port)
		if s == nil {
			if s, err = p.IPVS.AddService(spec); err != nil {
				return fail(err)
			}
			s.UnknownOrder = true // kube-proxy adds real servers in Go map order
		} else if s.Scheduler != spec.Scheduler || (s.Flags&ipvs.FlagPersistent != 0) != spec.Persistent || s.Timeout != spec.Timeout {
			if err := p.IPVS.EditService(spec); err != nil {
				return fail(err)
			}
		}
		active[s] = true
		if vs.Bind && !bound[vs.Addr] {
			if err := n.Host.AddAddr(kubeproxy.DummyDevice, netip.PrefixFrom(vs.Addr, 32)); err != nil {
				return fail(err)
			}
			bound[vs.Addr] = true
		}
		if err := p.syncDests(s, vs.Dests); err != nil {
			return fail(err)
		}
	}
	if err := nf.Restore(rules.RestoreInput(), netfilter.RestoreOptions{Noflush: true, Counters: true}); err != nil {
		return fail(err)
	}
	want := map[netip.Addr]bool{}
	for _, a := range rules.BindAddrs {
		want[a] = true
	}
	for _, a := range slices.Clone(n.Host.Addrs()) {
		if a.Dev.Name == kubeproxy.DummyDevice && !want[a.Prefix.Addr()] {
			if err := n.Host.DeleteAddr(kubeproxy.DummyDevice, a.Prefix); err != nil {
				return fail(err)
			}
		}
	}
	for _, s := range p.IPVS.Services() {
		if !active[s] {
			if err := p.IPVS.DeleteService(s.Proto, netip.AddrFrom4(s.Addr), s.Port); err != nil {
				return fail(err)
			}
		}
	}
	p.Rules = rules
	stale, err := kubeproxy.StaleUDPFlows(cfg, p.last, snap)
	if err != nil {
		return err
	}
	clearStaleUDP(n, stale)
	p.last = snap
	return nil
}

// syncDests is syncEndpoint: add missing real servers with weight 1;
// remove the others through the graceful termination manager (a TCP real
// server with connections is set to weight 0 and removed once they are
// gone; UDP ones at once).
func (p *IPVSProxier) syncDests(s *ipvs.Service, want []netip.AddrPort) error {
	for _, d := range s.Dests() {
		a := d.AddrPort()
		if slices.Contains(want, a) {
			if d.Weight != 1 {
				if err := p.IPVS.EditDest(s, a, 1); err != nil {
					return err
				}
			}
			continue
		}
		if s.Proto == datapath.ProtoTCP && d.ActiveConns+d.InactConns > 0 {
			if d.Weight != 0 {
				if err := p.IPVS.EditDest(s, a, 0); err != nil {
					return err
				}
			}
			continue
		}
		if err := p.IPVS.DeleteDest(s, a); err != nil {
			return err
		}
	}
	for _, a := range want {
		if s.Dest(a) == nil {
			if err := p.IPVS.AddDest(s, a, 1); err != nil {
				return err
			}
		}
	}
	return nil
}

func currentEntries(s *ipset.Set) []string { return s.Entries() }
