package netstack_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/sim/dns"
	"github.com/kubewalk/kubewalk/sim/netstack"
	"github.com/stretchr/testify/require"
)

// podResolvConf is the kubelet's resolv.conf for the client pod with
// kubeadm's clusterDNS (search net.svc.cluster.local svc.cluster.local
// cluster.local, nameserver 10.96.0.10, ndots:5).
func podResolvConf(t *testing.T, w *web) dns.ResolvConf {
	t.Helper()
	rc, _ := dns.PodResolvConf(w.Client.Object, dns.KubeletDNS{
		ClusterDNS:    []netip.Addr{netip.MustParseAddr(w.DNSServiceIP())},
		ClusterDomain: "cluster.local",
	})
	require.Equal(t, []string{"net.svc.cluster.local", "svc.cluster.local", "cluster.local"}, rc.Searches)
	return rc
}

// dnsWeb is newWeb with CoreDNS serving in kubeadm's two coredns pods and
// the client pod resolving through its resolv.conf.
func dnsWeb(t *testing.T) (*web, []*netstack.DNSServer) {
	w := newWeb(t, 3)
	servers, err := netstack.StartCoreDNS(w.Cluster)
	require.NoError(t, err)
	require.Len(t, servers, 2)
	t.Cleanup(func() {
		for _, s := range servers {
			s.Close()
		}
	})
	w.client.SetResolvConf(podResolvConf(t, w))
	return w, servers
}

// asked runs f and returns the questions the servers got meanwhile.
func asked(servers []*netstack.DNSServer, f func()) []string {
	before := make([]int, len(servers))
	for i, s := range servers {
		before[i] = len(s.Queries)
	}
	f()
	var q []string
	for i, s := range servers {
		q = append(q, s.Queries[before[i]:]...)
	}
	return q
}

// TestWgetServiceName: wget resolves a Service's name through the pod's
// search list, with real queries over UDP to the kube-dns ClusterIP
// (DNAT to a CoreDNS pod on cka-cp1, across nodes), then fetches the page.
func TestWgetServiceName(t *testing.T) {
	w, servers := dnsWeb(t)
	for _, tc := range []struct {
		url   string
		asked []string // the names CoreDNS is asked, A and AAAA each
	}{
		{"http://web/", []string{"web.net.svc.cluster.local."}},
		{"http://web.net/", []string{"web.net.net.svc.cluster.local.", "web.net.svc.cluster.local."}},
		// 4 dots < ndots:5: the search list first, as glibc does.
		{"http://web.net.svc.cluster.local/", []string{
			"web.net.svc.cluster.local.net.svc.cluster.local.", "web.net.svc.cluster.local.svc.cluster.local.",
			"web.net.svc.cluster.local.cluster.local.", "web.net.svc.cluster.local."}},
		// A trailing dot: the name alone.
		{"http://web.net.svc.cluster.local./", []string{"web.net.svc.cluster.local."}},
	} {
		var out, errOut string
		var code int
		q := asked(servers, func() { out, errOut, code = netstack.Wget(w.World, w.Client.Netns, tc.url) })
		require.Equal(t, 0, code, "%s: %s", tc.url, errOut)
		require.Contains(t, out, "<title>Welcome to nginx!</title>", tc.url)
		var want []string
		for _, n := range tc.asked {
			want = append(want, "A "+n, "AAAA "+n)
		}
		require.ElementsMatch(t, want, q, tc.url)
	}
}

// TestWgetBadAddress: a name no search domain makes resolvable is busybox's
// "bad address", after glibc tried every search domain (NXDOMAIN from the
// kubernetes plugin) and the name alone: "nope." is outside the cluster
// zone, CoreDNS would forward it to the node's resolver, which is not
// modelled (SERVFAIL), and glibc asks a SERVFAILing server again on its
// second attempt.
func TestWgetBadAddress(t *testing.T) {
	w, servers := dnsWeb(t)
	for _, tc := range []struct {
		url, stderr, name string
		zone              []string
	}{
		{"http://nope/", "wget: bad address 'nope'\n", "nope.", []string{"nope.net.svc.cluster.local.", "nope.svc.cluster.local.", "nope.cluster.local."}},
		{"http://nope:8080/x", "wget: bad address 'nope:8080'\n", "nope.", []string{"nope.net.svc.cluster.local.", "nope.svc.cluster.local.", "nope.cluster.local."}},
		{"http://web.default/", "wget: bad address 'web.default'\n", "web.default.", []string{"web.default.net.svc.cluster.local.", "web.default.svc.cluster.local.", "web.default.cluster.local."}},
	} {
		var out, errOut string
		var code int
		q := asked(servers, func() { out, errOut, code = netstack.Wget(w.World, w.Client.Netns, tc.url) })
		require.Equal(t, 1, code, tc.url)
		require.Empty(t, out)
		require.Equal(t, tc.stderr, errOut)
		var want []string
		for _, n := range tc.zone {
			want = append(want, "A "+n, "AAAA "+n)
		}
		want = append(want, "A "+tc.name, "AAAA "+tc.name, "A "+tc.name, "AAAA "+tc.name)
		require.ElementsMatch(t, want, q, tc.url)
	}
}

