package conntrack

import (
	"math"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
)

// The conntrack stages' part in the datapath's namespace fast path
// (datapath.FastStage): a packet of a live, confirmed connection that
// changes neither the connection's TCP state nor its status is tracked
// the same way every time — its timeout refreshed from the current time,
// counted as found, attached — so the fast path may repeat exactly that.
// Anything else (a new connection, a state move, the first reply, the
// moment a flow becomes ASSURED, an expired or killed entry, an ICMP
// error) is not repeatable and makes the fast path walk the packet.

// steady reports whether tracking a packet of e in direction reply with
// TCP flags flags at now would refresh its timeout and nothing else.
func (t *Table) steady(e *Entry, reply bool, flags uint8, now time.Duration) bool {
	if e.t != t || e.Status&(StatusConfirmed|StatusDying) != StatusConfirmed || e.expires <= now {
		return false
	}
	if reply && e.Status&StatusSeenReply == 0 {
		return false // the first reply sets SEEN_REPLY
	}
	switch e.Orig.Proto {
	case datapath.ProtoTCP:
		dir, idx := 0, tcpIndex(flags)
		if reply {
			dir = 1
		}
		if idx == tcpRstSet || tcpConntracks[dir][idx][e.TCPState] != e.TCPState {
			return false
		}
		if e.Status&StatusSeenReply != 0 && e.Status&StatusAssured == 0 && (e.TCPState == sSR || e.TCPState == sES) {
			return false // becomes ASSURED
		}
	case datapath.ProtoUDP:
		if e.Status&StatusSeenReply != 0 && e.Status&StatusAssured == 0 && now > e.streamTS {
			return false // becomes a stream, ASSURED
		}
	case datapath.ProtoSCTP:
		if (reply || e.Status&StatusSeenReply != 0) && e.Status&StatusAssured == 0 {
			return false
		}
	}
	return true
}

// ProcessFast is Process, reporting a steady packet's tracking as an
// effect the fast path can repeat.
func (s *inStage) ProcessFast(w *datapath.Walk, p *datapath.Packet) (datapath.Verdict, datapath.Effect, bool) {
	t := s.t
	if p.CT.Entry != nil || p.Len() < datapath.EthHdrLen+20 || p.EtherType() != 0x0800 {
		return s.Process(w, p), datapath.Effect{}, false
	}
	var pr parsed
	parseIP(p.IPv4(), &pr)
	if pr.frag || !pr.ok || (pr.t.Proto == datapath.ProtoICMP && isICMPError(pr.t.ICMPType())) {
		return s.Process(w, p), datapath.Effect{}, false
	}
	sl, ok := t.find(pr.t)
	if !ok || !t.steady(sl.e, sl.reply, pr.tcpFlags, w.Now()) {
		return s.processParsed(w, p, &pr, sl, ok), datapath.Effect{}, false
	}
	e := sl.e
	status, state := e.Status, e.TCPState
	v := s.Process(w, p)
	if x, _ := Get(p); x != e || e.Status != status || e.TCPState != state {
		return v, datapath.Effect{}, false
	}
	return v, datapath.Effect{R: s, Ref: e, B: sl.reply, U: uint32(pr.tcpFlags), N: uint64(status), M: uint64(state)}, true
}

// Valid reports whether the connection is still the one tracked, in the
// same state, and the packet still steady. The packet was steady when
// recorded, and with the same table, status, TCP state, direction and
// flags all steady looks at that can change is the time: the entry's
// expiry and, for a replied UDP flow not yet ASSURED, its turn to a
// stream.
func (s *inStage) Valid(w *datapath.Walk, fx *datapath.Effect) bool {
	return s.valid(fx.Ref.(*Entry), fx, w.Now())
}

func (s *inStage) valid(e *Entry, fx *datapath.Effect, now time.Duration) bool {
	if e.Status != Status(fx.N) || e.TCPState != TCPState(fx.M) || e.t != s.t {
		return false
	}
	return e.expires > now && (e.Orig.Proto != datapath.ProtoUDP ||
		e.Status&(StatusSeenReply|StatusAssured) != StatusSeenReply || now <= e.streamTS)
}

