package kubeproxy

import (
	"net/netip"
	"strconv"
)

// ServiceType is spec.type of a Service. ExternalName Services are not
// proxied by kube-proxy and are not modelled.
type ServiceType string

// Service types handled by kube-proxy.
const (
	// ServiceTypeClusterIP exposes the Service on its cluster IP only.
	ServiceTypeClusterIP ServiceType = "ClusterIP"
	// ServiceTypeNodePort adds a port (30000-32767 by default) on every node.
	ServiceTypeNodePort ServiceType = "NodePort"
	// ServiceTypeLoadBalancer adds a NodePort (unless disabled) and accepts
	// traffic to status.loadBalancer.ingress IPs.
	ServiceTypeLoadBalancer ServiceType = "LoadBalancer"
)

// Protocol is the L4 protocol of a Service or EndpointSlice port.
type Protocol string

// Protocols kube-proxy supports. An empty Protocol means TCP, the API default.
const (
	ProtocolTCP  Protocol = "TCP"
	ProtocolUDP  Protocol = "UDP"
	ProtocolSCTP Protocol = "SCTP"
)

// TrafficPolicy is spec.externalTrafficPolicy or spec.internalTrafficPolicy.
// An empty value means Cluster, the API default.
type TrafficPolicy string

// Traffic policies.
const (
	// TrafficPolicyCluster sends traffic to any ready endpoint in the cluster.
	TrafficPolicyCluster TrafficPolicy = "Cluster"
	// TrafficPolicyLocal sends traffic only to endpoints on the receiving
	// node and (for external traffic) preserves the client source address.
	TrafficPolicyLocal TrafficPolicy = "Local"
)

// SessionAffinity is spec.sessionAffinity. Empty means None.
type SessionAffinity string

// Session affinity modes.
const (
	SessionAffinityNone     SessionAffinity = "None"
	SessionAffinityClientIP SessionAffinity = "ClientIP"
)

// DefaultClientIPTimeoutSeconds is the API default for
// spec.sessionAffinityConfig.clientIP.timeoutSeconds (3 hours).
const DefaultClientIPTimeoutSeconds = 10800

// IntOrString is a Service targetPort: a number or the name of a container
// port. The zero value means "same as port".
type IntOrString struct {
	IntVal int
	StrVal string
}

// FromInt returns a numeric targetPort.
func FromInt(p int) IntOrString { return IntOrString{IntVal: p} }

// FromString returns a named targetPort.
func FromString(name string) IntOrString { return IntOrString{StrVal: name} }

// String returns the number or the name.
func (v IntOrString) String() string {
	if v.StrVal != "" {
		return v.StrVal
	}
	return strconv.Itoa(v.IntVal)
}

// ServicePort is one entry of spec.ports.
type ServicePort struct {
	// Name is required when the Service has more than one port. It becomes
	// part of the chain-name hash and of every rule comment ("ns/svc:name").
	Name     string
	Protocol Protocol
	// Port is the port on the cluster IP, external IPs and LB IPs.
	Port int
	// TargetPort is resolved by the EndpointSlice controller, not by
	// kube-proxy: kube-proxy DNATs to the port numbers in the EndpointSlices.
	// See ResolveTargetPort.
	TargetPort IntOrString
	// NodePort is the port opened on every node for NodePort and
	// LoadBalancer Services; 0 for none.
	NodePort int
}

// Service is the part of a v1.Service kube-proxy reads.
type Service struct {
	Namespace string
	Name      string
	Type      ServiceType
	// Headless is spec.clusterIP: None. kube-proxy ignores headless Services.
	Headless bool
	// ClusterIP is spec.clusterIP. Required unless Headless.
	ClusterIP netip.Addr
	// ClusterIPs is spec.clusterIPs; if set, its first entry must equal
	// ClusterIP. Secondary (IPv6) entries are ignored by this IPv4 model.
	ClusterIPs []netip.Addr
	Ports      []ServicePort
	// ExternalIPs is spec.externalIPs; traffic to them on a service port goes
	// to KUBE-EXT-*.
	ExternalIPs []netip.Addr
	// LoadBalancerIngress is status.loadBalancer.ingress[*].ip for ingress
	// points with ipMode VIP (the default).
	LoadBalancerIngress []netip.Addr
	// LoadBalancerSourceRanges is spec.loadBalancerSourceRanges: when set,
	// traffic to the LB IPs from other sources is dropped (KUBE-FW-*).
	LoadBalancerSourceRanges []netip.Prefix
	ExternalTrafficPolicy    TrafficPolicy
	InternalTrafficPolicy    TrafficPolicy
	SessionAffinity          SessionAffinity
	// ClientIPTimeoutSeconds is the ClientIP affinity timeout; 0 means
	// DefaultClientIPTimeoutSeconds.
	ClientIPTimeoutSeconds int
	// HealthCheckNodePort is spec.healthCheckNodePort (LoadBalancer with
	// externalTrafficPolicy Local); kube-proxy accepts it in filter
	// KUBE-NODEPORTS.
	HealthCheckNodePort int
}

// EndpointPort is one entry of an EndpointSlice's ports. It matches the
// Service port with the same Name and Protocol.
type EndpointPort struct {
	Name     string
	Protocol Protocol
	// Port is the destination port kube-proxy DNATs to. 0 (unset) makes
	// kube-proxy skip the port.
	Port int
}

// EndpointConditions are an endpoint's conditions. A nil Ready or Serving
// means true and a nil Terminating means false, as kube-proxy reads them.
type EndpointConditions struct {
	Ready       *bool
	Serving     *bool
	Terminating *bool
}

