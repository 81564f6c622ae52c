package scenario

import "net/netip"

// APIVersion is the apiVersion of the Cluster document.
const APIVersion = "kubewalk.io/v1alpha1"

// ClusterKind is the kind of the Cluster document.
const ClusterKind = "Cluster"

// TypeMeta is apiVersion and kind, the two keys every document starts
// with. It is local (as kind's is), not apimachinery's, so the Cluster
// document is read strictly without Kubernetes' conversion machinery.
type TypeMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

// Cluster is the one document of a scenario file that is not a Kubernetes
// object: the machines (VMs) and their wiring, and the settings kubeadm,
// the kubelet, the CNI and kube-proxy are given. Everything else in the
// file is an ordinary manifest.
//
//	apiVersion: kubewalk.io/v1alpha1
//	kind: Cluster
//	nodes:
//	- name: cp1
//	  role: control-plane
//	  nics:
//	  - {network: lan, address: 192.168.1.10/24, gateway: 192.168.1.1}
//	- name: w1
//	  nics:
//	  - {network: lan, address: 192.168.1.11/24, gateway: 192.168.1.1}
type Cluster struct {
	TypeMeta `yaml:",inline"`

	// Name names the cluster in listings. Default: "kubewalk".
	Name string `yaml:"name"`

	// Seed seeds the world's random source (MAC addresses, kube-proxy's
	// endpoint choice, ports): the same file and seed give the same walks.
	// A command's --seed flag overrides it. Default: 1.
	Seed uint64 `yaml:"seed"`

	// Nodes are the cluster's VMs in join order: the first runs kubeadm
	// init, the rest kubeadm join; the node IPAM controller hands out pod
	// ranges in this order. At least one is required.
	Nodes []Node `yaml:"nodes"`

	// Networks are the underlay L2 segments (a libvirt network, a switch)
	// the NICs and external hosts plug into. Default: when the list is
	// empty, one network for every name the NICs and external hosts use,
	// in order of first use. When it is not empty, every name used must be
	// listed (a misspelt name would otherwise be a segment of its own).
	Networks []Network `yaml:"networks"`

	// Networking is kubeadm's ClusterConfiguration networking and the
	// add-ons' choice.
	Networking Networking `yaml:"networking"`

	// Kubelet is the KubeletConfiguration every node's kubelet runs with.
	Kubelet Kubelet `yaml:"kubelet"`

	/* Advanced fields */

	// ExternalHosts are machines outside the cluster on an underlay
	// network: a client on the node network, a load balancer's router.
	ExternalHosts []ExternalHost `yaml:"externalHosts"`
}

// NodeRole is a node's kubeadm role.
type NodeRole string

const (
	// ControlPlaneRole runs the API server (kubeadm init / join
	// --control-plane); kubeadm labels it node-role.kubernetes.io/control-plane.
	ControlPlaneRole NodeRole = "control-plane"
	// WorkerRole runs workloads only (kubeadm join).
	WorkerRole NodeRole = "worker"
)

// ServiceState says whether a systemd unit on a node is running.
type ServiceState string

const (
	// Running is an active unit (systemctl start).
	Running ServiceState = "running"
	// Stopped is an inactive unit (systemctl stop).
	Stopped ServiceState = "stopped"
)

