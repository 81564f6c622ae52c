package sim

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/datapath/nftables"
	"github.com/kubewalk/kubewalk/internal/textarena"
	"github.com/kubewalk/kubewalk/sim/apiserver"
	"github.com/kubewalk/kubewalk/sim/cni"
	"github.com/kubewalk/kubewalk/sim/controller"
	"github.com/kubewalk/kubewalk/sim/flannel"
	"github.com/kubewalk/kubewalk/sim/ipam"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/nodeipam"
)

// Config is the cluster-wide configuration kubeadm and the add-ons are
// given.
type Config struct {
	// Seed seeds the world's random source.
	Seed uint64
	// ClusterCIDR is --pod-network-cidr / --cluster-cidr (10.244.0.0/16).
	ClusterCIDR netip.Prefix
	// NodeCIDRMaskSize is --node-cidr-mask-size (24).
	NodeCIDRMaskSize int
	// ServiceCIDR is --service-cluster-ip-range (10.96.0.0/12).
	ServiceCIDR netip.Prefix
	// Overlay selects the pod network; "flannel-vxlan" (the default) or
	// "none" (pods reach only their own node).
	Overlay string
	// UnderlayLatency is the one-way latency of underlay segments created
	// implicitly by AddNode (default 100µs).
	UnderlayLatency time.Duration
	// ProxyMode is kube-proxy's mode on every node (the kube-proxy
	// ConfigMap's `mode`): "" (iptables on Linux), "iptables", "nftables"
	// or "ipvs". Other values are kube-proxy's validation error.
	ProxyMode kubeproxy.Mode
	// IPVSScheduler is the kube-proxy ConfigMap's ipvs.scheduler for
	// ProxyMode ipvs: "" (rr) or one kube-proxy accepts (rr, wrr, lc, wlc,
	// lblc, lblcr, sh, dh, sed, nq); others are kube-proxy's validation
	// error when a node's kube-proxy starts.
	IPVSScheduler string
}

// DefaultConfig is a kubeadm cluster with flannel: 10.244.0.0/16 split in
// /24s, services in 10.96.0.0/12.
func DefaultConfig() Config {
	return Config{
		ClusterCIDR:      netip.MustParsePrefix("10.244.0.0/16"),
		NodeCIDRMaskSize: 24,
		ServiceCIDR:      netip.MustParsePrefix("10.96.0.0/12"),
		Overlay:          "flannel-vxlan",
		UnderlayLatency:  100 * time.Microsecond,
	}
}

// ConfigError reports an impossible cluster, node or pod specification.
type ConfigError struct {
	Object string // "cluster", "node cka-w1", "pod default/web"
	Field  string
	Msg    string
}

// Error implements the error interface.
func (e *ConfigError) Error() string {
	if e.Field == "" {
		return e.Object + ": " + e.Msg
	}
	return e.Object + ": " + e.Field + ": " + e.Msg
}

// Cluster is a set of nodes on underlay segments, their pods, and the
// components that wire them.
type Cluster struct {
	World   *World
	Config  Config
	Flannel *flannel.Network

	// API is the cluster's API server: the objects (Nodes, Pods,
	// Services, EndpointSlices, workloads) the controllers act on.
	API *apiserver.Server

	cp    *controlPlane
	nodes []*Node
	// nodeByName indexes nodes by name: the kubelet and kube-proxy look
	// their node up on every pod and every sync.
	nodeByName map[string]*Node
	// proxyFailing counts the nodes whose last kube-proxy sync failed, so
	// that the check after every change costs nothing when none has.
	proxyFailing int
	pods         []*Pod
	// podByName indexes pods by "namespace/name": the duplicate-name
	// check of every AddPod is a lookup, not a scan.
	podByName  map[string]*Pod
	services   []*Service // kube-proxy's informer cache, in the order it saw them
	svcByName  map[string]*Service
	slices     map[string][]*discoveryv1.EndpointSlice // "namespace/service" → its slices
	started    map[string]time.Duration                // pod key → when its sandbox is up
	advertised bool
	flannel    *flanneld
	proxyConf  *string            // the kube-proxy ConfigMap's config.conf, as kube-proxy would read it
	snap       kubeproxy.Snapshot // kube-proxy's view, cached
	snapGen    uint64             // bumped by every Service or EndpointSlice event, and only by them
	snapAt     uint64
	snapValid  bool
	// proxyShare is kube-proxy's rules generated and compiled once for
	// the nodes syncing the latest snapshot generation; staleUDP the stale
	// UDP flows between two generations.
	proxyShare *proxyShare
	staleUDP   map[[2]uint64][]kubeproxy.StaleUDPFlow
	// proxyLog is the Services the informers saw events for, by snapshot
	// generation (from proxyLogFrom on); proxyChanged the Services changed
	// between two generations; proxyLastShared the last rulesets compiled
	// (filter, nat), which the next compile reuses chains of;
	// proxyLastFresh the last full sync's.
	proxyLog     []proxyChange
	proxyLogFrom uint64
	// proxyLogCompactAt is the length at which the log is next compacted:
	// twice what the last compaction kept, so that a burst of events no
	// node has synced yet (10,000 Services) does not rescan every node
	// and the whole log on every event.
	proxyLogCompactAt int
	proxyChanged      map[[2]uint64]map[string]bool
	// lastChanged is the last map of changed Services a partial sync was
	// keyed by (changedKey), its length then, and its key.
	lastChanged     map[string]bool
	lastChangedLen  int
	lastChangedKey  string
	proxyLastShared [2]*netfilter.Shared
	proxyLastFresh  [2]*netfilter.Shared // the last full sync's
	nodeIndepGen    uint64
	nodeIndep       bool
	stopping        map[string]time.Duration // pod key → when its containers have stopped
	podErrs         map[string]error         // pod key → why the kubelet could not start it
	externals       []*Host
	texts           map[textKey]string  // the kubelet's texts, by word (text)
	podMemo         podMemo             // what podObject and podSpecOf made last
	arena           textarena.Arena     // the pods' keys and IDs
	arenaText       func([]byte) string // arena.text, made once
	podChunk        []Pod               // the Pods newPod hands out next
	segments        []*datapath.Segment
	cidrs           *nodeipam.CIDRSet
	nextCID         int
	// submitting is the key of the pod submitPod is creating, for the
	// kubelet's watch to queue (kubeletKey).
	submitting string

	// lastStart is what the pods started at the last instant a kubelet
	// started one share (kubeletStarts).
	lastStart *kubeletStart

	// proxyTrack is kube-proxy's state between syncs for the rules every
	// node shares (sim/proxy_load.go).
	proxyTrack *proxyTrack
}

