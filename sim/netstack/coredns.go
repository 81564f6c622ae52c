package netstack

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/miekg/dns"
)

// CoreDNSTTL is the TTL of the records the kubernetes plugin answers with
// (kubeadm's Corefile: `ttl 30`), and the SOA's minimum.
const CoreDNSTTL = 30

// DNSServer is a CoreDNS answering in a pod as kubeadm's Corefile
// configures it (CoreDNS v1.12):
//
//	.:53 {
//	    kubernetes cluster.local in-addr.arpa ip6.arpa {
//	       pods insecure
//	       fallthrough in-addr.arpa ip6.arpa
//	       ttl 30
//	    }
//	    forward . /etc/resolv.conf
//	    ...
//	}
//
// The kubernetes plugin answers from the cluster's Services: A records of
// a Service's ClusterIP (<service>.<namespace>.svc.cluster.local), of a
// headless Service's ready endpoints, and of a pod address written with
// dashes (1-2-3-4.<namespace>.pod.cluster.local, `pods insecure`); PTR
// records of ClusterIPs; NOERROR without answers (and the zone's SOA) for
// a name that exists without records of the type asked (AAAA in an IPv4
// cluster, a namespace's <namespace>.svc.cluster.local); NXDOMAIN with the
// SOA for the rest of the zone. Answers are authoritative, without
// recursion available, as CoreDNS's are. What the plugin does not answer
// goes to `forward . /etc/resolv.conf`, the node's upstream resolver,
// which is not modelled: such a query gets SERVFAIL, as CoreDNS returns
// when its upstream does not answer (at once here, not after the forward
// plugin's timeouts). Not modelled either: the cache (a Service change is
// seen by the next query), loadbalance's shuffling of headless answers,
// TCP (a truncated answer, over 512 bytes without EDNS0, is all a client
// gets), EDNS0 options beyond the buffer size.
type DNSServer struct {
	s    *Stack
	c    *sim.Cluster
	pc   net.PacketConn
	zone string

	// Queries is every question the server was asked, in order, as
	// "TYPE name" ("A web.net.svc.cluster.local."). Read it while nobody
	// drives the world.
	Queries []string
}

// ServeCoreDNS runs CoreDNS in pod p (one of the coredns Deployment's, or
// any pod) on UDP port 53, on its own goroutine, answering for the
// cluster.local zone from c's Services. Close stops it.
func ServeCoreDNS(c *sim.Cluster, p *sim.Pod) (*DNSServer, error) {
	s, err := AttachPod(c.World, p)
	if err != nil {
		return nil, err
	}
	pc, err := s.ListenPacket("udp", ":53")
	if err != nil {
		return nil, err
	}
	srv := &DNSServer{s: s, c: c, pc: pc, zone: "cluster.local."}
	go srv.serve()
	return srv, nil
}

// StartCoreDNS runs ServeCoreDNS in every running pod of the kube-dns
// Service's selector (k8s-app=kube-dns, kubeadm's CoreDNS pods) that has
// no stack yet, and returns the servers it started.
func StartCoreDNS(c *sim.Cluster) ([]*DNSServer, error) {
	var out []*DNSServer
	for _, p := range c.Pods() {
		if p.Object == nil || p.Object.Labels["k8s-app"] != "kube-dns" || p.Netns == nil || p.Netns.SocketOwner() != nil {
			continue
		}
		srv, err := ServeCoreDNS(c, p)
		if err != nil {
			return out, err
		}
		out = append(out, srv)
	}
	return out, nil
}

// Close stops the server (its socket is closed).
func (srv *DNSServer) Close() error { return srv.pc.Close() }

