package bench

import (
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/dns"
	"github.com/kubewalk/kubewalk/sim/netstack"
)

// netstackWorld is the reference cluster with nginx-like servers in both
// web pods and a gVisor stack in the client pod. With crossNode, net/web-1
// (on the client's node) is deleted first, so net/web's one endpoint,
// net/web-2, is on cka-w2 and every GET crosses nodes: DNAT on cka-w1,
// VXLAN both ways, un-DNAT.
func netstackWorld(b *testing.B, crossNode bool) (*scenarios.Reference, *netstack.Stack) {
	b.Helper()
	r, err := scenarios.NewReference(1)
	if err != nil {
		b.Fatal(err)
	}
	client, err := netstack.AttachPod(r.World, r.Client)
	if err != nil {
		b.Fatal(err)
	}
	pods := []*sim.Pod{r.Web1, r.Web2}
	if crossNode {
		if err := r.DeletePod("net", "web-1"); err != nil {
			b.Fatal(err)
		}
		pods = pods[1:]
	}
	for _, pod := range pods {
		s, err := netstack.AttachPod(r.World, pod)
		if err != nil {
			b.Fatal(err)
		}
		srv, err := s.ServeHTTP(":80", netstack.NginxHandler(s))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Close() })
	}
	return r, client
}

// loop runs f b.N times and reports CPU time per call (unit, e.g.
// cpu-ns/GET) beside ns/op: on a shared machine wall-clock time waits for
// other people's processes.
func loop(b *testing.B, unit string, f func()) {
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for range b.N {
		f()
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), unit)
}

func get(b *testing.B, c *http.Client, url string) {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatal(resp.Status)
	}
}

// BenchmarkNetstackGETPersistent is one GET from net/client on cka-w1 to
// the net/web ClusterIP, whose endpoint is on cka-w2, over a kept-alive
// connection: request and response (each carrying the ACK of the other,
// as between Linux nodes) through the whole walk, DNAT, VXLAN both ways,
// un-DNAT.
func BenchmarkNetstackGETPersistent(b *testing.B) {
	_, client := netstackWorld(b, true)
	c := client.HTTPClient(0)
	get(b, c, "http://10.111.80.136/")
	loop(b, "cpu-ns/GET", func() { get(b, c, "http://10.111.80.136/") })
}

// BenchmarkNetstackGETFresh is one GET across nodes, as
// BenchmarkNetstackGETPersistent, on a new connection each time:
// handshake, request, response, close (FIN both ways).
func BenchmarkNetstackGETFresh(b *testing.B) {
	_, client := netstackWorld(b, true)
	t := client.Transport()
	t.DisableKeepAlives()
	c := &http.Client{Transport: t}
	get(b, c, "http://10.111.80.136/")
	loop(b, "cpu-ns/GET", func() { get(b, c, "http://10.111.80.136/") })
}

// BenchmarkNetstackLookup is one name lookup from the client pod as glibc
// does it through the pod's resolv.conf: "web" is found with the first
// search domain, an A and an AAAA query over UDP to the kube-dns ClusterIP
// (DNAT to a CoreDNS pod on cka-cp1, across nodes) and their answers.
func BenchmarkNetstackLookup(b *testing.B) {
	r, client := netstackWorld(b, false)
	servers, err := netstack.StartCoreDNS(r.Cluster)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range servers {
		b.Cleanup(func() { s.Close() })
	}
	rc, _ := dns.PodResolvConf(r.Client.Object, dns.KubeletDNS{
		ClusterDNS: []netip.Addr{netip.MustParseAddr(r.DNSServiceIP())}, ClusterDomain: "cluster.local"})
	client.SetResolvConf(rc)
	lookup := func() {
		addrs, err := client.LookupHost("web")
		if err != nil || len(addrs) != 1 {
			b.Fatal(addrs, err)
		}
	}
	lookup()
	loop(b, "cpu-ns/lookup", lookup)
}
