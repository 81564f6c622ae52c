package scenarios

import (
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/stretchr/testify/require"
)

// TestBridgeNFCallIPTables reproduces the br_netfilter failure: the
// client's connection to the ClusterIP is sent to net/web-1, which sits on
// the client's own bridge.
func TestBridgeNFCallIPTables(t *testing.T) {
	toWeb1 := func(p float64) bool { return true } // first endpoint: 10.244.1.3 (net/web-1)
	for _, tc := range []struct {
		name        string
		brnf        bool
		established bool
	}{{"bridge-nf-call-iptables=1", true, true}, {"bridge-nf-call-iptables=0", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewBrNetfilterOff(1)
			require.NoError(t, err)
			r.W1.Host.Sysctl.BridgeNFCallIPTables = tc.brnf
			r.World.Walk().Chooser = toWeb1
			tr := &trace.Trace{}
			c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web.ClusterIP(), 40000, 80, 1, tr)
			require.NoError(t, err)
			require.NoError(t, r.World.Run())
			require.Equal(t, tc.established, c.Established)
			var synack *trace.Observation
			for i := range tr.Obs {
				o := &tr.Obs[i]
				if o.Netns == "net/client" && o.Action == trace.Received && strings.Contains(o.Summary, "Flags [S.]") {
					synack = o
				}
			}
			require.NotNil(t, synack, "the SYN-ACK reached the client")
			if tc.brnf {
				require.Contains(t, synack.Summary, "10.111.80.136.80 > 10.244.1.2.40000", "un-DNATed by conntrack on the bridge")
				return
			}
			require.Contains(t, synack.Summary, "10.244.1.3.80 > 10.244.1.2.40000", "the reply still carries the pod address")
			drops := tr.Find(func(o *trace.Observation) bool { return o.Netns == "net/client" && o.Action == trace.Dropped })
			require.NotEmpty(t, drops)
			require.Contains(t, drops[0].Summary, "10.244.1.3.80 > 10.244.1.2.40000")
			require.Equal(t, "connection refused (RST)", drops[0].Reason, "the client answers an unknown SYN-ACK with RST")
		})
	}
}
