package export_test

import (
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/export"
)

// TestScriptShape checks the scripts without running them: names, the
// prefix, interface name lengths, and that teardown deletes every
// namespace setup adds.
func TestScriptShape(t *testing.T) {
	r, err := scenarios.NewReference(1)
	if err != nil {
		t.Fatal(err)
	}
	e, err := export.Generate(r.Cluster, export.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.Prefix, "kw-") || len(e.Prefix) != 7 {
		t.Errorf("default prefix %q is not kw-<4 hex>", e.Prefix)
	}
	e2, _ := export.Generate(r.Cluster, export.Options{})
	if e2.Setup != e.Setup {
		t.Error("the export is not deterministic")
	}
	ns, ok := e.Netns("cka-w1", "net/client")
	if !ok || ns != e.Prefix+"-cka-w1-net.client" {
		t.Errorf("net/client maps to %q", ns)
	}
	for _, n := range e.Namespaces() {
		if !strings.HasPrefix(n, e.Prefix+"-") {
			t.Errorf("namespace %s lacks the prefix", n)
		}
		if !strings.Contains(e.Setup, "ip netns add "+n+"\n") {
			t.Errorf("setup does not create %s", n)
		}
		if !strings.Contains(e.Teardown, "ip netns del "+n+" ") {
			t.Errorf("teardown does not delete %s", n)
		}
	}
	for _, l := range strings.Split(e.Setup, "\n") {
		if strings.HasPrefix(l, "ip ") && !strings.HasPrefix(l, "ip netns ") && !strings.HasPrefix(l, "ip -n "+e.Prefix+"-") {
			t.Errorf("command outside the export's namespaces: %s", l)
		}
		f := strings.Fields(l)
		for i, w := range f {
			if (w == "add" || w == "name") && i+1 < len(f) && i >= 3 && f[i-1] != "addr" && len(f[i+1]) > 15 && !strings.HasPrefix(f[i+1], e.Prefix) {
				t.Errorf("interface name %q longer than 15 characters: %s", f[i+1], l)
			}
		}
	}
	for _, want := range []string{
		"type vxlan id 1 local 192.168.122.21 dev eth0 dstport 8472 nolearning",
		"route add 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink",
		"dev flannel.1 lladdr " + r.W2.Host.Device("flannel.1").MAC().String() + " nud permanent",
		"fdb append " + r.W2.Host.Device("flannel.1").MAC().String() + " dev flannel.1 dst 192.168.122.22 self permanent",
		"addr add 10.244.1.1/24 brd + dev cni0",
		"link add cni0 address " + r.W1.Host.Device("cni0").MAC().String() + " mtu 1450 type bridge",
		"hairpin on",
		"iptables-restore -w",
	} {
		if !strings.Contains(e.Setup, want) {
			t.Errorf("setup lacks %q", want)
		}
	}
}

// TestCompareFindsAFlippedField is the negative control of the
// differential comparison: one changed byte is reported by field name.
func TestCompareFindsAFlippedField(t *testing.T) {
	f := []byte{
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00,
		0x45, 0x00, 0x00, 0x1c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
		8, 0, 0xf7, 0xff, 0, 0, 0, 0,
	}
	k := append([]byte(nil), f...)
	k[14+1] = 0xc0
	ctx := maskCtx{injected: map[[4]uint32]bool{}, masq: map[[4]byte]bool{}}
	ds := compareAt(point{"n", "host", "eth0"}, []frame{{Out: true, B: k}}, []frame{{Out: true, B: f}}, ctx)
	if len(ds) != 1 || !strings.Contains(ds[0].What, "ipv4.tos: kernel 0xc0, kubewalk 0x0") {
		t.Fatalf("got %v", ds)
	}
	if ds := compareAt(point{}, []frame{{B: f}}, []frame{{B: f}}, ctx); len(ds) != 0 {
		t.Fatalf("equal frames disagree: %v", ds)
	}
	if ds := compareAt(point{}, []frame{{B: f}}, nil, ctx); len(ds) != 1 || !strings.Contains(ds[0].What, "only the kernel") {
		t.Fatalf("a missing frame is not reported: %v", ds)
	}
}
