package conntrack

import (
	"strconv"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

// TCP flag index (get_conntrack_index).
const (
	tcpSynSet = iota
	tcpSynAckSet
	tcpFinSet
	tcpAckSet
	tcpRstSet
	tcpNoneSet
)

func tcpIndex(flags uint8) int {
	const fin, syn, rst, ack = 0x01, 0x02, 0x04, 0x10
	switch {
	case flags&rst != 0:
		return tcpRstSet
	case flags&syn != 0:
		if flags&ack != 0 {
			return tcpSynAckSet
		}
		return tcpSynSet
	case flags&fin != 0:
		return tcpFinSet
	case flags&ack != 0:
		return tcpAckSet
	}
	return tcpNoneSet
}

const (
	sNO = TCPNone
	sSS = TCPSynSent
	sSR = TCPSynRecv
	sES = TCPEstablished
	sFW = TCPFinWait
	sCW = TCPCloseWait
	sLA = TCPLastAck
	sTW = TCPTimeWait
	sCL = TCPClose
	sS2 = TCPSynSent2
	sIV = tcpInvalid
	sIG = tcpIgnore
)

// tcpConntracks is the kernel's TCP state transition table
// (tcp_conntracks in nf_conntrack_proto_tcp.c), by direction, flag index
// and current state.
var tcpConntracks = [2][6][tcpMax]TCPState{
	{ // ORIGINAL
		/*          sNO, sSS, sSR, sES, sFW, sCW, sLA, sTW, sCL, sS2 */
		/*syn*/ {sSS, sSS, sIG, sIG, sIG, sIG, sIG, sSS, sSS, sS2},
		/*synack*/ {sIV, sIV, sSR, sIV, sIV, sIV, sIV, sIV, sIV, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sES, sIV, sES, sES, sCW, sCW, sTW, sTW, sCL, sIV},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	},
	{ // REPLY
		/*          sNO, sSS, sSR, sES, sFW, sCW, sLA, sTW, sCL, sS2 */
		/*syn*/ {sIV, sS2, sIV, sIV, sIV, sIV, sIV, sSS, sIV, sS2},
		/*synack*/ {sIV, sSR, sIG, sIG, sIG, sIG, sIG, sIG, sIG, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sIV, sIG, sSR, sES, sCW, sCW, sTW, sTW, sCL, sIG},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	},
}

type l4Result uint8

const (
	resAccept  l4Result = iota
	resInvalid          // -NF_ACCEPT: the packet continues untracked (INVALID)
	resRepeat           // -NF_REPEAT: the old connection was killed; look up again
)

// tcpPacket is nf_conntrack_tcp_packet for a known connection, without
// window tracking (see the package notes).
func (t *Table) tcpPacket(e *Entry, reply bool, flags uint8, now time.Duration) l4Result {
	dir := 0
	if reply {
		dir = 1
	}
	idx := tcpIndex(flags)
	old := e.TCPState
	ns := tcpConntracks[dir][idx][old]
	switch ns {
	case sSS:
		if old >= sTW {
			// Attempt to reopen a closed connection: kill it and let the
			// SYN create a new one.
			t.remove(e)
			return resRepeat
		}
	case sIG:
		return resAccept
	case sIV:
		return resInvalid
	}
	e.TCPState = ns
	timeout := t.to.tcp(ns)
	if idx == tcpRstSet {
		timeout = t.to.TCPClose
	}
	if e.Status&StatusSeenReply == 0 {
		if reply && idx == tcpRstSet {
			// "If only reply is a RST, we can consider ourselves not to
			// have an established connection": delete it at once.
			t.remove(e)
			return resAccept
		}
		if ns == sES && timeout > t.to.TCPUnacknowledged {
			timeout = t.to.TCPUnacknowledged
		}
	} else if e.Status&StatusAssured == 0 && (old == sSR || old == sES) && ns == sES {
		e.Status |= StatusAssured
	}
	e.expires = now + timeout
	return resAccept
}

// udpPacket is nf_conntrack_udp_packet: 30 s until a reply; a flow that
// has seen a reply and is still active 2 s after it started is a stream:
// 120 s and ASSURED.
func (t *Table) udpPacket(e *Entry, now time.Duration) {
	if e.Status&StatusSeenReply != 0 {
		extra := t.to.UDP
		stream := false
		if now > e.streamTS {
			extra = t.to.UDPStream
			stream = e.Status&StatusAssured == 0
		}
		e.expires = now + extra
		if stream {
			e.Status |= StatusAssured
		}
		return
	}
	e.expires = now + t.to.UDP
}

// sctpPacket is the minimal SCTP tracker: an association is COOKIE_WAIT
// until a packet is seen in the reply direction, then ESTABLISHED and
// ASSURED.
func (t *Table) sctpPacket(e *Entry, reply bool, now time.Duration) {
	if reply || e.Status&StatusSeenReply != 0 {
		e.Status |= StatusAssured
		e.expires = now + t.to.SCTPEstablished
		return
	}
	e.expires = now + t.to.SCTP
}

// inStage is nf_conntrack_in.
type inStage struct{ t *Table }

var _ datapath.Stage = (*inStage)(nil)

// Process tracks p: finds or creates its connection and attaches it.
func (s *inStage) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	t := s.t
	if p.CT.Entry != nil {
		if e, _ := Get(p); e != nil && e.t == t {
			return datapath.VerdictContinue // already tracked here (loopback, br_netfilter re-run)
		}
		p.CT = datapath.CTRef{} // another namespace's entry: the skb was scrubbed
	}
	if p.Len() < datapath.EthHdrLen+20 || p.EtherType() != 0x0800 {
		return datapath.VerdictContinue
	}
	now := w.Now()
	var pr parsed
	parseIP(p.IPv4(), &pr)
	if pr.frag || !pr.ok {
		t.Stats.Invalid++
		if p.Trace != nil {
			t.note(w, p, "INVALID: cannot build a tuple (fragment or truncated header)")
		}
		return datapath.VerdictContinue
	}
	if pr.t.Proto == datapath.ProtoICMP && isICMPError(pr.t.ICMPType()) {
		return t.related(w, p, pr)
	}
	sl, ok := t.find(pr.t)
	return t.track(w, p, &pr, sl, ok, now)
}

