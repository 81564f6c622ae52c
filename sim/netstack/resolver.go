package netstack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubewalk/kubewalk/sim/dns"
	mdns "github.com/miekg/dns"
)

// SetResolvConf gives the stack the namespace's /etc/resolv.conf (for a
// pod, what the kubelet writes: dns.PodResolvConf). LookupHost and Wget
// resolve names through it; without one, a name does not resolve.
func (s *Stack) SetResolvConf(rc dns.ResolvConf) {
	s.d.lock()
	s.resolv = &rc
	s.d.unlock()
}

// resolver is glibc's stub resolver as getaddrinfo(AF_UNSPEC) uses it
// (glibc 2.36, what a Debian or glibc busybox image links): the options
// of resolv.conf it reads, and the names it tries.
type resolver struct {
	nameservers []netip.Addr
	searches    []string
	ndots       int
	timeout     time.Duration
	attempts    int
}

func newResolver(rc dns.ResolvConf) resolver {
	r := resolver{searches: rc.Searches, ndots: 1, timeout: 5 * time.Second, attempts: 2}
	for _, ns := range rc.Nameservers {
		if a, err := netip.ParseAddr(ns); err == nil && a.Is4() && len(r.nameservers) < 3 { // MAXNS
			r.nameservers = append(r.nameservers, a)
		}
	}
	for _, o := range rc.Options {
		k, v, _ := strings.Cut(o, ":")
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			continue
		}
		switch k {
		case "ndots":
			r.ndots = min(n, 15) // RES_MAXNDOTS
		case "timeout":
			r.timeout = time.Duration(max(min(n, 30), 1)) * time.Second // RES_MAXRETRANS
		case "attempts":
			r.attempts = max(min(n, 5), 1) // RES_MAXRETRY
		}
	}
	return r
}

// outcome of one name tried (res_querydomain for A and AAAA).
type outcome int

const (
	found    outcome = iota
	notFound         // NXDOMAIN: keep searching
	noData           // NOERROR without addresses: keep searching
	servFail         // SERVFAIL (or REFUSED): keep searching
	timedOut         // no answer from any nameserver: stop searching
	refused          // ECONNREFUSED (ICMP port unreachable): give up at once
)

// LookupHost resolves host (an IPv4 address, or a name looked up through
// the stack's resolv.conf over the simulated network) as glibc's
// getaddrinfo does for busybox and most C programs: a name with fewer
// dots than ndots (5 in a pod) is tried with each search domain first
// (web.net.svc.cluster.local, web.svc.cluster.local, ...), then as it is;
// one with more is tried as it is first. Each try sends an A and an AAAA
// query from a new UDP socket to the first nameserver, waits timeout (5
// s) and sends them again, attempts (2) times, then the next nameserver.
// An NXDOMAIN, NODATA or SERVFAIL answer goes on to the next name; a
// nameserver that never answers ends the search list (the name as it is
// is still tried), one that refuses (ICMP port unreachable) ends the
// lookup. Only A records are used (the model is IPv4). The error is Go's
// *net.DNSError ("lookup nope on 10.96.0.10:53: no such host", IsNotFound;
// SERVFAIL, a timeout or a refusal: "server misbehaving", IsTemporary).
// The queries are glibc's, not those of Go's own resolver (which sends
// the A and AAAA queries from two sockets). Time is the world's: a
// lookup against a dead nameserver takes its 20 s of virtual time.
func (s *Stack) LookupHost(host string) ([]string, error) {
	addrs, err := s.lookup(host, true)
	var out []string
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out, err
}

