package datapath

import (
	"sort"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
)

// VerdictCode says what happens to a packet after a stage.
type VerdictCode uint8

// Verdict codes, after netfilter's NF_ACCEPT / NF_DROP / NF_STOLEN.
const (
	// Continue passes the packet to the next stage (NF_ACCEPT).
	Continue VerdictCode = iota
	// Drop discards the packet; the caller releases it (NF_DROP).
	Drop
	// Stolen means the stage took ownership: queued, handed to another
	// device, delivered or released (NF_STOLEN).
	Stolen
)

// Verdict is a stage's answer: a code and, for drops, a reason.
type Verdict struct {
	Code   VerdictCode
	Reason DropReason
}

// Verdicts without a reason, for convenience.
var (
	VerdictContinue = Verdict{Code: Continue}
	VerdictStolen   = Verdict{Code: Stolen}
)

// DropVerdict returns a Drop verdict with reason r.
func DropVerdict(r DropReason) Verdict { return Verdict{Code: Drop, Reason: r} }

// Stage is one step of a walk: it looks at the packet, may rewrite it, and
// says what happens next. Process may modify p; if it returns Stolen it owns
// p, otherwise p must not be retained after it returns.
type Stage interface {
	Process(w *Walk, p *Packet) Verdict
}

// StageFunc adapts a function to a Stage.
type StageFunc func(w *Walk, p *Packet) Verdict

// Process calls f.
func (f StageFunc) Process(w *Walk, p *Packet) Verdict { return f(w, p) }

// Hook is one of netfilter's five IPv4 hook points.
type Hook uint8

// Hook points in Linux order.
const (
	Prerouting Hook = iota
	Input
	Forward
	Output
	Postrouting
	numHooks
)

var hookNames = [...]string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// String returns the chain name iptables uses for the hook.
func (h Hook) String() string {
	if h < numHooks {
		return hookNames[h]
	}
	return "HOOK(" + itoa(int(h)) + ")"
}

// Netfilter hook priorities (include/uapi/linux/netfilter_ipv4.h). Stages
// registered on a hook run in ascending priority, like nf_hook_ops.
const (
	PriorityConntrackDefrag  = -400
	PriorityRaw              = -300
	PriorityConntrack        = -200
	PriorityMangle           = -150
	PriorityNATDst           = -100
	PriorityFilter           = 0
	PrioritySecurity         = 50
	PriorityNATSrc           = 100
	PriorityConntrackHelper  = 300
	PriorityConntrackConfirm = 1<<31 - 1
)

// HookEntry is a stage registered on a hook at a priority.
type HookEntry struct {
	Name     string
	Priority int
	Stage    Stage
	// passPackets and passBytes, when set (SetHookPassive), stand in for
	// calling Stage: the hook counts the packet there instead.
	passPackets, passBytes *uint64
}

// Passive reports whether the hook counts packets for the stage instead of
// calling it (Netns.SetHookPassive).
func (e HookEntry) Passive() bool { return e.passPackets != nil }

// hookList is the ordered list of stages on one hook.
type hookList []HookEntry

func (l *hookList) add(e HookEntry) {
	*l = append(*l, e)
	sort.SliceStable(*l, func(i, j int) bool { return (*l)[i].Priority < (*l)[j].Priority })
}

func (l *hookList) remove(name string) bool {
	for i, e := range *l {
		if e.Name == name {
			*l = append((*l)[:i], (*l)[i+1:]...)
			return true
		}
	}
	return false
}

func (l hookList) run(w *Walk, p *Packet) Verdict {
	if w.rec != nil {
		return l.runRecording(w, p)
	}
	for i := range l {
		e := &l[i]
		if e.passPackets != nil {
			*e.passPackets++
			*e.passBytes += uint64(p.Len() - EthHdrLen)
			continue
		}
		v := e.Stage.Process(w, p)
		if v.Code != Continue {
			return v
		}
	}
	return VerdictContinue
}

// runRecording is run while the fast path records (fastpath.go): every
// stage must be a FastStage whose effect can be repeated, or the
// recording is abandoned.
func (l hookList) runRecording(w *Walk, p *Packet) Verdict {
	r := w.recording()
	for i := range l {
		e := &l[i]
		if e.passPackets != nil {
			*e.passPackets++
			*e.passBytes += uint64(p.Len() - EthHdrLen)
			if r != nil {
				r.add(e.passPackets, 1, e.passBytes, uint64(p.Len()-EthHdrLen))
			}
			continue
		}
		if r != nil {
			if fs, ok := e.Stage.(FastStage); ok {
				v, fx, ok := fs.ProcessFast(w, p)
				switch {
				case !ok:
					w.noFast()
					r = nil
				case fx.R != nil:
					r.op(fcStage).fx = fx
				}
				if v.Code != Continue {
					return v
				}
				continue
			}
			w.noFast()
			r = nil
		}
		v := e.Stage.Process(w, p)
		if v.Code != Continue {
			return v
		}
	}
	return VerdictContinue
}

// Walk is the context a stage runs in: the engine (clock, random source,
// scheduling) and the chooser used at branch points.
type Walk struct {
	e *Engine
	// dev is the device whose rx or tx stages are running, for stages that
	// record where they acted.
	dev *Device
	// rec is the fast path's recording in progress (fastpath.go).
	rec *fastRec
	// from is the replayed entry that handed the running event on (set
	// for the event's start only).
	from *fastEntry
	// Chooser, when set, decides branch points (random endpoint choice)
	// instead of the random source; explore mode uses it to enumerate every
	// branch. It returns whether the branch taken with probability p matches.
	Chooser func(p float64) bool
}

// Engine returns the engine running this walk.
func (w *Walk) Engine() *Engine { return w.e }

// Now is the current virtual time.
func (w *Walk) Now() time.Duration { return w.e.now }

// Chance returns true with probability p, from the world's random source or
// the Chooser. It is how `-m statistic --mode random` decides.
func (w *Walk) Chance(p float64) bool {
	w.noFast() // a branch point: the walk is not the same every time
	if w.Chooser != nil {
		return w.Chooser(p)
	}
	if p >= 1 {
		return true
	}
	return w.e.rng.Float64() < p
}

// Observe records o for p if p is traced, filling in time and packet IDs.
// Callers should test p.Trace != nil before building o so that untraced
// packets pay nothing.
func (w *Walk) Observe(p *Packet, o trace.Observation) {
	if p.Trace == nil {
		return
	}
	if p.ID == 0 {
		p.ID = p.Trace.NewPacketID()
	}
	o.At = w.e.now
	o.Packet = p.ID
	o.Parent = p.Parent
	p.Trace.Add(o)
}

// Device returns the device whose rx or tx stages are running, or nil when
// the stage runs on a netfilter hook.
func (w *Walk) Device() *Device { return w.dev }

// where fills an observation's location from the running device.
func (w *Walk) where(o *trace.Observation) {
	if d := w.dev; d != nil && d.ns != nil {
		o.Node, o.Netns, o.Device = d.ns.Node, d.ns.Name, d.Name
	}
}
