package datapath

import (
	"net/netip"
	"syscall"

	"github.com/kubewalk/kubewalk/datapath/route"
)

// RouteType is the kind of route `ip route get` reports for a destination
// (rtm_type of the answer).
type RouteType uint8

// Route types `ip route get` prints as the first word (unicast prints none).
const (
	RouteUnicast RouteType = iota
	RouteLocal
	RouteBroadcast
	RouteMulticast
)

// RouteGetResult is the answer of `ip route get DST` for a locally
// generated packet with no bound source: where it goes and the source
// address the kernel picks for it.
type RouteGetResult struct {
	Type RouteType
	Dst  netip.Addr
	Gw   netip.Addr // invalid when the destination is on link or local
	Dev  string
	Src  netip.Addr // invalid when no address could be selected
}

// String prints the result as `ip route get` does (iproute2 6.x, without
// the cache flags), e.g.
//
//	10.244.2.5 via 10.244.2.0 dev flannel.1 src 10.244.1.0 uid 0
func (r RouteGetResult) String() string {
	s := ""
	switch r.Type {
	case RouteLocal:
		s = "local "
	case RouteBroadcast:
		s = "broadcast "
	case RouteMulticast:
		s = "multicast "
	}
	s += r.Dst.String()
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	s += " dev " + r.Dev
	if r.Src.IsValid() {
		s += " src " + r.Src.String()
	}
	return s + " uid 0 "
}

// RouteError is a failed output route lookup, with the errno the kernel
// returns: ENETUNREACH (no route), EHOSTUNREACH (an unreachable route),
// EACCES (prohibit), EINVAL (blackhole).
type RouteError struct {
	Dst   netip.Addr
	Errno syscall.Errno
}

// Error prints the error as `ip route get` reports it.
func (e *RouteError) Error() string { return "RTNETLINK answers: " + strerror(e.Errno) }

// Unwrap returns the errno, so errors.Is(err, syscall.ENETUNREACH) works.
func (e *RouteError) Unwrap() error { return e.Errno }

// SocketError is a failed socket call (connect, bind) with its errno,
// printed as the C library's perror does ("connect: Network is
// unreachable"). Nothing was sent.
type SocketError struct {
	Op    string // "connect", "bind"
	Addr  netip.AddrPort
	Errno syscall.Errno
}

// Error implements the error interface.
func (e *SocketError) Error() string {
	return e.Op + " " + e.Addr.String() + ": " + strerror(e.Errno)
}

// Unwrap returns the errno.
func (e *SocketError) Unwrap() error { return e.Errno }

// strerror is glibc's text for the errnos the stack returns (Go's
// syscall.Errno prints them in lower case).
func strerror(e syscall.Errno) string {
	switch e {
	case syscall.ENETUNREACH:
		return "Network is unreachable"
	case syscall.EHOSTUNREACH:
		return "No route to host"
	case syscall.EACCES:
		return "Permission denied"
	case syscall.EINVAL:
		return "Invalid argument"
	case syscall.EADDRNOTAVAIL:
		return "Cannot assign requested address"
	case syscall.EADDRINUSE:
		return "Address already in use"
	}
	return e.Error()
}

// addrScope is an address's scope as the kernel gives it by default:
// host for 127.0.0.0/8 (`ip addr add` sets it), universe otherwise.
func addrScope(a netip.Addr) route.Scope {
	if a.As4()[0] == 127 {
		return route.ScopeHost
	}
	return route.ScopeUniverse
}

// selectAddr is inet_select_addr(dev, dst, scope): among dev's primary
// addresses whose scope is at most scope, the first whose subnet holds dst
// (when dst is not 0.0.0.0), else the first; failing that, the first
// primary address of any device, in ifindex order, whose scope is neither
// link nor wider than scope (so 127.0.0.1 is not taken for a route of
// scope link or universe). It returns false when there is none.
func (ns *Netns) selectAddr(dev *Device, dst [4]byte, scope route.Scope) ([4]byte, bool) {
	var first [4]byte
	haveFirst := false
	d := netip.AddrFrom4(dst)
	for _, a := range ns.addrs {
		if a.Dev != dev || a.Secondary || addrScope(a.Prefix.Addr()) > scope {
			continue
		}
		if dst != ([4]byte{}) && a.Prefix.Masked().Contains(d) {
			return a.Prefix.Addr().As4(), true
		}
		if !haveFirst {
			first, haveFirst = a.Prefix.Addr().As4(), true
		}
	}
	if haveFirst {
		return first, true
	}
	for _, dv := range ns.devs {
		for _, a := range ns.addrs {
			if a.Dev != dv || a.Secondary {
				continue
			}
			if s := addrScope(a.Prefix.Addr()); s != route.ScopeLink && s <= scope {
				return a.Prefix.Addr().As4(), true
			}
		}
	}
	return [4]byte{}, false
}

