package export_test

import (
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/scenarios"
)

// realDump runs an iproute2 command in the real namespace ns.
func realDump(t *testing.T, ns string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], append([]string{"-n", ns}, args[1:]...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr // "Peer netns reference is invalid" for a peer it cannot name
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s -n %s %v: %v: %s", args[0], ns, args[1:], err, stderr.String())
	}
	return string(out)
}

var (
	// The kernel numbers peer namespaces in its own order (the export's
	// underlay namespace takes an id) and names them when /run/netns has
	// them: the comparison is of the layout, not of the id.
	netnsRE = regexp.MustCompile(` link-netns(id)? \S+`)
	// Multicast FDB entries IPv6 and IGMP add are not modelled.
	mcastRE = regexp.MustCompile(`^(33:33|01:00:5e):`)
	// Dynamic neighbour states depend on timers kubewalk runs in virtual
	// time; which one an entry is in is compared by the walk tests.
	nudRE = regexp.MustCompile(` (REACHABLE|STALE|DELAY|PROBE) $`)
)

func lines(s string, drop *regexp.Regexp) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if l == "" || (drop != nil && drop.MatchString(l)) {
			continue
		}
		out = append(out, nudRE.ReplaceAllString(netnsRE.ReplaceAllString(l, " link-netns*"), " <dynamic> "))
	}
	slices.Sort(out) // the kernel dumps hash tables in hash order
	return out
}

// TestKernelDumps compares kubewalk's ip link, ip -4 addr, ip neigh and
// bridge fdb dumps with what iproute2 prints for the exported namespaces,
// right after setup and after a connection from net/client to a pod on the
// same node and one on another node (ARP, learned FDB entries).
func TestKernelDumps(t *testing.T) {
	needKernel(t)
	r, err := scenarios.NewReference(1)
	if err != nil {
		t.Fatal(err)
	}
	exp := buildReal(t, r.Cluster, "dumps")
	type nsView struct {
		name string
		ns   *datapath.Netns
	}
	var views []nsView
	for _, n := range r.Nodes() {
		views = append(views, nsView{n.Name + "/host", n.Host})
	}
	for _, p := range r.Pods() {
		views = append(views, nsView{p.Node.Name + "/" + p.Netns.Name, p.Netns})
	}
	compare := func(when string) {
		for _, v := range views {
			real, ok := exp.Netns(v.ns.Node, v.ns.Name)
			if !ok {
				t.Fatalf("no real namespace for %s", v.name)
			}
			check := func(what string, got, want []string) {
				t.Helper()
				if !slices.Equal(got, want) {
					t.Errorf("%s, %s: %s:\nkernel:\n  %s\nkubewalk:\n  %s", when, v.name, what, strings.Join(want, "\n  "), strings.Join(got, "\n  "))
				}
			}
			check("ip neigh", lines(v.ns.IPNeigh(""), nil), lines(realDump(t, real, "ip", "neigh"), nil))
			check("bridge fdb show", lines(v.ns.BridgeFDB(""), nil), lines(realDump(t, real, "bridge", "fdb", "show"), mcastRE))
			for _, d := range v.ns.Devices() {
				if d.Kind == datapath.KindNIC {
					continue // a veth to the underlay bridge in the export
				}
				check("ip link show "+d.Name, lines(v.ns.IPLink(d.Name, false), nil), lines(realDump(t, real, "ip", "link", "show", "dev", d.Name), nil))
				check("ip neigh show dev "+d.Name, lines(v.ns.IPNeigh(d.Name), nil), lines(realDump(t, real, "ip", "neigh", "show", "dev", d.Name), nil))
			}
			if v.ns != r.W1.Host && v.ns != r.W2.Host && v.ns != r.CP1.Host {
				check("ip -4 addr", lines(v.ns.IPAddr(), nil), lines(realDump(t, real, "ip", "-4", "addr"), nil))
			}
		}
	}
	compare("after setup")

	clientNS, _ := exp.Netns(r.Client.Node.Name, r.Client.Netns.Name)
	for i, dst := range []netip.Addr{r.Web1.IP, r.Web2.IP} {
		_ = inNetns(clientNS, func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dst, 80).String(), time.Second)
			if err == nil {
				c.Close()
			}
			return nil // refused: no server listens in the real pod
		})
		if _, err := r.Client.Netns.DialTCP(r.Client.IP, dst, uint16(40000+i), 80, 1000, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.World.Run(); err != nil {
			t.Fatal(err)
		}
	}
	compare("after connections to web-1 and web-2")
}