// Flatten hands the fast path what Apply repeats for a connection whose
// timeout refresh is known from its status and state alone (all but
// SCTP's, which is asked Valid and applied): Valid's checks as one timer
// (the status, the TCP state and the expiry; the entry's table is set
// when it is created and an entry is never reused, newEntry), the timeout
// the refresh sets (steadyTimeout; the table's timeouts are set when it
// is made), the moment that timeout would change (a replied UDP flow not
// yet past its stream time, Valid's last test), the lookup counted as
// found, and the connection attached.
func (s *inStage) Flatten(fx *datapath.Effect, f *datapath.Flat) bool {
	e := fx.Ref.(*Entry)
	now := f.Now()
	if !s.valid(e, fx, now) {
		return false
	}
	d, until, ok := s.t.steadyTimeout(e, now)
	if !ok {
		return false
	}
	if until != math.MaxInt64 {
		f.Until(until)
	}
	f.Timer((*uint32)(&e.Status), uint32(fx.N), (*uint8)(&e.TCPState), uint8(fx.M), &e.expires, d)
	f.Add(&s.t.Stats.Found, 1, &s.t.Stats.Found, 0)
	f.SetCT(datapath.CTRef{Entry: e, Reply: fx.B})
	return true
}

// steadyTimeout is the timeout refresh sets e to for a steady packet
// (steady) at now and at every later time before until (math.MaxInt64:
// for good) while e's status and TCP state stay as they are, with ok
// false for a protocol whose refresh it does not know (SCTP's).
//
//   - TCP (tcpPacket): the state stays, not a RST, no turn to ASSURED: the
//     state's timeout, or the unacknowledged one for an established
//     connection that has seen no reply, if shorter.
//   - UDP (udpPacket): a replied flow past its stream time (ASSURED
//     already, or not steady) gets the stream timeout, for good (the time
//     only moves later); any other flow the unreplied one, and a replied
//     flow only until its stream time.
func (t *Table) steadyTimeout(e *Entry, now time.Duration) (d, until time.Duration, ok bool) {
	until = math.MaxInt64
	switch e.Orig.Proto {
	case datapath.ProtoTCP:
		d = t.to.tcp(e.TCPState)
		if e.Status&StatusSeenReply == 0 && e.TCPState == sES && d > t.to.TCPUnacknowledged {
			d = t.to.TCPUnacknowledged
		}
	case datapath.ProtoUDP:
		d = t.to.UDP
		if e.Status&StatusSeenReply != 0 {
			if now > e.streamTS {
				d = t.to.UDPStream
			} else {
				until = e.streamTS + 1
			}
		}
	case datapath.ProtoICMP:
		d = t.to.ICMP
	case datapath.ProtoSCTP:
		return 0, 0, false
	default:
		d = t.to.Generic
	}
	return d, until, true
}

// BytesKept tells the fast path that tracking changes no byte of the
// packet.
func (s *inStage) BytesKept() {}

// Apply tracks p as Process does for a steady packet.
func (s *inStage) Apply(w *datapath.Walk, p *datapath.Packet, fx *datapath.Effect) {
	e := fx.Ref.(*Entry)
	s.t.refresh(e, fx.B, e.Orig.Proto, uint8(fx.U), w.Now())
	s.t.Stats.Found++
	p.CT = datapath.CTRef{Entry: e, Reply: fx.B}
}

// ProcessFast is Process; confirming does nothing to a packet of a
// confirmed connection (or of none), which is repeatable.
func (s *confirmStage) ProcessFast(w *datapath.Walk, p *datapath.Packet) (datapath.Verdict, datapath.Effect, bool) {
	e, ok := p.CT.Entry.(*Entry)
	fresh := ok && e.t == s.t && e.Status&StatusConfirmed == 0
	return s.Process(w, p), datapath.Effect{}, !fresh
}