// SelectAddr is inet_select_addr(dev, dst, scope) for callers outside the
// stack: MASQUERADE uses it with the next hop and RT_SCOPE_UNIVERSE
// (nf_nat_masquerade_ipv4). It returns false when no address qualifies.
func (ns *Netns) SelectAddr(dev *Device, dst [4]byte, scope route.Scope) ([4]byte, bool) {
	return ns.selectAddr(dev, dst, scope)
}

// primaryFor returns the primary address that covers the local address a:
// a itself, or for a secondary address the primary of its subnet (the
// preferred source of its local route).
func (ns *Netns) primaryFor(a [4]byte) [4]byte {
	for _, x := range ns.addrs {
		if x.Prefix.Addr().As4() != a {
			continue
		}
		if !x.Secondary {
			return a
		}
		for _, y := range ns.addrs {
			if y.Dev == x.Dev && !y.Secondary && y.Prefix.Bits() == x.Prefix.Bits() && y.Prefix.Masked() == x.Prefix.Masked() {
				return y.Prefix.Addr().As4()
			}
		}
	}
	return a
}

// RouteGet answers `ip route get DST` for a locally generated packet with
// no bound source, as ip_route_output_key does: 0.0.0.0 is this host
// (local, via lo, source 127.0.0.1); a local address is reached over lo
// from the primary address of its subnet; a subnet broadcast address of a
// local address is a broadcast route from that address. Otherwise the main
// table decides, and the source is the route's preferred source (`src`)
// or else inet_select_addr on the output device: the first primary
// address whose subnet holds the gateway (for a route via a gateway),
// else the device's first primary address, else another device's. So a
// node's packet to a remote pod CIDR behind flannel leaves from
// flannel.1's 10.244.N.0, not from the node's InternalIP.
// 255.255.255.255 and 224.0.0.0/4 destinations routed by a unicast route
// are broadcast and multicast.
func (ns *Netns) RouteGet(dst netip.Addr) (RouteGetResult, error) {
	if !dst.Is4() {
		return RouteGetResult{}, &RouteError{Dst: dst, Errno: syscall.EINVAL}
	}
	d := dst.As4()
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if d == ([4]byte{}) {
		return RouteGetResult{Type: RouteLocal, Dst: dst, Dev: ns.lo.Name, Src: lo}, nil
	}
	if ns.IsLocal(d) {
		return RouteGetResult{Type: RouteLocal, Dst: dst, Dev: ns.lo.Name, Src: netip.AddrFrom4(ns.primaryFor(d))}, nil
	}
	if d[0] == 127 {
		return RouteGetResult{Type: RouteLocal, Dst: dst, Dev: ns.lo.Name, Src: lo}, nil
	}
	if ns.bcast.has(d) {
		for _, a := range ns.addrs {
			if !a.Secondary && a.Prefix.Bits() < 31 && lastAddr(a.Prefix) == d {
				return RouteGetResult{Type: RouteBroadcast, Dst: dst, Dev: a.Dev.Name, Src: a.Prefix.Addr()}, nil
			}
		}
	}
	r, ok := ns.Routes.Lookup(d)
	if !ok {
		return RouteGetResult{}, &RouteError{Dst: dst, Errno: syscall.ENETUNREACH}
	}
	switch r.Type {
	case route.Blackhole:
		return RouteGetResult{}, &RouteError{Dst: dst, Errno: syscall.EINVAL}
	case route.Unreachable:
		return RouteGetResult{}, &RouteError{Dst: dst, Errno: syscall.EHOSTUNREACH}
	case route.Prohibit:
		return RouteGetResult{}, &RouteError{Dst: dst, Errno: syscall.EACCES}
	}
	dev := ns.devByIndex(r.Dev)
	res := RouteGetResult{Dst: dst, Gw: r.Gw, Dev: r.DevName}
	switch {
	case d == [4]byte{255, 255, 255, 255}:
		res.Type, res.Gw = RouteBroadcast, netip.Addr{}
	case d[0]&0xf0 == 224:
		res.Type, res.Gw = RouteMulticast, netip.Addr{}
	}
	if r.Src.IsValid() {
		res.Src = r.Src
	} else if dev != nil {
		var gw [4]byte
		if r.Gw.IsValid() {
			gw = r.Gw.As4()
		}
		if a, ok := ns.selectAddr(dev, gw, r.Scope); ok {
			res.Src = netip.AddrFrom4(a)
		}
	}
	return res, nil
}

func lastAddr(p netip.Prefix) [4]byte {
	a := p.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= ^uint32(0) >> p.Bits()
	return [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}
