// Package sim is the Kubernetes layer of kubewalk: a World (virtual clock,
// seeded random source, event queue) and a Cluster of nodes and pods whose
// network namespaces are configured the way kubeadm, kube-controller-manager,
// the CNI plugins and flannel configure a real node.
package sim

import (
	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

// World owns the virtual clock, the seeded random source (math/rand/v2 PCG)
// and the event queue every namespace of a simulation shares. The same seed
// and the same inputs give the same walk, byte for byte.
type World struct {
	*datapath.Engine
	Seed uint64
}

// NewWorld returns a world whose random source is seeded with seed.
func NewWorld(seed uint64) *World {
	return &World{Engine: datapath.NewEngine(seed), Seed: seed}
}

// Send queues a locally generated IPv4 packet (no Ethernet header) for
// output from ns, traced into tr when tr is not nil.
func (w *World) Send(ns *datapath.Netns, ip []byte, tr *trace.Trace) error {
	p, err := ns.Send(ip)
	if err != nil {
		return err
	}
	p.Trace = tr
	return nil
}
