package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/google/gopacket/pcapgo"
	"github.com/kubewalk/kubewalk/datapath/trace"
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
		{[]string{"trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/web"}, "malformed service"},
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
	require.Regexp(t, `^tcp      6 \d+ ESTABLISHED src=10\.244\.1\.2 dst=10\.111\.80\.136 sport=40000 dport=80 src=10\.244\.\d\.\d dst=10\.244\.1\.2 sport=80 dport=40000 \[ASSURED\] mark=0 use=1\n$`, out)
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