// NewCluster validates cfg (the three ranges must not overlap, which
// nothing in Kubernetes checks for you) and returns an empty cluster.
func NewCluster(cfg Config) (*Cluster, error) {
	d := DefaultConfig()
	if !cfg.ClusterCIDR.IsValid() {
		cfg.ClusterCIDR = d.ClusterCIDR
	}
	if cfg.NodeCIDRMaskSize == 0 {
		cfg.NodeCIDRMaskSize = d.NodeCIDRMaskSize
	}
	if !cfg.ServiceCIDR.IsValid() {
		cfg.ServiceCIDR = d.ServiceCIDR
	}
	if cfg.Overlay == "" {
		cfg.Overlay = d.Overlay
	}
	if cfg.UnderlayLatency == 0 {
		cfg.UnderlayLatency = d.UnderlayLatency
	}
	if cfg.Overlay != "flannel-vxlan" && cfg.Overlay != "none" {
		return nil, &ConfigError{Object: "cluster", Field: "overlay", Msg: fmt.Sprintf("unknown overlay %q (want flannel-vxlan or none)", cfg.Overlay)}
	}
	if !cfg.ServiceCIDR.Addr().Is4() || cfg.ServiceCIDR.Masked() != cfg.ServiceCIDR {
		return nil, &ConfigError{Object: "cluster", Field: "serviceCIDR", Msg: fmt.Sprintf("%s must be a masked IPv4 prefix", cfg.ServiceCIDR)}
	}
	if cfg.ClusterCIDR.Overlaps(cfg.ServiceCIDR) {
		return nil, &ConfigError{Object: "cluster", Field: "serviceCIDR", Msg: fmt.Sprintf("%s overlaps the pod network %s", cfg.ServiceCIDR, cfg.ClusterCIDR)}
	}
	mode, err := kubeproxy.ParseMode(string(cfg.ProxyMode))
	if err != nil {
		return nil, &ConfigError{Object: "cluster", Field: "proxyMode", Msg: err.Error()}
	}
	cfg.ProxyMode = mode
	// kube-proxy validates the ipvs section whatever the mode.
	if _, err := kubeproxy.ParseIPVSScheduler(cfg.IPVSScheduler); err != nil {
		return nil, &ConfigError{Object: "cluster", Field: "ipvsScheduler", Msg: err.Error()}
	}
	cidrs, err := nodeipam.NewCIDRSet(cfg.ClusterCIDR, cfg.NodeCIDRMaskSize)
	if err != nil {
		return nil, &ConfigError{Object: "cluster", Field: "clusterCIDR", Msg: err.Error()}
	}
	c := &Cluster{World: NewWorld(cfg.Seed), Config: cfg, cidrs: cidrs, started: map[string]time.Duration{}, podErrs: map[string]error{}, stopping: map[string]time.Duration{},
		svcByName: map[string]*Service{}, slices: map[string][]*discoveryv1.EndpointSlice{}}
	c.arenaText = c.arena.Text
	if err := c.startControlPlane(); err != nil {
		return nil, &ConfigError{Object: "cluster", Msg: err.Error()}
	}
	if cfg.Overlay == "flannel-vxlan" {
		fc := flannel.DefaultConfig()
		fc.Network = cfg.ClusterCIDR
		c.Flannel = flannel.NewNetwork(fc)
		c.watchFlannel()
	}
	return c, nil
}

// Segment returns the underlay segment named name, creating it.
func (c *Cluster) Segment(name string) *datapath.Segment {
	for _, s := range c.segments {
		if s.Name == name {
			return s
		}
	}
	s := datapath.NewSegment(name, c.Config.UnderlayLatency)
	c.segments = append(c.segments, s)
	return s
}

