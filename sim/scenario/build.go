package scenario

import (
	"k8s.io/apimachinery/pkg/runtime"

	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// Build creates the scenario's cluster with the world seeded by seed (pass
// f.Cluster.Seed for the file's own): the underlay networks, the nodes in
// join order (each registering its Node object), the external hosts, then
// the manifests applied in file order as one kubectl apply (all or
// nothing; an object the API server refuses is reported at its position
// with the API server's words, a missing namespace as
// `namespaces "net" not found`), and the world settled.
func Build(f *File, seed uint64) (*sim.Cluster, error) {
	cl := f.Cluster
	if cl == nil {
		return nil, fmt.Errorf("no %s %s document: a scenario needs one to say what the nodes are", APIVersion, ClusterKind)
	}
	at := func(err error) error { return &Error{Pos: f.ClusterPos, Msg: err.Error()} }
	if err := unmodelled(cl); err != nil {
		return nil, at(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	cfg.ClusterCIDR = cl.Networking.PodSubnet
	cfg.ServiceCIDR = cl.Networking.ServiceSubnet
	cfg.NodeCIDRMaskSize = cl.Networking.NodeCIDRMaskSize
	cfg.ProxyMode = kubeproxy.Mode(cl.Networking.KubeProxyMode)
	if cl.Networking.CNI == NoCNI {
		cfg.Overlay = "none"
	}
	c, err := sim.NewCluster(cfg)
	if err != nil {
		return nil, at(err)
	}
	for _, w := range cl.Networks {
		c.Segment(w.Name)
	}
	// kubeadm init on the first control-plane node (the first node when
	// none is one) installs the add-ons; kubeadm join --control-plane
	// adds a node's static pods.
	initNode := 0
	for i := range cl.Nodes {
		if cl.Nodes[i].Role == ControlPlaneRole {
			initNode = i
			break
		}
	}
	for i := range cl.Nodes {
		n := &cl.Nodes[i]
		spec := sim.NodeSpec{Name: n.Name, NodeIP: n.NodeIP, FlannelIface: n.FlannelIface, PodCIDR: n.PodCIDR,
			MaxPods: cl.Kubelet.MaxPods, Role: sim.RoleWorker}
		if n.Role == ControlPlaneRole {
			spec.Role = sim.RoleControlPlane
		}
		for _, nic := range n.NICs {
			s := sim.NICSpec{Name: nic.Name, Segment: nic.Network, Addr: nic.Address, Gateway: nic.Gateway, MTU: nic.MTU}
			if nic.MAC != "" {
				hw, _ := net.ParseMAC(nic.MAC) // validated
				copy(s.MAC[:], hw)
			}
			spec.NICs = append(spec.NICs, s)
		}
		node, err := c.AddNode(spec)
		if err != nil {
			return nil, at(fmt.Errorf("invalid configuration for node %d: %w", i, err))
		}
		for _, k := range sortedKeys(n.Sysctls) {
			on := n.Sysctls[k] == "1"
			switch k {
			case "net.ipv4.ip_forward":
				node.Host.Sysctl.IPForward = on
			case "net.bridge.bridge-nf-call-iptables":
				node.Host.Sysctl.BridgeNFCallIPTables = on
			}
		}
		if cl.Networking.Addons == KubeadmAddons {
			var objs []runtime.Object
			if n.Role == ControlPlaneRole {
				objs = sim.StaticPods(n.Name)
			}
			if i == initNode {
				objs = append(objs, c.KubeadmAddons(nil)...)
			}
			if err := c.Apply(objs...); err != nil {
				return nil, at(fmt.Errorf("kubeadm add-ons: %w", err))
			}
			if err := c.Settle(); err != nil {
				return nil, at(err)
			}
		}
	}
	if a := cl.Networking.APIServerAddress; a != cl.defaultAPIServerAddress() {
		if err := c.API.SetKubernetesEndpoints(a); err != nil {
			return nil, at(err)
		}
	}
	if err := apply(c, f.Manifests); err != nil {
		return nil, err
	}
	if err := c.Settle(); err != nil {
		return nil, err
	}
	for i, h := range cl.ExternalHosts {
		host, err := c.AddExternalHost(h.Name, h.Network, h.Address, h.Gateway)
		if err != nil {
			return nil, at(fmt.Errorf("invalid configuration for external host %d: %w", i, err))
		}
		for j, r := range h.Routes {
			if err := host.Netns.AddRoute(datapath.RouteSpec{Dst: r.To, Via: r.Via}); err != nil {
				return nil, at(fmt.Errorf("invalid configuration for external host %d: routes[%d]: %w", i, j, err))
			}
		}
	}
	return c, nil
}

// apply creates or updates the manifests as one transaction, so the one
// refused is named with its position.
func apply(c *sim.Cluster, ms []Manifest) error {
	if len(ms) == 0 {
		return nil
	}
	c.API.Begin()
	for _, m := range ms {
		// The store keeps its own copy; the File stays reusable.
		if _, _, err := c.API.Apply(m.Object.DeepCopyObject().(Object)); err != nil {
			c.API.Abort()
			return &Error{Pos: m.Pos, Msg: err.Error()}
		}
	}
	c.API.Commit()
	return nil
}

// defaultAPIServerAddress is where kubeadm init advertises the API server
// when not told: the first control-plane node's InternalIP.
func (c *Cluster) defaultAPIServerAddress() (a netip.Addr) {
	for _, n := range c.Nodes {
		if n.Role == ControlPlaneRole {
			return n.InternalIP()
		}
	}
	return a
}

// unmodelled refuses settings the simulation cannot honour yet, rather than
// accepting them silently.
func unmodelled(c *Cluster) error {
	notYet := func(field string, v any) error {
		return fmt.Errorf("%s: %v is not modelled yet (kubewalk runs the default)", field, v)
	}
	if c.Networking.APIServerPort != DefaultAPIServerPort {
		return notYet("networking.apiServerPort", c.Networking.APIServerPort)
	}
	if !slices.Equal(c.Kubelet.ClusterDNS, []netip.Addr{DefaultClusterDNS}) {
		return notYet("kubelet.clusterDNS", c.Kubelet.ClusterDNS)
	}
	if c.Kubelet.ClusterDomain != DefaultClusterDomain {
		return notYet("kubelet.clusterDomain", c.Kubelet.ClusterDomain)
	}
	for i, n := range c.Nodes {
		if n.Kubelet != Running {
			return notYet(fmt.Sprintf("nodes[%d].kubelet", i), n.Kubelet)
		}
		if n.ContainerRuntime != Running {
			return notYet(fmt.Sprintf("nodes[%d].containerRuntime", i), n.ContainerRuntime)
		}
	}
	return nil
}
