package scenario

import (
	"fmt"
	"net/netip"
)

// Defaults of the Cluster document, as each field's doc states them.
var (
	DefaultName             = "kubewalk"
	DefaultSeed      uint64 = 1
	DefaultPodSubnet        = netip.MustParsePrefix("10.244.0.0/16")
	// DefaultServiceSubnet is kubeadm's (kind's is a /16).
	DefaultServiceSubnet    = netip.MustParsePrefix("10.96.0.0/12")
	DefaultNodeCIDRMaskSize = 24
	DefaultAPIServerPort    = 6443
	DefaultMaxPods          = 110
	DefaultClusterDNS       = netip.MustParseAddr("10.96.0.10")
	DefaultClusterDomain    = "cluster.local"
	DefaultMTU              = 1500
)

// SetDefaults fills the zero-valued fields of c with their documented
// defaults; a field already set is never changed.
func SetDefaults(c *Cluster) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	n := &c.Networking
	if !n.PodSubnet.IsValid() {
		n.PodSubnet = DefaultPodSubnet
	}
	if !n.ServiceSubnet.IsValid() {
		n.ServiceSubnet = DefaultServiceSubnet
	}
	if n.NodeCIDRMaskSize == 0 {
		n.NodeCIDRMaskSize = DefaultNodeCIDRMaskSize
	}
	if n.APIServerPort == 0 {
		n.APIServerPort = DefaultAPIServerPort
	}
	if n.CNI == "" {
		n.CNI = Flannel
	}
	if n.KubeProxyMode == "" {
		n.KubeProxyMode = IPTablesProxyMode
	}
	if n.Addons == "" {
		n.Addons = KubeadmAddons
	}
	k := &c.Kubelet
	if k.MaxPods == 0 {
		k.MaxPods = DefaultMaxPods
	}
	if len(k.ClusterDNS) == 0 {
		k.ClusterDNS = []netip.Addr{DefaultClusterDNS}
	}
	if k.ClusterDomain == "" {
		k.ClusterDomain = DefaultClusterDomain
	}
	for i := range c.Nodes {
		node := &c.Nodes[i]
		if node.Role == "" {
			node.Role = WorkerRole
			if i == 0 {
				node.Role = ControlPlaneRole
			}
		}
		if node.Kubelet == "" {
			node.Kubelet = Running
		}
		if node.ContainerRuntime == "" {
			node.ContainerRuntime = Running
		}
		for j := range node.NICs {
			nic := &node.NICs[j]
			if nic.Name == "" {
				nic.Name = fmt.Sprintf("eth%d", j)
			}
			if nic.MTU == 0 {
				nic.MTU = DefaultMTU
			}
		}
	}
	if len(c.Networks) == 0 {
		seen := map[string]bool{}
		add := func(name string) {
			if name != "" && !seen[name] {
				seen[name] = true
				c.Networks = append(c.Networks, Network{Name: name})
			}
		}
		for _, node := range c.Nodes {
			for _, nic := range node.NICs {
				add(nic.Network)
			}
		}
		for _, h := range c.ExternalHosts {
			add(h.Network)
		}
	}
	if !n.APIServerAddress.IsValid() {
		for _, node := range c.Nodes {
			if node.Role == ControlPlaneRole {
				n.APIServerAddress = node.InternalIP()
				break
			}
		}
	}
}

// InternalIP is the address the node's kubelet registers: --node-ip when
// set, else the address of the NIC holding the default route, else the
// first NIC's (the zero Addr for a node without NICs).
func (n *Node) InternalIP() netip.Addr {
	if n.NodeIP.IsValid() {
		return n.NodeIP
	}
	for _, nic := range n.NICs {
		if nic.Gateway.IsValid() {
			return nic.Address.Addr()
		}
	}
	if len(n.NICs) > 0 {
		return n.NICs[0].Address.Addr()
	}
	return netip.Addr{}
}
