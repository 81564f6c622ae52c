package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// routeGetTopo is the namespace of the source-selection table below. The
// same commands build it in a real namespace (routeGetScript).
func routeGetTopo(t testing.TB) *Netns {
	t.Helper()
	e := NewEngine(1)
	ns := e.NewNetns("n", "host")
	peer := e.NewNetns("n", "peer")
	for _, d := range []string{"d0", "v0", "f0"} {
		a, b, err := ns.AddVeth(d, peer, d+"p")
		require.NoError(t, err)
		a.SetUp(true)
		b.SetUp(true)
	}
	for _, a := range []struct{ dev, p string }{{"d0", "10.1.0.2/24"}, {"d0", "10.2.0.2/24"}, {"d0", "10.1.0.3/24"}, {"f0", "10.244.1.0/32"}} {
		require.NoError(t, ns.AddAddr(a.dev, pfx(a.p)))
	}
	for _, r := range []RouteSpec{
		{Dst: pfx("10.244.2.0/24"), Via: addr("10.244.2.0"), Dev: "f0", OnLink: true},
		{Dst: pfx("10.9.0.0/24"), Dev: "v0"},
		{Dst: pfx("10.8.0.0/24"), Dev: "d0"},
		{Dst: pfx("10.7.0.0/24"), Via: addr("10.2.0.1")},
		{Dst: pfx("10.6.0.0/24"), Via: addr("10.1.0.1")},
		{Dst: pfx("10.5.0.0/24"), Via: addr("10.9.9.9"), Dev: "v0", OnLink: true},
		{Dst: pfx("10.4.0.0/24"), Dev: "d0", Src: addr("10.2.0.2")},
		{Dst: pfx("10.3.0.0/24"), Type: 1},
		{Dst: pfx("10.3.1.0/24"), Type: 2},
		{Dst: pfx("10.3.2.0/24"), Type: 3},
	} {
		require.NoError(t, ns.AddRoute(r))
	}
	return ns
}

const routeGetScript = `set -e
ip link set lo up
for d in d0 v0 f0; do ip link add $d type veth peer name ${d}p; ip link set $d up; ip link set ${d}p up; done
ip addr add 10.1.0.2/24 dev d0; ip addr add 10.2.0.2/24 dev d0; ip addr add 10.1.0.3/24 dev d0
ip addr add 10.244.1.0/32 dev f0
ip route add 10.244.2.0/24 via 10.244.2.0 dev f0 onlink
ip route add 10.9.0.0/24 dev v0
ip route add 10.8.0.0/24 dev d0
ip route add 10.7.0.0/24 via 10.2.0.1
ip route add 10.6.0.0/24 via 10.1.0.1
ip route add 10.5.0.0/24 via 10.9.9.9 dev v0 onlink
ip route add 10.4.0.0/24 dev d0 src 10.2.0.2
ip route add blackhole 10.3.0.0/24
ip route add unreachable 10.3.1.0/24
ip route add prohibit 10.3.2.0/24
`

// routeGetCases are the destinations asked about, with what Linux 6.18's
// `ip route get` answered in the namespace routeGetScript builds.
var routeGetCases = []struct{ dst, want string }{
	{"10.244.2.5", "10.244.2.5 via 10.244.2.0 dev f0 src 10.244.1.0 uid 0 "}, // flannel: the VTEP's own address
	{"10.9.0.5", "10.9.0.5 dev v0 src 10.1.0.2 uid 0 "},                      // no address on v0: another device's, not 127.0.0.1
	{"10.8.0.5", "10.8.0.5 dev d0 src 10.1.0.2 uid 0 "},                      // on link: the first primary, whatever dst is
	{"10.7.0.5", "10.7.0.5 via 10.2.0.1 dev d0 src 10.2.0.2 uid 0 "},         // the address in the gateway's subnet
	{"10.6.0.5", "10.6.0.5 via 10.1.0.1 dev d0 src 10.1.0.2 uid 0 "},         // 10.1.0.3 is secondary
	{"10.5.0.5", "10.5.0.5 via 10.9.9.9 dev v0 src 10.1.0.2 uid 0 "},         // onlink gateway on a device without address
	{"10.4.0.5", "10.4.0.5 dev d0 src 10.2.0.2 uid 0 "},                      // the route's src
	{"10.1.0.9", "10.1.0.9 dev d0 src 10.1.0.2 uid 0 "},                      // connected route (proto kernel src)
	{"10.2.0.9", "10.2.0.9 dev d0 src 10.2.0.2 uid 0 "},                      //
	{"10.1.0.3", "local 10.1.0.3 dev lo src 10.1.0.2 uid 0 "},                // a secondary is reached from its primary
	{"127.0.0.5", "local 127.0.0.5 dev lo src 127.0.0.1 uid 0 "},             //
	{"0.0.0.0", "local 0.0.0.0 dev lo src 127.0.0.1 uid 0 "},                 // connect(0.0.0.0) is this host
	{"10.1.0.255", "broadcast 10.1.0.255 dev d0 src 10.1.0.2 uid 0 "},        //
	{"255.255.255.255", "RTNETLINK answers: Network is unreachable"},         // no default route here
	{"224.0.0.1", "RTNETLINK answers: Network is unreachable"},               //
	{"10.3.0.1", "RTNETLINK answers: Invalid argument"},                      // blackhole
	{"10.3.1.1", "RTNETLINK answers: No route to host"},                      // unreachable
	{"10.3.2.1", "RTNETLINK answers: Permission denied"},                     // prohibit
	{"8.8.8.8", "RTNETLINK answers: Network is unreachable"},                 //
}

