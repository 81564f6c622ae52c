// Package sim is the Kubernetes layer of kubewalk: a World (virtual clock,
// seeded random source, event queue) and a Cluster of nodes and pods whose
// network namespaces are configured the way kubeadm, kube-controller-manager,
// the CNI plugins and flannel configure a real node.
package sim

import (
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

// World owns the virtual clock, the seeded random source (math/rand/v2 PCG)
// and the event queue every namespace of a simulation shares. The same seed
// and the same inputs give the same walk, byte for byte.
type World struct {
	*datapath.Engine
	Seed uint64

	runner Runner
}

// Runner runs a world's events in place of its engine, for a component
// that has work of its own to finish after each event: sim/netstack brings
// its gVisor stacks and their goroutines to rest after every event.
type Runner interface {
	// RunUntil has datapath.Engine.RunUntil's contract: run the events
	// due at or before until (until < 0: until only background events
	// are queued), then set the clock to until if it is later.
	RunUntil(until time.Duration) error
}

// SetRunner makes Run, RunUntil and Advance (and so Cluster.Settle and
// RunFor) go through r.
func (w *World) SetRunner(r Runner) { w.runner = r }

// Run processes events until no foreground event is queued, as
// datapath.Engine.Run, through the world's Runner when one is set.
func (w *World) Run() error { return w.RunUntil(-1) }

// RunUntil processes the events due at or before until (until < 0: all
// foreground work), as datapath.Engine.RunUntil, through the world's
// Runner when one is set.
func (w *World) RunUntil(until time.Duration) error {
	if w.runner != nil {
		return w.runner.RunUntil(until)
	}
	return w.Engine.RunUntil(until)
}

// Advance moves the clock forward by d, running everything due on the way,
// as datapath.Engine.Advance, through the world's Runner when one is set.
func (w *World) Advance(d time.Duration) error { return w.RunUntil(w.Now() + d) }

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
