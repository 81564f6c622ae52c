package sim

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// ServiceSpec is the part of a v1.Service the simulator takes: the
// kube-proxy view (type, ports, policies, IPs) plus the pod selector the
// EndpointSlice controller uses. An unset ClusterIP is allocated from the
// service range; an unset NodePort on a NodePort or LoadBalancer Service is
// allocated from 30000-32767.
type ServiceSpec struct {
	kubeproxy.Service
	Selector map[string]string
}

// Service is a created Service with its allocated addresses and the
// EndpointSlice the controller maintains for it.
type Service struct {
	Spec          ServiceSpec
	EndpointSlice kubeproxy.EndpointSlice
}

// Name is "namespace/name".
func (s *Service) Name() string { return s.Spec.Namespace + "/" + s.Spec.Name }

// ClusterIP is spec.clusterIP.
func (s *Service) ClusterIP() netip.Addr { return s.Spec.ClusterIP }

// Port returns the service port named name (or the only port when name is
// empty).
func (s *Service) Port(name string) (kubeproxy.ServicePort, bool) {
	for _, p := range s.Spec.Ports {
		if p.Name == name || (name == "" && len(s.Spec.Ports) == 1) {
			return p, true
		}
	}
	return kubeproxy.ServicePort{}, false
}

// PortNumber returns the service port whose port number is n.
func (s *Service) PortNumber(n int) (kubeproxy.ServicePort, bool) {
	for _, p := range s.Spec.Ports {
		if p.Port == n {
			return p, true
		}
	}
	return kubeproxy.ServicePort{}, false
}