func routeGetString(ns *Netns, dst string) string {
	r, err := ns.RouteGet(addr(dst))
	if err != nil {
		return err.Error()
	}
	return r.String()
}

func TestRouteGetSelectsSourceAsLinux(t *testing.T) {
	ns := routeGetTopo(t)
	for _, tc := range routeGetCases {
		require.Equal(t, tc.want, routeGetString(ns, tc.dst), "ip route get %s", tc.dst)
	}
}

// TestRouteGetAgainstKernel builds routeGetScript in a namespace of its own
// and compares every answer with the kernel's.
func TestRouteGetAgainstKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	name := fmt.Sprintf("kwdp-routeget-%d", os.Getpid()) // unique: other runs of this test may be going on
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	if out, err := exec.Command("ip", "netns", "exec", name, "sh", "-c", routeGetScript).CombinedOutput(); err != nil {
		t.Skipf("building the topology failed (veth support?): %v: %s", err, out)
	}
	ns := routeGetTopo(t)
	for _, tc := range routeGetCases {
		out, _ := exec.Command("ip", "netns", "exec", name, "ip", "route", "get", tc.dst).CombinedOutput()
		line, _, _ := strings.Cut(string(out), "\n")
		line = strings.Replace(line, " rt_offload_failed", "", 1)
		require.Equal(t, line, routeGetString(ns, tc.dst), "ip route get %s", tc.dst)
	}
}

func TestDialTCPConnectsAsLinux(t *testing.T) {
	tp := newTopo(t)
	a := tp.a
	l, err := a.ListenTCP(81)
	require.NoError(t, err)

	// connect(0.0.0.0) unbound goes from and to 127.0.0.1.
	c, err := a.DialTCP(netip.Addr{}, addr("0.0.0.0"), 40000, 81, 1, nil)
	require.NoError(t, err)
	require.Equal(t, [4]byte{127, 0, 0, 1}, c.Src)
	require.Equal(t, [4]byte{127, 0, 0, 1}, c.Dst)
	// Bound to the pod address, it goes to that address.
	c2, err := a.DialTCP(addr("10.0.0.2"), addr("0.0.0.0"), 40001, 81, 1, nil)
	require.NoError(t, err)
	require.Equal(t, [4]byte{10, 0, 0, 2}, c2.Dst)
	require.NoError(t, tp.e.Run())
	require.True(t, c.Established)
	require.True(t, c2.Established)
	require.Equal(t, 2, l.SYNs)

	// Unbound to a remote address: the route's source.
	c3, err := a.DialTCP(netip.IPv4Unspecified(), addr("10.0.0.3"), 40002, 80, 1, nil)
	require.NoError(t, err)
	require.Equal(t, [4]byte{10, 0, 0, 2}, c3.Src)
	require.NoError(t, tp.e.Run())

	// Broadcast and multicast: ENETUNREACH, and nothing is sent.
	for _, dst := range []string{"255.255.255.255", "10.0.0.255", "224.0.0.1", "239.1.2.3"} {
		for _, src := range []string{"0.0.0.0", "10.0.0.2"} {
			_, err := a.DialTCP(addr(src), addr(dst), 40010, 80, 1, nil)
			require.ErrorIs(t, err, syscall.ENETUNREACH, "connect %s from %s", dst, src)
			var se *SocketError
			require.True(t, errors.As(err, &se))
			require.Equal(t, "connect "+dst+":80: Network is unreachable", err.Error())
			require.Zero(t, tp.e.Pending(), "nothing is sent")
		}
	}
	_, err = a.DialTCP(addr("10.0.0.9"), addr("10.0.0.3"), 40011, 80, 1, nil)
	require.ErrorIs(t, err, syscall.EADDRNOTAVAIL)
}
