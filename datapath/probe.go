package datapath

import (
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
)

// Ready-made stages for the insertion points (Device.AddRxStage and
// AddTxStage, Netns.AddHookStage): count, capture, drop, corrupt and delay
// packets, the way tc filters, netem and tcpdump would on a real host.

// Counter counts the packets and bytes that pass it.
type Counter struct{ Packets, Bytes uint64 }

// Process counts p and lets it continue.
func (c *Counter) Process(w *Walk, p *Packet) Verdict {
	c.Packets++
	c.Bytes += uint64(p.Len())
	return VerdictContinue
}

// Capture keeps a copy of every frame that passes it, like tcpdump on the
// device. Limit bounds the frames kept (0: no bound).
type Capture struct {
	Frames [][]byte
	Limit  int
}

// Process copies p's frame and lets it continue.
func (c *Capture) Process(w *Walk, p *Packet) Verdict {
	if c.Limit == 0 || len(c.Frames) < c.Limit {
		c.Frames = append(c.Frames, append([]byte(nil), p.Frame()...))
	}
	return VerdictContinue
}

// DropIf drops the packets Match selects (all of them when Match is nil),
// with ReasonStage and Why in the trace: a firewall, a broken cable, a
// lossy link.
type DropIf struct {
	Match   func(p *Packet) bool
	Why     string
	Dropped int
}

// Process drops p if it matches.
func (d *DropIf) Process(w *Walk, p *Packet) Verdict {
	if d.Match != nil && !d.Match(p) {
		return VerdictContinue
	}
	d.Dropped++
	if p.Trace != nil {
		o := trace.Observation{Stage: "probe", Action: trace.Note, Summary: p.Summary(), Detail: "DropIf: " + d.Why}
		w.where(&o)
		w.Observe(p, o)
	}
	return DropVerdict(ReasonStage)
}

// Corrupt flips bits of the byte at Offset (from the start of the frame)
// with Mask in the packets Match selects (all when nil), like netem's
// corrupt. The checksums no longer hold, so the packet is marked for
// verification again.
type Corrupt struct {
	Offset  int
	Mask    byte
	Match   func(p *Packet) bool
	Applied int
}

// Process corrupts p if it matches and lets it continue.
func (c *Corrupt) Process(w *Walk, p *Packet) Verdict {
	if (c.Match != nil && !c.Match(p)) || c.Offset < 0 || c.Offset >= p.Len() {
		return VerdictContinue
	}
	before := ""
	if p.Trace != nil {
		before = p.Summary()
	}
	p.buf[p.head+c.Offset] ^= c.Mask
	p.CsumValid = false
	c.Applied++
	if p.Trace != nil {
		o := trace.Observation{Stage: "probe", Action: trace.Rewritten, Summary: p.Summary(),
			Detail: "Corrupt: byte " + itoa(c.Offset) + " ^= 0x" + hex16(uint16(c.Mask))[2:], Before: before, After: p.Summary()}
		w.where(&o)
		w.Observe(p, o)
	}
	return VerdictContinue
}

// Delay holds every packet for a fixed virtual time before letting it go on,
// like netem's delay on a device. It works as a device rx or tx stage: the
// packet re-enters the same device path after D.
type Delay struct {
	D time.Duration
	// Dev and Tx say where the stage is installed: Dev's rx path, or its tx
	// path when Tx is set.
	Dev     *Device
	Tx      bool
	Delayed int
}

type delayed struct {
	d *Delay
	p *Packet
}

// Fire re-enters the device path with the held packet.
func (x *delayed) Fire(w *Walk) {
	x.p.delayedBy = x.d
	if x.d.Tx {
		x.d.Dev.transmit(w, x.p)
	} else {
		x.d.Dev.receive(w, x.p)
	}
}

// Process holds p for D, or lets it continue when it is coming back.
func (d *Delay) Process(w *Walk, p *Packet) Verdict {
	if p.delayedBy == d {
		p.delayedBy = nil
		return VerdictContinue
	}
	if d.Dev == nil {
		return VerdictContinue
	}
	d.Delayed++
	if p.Trace != nil {
		w.Observe(p, trace.Observation{Node: d.Dev.ns.Node, Netns: d.Dev.ns.Name, Device: d.Dev.Name, Stage: "probe",
			Action: trace.Queued, Summary: p.Summary(), Detail: "Delay " + d.D.String()})
	}
	w.e.ScheduleTimer(d.D, &delayed{d: d, p: p})
	return VerdictStolen
}

var (
	_ Stage = (*Counter)(nil)
	_ Stage = (*Capture)(nil)
	_ Stage = (*DropIf)(nil)
	_ Stage = (*Corrupt)(nil)
	_ Stage = (*Delay)(nil)
)
