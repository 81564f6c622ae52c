package scenario

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
)

// validator gathers every problem of a defaulted Cluster document, each at
// the position of the field it is about.
type validator struct {
	file string
	pos  map[string]Pos
	errs Errors
}

// at returns the position of path, or of its closest recorded parent.
func (v *validator) at(path string) Pos {
	for {
		if p, ok := v.pos[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return v.pos[""]
		}
		path = path[:i]
	}
}

// fail records msg about the field at path. prefix ("invalid configuration
// for node 1") says which part of the cluster it is about, as kind's
// validation does.
func (v *validator) fail(prefix, path, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	full := path
	if prefix != "" {
		msg = prefix + ": " + msg
		full = strings.TrimPrefix(path, ".")
	}
	v.errs = append(v.errs, &Error{Pos: v.at(full), Msg: msg})
}

// dns1123Subdomain is the Kubernetes name rule for Node names.
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// ifName is what the kernel accepts as an interface name (IFNAMSIZ 16,
// no '/', ':' or whitespace).
var ifName = regexp.MustCompile(`^[^/:\s]{1,15}$`)

// Sysctls are the kernel parameters a node's sysctls may set, with the
// value kubeadm's prerequisites give them.
var Sysctls = map[string]string{
	"net.ipv4.ip_forward":                "1",
	"net.bridge.bridge-nf-call-iptables": "1",
}

// Validate checks a defaulted Cluster document and returns every problem.
// Positions come from pos (field path to position, as decoding recorded
// them); file names the file when pos has no entry.
func Validate(c *Cluster, file string, pos map[string]Pos) Errors {
	if pos == nil {
		pos = map[string]Pos{"": {File: file}}
	}
	v := &validator{file: file, pos: pos}
	v.cluster(c)
	return v.errs
}

func ipv4Prefix(p netip.Prefix) error {
	if !p.Addr().Is4() {
		//lint:ignore ST1005 the API server's field error wording
		return fmt.Errorf("Invalid value: %q: must be an IPv4 CIDR", p)
	}
	if p.Masked() != p {
		//lint:ignore ST1005 the API server's field error wording
		return fmt.Errorf("Invalid value: %q: must be a network address (%s)", p, p.Masked())
	}
	return nil
}