// track is Process for a packet parsed into pr (a tuple, not an ICMP
// error) whose lookup found sl (when ok).
func (t *Table) track(w *datapath.Walk, p *datapath.Packet, pr *parsed, sl slot, ok bool, now time.Duration) datapath.Verdict {
	if ok {
		e := sl.e
		if e.expires <= now {
			t.remove(e)
		} else {
			switch res := t.refresh(e, sl.reply, pr.t.Proto, pr.tcpFlags, now); res {
			case resInvalid:
				t.Stats.Invalid++
				if p.Trace != nil {
					t.note(w, p, "INVALID: tcp flags not valid in state "+e.TCPState.String())
				}
				return datapath.VerdictContinue
			case resAccept:
				t.Stats.Found++
				if sl.reply {
					e.Status |= StatusSeenReply
				}
				p.CT = datapath.CTRef{Entry: e, Reply: sl.reply}
				if p.Trace != nil {
					_, info := Get(p)
					t.note(w, p, info.String()+" "+e.Orig.String())
				}
				return datapath.VerdictContinue
			}
			// resRepeat: fall through to create a new connection.
		}
	}
	return t.newConn(w, p, *pr, now)
}

// processParsed is what the fast path's ProcessFast calls for a packet it
// has parsed and looked up and cannot repeat: Process without parsing and
// looking the tuple up again.
func (s *inStage) processParsed(w *datapath.Walk, p *datapath.Packet, pr *parsed, sl slot, ok bool) datapath.Verdict {
	return s.t.track(w, p, pr, sl, ok, w.Now())
}

// refresh is the protocol tracker's packet function for a packet of the
// live connection e (nf_conntrack_handle_packet).
func (t *Table) refresh(e *Entry, reply bool, proto, tcpFlags uint8, now time.Duration) l4Result {
	switch proto {
	case datapath.ProtoTCP:
		return t.tcpPacket(e, reply, tcpFlags, now)
	case datapath.ProtoUDP:
		t.udpPacket(e, now)
	case datapath.ProtoICMP:
		e.expires = now + t.to.ICMP
	case datapath.ProtoSCTP:
		t.sctpPacket(e, reply, now)
	default:
		e.expires = now + t.to.Generic
	}
	return resAccept
}

