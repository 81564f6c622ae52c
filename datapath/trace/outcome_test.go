package trace_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
)

// crossNode is the reference cluster's cross-node TCP handshake, ARP
// included: requests flooded by cni0 and the underlay, replies that
// resolve neighbour entries.
func crossNode(t *testing.T) *trace.Trace {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	tr := &trace.Trace{}
	_, err = r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1000, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	return tr
}

// TestOutcomesOfARP: every packet of a finished walk ends delivered or
// dropped (an ARP reply that resolved an entry is delivered to the ARP
// layer, not in flight), and each says truthfully where it came from: a
// flooded ARP request is a copy, not an answer.
func TestOutcomesOfARP(t *testing.T) {
	tr := crossNode(t)
	oc := tr.Outcomes()
	byID := map[int]trace.Outcome{}
	for _, o := range oc {
		byID[o.Packet] = o
	}
	first := map[int]trace.Observation{}
	for _, o := range tr.Obs {
		if _, ok := first[o.Packet]; !ok {
			first[o.Packet] = o
		}
	}
	seen := map[trace.Origin]int{}
	for _, o := range oc {
		require.False(t, o.InFlight(), "#%d: %s", o.Packet, o)
		require.NotContains(t, o.String(), "in flight")
		f := first[o.Packet]
		seen[o.Origin]++
		switch {
		case strings.HasPrefix(f.Summary, "ARP, Reply"):
			require.Equal(t, trace.Reply, o.Origin, "#%d", o.Packet)
			require.Equal(t, trace.Delivered, o.Action, "#%d: %s", o.Packet, o)
			require.Equal(t, trace.Resolved, o.Last.Action, "#%d ends resolving its entry", o.Packet)
		case strings.HasPrefix(f.Summary, "ARP, Request") && o.Origin == trace.Copy:
			// A copy carries its parent's bytes: the parent is the same
			// request.
			parent := first[o.Parent]
			require.Equal(t, f.Summary, parent.Summary, "#%d is a copy of #%d", o.Packet, o.Parent)
			require.Equal(t, "copy of #"+itoa(o.Parent), o.OriginLabel())
		case strings.HasPrefix(f.Summary, "ARP, Request"):
			require.Equal(t, trace.ARPRequest, o.Origin, "#%d", o.Packet)
			require.Equal(t, "ARP request for #"+itoa(o.Parent), o.OriginLabel())
			require.False(t, strings.HasPrefix(first[o.Parent].Summary, "ARP"), "asked for a packet waiting on its next hop")
		case o.Parent == 0:
			require.Equal(t, trace.Sent, o.Origin)
			require.Empty(t, o.OriginLabel())
		default:
			require.Equal(t, trace.Reply, o.Origin, "#%d %s", o.Packet, f.Summary)
		}
		if o.Origin != trace.Reply {
			require.NotContains(t, o.OriginLabel(), "answer", "#%d", o.Packet)
		}
	}
	for _, k := range []trace.Origin{trace.Sent, trace.Copy, trace.Reply, trace.ARPRequest} {
		require.Positive(t, seen[k], "the walk has packets of origin %d", k)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestOutcomeInFlightSaysWhen: a walk cut short says which packets are in
// flight, since when, and where they were last seen.
func TestOutcomeInFlightSaysWhen(t *testing.T) {
	tr := &trace.Trace{}
	tr.Add(trace.Observation{At: 150 * time.Microsecond, Packet: 1, Node: "n1", Netns: "host", Device: "eth0", Stage: "neigh", Action: trace.Queued})
	tr.Add(trace.Observation{At: 150 * time.Microsecond, Packet: 2, Parent: 1, Node: "n1", Netns: "host", Device: "eth0", Stage: "arp", Action: trace.Replied, Summary: "ARP, Request who-has 10.0.0.2 tell 10.0.0.1"})
	tr.Add(trace.Observation{At: 3 * time.Second, Packet: 2, Node: "n1", Netns: "host", Device: "eth0", Stage: "neigh", Action: trace.Dropped})
	oc := tr.Outcomes()
	require.Len(t, oc, 2)
	require.True(t, oc[0].InFlight())
	require.Equal(t, "in flight at 0.000150 (last seen at n1/host eth0: neigh queued)", oc[0].String())
	require.Equal(t, "dropped at n1/host eth0: no reason recorded", oc[1].String())
	require.Equal(t, trace.ARPRequest, oc[1].Origin)
	require.Equal(t, 3*time.Second, oc[1].At)
}