// Segments returns the underlay segments in creation order.
func (c *Cluster) Segments() []*datapath.Segment { return c.segments }

// NICSpec is one network interface of a node (a VM's NIC).
type NICSpec struct {
	Name    string       // "eth0"
	Segment string       // underlay segment it plugs into
	Addr    netip.Prefix // 192.168.122.21/24
	Gateway netip.Addr   // default route via this gateway, if valid
	MTU     int          // 1500 when 0
	MAC     datapath.MAC // 52:54:00:xx:xx:xx (random) when zero
}

// NodeSpec describes a node to add.
type NodeSpec struct {
	Name string
	NICs []NICSpec
	// NodeIP is kubelet's --node-ip. When unset kubelet registers the
	// address of the NIC holding the default route.
	NodeIP netip.Addr
	// FlannelIface is flanneld's --iface. When unset flannel, too, uses
	// the default-route NIC.
	FlannelIface string
	// PodCIDR pre-sets spec.podCIDR instead of letting the controller
	// allocate one (how two nodes end up with the same range).
	PodCIDR netip.Prefix
	// Role is the kubeadm role: a control-plane node gets the
	// node-role.kubernetes.io/control-plane label and NoSchedule taint.
	Role NodeRole
	// MaxPods is the kubelet's maxPods (110 when 0).
	MaxPods int
	// Labels and Taints are added to the Node object at registration
	// (kubelet --node-labels, --register-with-taints).
	Labels map[string]string
	Taints []corev1.Taint
}

// NodeRole is a node's kubeadm role.
type NodeRole string

// The kubeadm roles.
const (
	RoleControlPlane NodeRole = "control-plane"
	RoleWorker       NodeRole = "worker"
)

// Node is a cluster node: its root network namespace, InternalIP, podCIDR,
// host-local allocator and pods.
type Node struct {
	Name       string
	Host       *datapath.Netns
	InternalIP netip.Addr
	PodCIDR    netip.Prefix
	IPAM       *ipam.HostLocal
	Flannel    *flannel.Node
	// Annotations are those components write on the Node object.
	Annotations map[string]string
	// Conditions such as NetworkUnavailable; Ready when none is set.
	NetworkUnavailable bool
	// proxyRules are the rules kube-proxy generated at its last sync in
	// iptables mode (ProxyRules), or proxyRulesGen generates them when
	// asked (the node loaded rules compiled once for many nodes).
	proxyRules    *kubeproxy.Rules
	proxyRulesGen func() *kubeproxy.Rules
	// Proxier is the node's kube-proxy in the cluster's ProxyMode.
	Proxier kubeproxy.Proxier
	// NFTRules is what kube-proxy wrote at its last sync in nftables mode
	// (nil in the other modes).
	NFTRules *kubeproxy.NFTRules
	// NFTables is the root namespace's nf_tables ruleset.
	NFTables *nftables.NFTables
	// ProxySyncError is the error of the node's last kube-proxy sync, nil
	// when it succeeded: what kube-proxy logs as "Failed to execute
	// iptables-restore", naming the line and rule. The rules of the last
	// successful sync stay loaded. RestoreFailures counts failed syncs
	// (sync_proxy_rules_iptables_restore_failures_total).
	ProxySyncError  error
	RestoreFailures int
	// Netfilter and Conntrack are the root namespace's iptables tables and
	// connection tracking table.
	Netfilter *netfilter.Netfilter
	Conntrack *conntrack.Table

	cluster *Cluster
	pods    []*Pod
	// ipText is InternalIP as text, made once for every pod's
	// status.hostIP (ipTextOf: the address it was made from).
	ipText   string
	ipTextOf netip.Addr
	// hostIPList is status.hostIPs of its pods, made from ipText: one
	// slice shared by every pod's status (a stored object is never
	// modified, and every copy handed out is deep).
	hostIPList []corev1.HostIP
}

// internalIPString is InternalIP.String(), made once while it does not
// change.
func (n *Node) internalIPString() string {
	if n.ipTextOf != n.InternalIP || n.ipText == "" {
		n.ipText, n.ipTextOf = n.InternalIP.String(), n.InternalIP
	}
	return n.ipText
}

// hostIPs is status.hostIPs of the node's pods ([{ip: InternalIP}]),
// made once while InternalIP does not change.
func (n *Node) hostIPs() []corev1.HostIP {
	ip := n.internalIPString()
	if len(n.hostIPList) != 1 || n.hostIPList[0].IP != ip {
		n.hostIPList = []corev1.HostIP{{IP: ip}}
	}
	return n.hostIPList[:1:1]
}

// containerStarted is the value every running container's
// status.started points to (true): one, shared by every pod's status.
var containerStarted = true

// kubeletStart is what the pods the kubelets start at one instant share
// in their status: status.startTime and a running container's state
// (startedAt) point here.
type kubeletStart struct {
	time    metav1.Time
	running corev1.ContainerStateRunning
	// conds are the conditions of a pod Running now whose conditions were
	// prior before (a stored slice, never modified): the pods of a wave
	// share one slice (full, so an append copies).
	prior, conds []corev1.PodCondition
}

