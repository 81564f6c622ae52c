package sim

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
)

// twoPods is one node with a client pod and a server pod whose container
// declares UDP port 5353, echoing or not.
func twoPods(t *testing.T, echo bool) (*Cluster, *Pod, *Pod) {
	t.Helper()
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	_, err = c.AddNode(NodeSpec{Name: "n1", NICs: []NICSpec{{Name: "eth0", Segment: "lan",
		Addr: netip.MustParsePrefix("192.168.1.11/24"), Gateway: netip.MustParseAddr("192.168.1.1")}}})
	require.NoError(t, err)
	client, err := c.AddPod(PodSpec{Namespace: "ns", Name: "client", Node: "n1"})
	require.NoError(t, err)
	server, err := c.AddPod(PodSpec{Namespace: "ns", Name: "server", Node: "n1", Containers: []Container{{Name: "dns",
		Ports: []ContainerPort{{ContainerPort: 5353, Protocol: "UDP", Echo: echo}}}}})
	require.NoError(t, err)
	return c, client, server
}

func TestContainerUDPPortEchoesOnlyWhenAsked(t *testing.T) {
	for _, echo := range []bool{false, true} {
		c, client, server := twoPods(t, echo)
		_, err := client.Netns.ListenUDP(40000, false)
		require.NoError(t, err)
		ip, err := packet.UDP(packet.IP{Src: client.IP, Dst: server.IP}, 40000, 5353, []byte("query"))
		require.NoError(t, err)
		tr := &trace.Trace{}
		require.NoError(t, c.World.Send(client.Netns, ip, tr))
		require.NoError(t, c.World.Run())
		require.Equal(t, 1, server.Netns.UDPSocket(5353).Received, "echo=%v: the datagram reached the container", echo)
		got := client.Netns.UDPSocket(40000).Received
		if echo {
			require.Equal(t, 1, got, "an echo server answers")
		} else {
			require.Zero(t, got, "a container port is a silent listener unless it runs an echo server")
		}
	}
}

// TestFailedProxySyncIsReportedPerNode: on cka-w2 an administrator's nat
// chains reach KUBE-SERVICES 11 jumps deep, so when a NodePort Service
// adds KUBE-NODEPORTS -> KUBE-EXT -> KUBE-SVC -> KUBE-SEP -> KUBE-MARK-MASQ
// below it, that node's iptables-restore is refused (nf_tables' jump
// depth). As kube-proxy does, that node reports the failed restore with
// the rule's line, keeps the rules it had, and retries after its sync
// period; the other node is not held back. Before, the first failing node
// stopped the sync of every node after it.
func TestFailedProxySyncIsReportedPerNode(t *testing.T) {
	c, err := NewCluster(DefaultConfig())
	require.NoError(t, err)
	for i, name := range []string{"n1", "n2"} {
		_, err := c.AddNode(NodeSpec{Name: name, NICs: []NICSpec{{Name: "eth0", Segment: "lan",
			Addr: netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 1, byte(11 + i)}), 24), Gateway: netip.MustParseAddr("192.168.1.1")}}})
		require.NoError(t, err)
	}
	for _, node := range []string{"n1", "n2"} {
		_, err := c.AddPod(PodSpec{Namespace: "ns", Name: "web-" + node, Node: node, Labels: map[string]string{"app": "web"},
			Containers: []Container{{Name: "web", Ports: []ContainerPort{{ContainerPort: 80}}}}})
		require.NoError(t, err)
	}
	web := map[string]string{"app": "web"}
	_, err = c.AddService(ServiceSpec{Selector: web, Service: kubeproxy.Service{Namespace: "ns", Name: "cip",
		Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}})
	require.NoError(t, err)

	n1, n2 := c.Node("n1"), c.Node("n2")
	nf := n2.Netfilter
	deepAdminChains(t, nf)

	_, err = c.AddService(ServiceSpec{Selector: web, Service: kubeproxy.Service{Namespace: "ns", Name: "np", Type: kubeproxy.ServiceTypeNodePort,
		Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80), NodePort: 30080}}}})
	require.Error(t, err, "the Cluster reports the failed sync")
	require.Nil(t, n1.ProxySyncError)
	require.Contains(t, n1.Netfilter.Save(netfilter.SaveOptions{}), `"ns/np" -m tcp --dport 30080`, "n1 synced")
	require.ErrorContains(t, n2.ProxySyncError, "kube-proxy on n2: iptables-restore: line ")
	require.ErrorContains(t, n2.ProxySyncError, "RULE_APPEND failed (Too many links)")
	require.Equal(t, 1, n2.RestoreFailures)
	saved := nf.Save(netfilter.SaveOptions{})
	require.NotContains(t, saved, "ns/np", "nothing of the new sync is half-applied on n2")
	require.Contains(t, saved, "ns/cip cluster IP", "n2 keeps the rules it had")

	// The administrator removes the jump; kube-proxy's retry (its sync
	// period later) succeeds.
	require.NoError(t, nf.Exec("nat", "-D", "PREROUTING", "-j", "ADMIN1"))
	require.NoError(t, c.RunFor(ProxySyncPeriod))
	require.Nil(t, n2.ProxySyncError)
	require.Contains(t, nf.Save(netfilter.SaveOptions{}), `"ns/np" -m tcp --dport 30080`)
}

// deepAdminChains adds an administrator's chain of ten jumps
// (ADMIN1 → … → ADMIN10 → KUBE-SERVICES) at the head of nat PREROUTING,
// so that a KUBE-SVC chain kube-proxy jumps to from KUBE-SERVICES would
// sit past nf_tables' jump depth, and its restore is refused.
func deepAdminChains(t *testing.T, nf *netfilter.Netfilter) {
	t.Helper()
	for i := 1; i <= 10; i++ {
		require.NoError(t, nf.Exec("nat", "-N", fmt.Sprintf("ADMIN%d", i)))
	}
	for i := 1; i < 10; i++ {
		require.NoError(t, nf.Exec("nat", "-A", fmt.Sprintf("ADMIN%d", i), "-j", fmt.Sprintf("ADMIN%d", i+1)))
	}
	require.NoError(t, nf.Exec("nat", "-A", "ADMIN10", "-j", "KUBE-SERVICES"))
	require.NoError(t, nf.Exec("nat", "-I", "PREROUTING", "1", "-j", "ADMIN1"))
}
