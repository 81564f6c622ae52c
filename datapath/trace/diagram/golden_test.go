package diagram_test

import (
	"bytes"
	"github.com/kubewalk/kubewalk/internal/golden"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/datapath/trace/diagram"
	"github.com/stretchr/testify/require"
)

// TestGoldenCrossNode pins the JSON document and the Mermaid diagram of the
// reference cross-node TCP handshake. Regenerate with go test -update and
// review the diff.
func TestGoldenCrossNode(t *testing.T) {
	tr := walks[0].run(t)
	var j bytes.Buffer
	require.NoError(t, tr.WriteJSON(&j))
	golden.Check(t, "cross-node-tcp.json", j.String())
	back, err := trace.ReadJSON(&j)
	require.NoError(t, err)
	require.Equal(t, tr.Obs, back.Obs)

	var m bytes.Buffer
	require.NoError(t, diagram.Build(tr, diagram.Options{}).WriteMermaid(&m))
	golden.Check(t, "cross-node-tcp.mmd", m.String())
	mm := m.String()
	require.True(t, strings.HasPrefix(mm, "sequenceDiagram\n"))
	require.Contains(t, mm, "box rgb(232,240,254) cka-w1\n")
	require.Contains(t, mm, "participant d0 as net/client eth0")
	require.Contains(t, mm, "VXLAN encap vni 1 to 192.168.122.22:8472")
	require.NotContains(t, mm, "ARP", "ARP is left out by default")

	var withARP bytes.Buffer
	require.NoError(t, diagram.Build(tr, diagram.Options{ARP: true}).WriteMermaid(&withARP))
	require.Contains(t, withARP.String(), "ARP, Request who-has")
}

func TestMermaidEscapesAndDrops(t *testing.T) {
	tr := &trace.Trace{}
	tr.Add(trace.Observation{Packet: 1, Node: "n1", Netns: "ns/a", Device: "eth0", Stage: "tx", Action: trace.Transmitted, Summary: "1.1.1.1 > 2.2.2.2: UDP, length 1"})
	tr.Add(trace.Observation{Packet: 1, Node: "n1", Netns: "host", Device: "veth1", Stage: "rx", Action: trace.Received})
	tr.Add(trace.Observation{Packet: 1, Node: "n1", Netns: "host", Stage: "nat/PREROUTING", Action: trace.Rewritten, Detail: "DNAT", Before: "a", After: "b"})
	tr.Add(trace.Observation{Packet: 1, Node: "n1", Netns: "host", Device: "veth1", Stage: "filter/FORWARD", Action: trace.Dropped, Reason: "rule #3; policy DROP"})
	var m bytes.Buffer
	w := diagram.Build(tr, diagram.Options{})
	require.NoError(t, w.WriteMermaid(&m))
	require.Equal(t, `sequenceDiagram
    title 1.1.1.1 > 2.2.2.2: UDP
    box rgb(232,240,254) n1
        participant d0 as ns/a eth0
        participant d1 as veth1
    end
    d0->>d1: [1] 1.1.1.1 > 2.2.2.2: UDP
    Note over d1: [1] DNAT (nat/PREROUTING): a → b
    Note over d1: ❌ dropped: rule #35;3#59; policy DROP
`, m.String())
	require.Equal(t, "dropped at n1 veth1: rule #3; policy DROP", w.Packets[0].Outcome)
}