// runningConditionTypes are the conditions a Running, Ready pod has True,
// in the order the kubelet sets them.
var runningConditionTypes = [...]corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled}

// runningConditions returns the status.conditions of pod (its stored
// object) once it runs now, as controller.SetPodCondition sets each of
// runningConditionTypes True: the slice made for the last pod started at
// this instant with the same conditions before, else one made here from
// a copy of them.
func (st0 *kubeletStart) runningConditions(pod *corev1.Pod) []corev1.PodCondition {
	prior := pod.Status.Conditions
	if st0.conds != nil && slices.Equal(prior, st0.prior) {
		return st0.conds
	}
	up := &corev1.Pod{Status: corev1.PodStatus{Conditions: make([]corev1.PodCondition, len(prior), len(prior)+len(runningConditionTypes))}}
	copy(up.Status.Conditions, prior)
	for _, t := range runningConditionTypes {
		controller.SetPodCondition(up, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: st0.time})
	}
	st0.prior, st0.conds = prior, slices.Clip(up.Status.Conditions)
	return st0.conds
}

// kubeletStarts returns the kubeletStart of now, made once for all the
// pods started at this instant (a wave of pods starts at one).
func (c *Cluster) kubeletStarts() *kubeletStart {
	now := c.API.Now()
	if c.lastStart == nil || c.lastStart.time.Time != now {
		t := metav1.NewTime(now)
		c.lastStart = &kubeletStart{time: t, running: corev1.ContainerStateRunning{StartedAt: t}}
	}
	return c.lastStart
}

// Pods returns the node's pods in creation order.
func (n *Node) Pods() []*Pod { return n.pods }

// ProxyRules returns the rules kube-proxy generated at its last sync in
// iptables mode (nil in the other modes, or before its first sync).
func (n *Node) ProxyRules() *kubeproxy.Rules {
	if n.proxyRules == nil && n.proxyRulesGen != nil {
		n.proxyRules, n.proxyRulesGen = n.proxyRulesGen(), nil
	}
	return n.proxyRules
}

// setProxyRules records kube-proxy's last rules: r, or gen to generate
// them when asked (both nil: none).
func (n *Node) setProxyRules(r *kubeproxy.Rules, gen func() *kubeproxy.Rules) {
	n.proxyRules, n.proxyRulesGen = r, gen
}

// SetPodCIDR changes spec.podCIDR, which the API server forbids once set.
func (n *Node) SetPodCIDR(p netip.Prefix) error {
	if n.PodCIDR.IsValid() && p != n.PodCIDR {
		return &ConfigError{Object: "node " + n.Name, Field: "spec.podCIDRs",
			Msg: `Forbidden: node updates may not change podCIDR except from "" to valid`}
	}
	n.PodCIDR = p
	return nil
}

