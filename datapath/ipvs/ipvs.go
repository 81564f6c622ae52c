// Package ipvs models the Linux IP Virtual Server (net/netfilter/ipvs,
// kernel 6.x, IPv4, NAT forwarding only — the "Masq" method kube-proxy
// uses) on a datapath.Netns: virtual services (protocol, address, port)
// with a scheduler and optional persistence, real servers (destinations)
// with weights and connection counters, the connection table with the
// kernel's per-state timeouts, and the netfilter hooks where IPVS
// intercepts packets:
//
//	LOCAL_IN  priority  98 (NF_IP_PRI_NAT_SRC-2) ip_vs_reply4        replies: source back to the virtual address
//	LOCAL_IN  priority  99 (NF_IP_PRI_NAT_SRC-1) ip_vs_remote_request4 requests: schedule, DNAT, transmit
//	LOCAL_OUT priority -99 (NF_IP_PRI_NAT_DST+1) ip_vs_local_reply4
//	LOCAL_OUT priority -98 (NF_IP_PRI_NAT_DST+2) ip_vs_local_request4
//	FORWARD   priority 100                       ip_vs_reply4
//
// IPVS sees a request only once routing has decided it is local: the
// virtual address must be an address of the namespace, which is why
// kube-proxy binds every ClusterIP to the kube-ipvs0 dummy device. A
// scheduled request is translated (destination rewritten, TTL decremented)
// and sent on through LOCAL_OUT and POSTROUTING as ip_vs_nat_xmit does,
// marked so IPVS ignores it there (skb->ipvs_property). With
// net.ipv4.vs.conntrack=1 (kube-proxy sets it) the connection's conntrack
// reply tuple is altered to the real server (ip_vs_update_conntrack), so
// iptables' MASQUERADE in POSTROUTING and conntrack see the reply; the reply
// itself is translated back by IPVS in FORWARD or LOCAL_IN.
//
// # Listing
//
// [IPVS.List] prints `ipvsadm -Ln` and [IPVS.ListConns] `ipvsadm -Lnc` in
// ipvsadm 1.31's layout: services sorted by protocol, address and port,
// destinations by address and port (ipvsadm sorts both unless --nosort);
// connections in creation order (the kernel's /proc/net/ip_vs_conn is in
// hash order).
//
// # What could not be checked against a kernel
//
// The kernel kubewalk is developed on has no IP_VS (nor dummy) module, so
// nothing here was compared with a real kernel: the hook priorities, the TCP
// state table (tcp_states in ip_vs_proto_tcp.c), the timeouts, the TTL
// decrement on transmit (decrement_ttl, since 5.8), the ICMP port unreachable
// for a service without destinations (ip_vs_leave) and the schedulers'
// arithmetic follow the kernel source, and the listings follow ipvsadm's
// source. Not modelled: DR and tunnel forwarding, firewall-mark services,
// one-packet scheduling, connection synchronisation, ICMP errors about IPVS
// connections (ip_vs_in_icmp), the lblc/lblcr locality tables (they schedule
// as wlc here), mh, fo, ovf and twos (refused as "Scheduler not found"),
// thresholds and the overload flag, and SCTP.
package ipvs

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
)

// Service flags (IP_VS_SVC_F_*).
const (
	FlagPersistent uint32 = 0x0001
	FlagHashed     uint32 = 0x0002
	FlagOnePacket  uint32 = 0x0004
	FlagSchedSH1   uint32 = 0x0008 // sh-fallback / mh-fallback
	FlagSchedSH2   uint32 = 0x0010 // sh-port / mh-port
)

// Error is a failure of an IPVS configuration request, worded as ipvsadm
// prints the kernel's answer.
type Error struct{ Msg string }

// Error implements the error interface.
func (e *Error) Error() string { return e.Msg }

// ServiceSpec describes a virtual service (`ipvsadm -A -t|-u ADDR:PORT -s
// SCHED [-p TIMEOUT]`).
type ServiceSpec struct {
	Proto uint8 // datapath.ProtoTCP or ProtoUDP
	Addr  netip.Addr
	Port  uint16
	// Scheduler is the scheduling method; "" is wlc, ipvsadm's default.
	Scheduler string
	// Persistent with Timeout (seconds) makes the service persistent
	// (`-p`): a client keeps its real server while a template connection
	// lives.
	Persistent bool
	Timeout    uint32
	// Flags are extra IP_VS_SVC_F_* flags (kube-proxy sets FlagSchedSH1,
	// "source hash", for mh).
	Flags uint32
}

