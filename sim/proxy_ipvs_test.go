package sim

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/stretchr/testify/require"
)

// ipvsCluster: two nodes in IPVS mode, a NodePort Service with one pod on
// each node.
func ipvsCluster(t *testing.T, sched string) (*Cluster, *Service) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ProxyMode = kubeproxy.ModeIPVS
	cfg.IPVSScheduler = sched
	c, err := NewCluster(cfg)
	require.NoError(t, err)
	for i, name := range []string{"n1", "n2"} {
		_, err := c.AddNode(NodeSpec{Name: name, NICs: []NICSpec{{Name: "eth0", Segment: "lan",
			Addr: netip.MustParsePrefix("192.168.1." + string(rune('1'+i)) + "/24")}}})
		require.NoError(t, err)
	}
	for _, p := range []struct{ name, node string }{{"web-1", "n1"}, {"web-2", "n2"}} {
		_, err := c.AddPod(PodSpec{Name: p.name, Node: p.node, Labels: map[string]string{"app": "web"},
			Containers: []Container{{Name: "c", Ports: []ContainerPort{{ContainerPort: 80}}}}})
		require.NoError(t, err)
	}
	s, err := c.AddService(ServiceSpec{Selector: map[string]string{"app": "web"}, Service: kubeproxy.Service{
		Name: "web", Type: kubeproxy.ServiceTypeNodePort, ClusterIP: netip.MustParseAddr("10.96.0.20"),
		Ports: []kubeproxy.ServicePort{{Port: 80, NodePort: 30080}}}})
	require.NoError(t, err)
	return c, s
}

func TestIPVSModeProgramsTheNode(t *testing.T) {
	c, _ := ipvsCluster(t, "")
	n := c.Node("n1")
	px := n.Proxier.(*IPVSProxier)
	require.Equal(t, kubeproxy.ModeIPVS, px.Mode())
	require.Equal(t, "rr", px.Scheduler, `ipvs.scheduler "" is rr`)

	// The ClusterIP is a local address of the node, on the down dummy.
	require.True(t, n.Host.IsLocal([4]byte{10, 96, 0, 20}))
	require.Contains(t, n.Host.IPLink(kubeproxy.DummyDevice, true), "<BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN")
	require.Contains(t, n.Host.IPLink(kubeproxy.DummyDevice, true), "\n    dummy addrgenmode")
	require.Contains(t, n.Host.IPAddr(), "    inet 10.96.0.20/32 scope global kube-ipvs0\n")

	list := px.IPVS.List()
	pods := []string{c.Pod("default", "web-1").IP.String() + ":80", c.Pod("default", "web-2").IP.String() + ":80"}
	vs := "TCP  10.96.0.20:80 rr\n  -> " + pad(pods[0]) + " Masq    1      0          0         \n  -> " + pad(pods[1]) + " Masq    1      0          0         \n"
	require.Contains(t, list, vs)
	// NodePort virtual servers on every node address outside kube-ipvs0
	// (eth0, cni0, flannel.1), none on loopback.
	for _, a := range n.Host.Addrs() {
		if a.Dev.Name == kubeproxy.DummyDevice || a.Dev.Kind == datapath.KindLoopback {
			continue
		}
		require.Contains(t, list, "TCP  "+a.Prefix.Addr().String()+":30080 rr\n")
	}
	require.NotContains(t, list, "127.0.0.1:30080")

	// ipsets referenced by the iptables rules IPVS mode writes.
	require.Contains(t, px.IPSets.Get("KUBE-CLUSTER-IP").Entries(), "10.96.0.20,tcp:80")
	require.Equal(t, []string{"30080"}, px.IPSets.Get("KUBE-NODE-PORT-TCP").Entries())
	require.Equal(t, []string{pods[0][:len(pods[0])-3] + ",tcp:80," + pods[0][:len(pods[0])-3]}, px.IPSets.Get("KUBE-LOOP-BACK").Entries(),
		"only the node's own endpoints, for hairpin masquerade")
	save := n.Netfilter.Save(netfilter.SaveOptions{})
	for _, rule := range []string{
		// iptables-save prints the address match before the matches.
		`-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ`,
		`-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ`,
		`-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE`,
		`-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable`,
		`-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER`,
		`-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000`,
	} {
		require.Contains(t, save, rule+"\n")
	}
	require.Contains(t, px.IPSets.Get("KUBE-CLUSTER-IP").List(), "References: 3\n")
}

func pad(s string) string { return s + strings.Repeat(" ", 28-len(s)) }

func TestIPVSModeFollowsEndpointsAndServices(t *testing.T) {
	c, s := ipvsCluster(t, "wlc")
	n := c.Node("n1")
	px := n.Proxier.(*IPVSProxier)
	require.Contains(t, px.IPVS.List(), "TCP  10.96.0.20:80 wlc\n")
	web2 := c.Pod("default", "web-2").IP
	require.NoError(t, c.DeletePod("default", "web-2"))
	require.NotContains(t, px.IPVS.List(), web2.String()+":80", "a real server without connections goes at once")
	require.NoError(t, c.DeleteService(s.Spec.Namespace, s.Spec.Name))
	require.NotContains(t, px.IPVS.List(), "10.96.0.20")
	require.False(t, n.Host.IsLocal([4]byte{10, 96, 0, 20}), "the address left kube-ipvs0")
	require.NotContains(t, px.IPSets.Get("KUBE-CLUSTER-IP").Entries(), "10.96.0.20,tcp:80")
}

func TestIPVSSchedulerValidation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProxyMode = kubeproxy.ModeIPVS
	cfg.IPVSScheduler = "mh"
	_, err := NewCluster(cfg)
	require.EqualError(t, err, `cluster: ipvsScheduler: KubeProxyConfiguration.KubeProxyIPVSConfiguration.Scheduler.Scheduler: Invalid value: "mh": must be in [rr wrr lc wlc lblc lblcr sh dh sed nq ], blank means the default algorithm method (currently rr)`)
	cfg.ProxyMode = kubeproxy.ModeIPTables
	_, err = NewCluster(cfg)
	require.Error(t, err, "kube-proxy validates the ipvs section in every mode")
	for _, s := range []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq"} {
		c, _ := ipvsCluster(t, s)
		require.Contains(t, c.Node("n2").Proxier.(*IPVSProxier).IPVS.List(), "TCP  10.96.0.20:80 "+s+"\n")
	}
}