// AddNode creates the node's root namespace with its NICs, sets the sysctls
// kubeadm's prerequisites set (ip_forward=1, bridge-nf-call-iptables=1),
// picks the InternalIP as kubelet does, allocates spec.podCIDR as
// kube-controller-manager does and starts flanneld on it.
func (c *Cluster) AddNode(spec NodeSpec) (*Node, error) {
	obj := "node " + spec.Name
	if spec.Name == "" {
		return nil, &ConfigError{Object: "node", Field: "metadata.name", Msg: "required"}
	}
	if c.Node(spec.Name) != nil {
		return nil, &ConfigError{Object: obj, Msg: "already exists"}
	}
	if len(spec.NICs) == 0 {
		return nil, &ConfigError{Object: obj, Field: "nics", Msg: "a node needs at least one NIC"}
	}
	w := c.World
	host := w.NewNetns(spec.Name, "host")
	host.Sysctl.IPForward = true
	host.Sysctl.BridgeNFCallIPTables = true
	var defNIC *NICSpec
	for i := range spec.NICs {
		nic := &spec.NICs[i]
		if !nic.Addr.IsValid() || !nic.Addr.Addr().Is4() {
			return nil, &ConfigError{Object: obj, Field: "nics[" + nic.Name + "].addr", Msg: "an IPv4 address with prefix length is required"}
		}
		mac := nic.MAC
		if mac.IsZero() {
			r := w.Rand().Uint32()
			mac = datapath.MAC{0x52, 0x54, 0x00, byte(r >> 16), byte(r >> 8), byte(r)}
		}
		mtu := cmp.Or(nic.MTU, 1500)
		d, err := host.AddNIC(nic.Name, mac, mtu)
		if err != nil {
			return nil, &ConfigError{Object: obj, Field: "nics", Msg: err.Error()}
		}
		d.SetUp(true)
		if err := c.Segment(nic.Segment).Attach(d); err != nil {
			return nil, &ConfigError{Object: obj, Field: "nics", Msg: err.Error()}
		}
		if err := host.AddAddr(nic.Name, nic.Addr); err != nil {
			return nil, &ConfigError{Object: obj, Field: "nics", Msg: err.Error()}
		}
		if nic.Gateway.IsValid() {
			if defNIC != nil {
				return nil, &ConfigError{Object: obj, Field: "nics[" + nic.Name + "].gateway", Msg: "a default route is already set via " + defNIC.Name}
			}
			if err := host.AddRoute(datapath.RouteSpec{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: nic.Gateway, Dev: nic.Name}); err != nil {
				return nil, &ConfigError{Object: obj, Field: "nics[" + nic.Name + "].gateway", Msg: err.Error()}
			}
			defNIC = nic
		}
	}
	if defNIC == nil {
		defNIC = &spec.NICs[0]
	}
	n := &Node{Name: spec.Name, Host: host, cluster: c, Annotations: map[string]string{}}
	// kubelet: --node-ip, else the default-route NIC's address.
	if spec.NodeIP.IsValid() {
		if !host.IsLocal(spec.NodeIP.As4()) {
			return nil, &ConfigError{Object: obj, Field: "nodeIP", Msg: fmt.Sprintf("%s is not an address of this node", spec.NodeIP)}
		}
		n.InternalIP = spec.NodeIP
	} else {
		n.InternalIP = defNIC.Addr.Addr()
	}
	// kube-controller-manager: allocate spec.podCIDR.
	if spec.PodCIDR.IsValid() {
		if !spec.PodCIDR.Addr().Is4() || spec.PodCIDR.Masked() != spec.PodCIDR {
			return nil, &ConfigError{Object: obj, Field: "spec.podCIDR", Msg: fmt.Sprintf("%s must be a masked IPv4 prefix", spec.PodCIDR)}
		}
		c.cidrs.Occupy(spec.PodCIDR)
		n.PodCIDR = spec.PodCIDR
	} else {
		p, err := c.cidrs.AllocateNext()
		if err != nil {
			return nil, &ConfigError{Object: obj, Field: "spec.podCIDR", Msg: err.Error()}
		}
		n.PodCIDR = p
	}
	alloc, err := ipam.NewHostLocal(n.PodCIDR)
	if err != nil {
		return nil, &ConfigError{Object: obj, Field: "spec.podCIDR", Msg: err.Error()}
	}
	n.IPAM = alloc
	if c.Flannel != nil {
		iface := defNIC.Name
		pub := defNIC.Addr.Addr()
		if spec.FlannelIface != "" {
			found := false
			for _, nic := range spec.NICs {
				if nic.Name == spec.FlannelIface {
					iface, pub, found = nic.Name, nic.Addr.Addr(), true
				}
			}
			if !found {
				return nil, &ConfigError{Object: obj, Field: "flannelIface", Msg: fmt.Sprintf("no NIC named %q", spec.FlannelIface)}
			}
		}
		fn, err := c.Flannel.Start(spec.Name, host, n.PodCIDR, pub, iface)
		if err != nil {
			return nil, &ConfigError{Object: obj, Field: "flannel", Msg: err.Error()}
		}
		n.Flannel = fn
		for k, v := range fn.Annotations() {
			n.Annotations[k] = v
		}
	}
	if err := c.installNetfilter(n); err != nil {
		return nil, &ConfigError{Object: obj, Field: "iptables", Msg: err.Error()}
	}
	px, err := c.newProxier(n)
	if err != nil {
		return nil, &ConfigError{Object: obj, Field: "kube-proxy", Msg: err.Error()}
	}
	n.Proxier = px
	c.nodes = append(c.nodes, n)
	if c.nodeByName == nil {
		c.nodeByName = map[string]*Node{}
	}
	c.nodeByName[n.Name] = n
	if err := c.registerNode(n, spec); err != nil {
		c.nodes = c.nodes[:len(c.nodes)-1]
		delete(c.nodeByName, n.Name)
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	if err := c.startFlanneld(n); err != nil {
		return nil, &ConfigError{Object: obj, Field: "flannel", Msg: err.Error()}
	}
	if !c.advertised && (spec.Role == RoleControlPlane || len(c.nodes) == 1) {
		// kubeadm init: --apiserver-advertise-address defaults to the
		// default-route address of the first control-plane node.
		if err := c.API.SetKubernetesEndpoints(n.InternalIP); err != nil {
			return nil, &ConfigError{Object: obj, Msg: err.Error()}
		}
		c.advertised = spec.Role == RoleControlPlane
	}
	if err := c.Settle(); err != nil {
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	if err := c.proxyError(); err != nil {
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	return n, nil
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	return c.nodeByName[name]
}

// Nodes returns the nodes in creation order.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// ContainerPort is a port a container listens on.
type ContainerPort struct {
	Name          string
	ContainerPort uint16
	Protocol      string // "TCP" (default), "UDP" or "SCTP"
	HostPort      uint16
	// Echo makes the container an echo server on a UDP port: it sends
	// every datagram back to its sender. Without it a UDP port is a
	// silent listener, as a real container that only reads is: the
	// datagram is delivered and nothing answers. (TCP ports always
	// complete the handshake: the kernel does that for a listener.)
	Echo bool
}

// Container is one container of a pod; only its ports matter to the network.
type Container struct {
	Name  string
	Ports []ContainerPort
}

// PodSpec describes a pod to add.
type PodSpec struct {
	Namespace, Name string
	Node            string
	Labels          map[string]string
	Containers      []Container
	HostNetwork     bool
}

// Pod is a running pod: a network namespace held by its pause container and
// shared by its containers, wired by the CNI plugins.
type Pod struct {
	// Spec is the pod as the kubelet read it from its object; its Labels
	// map is the stored object's (read it, do not modify it: LabelPod
	// changes a pod's labels), and its Containers may be shared with the
	// pods made before and after it from the same containers (read them,
	// do not modify them).
	Spec        PodSpec
	Node        *Node
	Netns       *datapath.Netns
	IP          netip.Addr
	ContainerID string
	// HostVeth is the node-side veth (vethXXXXXXXX), a port of cni0.
	HostVeth *datapath.Device
	// Object is the v1.Pod as the kubelet wrote it when the pod started
	// (status Running, its IPs): the API server's stored object as it was
	// then, shared with the store (read it, do not modify it). The
	// Pending object the pod was created as is not kept.
	Object *corev1.Pod
}

// Name is "namespace/name".
func (p *Pod) Name() string { return p.Spec.Namespace + "/" + p.Spec.Name }

// AddPod creates the pod object (pinned to spec.Node when it is set,
// else placed by the scheduler) and runs the world until it settles: the
// kubelet creates the sandbox namespace, the runtime runs the CNI ADD
// (bridge + host-local, as flannel delegates) and the containers start,
// each binding its ports in the shared namespace. A pod that does not
// reach Running is deleted again and the error says why (the scheduler's
// message, the sandbox error, or "address already in use" when two
// containers bind the same port).
func (c *Cluster) AddPod(spec PodSpec) (*Pod, error) {
	if spec.Namespace == "" {
		spec.Namespace = "default"
	}
	obj := "pod " + spec.Namespace + "/" + spec.Name
	if spec.Name == "" {
		return nil, &ConfigError{Object: "pod", Field: "metadata.name", Msg: "required"}
	}
	if c.Pod(spec.Namespace, spec.Name) != nil {
		return nil, &ConfigError{Object: obj, Msg: "already exists"}
	}
	if spec.Node != "" {
		n := c.Node(spec.Node)
		if n == nil {
			return nil, &ConfigError{Object: obj, Field: "spec.nodeName", Msg: fmt.Sprintf("node %q does not exist", spec.Node)}
		}
		spec.Node = n.Name // the node's own string, not one per pod
	}
	if _, ok := c.API.Peek("Namespace", "", spec.Namespace); !ok {
		if _, err := c.API.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spec.Namespace}}); err != nil {
			return nil, &ConfigError{Object: obj, Msg: err.Error()}
		}
	}
	if err := c.submitPod(spec, c.podKey(spec)); err != nil {
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	if err := c.Settle(); err != nil {
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	p := c.Pod(spec.Namespace, spec.Name)
	if p == nil {
		perr := c.podError(spec.Namespace, spec.Name)
		_ = c.API.DeleteNow("Pod", spec.Namespace, spec.Name)
		delete(c.started, spec.Namespace+"/"+spec.Name)
		if err := c.Settle(); err != nil {
			return nil, err
		}
		return nil, perr
	}
	if err := c.proxyError(); err != nil {
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	return p, nil
}

// AddPods creates several pods at once, as a controller scaling up does,
// and runs the world until they settle: the kubelets start them together
// (one PodStartDelay for all, where AddPod after AddPod spends one each).
// The specs are checked first, as AddPod checks one (name, duplicates
// among them too, node); a bad one creates none. A pod that does not
// reach Running is deleted again, as with AddPod; the others stay, and
// the error joins the reasons.
func (c *Cluster) AddPods(specs []PodSpec) ([]*Pod, error) {
	seen := make(map[string]bool, len(specs))
	keys := make([]string, len(specs)) // "namespace/name", as podByName's
	for i := range specs {
		spec := &specs[i]
		if spec.Namespace == "" {
			spec.Namespace = "default"
		}
		if spec.Name == "" {
			return nil, &ConfigError{Object: "pod", Field: "metadata.name", Msg: "required"}
		}
		k := c.podKey(*spec)
		keys[i] = k
		if c.podByName[k] != nil || seen[k] {
			return nil, &ConfigError{Object: "pod " + k, Msg: "already exists"}
		}
		seen[k] = true
		if spec.Node != "" {
			n := c.Node(spec.Node)
			if n == nil {
				return nil, &ConfigError{Object: "pod " + k, Field: "spec.nodeName", Msg: fmt.Sprintf("node %q does not exist", spec.Node)}
			}
			spec.Node = n.Name // the node's own string, not one per pod
		}
	}
	for i, spec := range specs {
		if _, ok := c.API.Peek("Namespace", "", spec.Namespace); !ok {
			if _, err := c.API.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spec.Namespace}}); err != nil {
				return nil, &ConfigError{Object: "pod " + spec.Namespace + "/" + spec.Name, Msg: err.Error()}
			}
		}
		if err := c.submitPod(spec, keys[i]); err != nil {
			return nil, &ConfigError{Object: "pod " + spec.Namespace + "/" + spec.Name, Msg: err.Error()}
		}
	}
	if err := c.Settle(); err != nil {
		return nil, err
	}
	out := make([]*Pod, 0, len(specs))
	var errs []error
	for i, spec := range specs {
		p := c.podByName[keys[i]]
		if p == nil {
			errs = append(errs, c.podError(spec.Namespace, spec.Name))
			_ = c.API.DeleteNow("Pod", spec.Namespace, spec.Name)
			delete(c.started, spec.Namespace+"/"+spec.Name)
			continue
		}
		out = append(out, p)
	}
	if len(errs) > 0 {
		if err := c.Settle(); err != nil {
			return nil, err
		}
		return out, errors.Join(errs...)
	}
	if err := c.proxyError(); err != nil {
		return out, &ConfigError{Object: "pods", Msg: err.Error()}
	}
	return out, nil
}