// AddService creates a Service: allocates its ClusterIP and NodePorts as
// the API server does, builds its EndpointSlice from the pods its selector
// matches and re-syncs kube-proxy on every node.
func (c *Cluster) AddService(spec ServiceSpec) (*Service, error) {
	out, err := c.AddServices([]ServiceSpec{spec})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// AddServices creates several Services and re-syncs kube-proxy once, as
// a proxier that batches changes between syncs does. On error none is added.
func (c *Cluster) AddServices(specs []ServiceSpec) ([]*Service, error) {
	n := len(c.services)
	var out []*Service
	for _, spec := range specs {
		s, err := c.addService(spec)
		if err != nil {
			c.services = c.services[:n]
			return nil, err
		}
		out = append(out, s)
	}
	if err := c.Sync(); err != nil {
		c.services = c.services[:n]
		return nil, &ConfigError{Object: "services", Msg: err.Error()}
	}
	return out, nil
}

func (c *Cluster) addService(spec ServiceSpec) (*Service, error) {
	if spec.Namespace == "" {
		spec.Namespace = "default"
	}
	obj := "service " + spec.Namespace + "/" + spec.Name
	if spec.Name == "" {
		return nil, &ConfigError{Object: "service", Field: "metadata.name", Msg: "required"}
	}
	if c.Service(spec.Namespace, spec.Name) != nil {
		return nil, &ConfigError{Object: obj, Msg: "already exists"}
	}
	if spec.Type == "" {
		spec.Type = kubeproxy.ServiceTypeClusterIP
	}
	if !spec.Headless {
		if !spec.ClusterIP.IsValid() {
			ip, err := c.allocateClusterIP()
			if err != nil {
				return nil, &ConfigError{Object: obj, Field: "spec.clusterIP", Msg: err.Error()}
			}
			spec.ClusterIP = ip
		} else {
			if !c.Config.ServiceCIDR.Contains(spec.ClusterIP) {
				return nil, &ConfigError{Object: obj, Field: "spec.clusterIP",
					Msg: fmt.Sprintf("Invalid value: %q: provided IP is not in the valid range. The range of valid IPs is %s", spec.ClusterIP, c.Config.ServiceCIDR)}
			}
			if s := c.serviceByIP(spec.ClusterIP); s != nil {
				return nil, &ConfigError{Object: obj, Field: "spec.clusterIP",
					Msg: fmt.Sprintf("Invalid value: %q: provided IP is already allocated (to %s)", spec.ClusterIP, s.Name())}
			}
		}
	}
	spec.Ports = slices.Clone(spec.Ports)
	for i := range spec.Ports {
		p := &spec.Ports[i]
		p.Protocol = cmp.Or(p.Protocol, kubeproxy.ProtocolTCP)
		if spec.Type == kubeproxy.ServiceTypeNodePort || spec.Type == kubeproxy.ServiceTypeLoadBalancer {
			if p.NodePort == 0 {
				np, err := c.allocateNodePort()
				if err != nil {
					return nil, &ConfigError{Object: obj, Field: "spec.ports.nodePort", Msg: err.Error()}
				}
				p.NodePort = np
			} else if s := c.serviceByNodePort(p.NodePort); s != nil {
				return nil, &ConfigError{Object: obj, Field: "spec.ports.nodePort",
					Msg: fmt.Sprintf("Invalid value: %d: provided port is already allocated", p.NodePort)}
			}
		}
	}
	s := &Service{Spec: spec, EndpointSlice: kubeproxy.EndpointSlice{Namespace: spec.Namespace, Name: spec.Name + "-abcde", ServiceName: spec.Name}}
	c.services = append(c.services, s)
	return s, nil
}

// DeleteService removes a Service and re-syncs kube-proxy.
func (c *Cluster) DeleteService(namespace, name string) error {
	s := c.Service(namespace, name)
	if s == nil {
		return &ConfigError{Object: "service " + namespace + "/" + name, Msg: "not found"}
	}
	c.services = slices.DeleteFunc(c.services, func(x *Service) bool { return x == s })
	return c.Sync()
}

// Service returns the Service namespace/name, or nil.
func (c *Cluster) Service(namespace, name string) *Service {
	for _, s := range c.services {
		if s.Spec.Namespace == namespace && s.Spec.Name == name {
			return s
		}
	}
	return nil
}

// Services returns the Services in creation order.
func (c *Cluster) Services() []*Service { return c.services }

func (c *Cluster) serviceByIP(ip netip.Addr) *Service {
	for _, s := range c.services {
		if s.Spec.ClusterIP == ip {
			return s
		}
	}
	return nil
}

func (c *Cluster) serviceByNodePort(np int) *Service {
	for _, s := range c.services {
		for _, p := range s.Spec.Ports {
			if p.NodePort == np {
				return s
			}
		}
	}
	return nil
}

// allocateClusterIP picks a free address in the service range the way the
// API server's allocator does since ServiceIPStaticSubrange: randomly, from
// the upper part of the range first (the lower part is kept for addresses
// chosen by hand, such as kube-dns's .10). The network address, the first
// address (the kubernetes Service) and the broadcast address are never
// used.
func (c *Cluster) allocateClusterIP() (netip.Addr, error) {
	r := c.Config.ServiceCIDR
	size := uint64(1) << (32 - r.Bits())
	if size < 8 {
		return netip.Addr{}, fmt.Errorf("service range %s is too small", r)
	}
	// Static band: min(max(16, size/16), 256) addresses at the bottom.
	static := min(max(16, size/16), 256)
	base := r.Addr().As4()
	b := uint64(base[0])<<24 | uint64(base[1])<<16 | uint64(base[2])<<8 | uint64(base[3])
	try := func(lo, hi uint64) (netip.Addr, bool) {
		if hi <= lo {
			return netip.Addr{}, false
		}
		start := lo + c.World.Rand().Uint64N(hi-lo)
		for k := uint64(0); k < hi-lo; k++ {
			off := lo + (start-lo+k)%(hi-lo)
			v := b + off
			a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
			if c.serviceByIP(a) == nil {
				return a, true
			}
		}
		return netip.Addr{}, false
	}
	if a, ok := try(static, size-1); ok {
		return a, nil
	}
	if a, ok := try(2, static); ok {
		return a, nil
	}
	//lint:ignore ST1005 the API server's own message, capital and all
	return netip.Addr{}, fmt.Errorf("Internal error occurred: failed to allocate a serviceIP: range is full")
}

// allocateNodePort picks a random free port in 30000-32767, upper band
// first, as the API server's port allocator does.
func (c *Cluster) allocateNodePort() (int, error) {
	const lo, hi = 30000, 32768
	static := 86 // min(max(16, 2768/32), 128)
	for _, band := range [][2]int{{lo + static, hi}, {lo, lo + static}} {
		n := band[1] - band[0]
		start := c.World.Rand().IntN(n)
		for k := range n {
			p := band[0] + (start+k)%n
			if c.serviceByNodePort(p) == nil {
				return p, nil
			}
		}
	}
	return 0, fmt.Errorf("range is full")
}

// endpointSlice builds the EndpointSlice the controller writes for s: the
// pods in s's namespace whose labels match the selector, ready, with their
// node names, and the target ports resolved against each pod's container
// ports.
// idx is the pod label index of this sync (see podLabelIndex).
func (c *Cluster) endpointSlice(s *Service, idx map[string][]*Pod) kubeproxy.EndpointSlice {
	es := kubeproxy.EndpointSlice{Namespace: s.Spec.Namespace, Name: s.Spec.Name + "-abcde", ServiceName: s.Spec.Name}
	if s.Spec.Selector == nil {
		return es
	}
	for _, sp := range s.Spec.Ports {
		es.Ports = append(es.Ports, kubeproxy.EndpointPort{Name: sp.Name, Protocol: sp.Protocol})
	}
	// Only pods carrying one of the selector's labels can match: look at
	// those (in creation order) instead of every pod of the cluster.
	var candidates []*Pod
	if len(s.Spec.Selector) > 0 {
		k := slices.Min(slices.Collect(maps.Keys(s.Spec.Selector)))
		candidates = idx[labelKey(s.Spec.Namespace, k, s.Spec.Selector[k])]
	}
	for _, p := range candidates {
		if p.Spec.Namespace != s.Spec.Namespace || !selects(s.Spec.Selector, p.Spec.Labels) {
			continue
		}
		var cps []kubeproxy.ContainerPort
		for _, ct := range p.Spec.Containers {
			for _, port := range ct.Ports {
				cps = append(cps, kubeproxy.ContainerPort{Name: port.Name, ContainerPort: int(port.ContainerPort),
					Protocol: kubeproxy.Protocol(cmp.Or(port.Protocol, "TCP"))})
			}
		}
		ok := true
		for i, sp := range s.Spec.Ports {
			port, found := kubeproxy.ResolveTargetPort(sp, cps)
			if !found {
				ok = false
				break
			}
			if es.Ports[i].Port == 0 {
				es.Ports[i].Port = port
			}
		}
		if !ok {
			continue
		}
		es.Endpoints = append(es.Endpoints, kubeproxy.Endpoint{Addresses: []netip.Addr{p.IP}, NodeName: p.Node.Name})
	}
	return es
}

// labelKey is a podLabelIndex key.
func labelKey(namespace, k, v string) string { return namespace + "\x00" + k + "\x00" + v }

// podLabelIndex maps namespace, label key and value to the pods carrying
// that label, in creation order: the EndpointSlice controller's informer
// index, built once per sync.
func (c *Cluster) podLabelIndex() map[string][]*Pod {
	idx := map[string][]*Pod{}
	for _, p := range c.pods {
		for k, v := range p.Spec.Labels {
			key := labelKey(p.Spec.Namespace, k, v)
			idx[key] = append(idx[key], p)
		}
	}
	return idx
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if labels[k] != sel[k] {
			return false
		}
	}
	return true
}

// Snapshot is what every kube-proxy sees: all Services and their slices.
func (c *Cluster) Snapshot() kubeproxy.Snapshot {
	var snap kubeproxy.Snapshot
	for _, s := range c.services {
		snap.Services = append(snap.Services, s.Spec.Service)
		snap.EndpointSlices = append(snap.EndpointSlices, s.EndpointSlice)
	}
	return snap
}

// ProxyConfig is the kube-proxy configuration of node n.
func (c *Cluster) ProxyConfig(n *Node) kubeproxy.Config {
	return kubeproxy.Config{NodeName: n.Name, NodeIPs: []netip.Addr{n.InternalIP}, ClusterCIDR: c.Config.ClusterCIDR}
}

// Sync is one round of the controllers: recompute every EndpointSlice, then
// re-sync kube-proxy on every node (each node's Proxier programs its
// datapath for the new snapshot and clears stale UDP conntrack entries).
func (c *Cluster) Sync() error {
	idx := c.podLabelIndex()
	for _, s := range c.services {
		s.EndpointSlice = c.endpointSlice(s, idx)
	}
	snap := c.Snapshot()
	for _, n := range c.nodes {
		if err := n.Proxier.Sync(snap); err != nil {
			return err
		}
	}
	return nil
}
