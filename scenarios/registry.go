package scenarios

import (
	"slices"
	"strings"

	"github.com/kubewalk/kubewalk/sim"
)

// Scenario is a built-in cluster a user can pick by name (kubewalk trace
// --scenario NAME).
type Scenario struct {
	// Name is the key users type: lower case, dash-separated.
	Name string
	// Description is one line for listings.
	Description string
	// New builds a fresh cluster seeded with seed.
	New func(seed uint64) (*sim.Cluster, error)
}

var registry = []Scenario{
	{"reference", "kubeadm + flannel VXLAN, 3 nodes (cka-cp1, cka-w1, cka-w2), pods net/client, net/web-1, net/web-2, host outside",
		func(seed uint64) (*sim.Cluster, error) {
			r, err := NewReference(seed)
			if err != nil {
				return nil, err
			}
			return r.Cluster, nil
		}},
	{"br-netfilter-off", "the reference cluster with bridge-nf-call-iptables=0: replies from a same-node Service endpoint are not un-DNATed",
		func(seed uint64) (*sim.Cluster, error) {
			r, err := NewBrNetfilterOff(seed)
			if err != nil {
				return nil, err
			}
			return r.Cluster, nil
		}},
	{"flows", "the reference cluster plus one Service of every kind (UDP, eTP Local, LoadBalancer with source ranges, externalIPs, no endpoints, iTP Local, session affinity)",
		func(seed uint64) (*sim.Cluster, error) {
			f, err := NewFlows(seed)
			if err != nil {
				return nil, err
			}
			return f.Cluster, nil
		}},
	{"duplicate-podcidr", "cka-w1 and cka-w2 both have podCIDR 10.244.1.0/24; pod net/probe on cka-cp1 reaches the wrong pod",
		func(seed uint64) (*sim.Cluster, error) {
			r, err := NewDuplicatePodCIDR(seed)
			if err != nil {
				return nil, err
			}
			return r.Cluster, nil
		}},
	{"wrong-nic", "every VM's eth0 is NAT 10.0.2.15; nodes register it as InternalIP and VXLAN goes nowhere",
		func(seed uint64) (*sim.Cluster, error) {
			r, err := NewWrongNIC(seed, false)
			if err != nil {
				return nil, err
			}
			return r.Cluster, nil
		}},
	{"wrong-nic-fixed", "the wrong-nic lab with kubelet --node-ip and flannel --iface=eth1 set",
		func(seed uint64) (*sim.Cluster, error) {
			r, err := NewWrongNIC(seed, true)
			if err != nil {
				return nil, err
			}
			return r.Cluster, nil
		}},
}

// Registry returns the built-in scenarios in listing order.
func Registry() []Scenario { return slices.Clone(registry) }

// Lookup returns the scenario named name.
func Lookup(name string) (Scenario, bool) {
	for _, s := range registry {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Names returns the scenario names, comma-separated, for error messages.
func Names() string {
	var n []string
	for _, s := range registry {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}