// Node is one VM of the cluster.
//
//   - name: cka-w1
//     role: worker
//     nics:
//   - name: eth0
//     network: lan
//     address: 192.168.122.21/24
//     gateway: 192.168.122.1
type Node struct {
	// Name is the hostname, which the kubelet registers as the Node's
	// name. Required.
	Name string `yaml:"name"`

	// Role is control-plane or worker. Default: control-plane for the
	// first node, worker for the others. The first node must be a
	// control-plane node (kubeadm init runs there).
	Role NodeRole `yaml:"role"`

	// NICs are the VM's network interfaces, in the order the kernel names
	// them. At least one is required.
	NICs []NIC `yaml:"nics"`

	// NodeIP is the kubelet's --node-ip: the InternalIP it registers.
	// Default: unset, and the kubelet registers the address of the NIC
	// holding the default route (the first NIC when none has a gateway).
	NodeIP netip.Addr `yaml:"nodeIP"`

	// FlannelIface is flanneld's --iface: the NIC whose address is the
	// VXLAN endpoint. Default: unset, and flanneld, too, uses the NIC
	// holding the default route.
	FlannelIface string `yaml:"flannelIface"`

	// PodCIDR pre-sets the Node's spec.podCIDR instead of letting the
	// node IPAM controller allocate the next free range (how two nodes end
	// up with the same range). Default: unset (allocated).
	PodCIDR netip.Prefix `yaml:"podCIDR"`

	// Sysctls are kernel parameters set on the node after kubeadm's
	// prerequisites (which set net.ipv4.ip_forward=1 and
	// net.bridge.bridge-nf-call-iptables=1), e.g.
	// net.bridge.bridge-nf-call-iptables: "0" for a node where
	// br_netfilter is not loaded. Modelled: net.ipv4.ip_forward,
	// net.bridge.bridge-nf-call-iptables. Default: none.
	Sysctls map[string]string `yaml:"sysctls"`

	/* Advanced fields */

	// Kubelet is the state of kubelet.service. Default: running.
	Kubelet ServiceState `yaml:"kubelet"`

	// ContainerRuntime is the state of containerd.service. Default:
	// running.
	ContainerRuntime ServiceState `yaml:"containerRuntime"`
}

// NIC is a VM's network interface.
//
//   - name: eth1
//     network: lan
//     address: 192.168.122.21/24
//     gateway: 192.168.122.1
//     mtu: 1500
//     mac: 52:54:00:12:34:56
type NIC struct {
	// Name is the interface name. Default: eth0 for the first NIC, eth1
	// for the second, and so on.
	Name string `yaml:"name"`

	// Network is the underlay network the NIC plugs into. Required.
	Network string `yaml:"network"`

	// Address is the NIC's IPv4 address with its prefix length
	// (ip addr add 192.168.122.21/24 dev eth0). Required.
	Address netip.Prefix `yaml:"address"`

	// Gateway, when set, is the default route's next hop via this NIC
	// (ip route add default via GATEWAY dev NAME). At most one NIC per
	// node has one. Default: unset (no default route via this NIC).
	Gateway netip.Addr `yaml:"gateway"`

	// MTU is the interface MTU. Default: 1500.
	MTU int `yaml:"mtu"`

	// MAC is the interface's hardware address. Default: 52:54:00 (the
	// prefix libvirt and QEMU use) followed by three bytes from the
	// world's random source.
	MAC string `yaml:"mac"`
}

// Network is an underlay L2 segment.
type Network struct {
	// Name is how NICs and external hosts refer to it. Required.
	Name string `yaml:"name"`
}

// CNI is the pod network add-on.
type CNI string

const (
	// Flannel is kube-flannel with the VXLAN backend (flannel.1, VNI 1,
	// UDP 8472) delegating to the bridge and host-local plugins.
	Flannel CNI = "flannel"
	// NoCNI is the bridge and host-local plugins without an overlay: pods
	// reach pods on their own node only.
	NoCNI CNI = "none"
)

// ProxyMode is kube-proxy's --proxy-mode.
type ProxyMode string

const (
	// IPTablesProxyMode programs Services as iptables rules.
	IPTablesProxyMode ProxyMode = "iptables"
	// NFTablesProxyMode programs Services as an nftables table.
	NFTablesProxyMode ProxyMode = "nftables"
	// IPVSProxyMode programs Services as IPVS virtual servers.
	IPVSProxyMode ProxyMode = "ipvs"
)

