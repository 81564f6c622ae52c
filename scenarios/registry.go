package scenarios

import (
	"slices"
	"strings"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/scenario"
)

// Scenario is a built-in cluster a user can pick by name (kubewalk trace
// --scenario NAME): an embedded scenario file, NAME.yaml.
type Scenario struct {
	// Name is the key users type: lower case, dash-separated.
	Name string
	// Description is one line for listings.
	Description string
}

var registry = []Scenario{
	{"reference", "kubeadm + flannel VXLAN, 3 nodes (cka-cp1, cka-w1, cka-w2), pods net/client, net/web-1, net/web-2, host outside"},
	{"br-netfilter-off", "the reference cluster with bridge-nf-call-iptables=0: replies from a same-node Service endpoint are not un-DNATed"},
	{"flows", "the reference cluster plus one Service of every kind (UDP, eTP Local, LoadBalancer with source ranges, externalIPs, no endpoints, iTP Local, session affinity)"},
	{"duplicate-podcidr", "cka-w1 and cka-w2 both have podCIDR 10.244.1.0/24; pod net/probe on cka-cp1 reaches the wrong pod"},
	{"wrong-nic", "every VM's eth0 is NAT 10.0.2.15; nodes register it as InternalIP and VXLAN goes nowhere"},
	{"wrong-nic-fixed", "the wrong-nic lab with kubelet --node-ip and flannel --iface=eth1 set"},
}

// New builds a fresh cluster from the scenario's file, seeded with seed.
func (s Scenario) New(seed uint64) (*sim.Cluster, error) { return build(s.Name, seed, "") }

// File returns the scenario's parsed file (shared: do not modify it).
func (s Scenario) File() (*scenario.File, error) { return Load(s.Name) }

// Source is the scenario's file as embedded, what kubewalk scenarios show
// prints.
func (s Scenario) Source() []byte {
	b, _ := Source(s.Name)
	return b
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
