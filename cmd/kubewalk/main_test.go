package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/stretchr/testify/require"
)

func call(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestScenarios(t *testing.T) {
	code, out, errs := call("scenarios")
	require.Equal(t, 0, code, errs)
	require.Empty(t, errs)
	for _, n := range []string{"NAME", "reference", "duplicate-podcidr", "wrong-nic", "wrong-nic-fixed"} {
		require.Contains(t, out, n)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"trace", "--help"}, {"state", "-h"}, {"help", "scenarios"}} {
		code, out, errs := call(args...)
		require.Equal(t, 0, code, "%v", args)
		require.Empty(t, errs)
		require.Contains(t, out, "Example", "%v", args)
	}
}

func TestTraceFormats(t *testing.T) {
	base := []string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "--port", "80"}
	code, out, errs := call(append(base, "--level", "minimal")...)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "#1 cka-w2/net/web-2 eth0 tcp delivered")

	code, out, _ = call(append(base, "-o", "json")...)
	require.Equal(t, 0, code)
	tr, err := trace.ReadJSON(strings.NewReader(out))
	require.NoError(t, err)
	require.NotEmpty(t, tr.Obs)

	code, out, _ = call(append(base, "-o", "mermaid")...)
	require.Equal(t, 0, code)
	require.True(t, strings.HasPrefix(out, "sequenceDiagram\n"))

	code, out, _ = call(append(base, "-o", "svg")...)
	require.Equal(t, 0, code)
	dec := xml.NewDecoder(strings.NewReader(out))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}

	code, out, _ = call(append(base, "-o", "pcapng")...)
	require.Equal(t, 0, code)
	r, err := pcapgo.NewNgReader(strings.NewReader(out), pcapgo.DefaultNgReaderOptions)
	require.NoError(t, err)
	_, _, err = r.ReadPacketData()
	require.NoError(t, err)
}

func TestTraceProtocolsAndTargets(t *testing.T) {
	for _, args := range [][]string{
		{"--from", "net/client", "--to", "net/web-1", "--proto", "icmp"},
		{"--from", "net/client", "--to", "10.244.2.2:80"},
		{"--from", "outside", "--to", "cka-w1", "--proto", "udp", "--port", "53"},
		{"--from", "cka-w1", "--to", "cka-w2:30080"},
		{"--from", "cka-w1", "--to", "10.244.2.2", "--proto", "icmp"},
	} {
		code, out, errs := call(append([]string{"trace", "--scenario", "reference", "--level", "minimal"}, args...)...)
		require.Equal(t, 0, code, "%v: %s", args, errs)
		require.NotEmpty(t, out)
	}
	code, out, _ := call("trace", "--scenario", "wrong-nic", "--from", "net/client", "--to", "net/web-2", "--level", "detailed")
	require.Equal(t, 0, code)
	require.Contains(t, out, "reason: not for this host")
}