func (v *validator) cluster(c *Cluster) {
	if c.APIVersion != APIVersion || c.Kind != ClusterKind {
		v.fail("", "", "apiVersion %s, kind %s: not a %s %s document", c.APIVersion, c.Kind, APIVersion, ClusterKind)
	}
	n := c.Networking
	const nw = "invalid configuration for networking"
	if err := ipv4Prefix(n.PodSubnet); err != nil {
		v.fail(nw, "networking.podSubnet", "podSubnet: %v", err)
	}
	if err := ipv4Prefix(n.ServiceSubnet); err != nil {
		v.fail(nw, "networking.serviceSubnet", "serviceSubnet: %v", err)
	} else if n.ServiceSubnet.Overlaps(n.PodSubnet) {
		v.fail(nw, "networking.serviceSubnet", "serviceSubnet: Invalid value: %q: overlaps the podSubnet %s", n.ServiceSubnet, n.PodSubnet)
	}
	if n.NodeCIDRMaskSize < n.PodSubnet.Bits() || n.NodeCIDRMaskSize > 32 {
		v.fail(nw, "networking.nodeCIDRMaskSize", "nodeCIDRMaskSize: Invalid value: %d: must be between the podSubnet's prefix length %d and 32", n.NodeCIDRMaskSize, n.PodSubnet.Bits())
	}
	if n.APIServerPort < 1 || n.APIServerPort > 65535 {
		v.fail(nw, "networking.apiServerPort", "apiServerPort: Invalid value: %d: must be between 1 and 65535, inclusive", n.APIServerPort)
	}
	if a := n.APIServerAddress; a.IsValid() {
		if !a.Is4() {
			v.fail(nw, "networking.apiServerAddress", "apiServerAddress: Invalid value: %q: must be an IPv4 address", a)
		} else if !c.controlPlaneHas(a) {
			v.fail(nw, "networking.apiServerAddress", "apiServerAddress: Invalid value: %q: not an address of a control-plane node", a)
		}
	}
	k := c.Kubelet
	const kl = "invalid configuration for kubelet"
	if k.MaxPods < 1 {
		v.fail(kl, "kubelet.maxPods", "maxPods: Invalid value: %d: must be positive", k.MaxPods)
	}
	for i, a := range k.ClusterDNS {
		if !a.Is4() {
			v.fail(kl, fmt.Sprintf("kubelet.clusterDNS[%d]", i), "clusterDNS[%d]: Invalid value: %q: must be an IPv4 address", i, a)
		}
	}
	if !dns1123Subdomain.MatchString(k.ClusterDomain) {
		v.fail(kl, "kubelet.clusterDomain", "clusterDomain: Invalid value: %q: must be a DNS subdomain", k.ClusterDomain)
	}

	networks := map[string]int{}
	for i, w := range c.Networks {
		p := fmt.Sprintf("invalid configuration for network %d", i)
		path := fmt.Sprintf("networks[%d]", i)
		if w.Name == "" {
			v.fail(p, path+".name", "name: Required value")
		} else if j, dup := networks[w.Name]; dup {
			v.fail(p, path+".name", "name: Duplicate value: %q (network %d has it)", w.Name, j)
		} else {
			networks[w.Name] = i
		}
	}
	network := func(prefix, path, field, name string) {
		if name == "" {
			v.fail(prefix, path, "%s: Required value", field)
		} else if _, ok := networks[name]; !ok {
			v.fail(prefix, path, "%s: Not found: %q (not in networks)", field, name)
		}
	}

	if len(c.Nodes) == 0 {
		v.fail("", "nodes", "nodes: Required value: a cluster needs at least one node")
	}
	names := map[string]string{}
	for i := range c.Nodes {
		node := &c.Nodes[i]
		p := fmt.Sprintf("invalid configuration for node %d", i)
		path := fmt.Sprintf("nodes[%d]", i)
		switch {
		case node.Name == "":
			v.fail(p, path+".name", "name: Required value")
		case !dns1123Subdomain.MatchString(node.Name) || len(node.Name) > 253:
			v.fail(p, path+".name", "name: Invalid value: %q: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character", node.Name)
		case names[node.Name] != "":
			v.fail(p, path+".name", "name: Duplicate value: %q (%s has it)", node.Name, names[node.Name])
		default:
			names[node.Name] = fmt.Sprintf("node %d", i)
		}
		if i == 0 && node.Role != ControlPlaneRole {
			v.fail(p, path+".role", "role: Invalid value: %q: the first node runs kubeadm init and must be a control-plane node", node.Role)
		}
		if len(node.NICs) == 0 {
			v.fail(p, path+".nics", "nics: Required value: a node needs at least one NIC")
		}
		nics := map[string]bool{}
		gateway := ""
		for j, nic := range node.NICs {
			np := fmt.Sprintf("%s.nics[%d]", path, j)
			field := fmt.Sprintf("nics[%d]", j)
			if !ifName.MatchString(nic.Name) {
				v.fail(p, np+".name", "%s.name: Invalid value: %q: not a valid interface name", field, nic.Name)
			} else if nics[nic.Name] {
				v.fail(p, np+".name", "%s.name: Duplicate value: %q", field, nic.Name)
			}
			nics[nic.Name] = true
			network(p, np+".network", field+".network", nic.Network)
			switch {
			case !nic.Address.IsValid():
				v.fail(p, np+".address", "%s.address: Required value", field)
			case !nic.Address.Addr().Is4():
				v.fail(p, np+".address", "%s.address: Invalid value: %q: must be an IPv4 address with prefix length", field, nic.Address)
			}
			if nic.Gateway.IsValid() {
				switch {
				case gateway != "":
					v.fail(p, np+".gateway", "%s.gateway: Invalid value: %q: the default route is already via %s", field, nic.Gateway, gateway)
				case nic.Address.IsValid() && !nic.Address.Masked().Contains(nic.Gateway):
					v.fail(p, np+".gateway", "%s.gateway: Invalid value: %q: not on the NIC's network %s (Nexthop has invalid gateway)", field, nic.Gateway, nic.Address.Masked())
				}
				gateway = nic.Name
			}
			if nic.MTU < 68 || nic.MTU > 65535 {
				v.fail(p, np+".mtu", "%s.mtu: Invalid value: %d: must be between 68 and 65535", field, nic.MTU)
			}
			if nic.MAC != "" {
				hw, err := net.ParseMAC(nic.MAC)
				if err != nil || len(hw) != 6 || hw[0]&1 == 1 || (hw[0]|hw[1]|hw[2]|hw[3]|hw[4]|hw[5]) == 0 {
					v.fail(p, np+".mac", "%s.mac: Invalid value: %q: must be a unicast Ethernet address (52:54:00:12:34:56)", field, nic.MAC)
				}
			}
		}
		if a := node.NodeIP; a.IsValid() && !node.hasAddr(a) {
			v.fail(p, path+".nodeIP", "nodeIP: Invalid value: %q: not an address of the node's NICs (the kubelet fails: failed to validate nodeIP: node IP: %q not found in the host's network interfaces)", a, a)
		}
		if node.FlannelIface != "" && !nics[node.FlannelIface] {
			v.fail(p, path+".flannelIface", "flannelIface: Invalid value: %q: no NIC has that name (flanneld fails: error looking up interface %s)", node.FlannelIface, node.FlannelIface)
		}
		if node.PodCIDR.IsValid() {
			if err := ipv4Prefix(node.PodCIDR); err != nil {
				v.fail(p, path+".podCIDR", "podCIDR: %v", err)
			}
		}
		for _, key := range sortedKeys(node.Sysctls) {
			val := node.Sysctls[key]
			if _, ok := Sysctls[key]; !ok {
				v.fail(p, path+".sysctls."+key, "sysctls: Unsupported value: %q: supported values: %s", key, quoteAll(sortedKeys(Sysctls)))
				continue
			}
			if val != "0" && val != "1" {
				v.fail(p, path+".sysctls."+key, "sysctls[%s]: Invalid value: %q: must be 0 or 1", key, val)
			}
		}
	}
	for i, h := range c.ExternalHosts {
		p := fmt.Sprintf("invalid configuration for external host %d", i)
		path := fmt.Sprintf("externalHosts[%d]", i)
		switch {
		case h.Name == "":
			v.fail(p, path+".name", "name: Required value")
		case names[h.Name] != "":
			v.fail(p, path+".name", "name: Duplicate value: %q (%s has it)", h.Name, names[h.Name])
		default:
			names[h.Name] = fmt.Sprintf("external host %d", i)
		}
		network(p, path+".network", "network", h.Network)
		switch {
		case !h.Address.IsValid():
			v.fail(p, path+".address", "address: Required value")
		case !h.Address.Addr().Is4():
			v.fail(p, path+".address", "address: Invalid value: %q: must be an IPv4 address with prefix length", h.Address)
		}
		if h.Gateway.IsValid() && h.Address.IsValid() && !h.Address.Masked().Contains(h.Gateway) {
			v.fail(p, path+".gateway", "gateway: Invalid value: %q: not on the host's network %s (Nexthop has invalid gateway)", h.Gateway, h.Address.Masked())
		}
		for j, r := range h.Routes {
			rp := fmt.Sprintf("%s.routes[%d]", path, j)
			if !r.To.IsValid() {
				v.fail(p, rp+".to", "routes[%d].to: Required value", j)
			} else if err := ipv4Prefix(r.To); err != nil {
				v.fail(p, rp+".to", "routes[%d].to: %v", j, err)
			}
			if !r.Via.IsValid() {
				v.fail(p, rp+".via", "routes[%d].via: Required value", j)
			} else if h.Address.IsValid() && !h.Address.Masked().Contains(r.Via) {
				v.fail(p, rp+".via", "routes[%d].via: Invalid value: %q: not on the host's network %s (Nexthop has invalid gateway)", j, r.Via, h.Address.Masked())
			}
		}
	}
}

func (n *Node) hasAddr(a netip.Addr) bool {
	for _, nic := range n.NICs {
		if nic.Address.Addr() == a {
			return true
		}
	}
	return false
}

func (c *Cluster) controlPlaneHas(a netip.Addr) bool {
	for i := range c.Nodes {
		if c.Nodes[i].Role == ControlPlaneRole && c.Nodes[i].hasAddr(a) {
			return true
		}
	}
	return false
}