// submitPod creates the pod object of spec, whose key ("namespace/name")
// is k: the API server's store and indexes, the kubelet's queue and the
// running pod (podByName, its sandbox's name) hold that one string, and
// the object's name is its tail.
func (c *Cluster) submitPod(spec PodSpec, k string) error {
	if isPodKey(k, spec.Namespace, spec.Name) {
		spec.Name = k[len(spec.Namespace)+1:]
	}
	c.submitting = k
	defer func() { c.submitting = "" }()
	return c.API.SubmitAt(podObject(spec, &c.podMemo), k)
}

// kubeletKey is the kubelet's queue key of pod ("namespace/name"): the
// key it is being submitted under (submitPod), else one made.
func (c *Cluster) kubeletKey(pod *corev1.Pod) string {
	if k := c.submitting; isPodKey(k, pod.Namespace, pod.Name) {
		return k
	}
	return controller.Key(pod.Namespace, pod.Name)
}

// isPodKey reports whether k is "namespace/name".
func isPodKey(k, namespace, name string) bool {
	return len(k) == len(namespace)+1+len(name) && k[:len(namespace)] == namespace && k[len(namespace)] == '/' && k[len(namespace)+1:] == name
}

// runPod is the container runtime's part for a pod bound to n: the
// sandbox (a network namespace held by the pause container, or the
// node's own for hostNetwork), the CNI ADD, and the containers binding
// their ports.
func (c *Cluster) runPod(spec PodSpec, n *Node, obj *corev1.Pod, key string) (*Pod, error) {
	c.nextCID++
	p := c.newPod()
	*p = Pod{Spec: spec, Node: n, ContainerID: c.containerID(uint64(c.nextCID) * 0x9e3779b97f4a7c15), Object: obj}
	name := key // the sandbox's name and podByName's key: one string, the kubelet's key
	if !isPodKey(name, spec.Namespace, spec.Name) {
		name = p.Name()
	}
	if spec.HostNetwork {
		p.Netns = n.Host
		p.IP = n.InternalIP
	} else {
		p.Netns = c.World.NewNetns(n.Name, name)
		mtu := 1500
		if n.Flannel != nil {
			mtu = n.Flannel.VTEP.MTU()
		}
		res, err := cni.BridgeAdd(n.Host, p.Netns, p.ContainerID, cni.BridgeConf{
			Bridge: "cni0", MTU: mtu, HairpinMode: true, IsGateway: true, IsDefaultGateway: true, Text: c.arenaText,
		}, n.IPAM)
		if err != nil {
			//lint:ignore ST1005 the kubelet's own event text
			return nil, fmt.Errorf("Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox %q: plugin type=\"bridge\" failed (add): %w", p.ContainerID, err)
		}
		p.IP = res.Addr.Addr()
		p.HostVeth = res.HostVeth
	}
	for _, ct := range spec.Containers {
		for _, port := range ct.Ports {
			var err error
			switch proto := cmp.Or(port.Protocol, "TCP"); proto {
			case "TCP":
				_, err = p.Netns.ListenTCP(port.ContainerPort)
			case "UDP":
				_, err = p.Netns.ListenUDP(port.ContainerPort, port.Echo)
			case "SCTP":
				_, err = p.Netns.ListenSCTP(port.ContainerPort)
			default:
				err = fmt.Errorf("protocol %q not supported (TCP, UDP or SCTP)", proto)
			}
			if err != nil {
				c.teardown(p)
				return nil, fmt.Errorf("containers[%s]: %w", ct.Name, err)
			}
		}
	}
	c.pods = append(c.pods, p)
	if c.podByName == nil {
		c.podByName = map[string]*Pod{}
	}
	c.podByName[name] = p
	n.pods = append(n.pods, p)
	return p, nil
}