// Service is a virtual service.
type Service struct {
	Proto     uint8
	Addr      [4]byte
	Port      uint16
	Scheduler string
	Flags     uint32
	Timeout   uint32
	Netmask   uint32
	// UnknownOrder says the order of the destinations is not defined by
	// the program that added them (kube-proxy adds them in Go map order,
	// so the kernel's list — newest first — is in random order). The
	// first scheduling then draws a rotation of the list as a branch point
	// of the walk (each destination first with equal probability), so
	// explore mode enumerates what a real first connection can do.
	UnknownOrder bool

	dests   []*Dest
	sched   scheduler
	ordered bool
	// Stats: connections scheduled and packets in each direction.
	Conns, InPkts, OutPkts uint64
}

// Dest is a real server of a service.
type Dest struct {
	Addr   [4]byte
	Port   uint16
	Weight int
	// ActiveConns are connections in ESTABLISHED; InactConns the others;
	// PersistConns the templates pointing here.
	ActiveConns, InactConns, PersistConns int
	svc                                   *Service
	removed                               bool
}

// AddrPort returns the destination as "ip:port" form.
func (d *Dest) AddrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(d.Addr), d.Port)
}

// Service returns the service the destination belongs to.
func (d *Dest) Service() *Service { return d.svc }

func (s *Service) String() string {
	return protoName(s.Proto) + "  " + netip.AddrPortFrom(netip.AddrFrom4(s.Addr), s.Port).String()
}

// Dests returns the destinations in the kernel's list order.
func (s *Service) Dests() []*Dest { return slices.Clone(s.dests) }

type svcKey struct {
	proto uint8
	addr  [4]byte
	port  uint16
}

// IPVS is the IPVS state of one network namespace.
type IPVS struct {
	ns       *datapath.Netns
	ct       *conntrack.Table
	svcs     map[svcKey]*Service
	in       map[connKey]*Conn
	out      map[connKey]*Conn
	tmpl     map[connKey]*Conn
	conns    []*Conn // creation order, for listings; compacted lazily
	slab     []Conn  // where newConn carves entries from
	slabN    int     // the size of the last slab
	timeouts Timeouts
	nextID   uint64
	// Conntrack is net.ipv4.vs.conntrack (default 0): keep conntrack
	// entries for IPVS connections and alter their reply tuple, so
	// iptables NAT can act on them. kube-proxy sets it to 1; with 0 the
	// kernel marks the packets untracked, which kubewalk does not model
	// beyond leaving the reply tuple alone.
	Conntrack bool
	// ExpireNoDestConn is net.ipv4.vs.expire_nodest_conn (default 0): drop
	// a packet whose real server was removed and expire its connection.
	// kube-proxy sets it to 1.
	ExpireNoDestConn bool
	// Lookups counts connection-table and service-table lookups, for
	// benchmarks (lookups per packet).
	Lookups uint64

	inStage, outStage hookStage
}

// Stage names under which Install registers IPVS's hooks.
const (
	StageIn  = "ipvs"
	StageOut = "ipvs-reply"
)

// Install creates the IPVS state of ns and registers its hooks (see the
// package documentation). ct is the namespace's conntrack table.
func Install(ns *datapath.Netns, ct *conntrack.Table) *IPVS {
	v := &IPVS{ns: ns, ct: ct, svcs: map[svcKey]*Service{}, in: map[connKey]*Conn{}, out: map[connKey]*Conn{},
		tmpl: map[connKey]*Conn{}, timeouts: DefaultTimeouts()}
	v.inStage = hookStage{v: v, request: true}
	v.outStage = hookStage{v: v}
	ns.AddHookStage(datapath.Input, StageOut, datapath.PriorityNATSrc-2, &v.outStage)
	ns.AddHookStage(datapath.Input, StageIn, datapath.PriorityNATSrc-1, &v.inStage)
	ns.AddHookStage(datapath.Output, StageOut, datapath.PriorityNATDst+1, &v.outStage)
	ns.AddHookStage(datapath.Output, StageIn, datapath.PriorityNATDst+2, &v.inStage)
	ns.AddHookStage(datapath.Forward, StageOut, 100, &v.outStage)
	return v
}

// Netns returns the namespace.
func (v *IPVS) Netns() *datapath.Netns { return v.ns }

func key(proto uint8, a netip.Addr, port uint16) (svcKey, error) {
	if proto != datapath.ProtoTCP && proto != datapath.ProtoUDP {
		return svcKey{}, &Error{Msg: "Invalid protocol (only TCP and UDP are modelled)"}
	}
	if !a.Is4() {
		return svcKey{}, &Error{Msg: "Invalid address (only IPv4 is modelled)"}
	}
	return svcKey{proto, a.As4(), port}, nil
}