func TestState(t *testing.T) {
	code, out, errs := call("state", "--scenario", "reference", "--node", "cka-w1", "ip-route")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink")
	code, out, _ = call("state", "ip-link-flannel", "--scenario", "reference", "--node", "cka-w2")
	require.Equal(t, 0, code)
	require.Contains(t, out, "vxlan id 1")
	code, out, _ = call("state", "--scenario", "reference", "--node", "cka-w1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "### cka-w1: bridge fdb show")
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"trace", "--scenario", "nope", "--from", "net/client", "--to", "net/web-2"}, `unknown scenario "nope"`},
		{[]string{"trace", "--scenario", "reference", "--from", "net/ghost", "--to", "net/web-2"}, `pod "net/ghost" not found`},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "net/ghost"}, `pod "net/ghost" not found`},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "10.244.2.300"}, "malformed address"},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "10.244.2.2:99999"}, "malformed port"},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "-o", "yaml"}, `unknown output format "yaml"`},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "--proto", "sctp"}, `unknown --proto "sctp"`},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/nope:80"}, "service net/nope not found"},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/web:81"}, "service net/web has no port 81"},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/web:80", "--explore", "-o", "svg"}, "--explore prints text or json"},
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net//web:80"}, "malformed service"},
		{[]string{"trace", "--scenario", "reference"}, "--from and --to are required"},
		{[]string{"state", "--scenario", "reference", "--node", "cka-w9", "ip-route"}, `node "cka-w9" not found`},
		{[]string{"state", "--scenario", "reference", "--node", "cka-w1", "ip-rule"}, `unknown state "ip-rule"`},
		{[]string{"scenarios", "extra"}, `unexpected argument "extra"`},
		{[]string{"export", "--scenario", "nope"}, `unknown scenario "nope"`},
		{[]string{"export", "--scenario", "reference", "-o", "yaml"}, `unknown output format "yaml"`},
		{[]string{"export", "--scenario", "reference", "--prefix", "x;echo INJECTED #"}, `invalid prefix "x;echo INJECTED #"`},
		{[]string{"export", "--scenario", "reference", "--prefix", "$(id)"}, `invalid prefix "$(id)"`},
		{[]string{"export", "--scenario", "reference", "--prefix", "x\necho INJECTED"}, `invalid prefix "x\necho INJECTED"`},
		{[]string{"export", "--scenario", "reference", "--teardown", "--prefix", "-rf"}, `invalid prefix "-rf"`},
		{[]string{"export", "--scenario", "x;echo INJECTED #"}, `unknown scenario "x;echo INJECTED #"`},
		{[]string{"export", "--scenario", "reference\necho INJECTED"}, `unknown scenario "reference\necho INJECTED"`},
	} {
		code, out, errs := call(tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errs)
		require.Empty(t, out, "%v: nothing on stdout", tc.args)
		require.Contains(t, errs, tc.msg, "%v", tc.args)
		require.Equal(t, 1, strings.Count(errs, "\n"), "%v: one line: %q", tc.args, errs)
	}
}

