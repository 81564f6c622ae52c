package trace

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sample() *Trace {
	t := &Trace{}
	id := t.NewPacketID()
	t.Add(Observation{At: 0, Packet: id, Node: "cka-w1", Netns: "net/client", Device: "eth0", Stage: "tx", Action: Transmitted, Summary: "10.244.1.2 > 10.244.2.2: ICMP echo request, id 1, seq 1, ttl 64"})
	t.Add(Observation{At: 1500 * time.Microsecond, Packet: id, Node: "cka-w1", Netns: "host", Device: "flannel.1", Stage: "vxlan", Action: Encapsulated, Detail: "vni 1 to 192.168.122.22:8472"})
	t.Add(Observation{At: 2 * time.Millisecond, Packet: id, Node: "cka-w2", Netns: "host", Device: "eth0", Stage: "route", Action: Dropped, Reason: "no route to host"})
	return t
}

func TestTextLevels(t *testing.T) {
	tr := sample()
	require.Equal(t, "#1 cka-w1/net/client eth0 tx transmitted\n#1 cka-w1/host flannel.1 vxlan encapsulated\n#1 cka-w2/host eth0 route dropped (no route to host)\n", tr.Text(Minimal))
	s := tr.Text(Summary)
	require.Contains(t, s, "0.001500 #1  cka-w1/host flannel.1")
	require.Contains(t, s, "vni 1 to 192.168.122.22:8472", "summary falls back to the detail")
	d := tr.Text(Detailed)
	require.Contains(t, d, "    reason: no route to host\n")
	for _, l := range []string{"minimal", "summary", "detailed"} {
		_, err := ParseLevel(l)
		require.NoError(t, err)
	}
	_, err := ParseLevel("verbose")
	require.ErrorContains(t, err, "unknown level")
}

func TestJSONRoundTrip(t *testing.T) {
	tr := sample()
	tr.Obs[0].Frame = []byte{1, 2, 3}
	var buf bytes.Buffer
	require.NoError(t, tr.WriteJSON(&buf))
	require.Contains(t, buf.String(), `"schema": "kubewalk.trace"`)
	back, err := ReadJSON(&buf)
	require.NoError(t, err)
	require.Equal(t, tr.Obs, back.Obs)
	_, err = ReadJSON(bytes.NewBufferString(`{"schema":"kubewalk.trace","version":99,"observations":[]}`))
	require.ErrorContains(t, err, "version 99")
	_, err = ReadJSON(bytes.NewBufferString(`{"schema":"kubewalk.trace","version":1,"observations":[{"action":"teleported"}]}`))
	require.ErrorContains(t, err, "unknown action")
}

func TestOutcomes(t *testing.T) {
	tr := sample()
	oc := tr.Outcomes()
	require.Len(t, oc, 1)
	require.Equal(t, Dropped, oc[0].Action)
	require.Equal(t, "cka-w2/host eth0", oc[0].Where)
	tr.Obs = tr.Obs[:2]
	require.Equal(t, Action(0), tr.Outcomes()[0].Action, "still in flight")
}

// FuzzReadJSON: whatever the bytes, ReadJSON returns a trace or an error,
// and a trace it accepts writes back to a document it accepts again.
func FuzzReadJSON(f *testing.F) {
	var buf bytes.Buffer
	_ = sample().WriteJSON(&buf)
	f.Add(buf.String())
	f.Add(`{"schema":"kubewalk.trace","version":1,"observations":[{"action":"dropped","packet":-3}]}`)
	f.Add(`{"schema":"kubewalk.trace","version":1,"observations":[{"frame":"!!"}]}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ReadJSON(bytes.NewBufferString(s))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := tr.WriteJSON(&out); err != nil {
			t.Fatalf("write: %v", err)
		}
		if _, err := ReadJSON(&out); err != nil {
			t.Fatalf("re-read of accepted trace failed: %v", err)
		}
		_ = tr.Text(Detailed)
		_ = tr.Outcomes()
	})
}