func (srv *DNSServer) serve() {
	buf := make([]byte, 65535)
	for {
		n, from, err := srv.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var q dns.Msg
		if q.Unpack(buf[:n]) != nil || q.Response {
			continue // CoreDNS drops what it cannot parse
		}
		// The cluster's state is read under the world lock: the event
		// loop changes it.
		srv.s.d.lock()
		r := srv.answer(&q)
		srv.s.d.unlock()
		// As CoreDNS scrubs a UDP answer to the client's buffer size:
		// 512 bytes without EDNS0, truncated (TC) beyond.
		size := 512
		if o := q.IsEdns0(); o != nil {
			size = max(int(o.UDPSize()), 512)
		}
		r.Truncate(size)
		out, err := r.Pack()
		if err != nil {
			continue
		}
		if _, err := srv.pc.WriteTo(out, from); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// answer builds the reply to q. Called with the world lock held.
func (srv *DNSServer) answer(q *dns.Msg) *dns.Msg {
	r := new(dns.Msg)
	r.SetReply(q)
	r.RecursionAvailable = false
	if q.Opcode != dns.OpcodeQuery || len(q.Question) != 1 {
		r.SetRcode(q, dns.RcodeNotImplemented)
		return r
	}
	qq := q.Question[0]
	srv.Queries = append(srv.Queries, dns.TypeToString[qq.Qtype]+" "+qq.Name)
	name := strings.ToLower(qq.Name)
	switch {
	case name == srv.zone || strings.HasSuffix(name, "."+srv.zone):
		r.Authoritative = true
		srv.zoneAnswer(r, qq, strings.TrimSuffix(strings.TrimSuffix(name, srv.zone), "."))
	case strings.HasSuffix(name, ".in-addr.arpa."):
		if ptr := srv.reverse(strings.TrimSuffix(name, ".in-addr.arpa.")); ptr != "" && qq.Qtype == dns.TypePTR {
			r.Authoritative = true
			r.Answer = append(r.Answer, &dns.PTR{Hdr: srv.hdr(qq.Name, dns.TypePTR), Ptr: ptr})
			return r
		}
		// fallthrough in-addr.arpa: to the upstream.
		r.Rcode = dns.RcodeServerFailure
	default:
		// forward . /etc/resolv.conf: the upstream is not modelled.
		r.Rcode = dns.RcodeServerFailure
	}
	return r
}

// zoneAnswer fills r for a name in the cluster zone; rel is the name
// without the zone ("web.net.svc", "" for the apex).
func (srv *DNSServer) zoneAnswer(r *dns.Msg, qq dns.Question, rel string) {
	labels := []string{}
	if rel != "" {
		labels = strings.Split(rel, ".")
	}
	var addrs []netip.Addr
	exists := false
	switch n := len(labels); {
	case n == 0, n == 1 && (labels[0] == "svc" || labels[0] == "pod"):
		exists = true
	case n == 2 && labels[1] == "svc":
		exists = srv.namespaceExists(labels[0])
	case n == 3 && labels[2] == "svc":
		if svc := srv.c.Service(labels[1], labels[0]); svc != nil {
			exists = true
			if !svc.Spec.Headless {
				addrs = append(addrs, svc.ClusterIP())
			} else {
				for _, ep := range svc.EndpointSlice.Endpoints {
					// A nil ready condition is ready (EndpointSlice API).
					if (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && len(ep.Addresses) > 0 {
						addrs = append(addrs, ep.Addresses[0])
					}
				}
			}
		}
	case n == 3 && labels[2] == "pod":
		if a, err := netip.ParseAddr(strings.ReplaceAll(labels[0], "-", ".")); err == nil && a.Is4() && strings.Count(labels[0], "-") == 3 {
			exists = true
			addrs = append(addrs, a)
		}
	}
	if !exists {
		r.Rcode = dns.RcodeNameError
		r.Ns = append(r.Ns, srv.soa())
		return
	}
	if qq.Qtype == dns.TypeA {
		for _, a := range addrs {
			r.Answer = append(r.Answer, &dns.A{Hdr: srv.hdr(qq.Name, dns.TypeA), A: net.IP(a.AsSlice())})
		}
	}
	if len(r.Answer) == 0 {
		r.Ns = append(r.Ns, srv.soa())
	}
}

func (srv *DNSServer) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: CoreDNSTTL}
}

// soa is the zone's SOA as the kubernetes plugin writes it; its serial is
// the virtual time in Unix seconds (CoreDNS uses the time of the last
// change it saw).
func (srv *DNSServer) soa() dns.RR {
	return &dns.SOA{Hdr: srv.hdr(srv.zone, dns.TypeSOA), Ns: "ns.dns." + srv.zone, Mbox: "hostmaster." + srv.zone,
		Serial: uint32(Epoch.Add(srv.c.World.Now()).Unix()), Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: CoreDNSTTL}
}

func (srv *DNSServer) namespaceExists(ns string) bool {
	_, err := srv.c.API.Get("Namespace", "", ns)
	return err == nil
}

// reverse returns the PTR target of a ClusterIP written as in-addr.arpa
// labels ("136.80.111.10"), or "".
func (srv *DNSServer) reverse(rev string) string {
	l := strings.Split(rev, ".")
	if len(l) != 4 {
		return ""
	}
	for _, x := range l {
		if _, err := strconv.ParseUint(x, 10, 8); err != nil {
			return ""
		}
	}
	a, err := netip.ParseAddr(l[3] + "." + l[2] + "." + l[1] + "." + l[0])
	if err != nil {
		return ""
	}
	for _, svc := range srv.c.Services() {
		if svc.ClusterIP() == a {
			return svc.Spec.Name + "." + svc.Spec.Namespace + ".svc." + srv.zone
		}
	}
	return ""
}