func (s *Stack) lookup(host string, fg bool) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	s.d.lock()
	rc := s.resolv
	s.d.unlock()
	notFoundErr := &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	if rc == nil || host == "" {
		return nil, notFoundErr
	}
	r := newResolver(*rc)
	if len(r.nameservers) == 0 {
		// glibc queries the local host when no nameserver is given.
		r.nameservers = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	}
	name := strings.TrimSuffix(host, ".")
	trailing := name != host
	dots := strings.Count(name, ".")
	// glibc's __res_context_search: the name as it is first when it has
	// ndots dots, then the search list (a timeout ends it, a refusal ends
	// the lookup), then the name as it is if not tried yet. The error is
	// that of the first try as it is, else NODATA if a search domain had
	// it, else TRY_AGAIN if one had SERVFAIL, else the last.
	var last, saved outcome
	haveSaved, gotNoData, gotServFail := false, false, false
	if dots >= r.ndots || trailing {
		addrs, o := s.queryName(r, name+".", fg)
		if o == found {
			return addrs, nil
		}
		last, saved, haveSaved = o, o, true
	}
	if !trailing && last != refused {
		for _, dom := range r.searches {
			addrs, o := s.queryName(r, name+"."+strings.TrimSuffix(dom, ".")+".", fg)
			if o == found {
				return addrs, nil
			}
			last = o
			if o == noData {
				gotNoData = true
			}
			if o == servFail {
				gotServFail = true
			}
			if o == timedOut || o == refused {
				break
			}
		}
	}
	if !haveSaved && last != refused {
		addrs, o := s.queryName(r, name+".", fg)
		if o == found {
			return addrs, nil
		}
		last = o
	}
	switch {
	case haveSaved:
		last = saved
	case gotNoData:
		last = noData
	case gotServFail:
		last = servFail
	}
	// The error names the nameserver, as Go's resolver does ("lookup nope
	// on 10.96.0.10:53: no such host").
	server := netip.AddrPortFrom(r.nameservers[len(r.nameservers)-1], 53).String()
	switch last {
	case notFound, noData:
		return nil, &net.DNSError{Err: "no such host", Name: host, Server: server, IsNotFound: true}
	}
	return nil, &net.DNSError{Err: "server misbehaving", Name: host, Server: server, IsTemporary: true, IsTimeout: last == timedOut}
}

// queryName asks the nameservers for fqdn's A and AAAA records as glibc's
// send_dg does: both queries at once from one connected UDP socket, the
// same two again after each timeout.
func (s *Stack) queryName(r resolver, fqdn string, fg bool) ([]netip.Addr, outcome) {
	last := timedOut
	for attempt := 0; attempt < r.attempts; attempt++ {
		for i, ns := range r.nameservers {
			// glibc: (retrans << ns) / nscount for the servers after the first.
			wait := r.timeout << i
			if i > 0 {
				wait /= time.Duration(len(r.nameservers))
			}
			addrs, o := s.exchange(ns, fqdn, max(wait, time.Second), fg)
			if o != timedOut && o != servFail && o != refused {
				return addrs, o
			}
			last = o
		}
	}
	return nil, last
}

// exchange sends the A and AAAA queries for fqdn to ns and waits up to
// wait for both answers.
func (s *Stack) exchange(ns netip.Addr, fqdn string, wait time.Duration, fg bool) ([]netip.Addr, outcome) {
	c, err := s.dial(context.Background(), "udp", netip.AddrPortFrom(ns, 53).String(), fg)
	if err != nil {
		return nil, refused
	}
	uc := c.(*UDPConn)
	defer uc.Close()
	var ids [2]uint16
	var qs [2][]byte
	for i, t := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		m := new(mdns.Msg)
		m.SetQuestion(fqdn, t)
		s.d.lock()
		m.Id = uint16(s.rng.Uint32())
		s.d.unlock()
		ids[i] = m.Id
		b, err := m.Pack()
		if err != nil {
			return nil, notFound
		}
		qs[i] = b
	}
	for _, q := range qs {
		if _, err := uc.Write(q); err != nil {
			return nil, refused
		}
	}
	s.d.lock()
	uc.rd.setAfter(s.d, wait)
	s.d.unlock()
	var answers [2]*mdns.Msg
	// Without EDNS0 an answer over UDP is at most 512 bytes (a longer one
	// comes truncated; glibc would ask again over TCP, not modelled).
	buf := make([]byte, 512)
	for answers[0] == nil || answers[1] == nil {
		n, err := uc.Read(buf)
		if err != nil {
			var en syscall.Errno
			if errors.As(err, &en) && en == syscall.ECONNREFUSED {
				return nil, refused
			}
			return nil, timedOut
		}
		var m mdns.Msg
		if m.Unpack(buf[:n]) != nil || !m.Response {
			continue
		}
		for i := range ids {
			if m.Id == ids[i] && answers[i] == nil && len(m.Question) == 1 && strings.EqualFold(m.Question[0].Name, fqdn) {
				answers[i] = &m
			}
		}
	}
	a := answers[0]
	switch a.Rcode {
	case mdns.RcodeSuccess:
	case mdns.RcodeNameError:
		return nil, notFound
	default:
		return nil, servFail
	}
	var addrs []netip.Addr
	for _, rr := range a.Answer {
		if ar, ok := rr.(*mdns.A); ok {
			if ip, ok := netip.AddrFromSlice(ar.A.To4()); ok {
				addrs = append(addrs, ip)
			}
		}
	}
	if len(addrs) == 0 {
		return nil, noData
	}
	return addrs, found
}