func TestLookupHost(t *testing.T) {
	w, _ := dnsWeb(t)
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"web", []string{"10.111.80.136"}},
		{"kube-dns.kube-system", []string{"10.96.0.10"}},
		{"kubernetes.default.svc.cluster.local", []string{"10.96.0.1"}},
		{"10-244-1-3.net.pod.cluster.local", []string{"10.244.1.3"}},
		{"10.0.0.1", []string{"10.0.0.1"}},
	} {
		got, err := w.client.LookupHost(tc.name)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
	// A namespace's name exists without addresses (NODATA), a missing
	// Service does not (NXDOMAIN): both are "no such host". A name whose
	// last try is outside the cluster zone ends in SERVFAIL: glibc's
	// TRY_AGAIN, Go's "server misbehaving".
	for _, tc := range []struct {
		name     string
		notFound bool
	}{
		{"net.svc.cluster.local.", true},
		{"nope.net.svc.cluster.local", true},
		{"nope", false},
	} {
		_, err := w.client.LookupHost(tc.name)
		var de *net.DNSError
		require.True(t, errors.As(err, &de), tc.name)
		require.Equal(t, tc.notFound, de.IsNotFound, tc.name)
		require.Equal(t, !tc.notFound, de.IsTemporary, tc.name)
		if tc.notFound {
			require.Equal(t, "lookup "+tc.name+" on 10.96.0.10:53: no such host", err.Error())
		} else {
			require.Equal(t, "lookup "+tc.name+" on 10.96.0.10:53: server misbehaving", err.Error())
		}
	}
}

// TestLookupDeadNameserver: a nameserver that never answers costs glibc's
// timeouts in virtual time, 5 s twice for the first search domain (a
// timeout ends the search list) and twice for the name alone, then busybox
// says "bad address".
func TestLookupDeadNameserver(t *testing.T) {
	w := newWeb(t, 3)
	// A nameserver that takes the queries and never answers.
	pc, err := w.web2.ListenPacket("udp", ":53")
	require.NoError(t, err)
	defer pc.Close()
	rc := podResolvConf(t, w)
	rc.Nameservers = []string{w.Web2.IP.String()}
	w.client.SetResolvConf(rc)
	start := w.World.Now()
	_, errOut, code := netstack.Wget(w.World, w.Client.Netns, "http://nope/")
	require.Equal(t, 1, code)
	require.Equal(t, "wget: bad address 'nope'\n", errOut)
	t.Log(w.World.Now() - start)
	require.Equal(t, 20*time.Second, (w.World.Now() - start).Truncate(time.Second))
}

// TestHTTPGetServiceName: the Go API resolves too: http.Client.Get of a
// Service's name from a pod (the Transport's dial looks it up while the
// caller drives), and net.Dial's error for a name that does not resolve.
func TestHTTPGetServiceName(t *testing.T) {
	w, servers := dnsWeb(t)
	var body string
	q := asked(servers, func() { _, body = getBody(t, w.client.HTTPClient(0), "http://web.net/") })
	require.Contains(t, body, "<title>Welcome to nginx!</title>")
	require.ElementsMatch(t, []string{"A web.net.net.svc.cluster.local.", "AAAA web.net.net.svc.cluster.local.",
		"A web.net.svc.cluster.local.", "AAAA web.net.svc.cluster.local."}, q)

	_, err := w.client.Dial("tcp", "nope.net.svc.cluster.local:80")
	require.EqualError(t, err, "dial tcp: lookup nope.net.svc.cluster.local on 10.96.0.10:53: no such host")
	var de *net.DNSError
	require.True(t, errors.As(err, &de) && de.IsNotFound)
}

// TestCloseStopsDeadlines: closing a socket disarms its deadlines, so a
// Settle after a wget runs the connection's TIME-WAIT (60 s) and not
// wget's 900 s read timeout, and one after a lookup not its 5 s timeout.
func TestCloseStopsDeadlines(t *testing.T) {
	w, _ := dnsWeb(t)
	_, errOut, code := netstack.Wget(w.World, w.Client.Netns, "http://web/")
	require.Equal(t, 0, code, errOut)
	start := w.World.Now()
	require.NoError(t, w.Settle())
	require.Less(t, w.World.Now()-start, netstack.WgetTimeout)
	require.GreaterOrEqual(t, w.World.Now()-start, 60*time.Second, "TIME-WAIT")

	_, err := w.client.LookupHost("web")
	require.NoError(t, err)
	start = w.World.Now()
	require.NoError(t, w.Settle())
	require.Less(t, w.World.Now()-start, 5*time.Second)
}