// newPod is a new zero Pod, from a chunk of podChunk: one allocation
// for the collector per chunk of pods instead of one per pod (a chunk
// lives while any of its pods is referenced).
func (c *Cluster) newPod() *Pod {
	if len(c.podChunk) == 0 {
		c.podChunk = make([]Pod, podChunk)
	}
	p := &c.podChunk[0]
	c.podChunk = c.podChunk[1:]
	return p
}

// podChunk is the number of Pods newPod allocates at once.
const podChunk = 64

// podKey is spec's key, "namespace/name" (made in the arena).
func (c *Cluster) podKey(spec PodSpec) string {
	var buf [96]byte
	return c.arena.Text(append(append(append(buf[:0], spec.Namespace...), '/'), spec.Name...))
}

// containerID is containerID(v) made in the arena.
func (c *Cluster) containerID(v uint64) string {
	var b [64]byte
	return c.arena.Text(appendContainerID(b[:0], v))
}

// appendContainerID appends containerID(v) to b.
func appendContainerID(b []byte, v uint64) []byte {
	b = append(b, "0000000000000000000000000000000000000000000000000000000000000000"...)
	for i := len(b) - 1; v > 0; i-- {
		b[i] = "0123456789abcdef"[v&0xf]
		v >>= 4
	}
	return b
}