func TestServicesExploreAndNetfilterState(t *testing.T) {
	code, out, errs := call("trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/web:80", "--explore")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "2 branch(es) for the first packet from net/client to service/net/web:80:\n 50.000%  10.244.1.3:80\n 50.000%  10.244.2.2:80\n", out)

	code, out, errs = call("trace", "--scenario", "flows", "--from", "outside", "--to", "cka-w2:30081", "--explore", "-o", "json")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"outcome": "10.244.2.4:80"`)
	require.Contains(t, out, `"masquerade": false`, "eTP Local keeps the client address")

	code, out, errs = call("trace", "--scenario", "reference", "--from", "outside", "--to", "cka-cp1:30080", "--level", "detailed")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "-A KUBE-NODEPORTS -p tcp -m comment --comment \"net/web\" -m tcp --dport 30080 -j KUBE-EXT-")
	require.Contains(t, out, "MASQUERADE --random-fully")
	require.Contains(t, out, "SYN-ACK: connection established")

	code, out, errs = call("state", "--scenario", "reference", "--node", "cka-w1", "iptables-save")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "-A KUBE-SERVICES -d 10.111.80.136/32 -p tcp -m comment --comment \"net/web cluster IP\" -m tcp --dport 80 -j KUBE-SVC-")
	require.Contains(t, out, "-A FLANNEL-POSTRTG")
	code, out, errs = call("state", "--scenario", "reference", "--node", "cka-w1", "conntrack")
	require.Equal(t, 0, code, errs)
	require.Empty(t, out, "no traffic yet, no connections")
	code, out, errs = call("state", "--scenario", "reference", "--node", "cka-w1", "conntrack", "--from", "net/client", "--to", "service/net/web:80")
	require.Equal(t, 0, code, errs)
	// The connection, first; a remote endpoint adds the VXLAN flows.
	require.Regexp(t, `^tcp      6 \d+ ESTABLISHED src=10\.244\.1\.2 dst=10\.111\.80\.136 sport=40000 dport=80 src=10\.244\.\d\.\d dst=10\.244\.1\.2 sport=80 dport=40000 \[ASSURED\] mark=0 use=1\n(udp      17 \d+ src=192\.168\.122\.2\d dst=192\.168\.122\.2\d sport=\d+ dport=8472 .*\n)*$`, out)
	code, _, errs = call("state", "--scenario", "reference", "--node", "cka-w1", "conntrack", "--from", "net/client")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "--from and --to go together")
}

func TestExport(t *testing.T) {
	code, setup, errs := call("export", "--scenario", "reference")
	require.Equal(t, 0, code, errs)
	require.Contains(t, setup, "ip netns add kw-")
	require.Contains(t, setup, "type vxlan id 1")
	require.Contains(t, setup, "dstport 8472")
	require.Contains(t, setup, "iptables-restore")
	code, down, errs := call("export", "--scenario", "reference", "--teardown", "--prefix", "kwx")
	require.Equal(t, 0, code, errs)
	require.Contains(t, down, "ip netns del kwx-cka-w1")
	require.NotContains(t, down, "ip link", "teardown only deletes namespaces it created")
}

// A node's connection takes its source from the route, as `ip route get`
// does: to a pod on another node that is flannel.1's 10.244.1.0, which
// flannel does not masquerade; --source-ip binds the InternalIP instead,
// and that one is masqueraded.
func TestTraceNodeSourceFollowsTheRoute(t *testing.T) {
	base := []string{"trace", "--scenario", "reference", "--from", "cka-w1", "--to", "net/web-2"}
	code, out, errs := call(base...)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "10.244.1.0.40000 > 10.244.2.2.80: Flags [S]")
	require.NotContains(t, out, "MASQUERADE")
	code, out, errs = call(append(base, "--source-ip", "192.168.122.21")...)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "192.168.122.21.40000 > 10.244.2.2.80: Flags [S]")
	require.Contains(t, out, "MASQUERADE")
	code, out, errs = call(append(base, "--source-ip", "10.9.9.9")...)
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errs, "--source-ip: 10.9.9.9 is not an address of cka-w1")
}

// TestHelpOnce: every command prints its help once (flag.Parse prints the
// usage itself before it returns ErrHelp).
func TestHelpOnce(t *testing.T) {
	for _, c := range commands {
		for _, h := range []string{"--help", "-h"} {
			code, out, errs := call(c.name, h)
			require.Equal(t, 0, code, "%s %s: %s", c.name, h, errs)
			require.Equal(t, 1, strings.Count(out, "\nUsage:\n"), "%s %s:\n%s", c.name, h, out)
		}
	}
	_, out, _ := call("--help")
	require.Equal(t, 1, strings.Count(out, "\nUsage:\n"))
	for _, c := range commands {
		require.Contains(t, out, "  "+c.name+" ", "the root help lists %s", c.name)
	}
}

// TestMeaninglessFlagsRefused: a flag that would be ignored, or that
// contradicts another, is an error: exit 2, one line, nothing on stdout.
func TestMeaninglessFlagsRefused(t *testing.T) {
	tr := []string{"trace", "--scenario", "reference", "--from", "net/client"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{append(tr, "--to", "cka-w2:30080", "--port", "81"), "--port 81 conflicts with the port 30080 in --to cka-w2:30080"},
		{append(tr, "--to", "10.244.2.2:80", "--port", "80"), "--port 80 conflicts with the port 80 in --to 10.244.2.2:80"},
		{append(tr, "--to", "service/net/web:80", "--port", "80"), "conflicts with the port 80"},
		{append(tr, "--to", "net/web-2", "--port", "0"), "--port 0: a port is between 1 and 65535"},
		{append(tr, "--to", "net/web-2", "--port", "65536"), "--port 65536"},
		{append(tr, "--to", "net/web-2", "--source-port", "0"), "--source-port 0"},
		{append(tr, "--to", "service/net/web:80", "--explore", "--level", "minimal"), "--level applies to a walk's text, not to --explore"},
		{append(tr, "--to", "net/web-2", "-o", "svg", "--level", "detailed"), "--level applies to -o text, not -o svg"},
		{append(tr, "--to", "net/web-2", "--arp"), "--arp applies to -o mermaid and -o svg"},
		{append(tr, "--to", "net/web-2", "--proto", "icmp", "--port", "80"), "--port means nothing for --proto icmp"},
		{append(tr, "--to", "net/web-2", "--proto", "icmp", "--source-port", "4000"), "--source-port means nothing for --proto icmp"},
		{append(tr, "--to", "10.244.2.2:80", "--proto", "icmp"), "a port means nothing for --proto icmp"},
		{append(tr, "--to", "net/web-2", "-o", "json", "--output", "svg"), "-o and --output are the same flag"},
		{append(tr, "--to", "net/web-2", "-n", "net", "--namespace", "net"), "-n and --namespace are the same flag"},
		{[]string{"state", "--scenario", "reference", "--node", "cka-w1", "--proto", "udp"}, "--proto describes the walk --from and --to run first"},
		{[]string{"state", "--scenario", "reference", "--node", "cka-w1", "--port", "80"}, "--port describes the walk"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
	} {
		code, out, errs := call(tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errs)
		require.Empty(t, out, "%v: nothing on stdout", tc.args)
		require.Contains(t, errs, tc.msg, "%v", tc.args)
		require.Equal(t, 1, strings.Count(errs, "\n"), "%v: one line: %q", tc.args, errs)
	}
}

// TestKubectlReferences: the names kubectl users type reach the same
// objects as the canonical forms, and the walks are identical.
func TestKubectlReferences(t *testing.T) {
	walk := func(args ...string) string {
		t.Helper()
		code, out, errs := call(append([]string{"trace", "--scenario", "reference", "--level", "minimal"}, args...)...)
		require.Equal(t, 0, code, "%v: %s", args, errs)
		require.NotEmpty(t, out)
		return out
	}
	pod := walk("--from", "net/client", "--to", "net/web-2")
	svc := walk("--from", "net/client", "--to", "service/net/web:80")
	node := walk("--from", "cka-w1", "--to", "cka-w2:30080")
	for _, tc := range []struct {
		want string
		args []string
	}{
		{pod, []string{"-n", "net", "--from", "client", "--to", "web-2"}},
		{pod, []string{"--namespace", "net", "--from", "pod/client", "--to", "po/web-2"}},
		{pod, []string{"--from", "pod/net/client", "--to", "pods/net/web-2"}},
		{pod, []string{"-n", "net", "--from", "net/client", "--to", "pod/web-2", "--port", "80"}},
		{pod, []string{"--from", "net/client", "--to", "net/web-2:80"}},
		{svc, []string{"-n", "net", "--from", "pod/client", "--to", "svc/web"}},
		{svc, []string{"-n", "net", "--from", "client", "--to", "service/web:80"}},
		{svc, []string{"-n", "net", "--from", "client", "--to", "services/web", "--port", "80"}},
		{svc, []string{"--from", "net/client", "--to", "svc/net/web"}},
		{svc, []string{"--from", "net/client", "--to", "svc net/web:80"}},
		{node, []string{"--from", "node/cka-w1", "--to", "no/cka-w2:30080"}},
		{node, []string{"-n", "net", "--from", "nodes/cka-w1", "--to", "cka-w2:30080"}},
	} {
		require.Equal(t, tc.want, walk(tc.args...), "%v", tc.args)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--from", "pod/client", "--to", "net/web-2"}, `--from: pod "default/client" not found in this scenario (there is net/client: use -n or NAMESPACE/NAME)`},
		{[]string{"--from", "client", "--to", "net/web-2"}, `--from: "client" is not a pod`},
		{[]string{"-n", "kube-system", "--from", "net/client", "--to", "net/web-2"}, `pod net/client is not in namespace "kube-system" given with -n`},
		{[]string{"-n", "net", "--from", "svc/web", "--to", "net/web-2"}, `"svc/web" is a Service; a walk starts at a pod, node or outside host`},
		{[]string{"--from", "net/client:80", "--to", "net/web-2"}, "a source has no port here"},
		{[]string{"-n", "net", "--from", "client", "--to", "svc/nope"}, "service net/nope not found"},
		{[]string{"--from", "net/client", "--to", "svc/web"}, "service default/web not found"},
		{[]string{"--from", "net/client", "--to", "node/net"}, `node "net" not found`},
	} {
		code, out, errs := call(append([]string{"trace", "--scenario", "reference"}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, errs)
		require.Empty(t, out)
		require.Contains(t, errs, tc.msg, "%v", tc.args)
		require.Equal(t, 1, strings.Count(errs, "\n"), "%v: one line: %q", tc.args, errs)
	}
	code, _, errs := call("trace", "--scenario", "flows", "--from", "net/client", "--to", "svc/net/web-udp")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "port 53 of service net/web-udp is UDP, not TCP (see --proto)")
	code, _, errs = call("trace", "--scenario", "flows", "--from", "net/client", "--to", "svc/net/web-udp", "--proto", "udp")
	require.Equal(t, 0, code, errs)
}

// TestAmbiguousReference: a bare name that is both a node and a pod in the
// -n namespace is refused with both readings; the typed forms pick one.
func TestAmbiguousReference(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	_, err = r.AddPod(sim.PodSpec{Namespace: "default", Name: "cka-w2", Node: "cka-w1"})
	require.NoError(t, err)
	o := refOptions{}
	_, err = resolveDestination(r.Cluster, "cka-w2", o)
	require.ErrorContains(t, err, `--to: "cka-w2" is ambiguous: it names node cka-w2 and pod default/cka-w2`)
	ep, err := resolveDestination(r.Cluster, "node/cka-w2", o)
	require.NoError(t, err)
	require.Equal(t, r.W2.InternalIP, ep.ip)
	ep, err = resolveDestination(r.Cluster, "pod/cka-w2", o)
	require.NoError(t, err)
	require.Equal(t, r.Pod("default", "cka-w2").IP, ep.ip)
	// A namespace called like a resource type: "svc/web" reads two ways.
	_, err = r.AddPod(sim.PodSpec{Namespace: "svc", Name: "web", Node: "cka-w1"})
	require.NoError(t, err)
	ep, err = resolveDestination(r.Cluster, "svc/web", refOptions{})
	require.NoError(t, err, "no Service default/web: only the pod reading names something")
	require.Equal(t, r.Pod("svc", "web").IP, ep.ip)
	ep, err = resolveDestination(r.Cluster, "svc/web", refOptions{namespace: "net"})
	require.NoError(t, err, "pod svc/web is not in -n net: only the Service reading fits")
	require.Equal(t, r.Web.ClusterIP(), ep.ip)
	_, err = r.AddService(sim.ServiceSpec{Service: kubeproxy.Service{Namespace: "default", Name: "web",
		Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
	require.NoError(t, err)
	_, err = resolveDestination(r.Cluster, "svc/web", refOptions{})
	require.ErrorContains(t, err, `"svc/web" is ambiguous: it names service default/web and pod svc/web`)
}

func TestVersion(t *testing.T) {
	code, out, errs := call("version")
	require.Equal(t, 0, code, errs)
	require.Regexp(t, `^kubewalk \S.* go\S+ \w+/\w+\n$`, out)
	code, out2, _ := call("--version")
	require.Equal(t, 0, code)
	require.Equal(t, out, out2)
	bi := &debug.BuildInfo{GoVersion: "go1.26.3", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	require.Equal(t, "v0.3.0 rev 0123456789ab (modified) go1.26.3 "+runtime.GOOS+"/"+runtime.GOARCH,
		version(func() (*debug.BuildInfo, bool) { return bi, true }))
	require.True(t, strings.HasPrefix(version(func() (*debug.BuildInfo, bool) { return nil, false }), "(unknown) go"))
	bi.Main.Version, bi.Settings = "", nil
	require.True(t, strings.HasPrefix(version(func() (*debug.BuildInfo, bool) { return bi, true }), "(devel) go1.26.3"))
}

// TestUDPToPort53IsADNSQuery: the help's UDP example goes to port 53; what
// it sends must decode as a DNS query, as tshark would decode it.
func TestUDPToPort53IsADNSQuery(t *testing.T) {
	code, out, errs := call("trace", "--scenario", "reference", "--from", "outside", "--to", "cka-w1", "--proto", "udp", "--port", "53", "-o", "pcapng")
	require.Equal(t, 0, code, errs)
	r, err := pcapgo.NewNgReader(strings.NewReader(out), pcapgo.DefaultNgReaderOptions)
	require.NoError(t, err)
	queries := 0
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		if udp, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); !ok || udp.DstPort != 53 {
			continue
		}
		require.Nil(t, p.ErrorLayer(), "a frame to port 53 does not decode: %v", p)
		d, ok := p.Layer(layers.LayerTypeDNS).(*layers.DNS)
		require.True(t, ok)
		require.False(t, d.QR)
		require.Len(t, d.Questions, 1)
		require.Equal(t, "kubernetes.default.svc.cluster.local", string(d.Questions[0].Name))
		require.Equal(t, layers.DNSTypeA, d.Questions[0].Type)
		queries++
	}
	require.Positive(t, queries)
}