// AddService is `ipvsadm -A`. The kernel refuses a duplicate ("Service
// already exists") and an unknown scheduler ("Scheduler not found").
func (v *IPVS) AddService(spec ServiceSpec) (*Service, error) {
	k, err := key(spec.Proto, spec.Addr, spec.Port)
	if err != nil {
		return nil, err
	}
	if v.svcs[k] != nil {
		return nil, &Error{Msg: "Service already exists"}
	}
	name := cmp.Or(spec.Scheduler, "wlc")
	sc, err := newScheduler(name)
	if err != nil {
		return nil, err
	}
	s := &Service{Proto: k.proto, Addr: k.addr, Port: k.port, Scheduler: name, sched: sc, Netmask: 0xffffffff,
		Flags: FlagHashed | spec.Flags}
	if spec.Persistent {
		s.Flags |= FlagPersistent
		s.Timeout = spec.Timeout
		if s.Timeout == 0 {
			s.Timeout = 300 // ipvsadm's default persistence timeout
		}
	}
	v.svcs[k] = s
	return s, nil
}

// EditService is `ipvsadm -E`: a new scheduler, persistence or flags.
func (v *IPVS) EditService(spec ServiceSpec) error {
	s := v.Service(spec.Proto, spec.Addr, spec.Port)
	if s == nil {
		return &Error{Msg: "No such service"}
	}
	name := cmp.Or(spec.Scheduler, "wlc")
	if name != s.Scheduler {
		sc, err := newScheduler(name)
		if err != nil {
			return err
		}
		s.Scheduler, s.sched = name, sc
	}
	s.Flags = FlagHashed | spec.Flags
	s.Timeout = 0
	if spec.Persistent {
		s.Flags |= FlagPersistent
		s.Timeout = cmp.Or(spec.Timeout, 300)
	}
	s.sched.reset(s)
	return nil
}

// Service returns the virtual service, or nil.
func (v *IPVS) Service(proto uint8, a netip.Addr, port uint16) *Service {
	k, err := key(proto, a, port)
	if err != nil {
		return nil
	}
	return v.svcs[k]
}

// Services returns the services sorted as ipvsadm lists them.
func (v *IPVS) Services() []*Service {
	out := make([]*Service, 0, len(v.svcs))
	for _, s := range v.svcs {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Service) int {
		return cmp.Or(cmp.Compare(a.Proto, b.Proto), cmp.Compare(be(a.Addr), be(b.Addr)), cmp.Compare(a.Port, b.Port))
	})
	return out
}

// DeleteService is `ipvsadm -D`: its destinations go with it; connections
// to them stay until they expire (and then find no destination).
func (v *IPVS) DeleteService(proto uint8, a netip.Addr, port uint16) error {
	k, err := key(proto, a, port)
	if err != nil {
		return err
	}
	s := v.svcs[k]
	if s == nil {
		return &Error{Msg: "No such service"}
	}
	for _, d := range s.dests {
		d.removed = true
	}
	delete(v.svcs, k)
	return nil
}

// Flush is `ipvsadm -C`.
func (v *IPVS) Flush() {
	for _, s := range v.Services() {
		_ = v.DeleteService(s.Proto, netip.AddrFrom4(s.Addr), s.Port)
	}
}

// AddDest is `ipvsadm -a ... -r ADDR:PORT -m -w WEIGHT`. The kernel puts a
// new destination at the head of the service's list.
func (v *IPVS) AddDest(s *Service, a netip.AddrPort, weight int) error {
	if !a.Addr().Is4() {
		return &Error{Msg: "Invalid address (only IPv4 is modelled)"}
	}
	if weight < 0 {
		return &Error{Msg: "Zero port specified for non-persistent service"}
	}
	for _, d := range s.dests {
		if d.Addr == a.Addr().As4() && d.Port == a.Port() {
			return &Error{Msg: "Destination already exists"}
		}
	}
	d := &Dest{Addr: a.Addr().As4(), Port: a.Port(), Weight: weight, svc: s}
	s.dests = append([]*Dest{d}, s.dests...)
	s.sched.reset(s)
	return nil
}

// EditDest is `ipvsadm -e`: change a destination's weight (kube-proxy sets
// 0 to drain a terminating endpoint).
func (v *IPVS) EditDest(s *Service, a netip.AddrPort, weight int) error {
	d := s.dest(a)
	if d == nil {
		return &Error{Msg: "No such destination"}
	}
	d.Weight = weight
	s.sched.reset(s)
	return nil
}

// DeleteDest is `ipvsadm -d`. Connections to it keep the destination
// (the kernel moves it to a trash list) until they expire; with
// ExpireNoDestConn their next packet is dropped and they are expired.
func (v *IPVS) DeleteDest(s *Service, a netip.AddrPort) error {
	d := s.dest(a)
	if d == nil {
		return &Error{Msg: "No such destination"}
	}
	d.removed = true
	s.dests = slices.DeleteFunc(s.dests, func(x *Dest) bool { return x == d })
	s.sched.reset(s)
	return nil
}