// Endpoint is one entry of an EndpointSlice's endpoints.
type Endpoint struct {
	// Addresses of the endpoint; kube-proxy uses only the first one.
	Addresses  []netip.Addr
	Conditions EndpointConditions
	// NodeName decides whether the endpoint is local to the proxying node.
	NodeName string
	// Zone is informational: topology-aware routing is not modelled.
	Zone string
}

// EndpointSlice is the part of a discovery.k8s.io/v1 EndpointSlice (address
// type IPv4) kube-proxy reads.
type EndpointSlice struct {
	Namespace string
	// Name orders slices of one Service the way kube-proxy's cache does;
	// it may be empty.
	Name string
	// ServiceName is the kubernetes.io/service-name label.
	ServiceName string
	Ports       []EndpointPort
	Endpoints   []Endpoint
}

// Snapshot is the set of Services and EndpointSlices one node's kube-proxy
// sees at a sync.
type Snapshot struct {
	Services       []Service
	EndpointSlices []EndpointSlice
}

// Config is kube-proxy's configuration for one node.
type Config struct {
	// NodeName is the node's name (--hostname-override); endpoints whose
	// NodeName equals it are local.
	NodeName string
	// NodeIPs are the node's IPv4 addresses; the first is the primary node
	// IP, used to decide whether LoadBalancerSourceRanges allow traffic from
	// the node itself.
	NodeIPs []netip.Addr
	// ClusterCIDR (--cluster-cidr, detect-local-mode ClusterCIDR) selects pod
	// traffic: `! -s <cidr> -j KUBE-MARK-MASQ` in KUBE-SVC-*, and
	// `-s <cidr>` short-circuit rules in KUBE-EXT-*. Leave invalid for no
	// local-traffic detector.
	ClusterCIDR netip.Prefix
	// MasqueradeBit is --iptables-masquerade-bit, the bit of the packet mark
	// KUBE-MARK-MASQ sets. 0 selects kube-proxy's default 14 (mark 0x4000);
	// set MasqueradeBitZero to really use bit 0.
	MasqueradeBit int
	// MasqueradeBitZero forces bit 0 (mark 0x1); kube-proxy allows 0-31.
	MasqueradeBitZero bool
	// MasqueradeAll (--masquerade-all) marks all cluster-IP traffic for SNAT.
	MasqueradeAll bool
	// NodePortAddresses (--nodeport-addresses) restricts NodePorts to node
	// addresses inside these prefixes. Empty means all local addresses
	// (`-m addrtype --dst-type LOCAL`).
	NodePortAddresses []netip.Prefix
	// DisableLocalhostNodePorts sets --iptables-localhost-nodeports=false.
	// By default kube-proxy sets route_localnet=1 and NodePorts answer on
	// 127.0.0.0/8 too.
	DisableLocalhostNodePorts bool
	// ConntrackTCPBeLiberal models net.netfilter.nf_conntrack_tcp_be_liberal=1,
	// in which case kube-proxy does not install the INVALID drop rule.
	ConntrackTCPBeLiberal bool
	// NFAcct models a kernel where kube-proxy could create its nfacct
	// counters; the INVALID drop rule and localhost NodePort rules then carry
	// `-m nfacct`.
	NFAcct bool
	// ServiceCIDRs are the ServiceCIDR objects' ranges kube-proxy watches
	// (MultiCIDRServiceAllocator, GA in v1.33). nftables mode drops
	// traffic to addresses in them that no Service has.
	ServiceCIDRs []netip.Prefix
	// NodePortRange is --service-node-port-range used for validation;
	// zero means 30000-32767.
	NodePortRange [2]int
}

// localhostNodePorts reports whether NodePorts are exposed on 127.0.0.0/8:
// kube-proxy turns the option off when nodePortAddresses excludes loopback.
func (c *Config) localhostNodePorts() bool {
	if c.DisableLocalhostNodePorts {
		return false
	}
	if len(c.NodePortAddresses) == 0 {
		return true
	}
	for _, p := range c.NodePortAddresses {
		if p.Contains(netip.AddrFrom4([4]byte{127, 0, 0, 1})) {
			return true
		}
	}
	return false
}

func (c *Config) masqueradeBit() int {
	if c.MasqueradeBitZero {
		return 0
	}
	if c.MasqueradeBit == 0 {
		return 14
	}
	return c.MasqueradeBit
}

func (c *Config) nodePortRange() (int, int) {
	if c.NodePortRange == [2]int{} {
		return 30000, 32767
	}
	return c.NodePortRange[0], c.NodePortRange[1]
}

// ResolveTargetPort returns the port number the EndpointSlice controller puts
// in a slice for a Service port and one pod: a numeric targetPort as is (0
// means the service port), a named one looked up among the pod's container
// ports by name and protocol. ok is false when the name is not found, in
// which case the controller leaves the pod out of the slice.
func ResolveTargetPort(sp ServicePort, containerPorts []ContainerPort) (port int, ok bool) {
	if sp.TargetPort.StrVal == "" {
		if sp.TargetPort.IntVal == 0 {
			return sp.Port, true
		}
		return sp.TargetPort.IntVal, true
	}
	proto := normProto(sp.Protocol)
	for _, cp := range containerPorts {
		if cp.Name == sp.TargetPort.StrVal && normProto(cp.Protocol) == proto {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// ContainerPort is a pod container port, used by ResolveTargetPort.
type ContainerPort struct {
	Name          string
	Protocol      Protocol
	ContainerPort int
}

func normProto(p Protocol) Protocol {
	if p == "" {
		return ProtocolTCP
	}
	return p
}

// Bool returns a pointer to b, for EndpointConditions.
func Bool(b bool) *bool { return &b }
