package bench

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
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

// The floor under BenchmarkNetstackGETPersistent: the same client and
// server (net/http's Transport with the Transport settings of
// Stack.Transport, http.Server with NginxHandler, the same request and
// response bytes) without the simulation, over the kernel's loopback
// (real sockets; the kernel's CPU time is in the process's) and over
// net.Pipe (no kernel, no copies beyond net/http's own). What is left is
// net/http itself on this machine.

func floorTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         dial,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
		ForceAttemptHTTP2:   false,
	}}
}

func floorServe(b *testing.B, ln net.Listener) {
	srv := &http.Server{Handler: netstack.NginxHandler(nil), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
}

// BenchmarkHTTPLoopbackGETPersistent is a kept-alive GET over kernel
// loopback TCP sockets.
func BenchmarkHTTPLoopbackGETPersistent(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	floorServe(b, ln)
	var d net.Dialer
	c := floorTransport(d.DialContext)
	url := "http://" + ln.Addr().String() + "/"
	get(b, c, url)
	loop(b, "cpu-ns/GET", func() { get(b, c, url) })
}

// BenchmarkHTTPPipeGETPersistent is a kept-alive GET over net.Pipe.
func BenchmarkHTTPPipeGETPersistent(b *testing.B) {
	ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	floorServe(b, ln)
	c := floorTransport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		client, server := net.Pipe()
		select {
		case ln.conns <- server:
			return client, nil
		case <-ln.done:
			return nil, net.ErrClosed
		}
	})
	get(b, c, "http://10.111.80.136/")
	loop(b, "cpu-ns/GET", func() { get(b, c, "http://10.111.80.136/") })
}

// pipeListener accepts the server ends of net.Pipe connections.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(10, 244, 2, 3), Port: 80} }