func (s *Service) dest(a netip.AddrPort) *Dest {
	for _, d := range s.dests {
		if d.Addr == a.Addr().As4() && d.Port == a.Port() {
			return d
		}
	}
	return nil
}

// Dest returns the destination a of s, or nil.
func (s *Service) Dest(a netip.AddrPort) *Dest { return s.dest(a) }

func be(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

func protoName(p uint8) string {
	if p == datapath.ProtoUDP {
		return "UDP"
	}
	return "TCP"
}

func ap(a [4]byte, port uint16) string {
	return netip.AddrPortFrom(netip.AddrFrom4(a), port).String()
}

// List is `ipvsadm -Ln`.
func (v *IPVS) List() string {
	var b strings.Builder
	b.WriteString("IP Virtual Server version 1.2.1 (size=4096)\n")
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	for _, s := range v.Services() {
		name := s.String()
		if len(name) > 33 {
			name = name[:33]
		}
		b.WriteString(name + " " + s.Scheduler)
		if s.Flags&FlagPersistent != 0 {
			b.WriteString(" persistent " + strconv.FormatUint(uint64(s.Timeout), 10))
		}
		b.WriteByte('\n')
		ds := slices.Clone(s.dests)
		slices.SortFunc(ds, func(x, y *Dest) int {
			return cmp.Or(cmp.Compare(be(x.Addr), be(y.Addr)), cmp.Compare(x.Port, y.Port))
		})
		for _, d := range ds {
			fmt.Fprintf(&b, "  -> %-28s %-7s %-6d %-10d %-10d\n", ap(d.Addr, d.Port), "Masq", d.Weight, d.ActiveConns, d.InactConns)
		}
	}
	return b.String()
}

// Timeouts are the per-state connection timeouts (ip_vs_proto_tcp.c
// tcp_timeouts, ip_vs_proto_udp.c udp_timeouts); `ipvsadm --set tcp
// tcpfin udp` changes ESTABLISHED, FIN_WAIT and UDP.
type Timeouts struct {
	TCP   [numTCPStates]time.Duration
	UDP   time.Duration
	Templ time.Duration // unused: templates take the service's timeout
}

// DefaultTimeouts are the kernel's.
func DefaultTimeouts() Timeouts {
	var t Timeouts
	t.TCP = [numTCPStates]time.Duration{
		tcpNone: 2 * time.Second, tcpEstablished: 15 * time.Minute, tcpSynSent: 2 * time.Minute,
		tcpSynRecv: time.Minute, tcpFinWait: 2 * time.Minute, tcpTimeWait: 2 * time.Minute,
		tcpClose: 10 * time.Second, tcpCloseWait: time.Minute, tcpLastAck: 30 * time.Second,
		tcpListen: 2 * time.Minute, tcpSynAck: 2 * time.Minute,
	}
	t.UDP = 5 * time.Minute
	return t
}

// SetTimeouts is `ipvsadm --set TCP TCPFIN UDP` (kube-proxy's
// ipvs.tcpTimeout, tcpFinTimeout, udpTimeout); zero keeps a value.
func (v *IPVS) SetTimeouts(tcp, tcpFin, udp time.Duration) {
	if tcp > 0 {
		v.timeouts.TCP[tcpEstablished] = tcp
	}
	if tcpFin > 0 {
		v.timeouts.TCP[tcpFinWait] = tcpFin
	}
	if udp > 0 {
		v.timeouts.UDP = udp
	}
}

// Timeouts returns the current timeouts.
func (v *IPVS) Timeouts() Timeouts { return v.timeouts }

// Virtual returns the virtual address and port of the connection a packet
// IPVS translated belongs to: a request after DNAT (client to real server)
// is looked up the way xt_ipvs does (conn_out_get on the inverted header).
// It is what `-m ipvs --vaddr/--vport` matches against (see
// netfilter.UseIPVS).
func (v *IPVS) Virtual(proto uint8, src, dst [4]byte, sport, dport uint16) ([4]byte, uint16, bool) {
	c := v.lookup(v.out, connKey{proto, dst, src, dport, sport})
	if c == nil {
		return [4]byte{}, 0, false
	}
	return c.VAddr, c.VPort, true
}

// FlushConns drops every connection entry and template, as if they had all
// expired (there is no ipvsadm command for it; benchmarks use it to make
// every packet a first packet again).
func (v *IPVS) FlushConns() {
	for _, c := range v.Conns() {
		v.expire(c)
	}
	v.conns = v.conns[:0]
}