// containerID is v as 64 hex digits, zero-padded (a 256-bit container
// ID whose high bits are zero), as "%064x" prints it.
func containerID(v uint64) string { return string(appendContainerID(nil, v)) }

// killPod stops the pod's containers and runs the CNI DEL.
func (c *Cluster) killPod(p *Pod) {
	c.teardown(p)
	c.pods = slices.DeleteFunc(c.pods, func(x *Pod) bool { return x == p })
	delete(c.podByName, p.Name())
	p.Node.pods = slices.DeleteFunc(p.Node.pods, func(x *Pod) bool { return x == p })
}

func (c *Cluster) teardown(p *Pod) {
	if p.Spec.HostNetwork {
		for _, ct := range p.Spec.Containers {
			for _, port := range ct.Ports {
				switch cmp.Or(port.Protocol, "TCP") {
				case "TCP":
					p.Netns.CloseTCP(port.ContainerPort)
				case "UDP":
					p.Netns.CloseUDP(port.ContainerPort)
				case "SCTP":
					p.Netns.CloseSCTP(port.ContainerPort)
				}
			}
		}
		return
	}
	_ = cni.BridgeDel(p.Node.Host, p.Netns, p.ContainerID, p.Node.IPAM)
}

// DeletePod deletes the pod object and runs the world until the kubelet
// has killed its containers and run the CNI DEL, and the Services it was
// an endpoint of are re-synced.
func (c *Cluster) DeletePod(namespace, name string) error {
	if c.Pod(namespace, name) == nil {
		if _, err := c.API.Get("Pod", namespace, name); err != nil {
			return &ConfigError{Object: "pod " + namespace + "/" + name, Msg: "not found"}
		}
	}
	if err := c.API.Delete("Pod", namespace, name); err != nil {
		return &ConfigError{Object: "pod " + namespace + "/" + name, Msg: err.Error()}
	}
	if err := c.Settle(); err != nil {
		return err
	}
	return c.proxyError()
}

// Pod returns the pod namespace/name, or nil.
func (c *Cluster) Pod(namespace, name string) *Pod {
	return c.podByName[namespace+"/"+name]
}

// Pods returns all pods in creation order.
func (c *Cluster) Pods() []*Pod { return c.pods }

// Host is a machine outside the cluster on an underlay segment (a client
// on the node network, a router).
type Host struct {
	Name  string
	Netns *datapath.Netns
	IP    netip.Addr
}

// AddExternalHost creates a machine with one NIC on segment.
func (c *Cluster) AddExternalHost(name, segment string, addr netip.Prefix, gateway netip.Addr) (*Host, error) {
	obj := "host " + name
	for _, h := range c.externals {
		if h.Name == name {
			return nil, &ConfigError{Object: obj, Msg: "already exists"}
		}
	}
	if c.Node(name) != nil {
		return nil, &ConfigError{Object: obj, Msg: "a node has that name"}
	}
	ns := c.World.NewNetns(name, "host")
	r := c.World.Rand().Uint32()
	d, err := ns.AddNIC("eth0", datapath.MAC{0x52, 0x54, 0x00, byte(r >> 16), byte(r >> 8), byte(r)}, 1500)
	if err != nil {
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	d.SetUp(true)
	if err := c.Segment(segment).Attach(d); err != nil {
		return nil, &ConfigError{Object: obj, Msg: err.Error()}
	}
	if err := ns.AddAddr("eth0", addr); err != nil {
		return nil, &ConfigError{Object: obj, Field: "addr", Msg: err.Error()}
	}
	if gateway.IsValid() {
		if err := ns.AddRoute(datapath.RouteSpec{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: gateway, Dev: "eth0"}); err != nil {
			return nil, &ConfigError{Object: obj, Field: "gateway", Msg: err.Error()}
		}
	}
	h := &Host{Name: name, Netns: ns, IP: addr.Addr()}
	c.externals = append(c.externals, h)
	return h, nil
}

// ExternalHost returns the external host named name, or nil.
func (c *Cluster) ExternalHost(name string) *Host {
	for _, h := range c.externals {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// ExternalHosts returns the external hosts in creation order.
func (c *Cluster) ExternalHosts() []*Host { return c.externals }
