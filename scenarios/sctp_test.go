package scenarios

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
)

// TestSCTPServiceWalk: a Service with an SCTP port loads on every node
// (kube-proxy writes -p sctp -m sctp --dport N; before, the sync failed
// with "Couldn't load match `sctp'" and no Service got rules), and an
// SCTP INIT from a pod to the ClusterIP is DNATed across nodes to the
// endpoint, its CRC32c recomputed after the port and address rewrite.
func TestSCTPServiceWalk(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	dia, err := r.AddPod(sim.PodSpec{Namespace: "tel", Name: "diameter", Node: "cka-w2", Labels: map[string]string{"app": "dia"},
		Containers: []sim.Container{{Name: "dia", Ports: []sim.ContainerPort{{ContainerPort: 3868, Protocol: "SCTP"}}}}})
	require.NoError(t, err)
	svc, err := r.AddService(sim.ServiceSpec{Selector: map[string]string{"app": "dia"}, Service: kubeproxy.Service{
		Namespace: "tel", Name: "dia", ClusterIP: ma("10.96.38.68"),
		Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolSCTP, Port: 38680, TargetPort: kubeproxy.FromInt(3868)}}}})
	require.NoError(t, err)
	for _, n := range r.Nodes() {
		require.Contains(t, n.ProxyRules().SaveNAT(), "-p sctp -m comment --comment \"tel/dia cluster IP\" -m sctp --dport 38680", n.Name)
		require.Contains(t, n.Netfilter.Save(netfilter.SaveOptions{}), "-m sctp --dport 38680", n.Name)
	}
	// The TCP Service on the same nodes kept its rules.
	require.Contains(t, r.W1.Netfilter.Save(netfilter.SaveOptions{}), "net/web cluster IP")

	ip, err := packet.SCTP(packet.IP{Src: r.Client.IP, Dst: svc.ClusterIP()}, packet.SCTPInit{Sport: 40000, Dport: 38680, InitiateTag: 99})
	require.NoError(t, err)
	tr := &trace.Trace{Capture: true}
	require.NoError(t, r.World.Send(r.Client.Netns, ip, tr))
	require.NoError(t, r.World.Run())
	l := dia.Netns.SCTPListener(3868)
	require.Equal(t, 1, l.Inits, "\n%s", tr.Text(trace.Summary))
	var got []byte
	for _, o := range tr.Obs {
		if o.Action == trace.Received && o.Netns == "tel/diameter" {
			got = o.Frame
		}
	}
	require.NotNil(t, got, "\n%s", tr.Text(trace.Summary))
	sctp := append([]byte(nil), got[14+20:]...)
	require.Equal(t, uint16(3868), binary.BigEndian.Uint16(sctp[2:4]), "DNATed port")
	sum := binary.LittleEndian.Uint32(sctp[8:12])
	clear(sctp[8:12])
	require.Equal(t, crc32.Checksum(sctp, crc32.MakeTable(crc32.Castagnoli)), sum, "CRC32c recomputed")
	require.Contains(t, r.W1.Conntrack.Dump(), "COOKIE_WAIT src=10.244.1.2 dst=10.96.38.68 sport=40000 dport=38680 [UNREPLIED] src=10.244.2.3 dst=10.244.1.2 sport=3868 dport=40000")
}