func (t *Table) newConn(w *datapath.Walk, p *datapath.Packet, pr parsed, now time.Duration) datapath.Verdict {
	if t.full(now) && !t.evict(w, p, pr.t, now) {
		t.Stats.Drop++
		if p.Trace != nil {
			w.Observe(p, trace.Observation{Node: t.ns.Node, Netns: t.ns.Name, Stage: StageIn, Action: trace.Dropped,
				Summary: p.Summary(), Detail: "nf_conntrack: table full, dropping packet",
				Reason: datapath.ReasonConntrackFull.String()})
			p.Release()
			return datapath.VerdictStolen
		}
		return datapath.DropVerdict(datapath.ReasonConntrackFull)
	}
	var state TCPState
	var timeout time.Duration
	switch pr.t.Proto {
	case datapath.ProtoTCP:
		state = tcpConntracks[0][tcpIndex(pr.tcpFlags)][sNO]
		if state >= tcpMax || (state != sSS && !t.loose) {
			t.Stats.Invalid++
			if p.Trace != nil {
				t.note(w, p, "INVALID: tcp packet without SYN does not start a connection")
			}
			return datapath.VerdictContinue
		}
		timeout = t.to.tcp(state)
		if state == sES && timeout > t.to.TCPUnacknowledged {
			timeout = t.to.TCPUnacknowledged
		}
	case datapath.ProtoUDP:
		timeout = t.to.UDP
	case datapath.ProtoICMP:
		if !isICMPQueryRequest(pr.t.ICMPType()) {
			t.Stats.Invalid++
			if p.Trace != nil {
				t.note(w, p, "INVALID: icmp type does not start a connection")
			}
			return datapath.VerdictContinue
		}
		timeout = t.to.ICMP
	case datapath.ProtoSCTP:
		timeout = t.to.SCTP
	default:
		timeout = t.to.Generic
	}
	e := t.newEntry(pr.t, now)
	// The tuple is not in the index: the lookup before found nothing,
	// or found the connection it belonged to, which is removed now.
	e.free = t.inserts + 1 | freeOrig
	e.TCPState = state
	e.expires = now + timeout
	e.streamTS = now + 2*time.Second
	t.Stats.New++
	p.CT = datapath.CTRef{Entry: e}
	if p.Trace != nil {
		t.note(w, p, "NEW "+e.Orig.String())
	}
	return datapath.VerdictContinue
}

// evict runs early_drop for a new connection's tuple on a full table and
// reports whether room was made.
func (t *Table) evict(w *datapath.Walk, p *datapath.Packet, tu Tuple, now time.Duration) bool {
	n := t.earlyDrop(tu, now)
	if n > 0 && p.Trace != nil {
		t.note(w, p, "table full: early_drop evicted "+strconv.Itoa(n)+" unassured connection(s)")
	}
	return n > 0
}

// related is icmp_error_message: an ICMP error whose quoted datagram
// belongs to a known connection is RELATED to it, in the direction
// opposite to the quoted datagram.
func (t *Table) related(w *datapath.Walk, p *datapath.Packet, pr parsed) datapath.Verdict {
	var inner parsed
	if len(pr.l4) >= 8 {
		parseIP(pr.l4[8:], &inner)
	}
	if !inner.ok || inner.frag {
		t.Stats.Invalid++
		if p.Trace != nil {
			t.note(w, p, "INVALID: icmp error without a usable quoted header")
		}
		return datapath.VerdictContinue
	}
	e, reply, ok := t.Lookup(inner.t.Invert())
	if !ok {
		t.Stats.Invalid++
		if p.Trace != nil {
			t.note(w, p, "INVALID: icmp error about an unknown connection "+inner.t.String())
		}
		return datapath.VerdictContinue
	}
	t.Stats.Related++
	p.CT = datapath.CTRef{Entry: &e.rel, Reply: reply}
	if p.Trace != nil {
		_, info := Get(p)
		t.note(w, p, info.String()+" to "+e.Orig.String())
	}
	return datapath.VerdictContinue
}

func (t *Table) note(w *datapath.Walk, p *datapath.Packet, detail string) {
	w.Observe(p, trace.Observation{Node: t.ns.Node, Netns: t.ns.Name, Stage: StageIn, Action: trace.Note,
		Summary: p.Summary(), Detail: detail})
}

// confirmStage is __nf_conntrack_confirm, run last at INPUT and POSTROUTING.
type confirmStage struct{ t *Table }

var _ datapath.Stage = (*confirmStage)(nil)

// Process confirms p's new connection into the table.
func (s *confirmStage) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	e, ok := p.CT.Entry.(*Entry)
	if !ok || e.t != s.t || e.Status&StatusConfirmed != 0 {
		return datapath.VerdictContinue
	}
	r := s.t.confirm(e, w.Now())
	if r == nil {
		s.t.Stats.Drop++
		if p.Trace != nil {
			w.Observe(p, trace.Observation{Node: s.t.ns.Node, Netns: s.t.ns.Name, Stage: StageConfirm, Action: trace.Dropped,
				Summary: p.Summary(), Detail: "insert failed: tuple clash with " + e.Reply.String(),
				Reason: datapath.ReasonConntrackInvalid.String()})
			p.Release()
			return datapath.VerdictStolen
		}
		return datapath.DropVerdict(datapath.ReasonConntrackInvalid)
	}
	p.CT.Entry = r
	return datapath.VerdictContinue
}