// Networking is kubeadm's networking configuration and the add-ons'.
//
//	networking:
//	  podSubnet: 10.244.0.0/16
//	  serviceSubnet: 10.96.0.0/12
//	  cni: flannel
//	  kubeProxyMode: iptables
type Networking struct {
	// PodSubnet is kubeadm's networking.podSubnet (--pod-network-cidr,
	// the controller manager's --cluster-cidr, flannel's Network).
	// Default: 10.244.0.0/16, kube-flannel.yml's.
	PodSubnet netip.Prefix `yaml:"podSubnet"`

	// ServiceSubnet is kubeadm's networking.serviceSubnet (the API
	// server's --service-cluster-ip-range). Default: 10.96.0.0/12,
	// kubeadm's.
	ServiceSubnet netip.Prefix `yaml:"serviceSubnet"`

	// NodeCIDRMaskSize is the controller manager's --node-cidr-mask-size:
	// the size of each node's podCIDR. Default: 24.
	NodeCIDRMaskSize int `yaml:"nodeCIDRMaskSize"`

	// APIServerAddress is the API server's --advertise-address (kubeadm's
	// localAPIEndpoint.advertiseAddress), the endpoint of the
	// default/kubernetes Service. Default: the first control-plane node's
	// node IP.
	APIServerAddress netip.Addr `yaml:"apiServerAddress"`

	// APIServerPort is the API server's --secure-port (kubeadm's
	// localAPIEndpoint.bindPort). Default: 6443.
	APIServerPort int `yaml:"apiServerPort"`

	// CNI is the pod network add-on. Default: flannel.
	CNI CNI `yaml:"cni"`

	// KubeProxyMode is kube-proxy's mode. Default: iptables.
	KubeProxyMode ProxyMode `yaml:"kubeProxyMode"`

	// Addons is what `kubeadm init` and the CNI's manifest install once
	// the first control-plane node is up. Default: kubeadm.
	Addons Addons `yaml:"addons"`
}

// Addons selects the cluster add-ons.
type Addons string

const (
	// KubeadmAddons are a kubeadm cluster's: the control plane's static
	// pods on every control-plane node, kube-proxy (ConfigMap and
	// DaemonSet), CoreDNS (Deployment of 2 and the kube-dns Service at the
	// tenth service address) and, with flannel, the kube-flannel
	// DaemonSet. CoreDNS starts before any worker joins, so its pods run
	// on the first control-plane node, whose taint it tolerates.
	KubeadmAddons Addons = "kubeadm"
	// NoAddons installs nothing: only the objects the file lists.
	NoAddons Addons = "none"
)

// Kubelet is the part of the KubeletConfiguration that shapes the network.
//
//	kubelet:
//	  maxPods: 110
//	  clusterDNS: [10.96.0.10]
//	  clusterDomain: cluster.local
type Kubelet struct {
	// MaxPods is the number of pods the kubelet runs (the node's
	// allocatable pods, which the scheduler checks). Default: 110.
	MaxPods int `yaml:"maxPods"`

	// ClusterDNS are the nameservers the kubelet writes into pods'
	// resolv.conf (kubeadm sets the tenth address of the service subnet).
	// Default: [10.96.0.10].
	ClusterDNS []netip.Addr `yaml:"clusterDNS"`

	// ClusterDomain is the DNS domain of the cluster, the search suffix
	// in pods' resolv.conf. Default: cluster.local.
	ClusterDomain string `yaml:"clusterDomain"`
}

// ExternalHost is a machine outside the cluster with one NIC, eth0.
//
//   - name: outside
//     network: lan
//     address: 192.168.122.100/24
//     routes:
//   - {to: 192.168.122.200/32, via: 192.168.122.21}
type ExternalHost struct {
	// Name is the host's name; it must differ from every node's. Required.
	Name string `yaml:"name"`

	// Network is the underlay network eth0 plugs into. Required.
	Network string `yaml:"network"`

	// Address is eth0's IPv4 address with prefix length. Required.
	Address netip.Prefix `yaml:"address"`

	// Gateway, when set, is the default route's next hop. Default: unset.
	Gateway netip.Addr `yaml:"gateway"`

	// Routes are static routes added after the address, as a router in
	// front of the cluster would have. Default: none.
	Routes []Route `yaml:"routes"`
}

// Route is a static route, ip route add TO via VIA.
type Route struct {
	// To is the destination prefix. Required.
	To netip.Prefix `yaml:"to"`
	// Via is the next hop, on the host's network. Required.
	Via netip.Addr `yaml:"via"`
}
