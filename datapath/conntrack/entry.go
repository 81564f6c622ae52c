package conntrack

import (
	"strconv"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
)

// Status is the connection's status bit set (enum ip_conntrack_status).
type Status uint32

// Status bits, with the kernel's bit positions.
const (
	StatusExpected    Status = 1 << 0 // IPS_EXPECTED: created from an expectation (helpers; not modelled)
	StatusSeenReply   Status = 1 << 1 // IPS_SEEN_REPLY: a packet was seen in the reply direction
	StatusAssured     Status = 1 << 2 // IPS_ASSURED: never early-dropped; shown as [ASSURED]
	StatusConfirmed   Status = 1 << 3 // IPS_CONFIRMED: inserted in the table
	StatusSrcNAT      Status = 1 << 4 // IPS_SRC_NAT: the original source is rewritten
	StatusDstNAT      Status = 1 << 5 // IPS_DST_NAT: the original destination is rewritten
	StatusSrcNATDone  Status = 1 << 7 // IPS_SRC_NAT_DONE: the source binding was set up
	StatusDstNATDone  Status = 1 << 8 // IPS_DST_NAT_DONE: the destination binding was set up
	StatusDying       Status = 1 << 9 // IPS_DYING: removed from the table
	StatusNATMask            = StatusSrcNAT | StatusDstNAT
	statusNATDoneMask        = StatusSrcNATDone | StatusDstNATDone
)

// TCPState is the conntrack TCP state (enum tcp_conntrack), as shown by
// `conntrack -L` and /proc/net/nf_conntrack.
type TCPState uint8

// TCP conntrack states in the kernel's order.
const (
	TCPNone TCPState = iota
	TCPSynSent
	TCPSynRecv
	TCPEstablished
	TCPFinWait
	TCPCloseWait
	TCPLastAck
	TCPTimeWait
	TCPClose
	TCPSynSent2
	tcpMax
	tcpIgnore  = tcpMax + 1 // sIG
	tcpInvalid = tcpMax     // sIV
)

var tcpStateNames = [...]string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT",
	"CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2"}

// String returns the state name conntrack prints.
func (s TCPState) String() string {
	if s < tcpMax {
		return tcpStateNames[s]
	}
	return "INVALID"
}

// CTInfo is the per-packet relation to its connection (enum
// ip_conntrack_info): what `-m conntrack --ctstate` matches.
type CTInfo uint8

// CTInfo values, numbered as in the kernel.
const (
	// Established: the packet belongs to a connection that has seen a
	// reply, or is itself in the reply direction (IP_CT_ESTABLISHED).
	Established CTInfo = 0
	// Related: an ICMP error about a tracked connection (IP_CT_RELATED).
	Related CTInfo = 1
	// New: the first packet(s) of a connection, before any reply (IP_CT_NEW).
	New CTInfo = 2
	// IsReply is added to Established and Related for reply-direction
	// packets (IP_CT_IS_REPLY).
	IsReply CTInfo = 3
	// EstablishedReply is Established in the reply direction.
	EstablishedReply = Established + IsReply
	// RelatedReply is Related in the reply direction.
	RelatedReply = Related + IsReply
)

// Base strips the reply flag (ctinfo % IP_CT_IS_REPLY).
func (i CTInfo) Base() CTInfo { return i % IsReply }

// Reply reports a reply-direction ctinfo.
func (i CTInfo) Reply() bool { return i >= IsReply }

// String names the state as --ctstate does.
func (i CTInfo) String() string {
	s := [...]string{"ESTABLISHED", "RELATED", "NEW"}[i.Base()]
	if i.Reply() {
		s += " reply"
	}
	return s
}

// Entry is one tracked connection (struct nf_conn). Orig and Reply are the
// tuples of the two directions: Reply starts as Orig inverted and changes
// when a NAT binding is set up, which is how replies are recognised and
// translated back. Both are read-only to callers: a binding changes
// Reply through SetupNAT or AlterReply only.
//
// Entries are created unconfirmed when the first packet is seen and enter
// the table only when that packet passes the last hook (confirm), so an
// entry for a dropped packet never appears in the table.
type Entry struct {
	// ID is the connection id conntrack prints with `-o id`; here a counter
	// per table, starting at 1, in creation order.
	ID          uint32
	Orig, Reply Tuple
	Status      Status
	// Mark is the connection mark (ct mark, CONNMARK).
	Mark uint32

	// free says which tuples were last known absent from the index, and
	// when: freeOrig for Orig, freeReply for Reply as it is now, the
	// table's insert count plus one in the bits below (freeCount). Only
	// an insert can make a tuple present, so while the count is the same
	// a new connection's NAT set-up and confirm need not look them up
	// again (knownFree).
	free     uint64
	expires  time.Duration
	streamTS time.Duration // UDP: after this time a replied flow is a stream
	hnext    [2]hnode      // next node in the hash chains of Orig and Reply
	t        *Table
	rel      relatedRef
	// prev and next link the table's live connections in ID order.
	prev, next *Entry
	handle     int32     // the index's name for the entry while confirmed
	hash       [2]uint32 // the index hashes of Orig and Reply when inserted

	// TCPState is the TCP tracker's state (TCPNone for other protocols).
	// (Last, with the unexported words above in what would be padding:
	// an entry is 144 bytes.)
	TCPState TCPState
}

// The flags and count of Entry.free.
const (
	freeOrig  = 1 << 63
	freeReply = 1 << 62
	freeCount = freeReply - 1
)

// knownFree reports whether the tuples flagged in bit are known absent
// from the index at the table's current insert count.
func (e *Entry) knownFree(bit uint64) bool {
	return e.free&bit != 0 && e.free&freeCount == e.t.inserts+1
}

// markFree records the tuples flagged in bit absent at the table's
// current insert count (those recorded at an older count are forgotten).
func (e *Entry) markFree(bit uint64) {
	if n := e.t.inserts + 1; e.free&freeCount != n {
		e.free = n
	}
	e.free |= bit
}

// relatedRef is what a RELATED packet's CTRef points to: the same
// connection, seen through an ICMP error. Keeping it inside the entry lets
// attaching it allocate nothing.
type relatedRef struct{ e *Entry }

// Table returns the table the entry belongs to.
func (e *Entry) Table() *Table { return e.t }

// Confirmed reports whether the entry is in the table.
func (e *Entry) Confirmed() bool { return e.Status&StatusConfirmed != 0 }

// Expires is the virtual time at which the entry times out.
func (e *Entry) Expires() time.Duration { return e.expires }

// Timeout is the time left before the entry expires at now (the third
// column of `conntrack -L`, in seconds there).
func (e *Entry) Timeout(now time.Duration) time.Duration {
	if e.expires <= now {
		return 0
	}
	return e.expires - now
}

// NATDone reports whether the binding of manip type m has been set up
// (nf_nat_initialized).
func (e *Entry) NATDone(m Manip) bool {
	if m == ManipSrc {
		return e.Status&StatusSrcNATDone != 0
	}
	return e.Status&StatusDstNATDone != 0
}

// Get returns the connection p is attached to and p's ctinfo, as
// nf_ct_get does. A nil entry means the packet is untracked by this table:
// conntrack classified it INVALID (or it never ran).
func Get(p *datapath.Packet) (*Entry, CTInfo) {
	switch x := p.CT.Entry.(type) {
	case *Entry:
		if p.CT.Reply {
			return x, EstablishedReply
		}
		if x.Status&StatusSeenReply != 0 {
			return x, Established
		}
		return x, New
	case *relatedRef:
		if p.CT.Reply {
			return x.e, RelatedReply
		}
		return x.e, Related
	}
	return nil, 0
}

// Get is the package-level Get restricted to connections of t: a packet
// still carrying another namespace's entry (the datapath does not scrub
// skbs crossing namespaces) is untracked here.
func (t *Table) Get(p *datapath.Packet) (*Entry, CTInfo) {
	e, i := Get(p)
	if e == nil || e.t != t {
		return nil, 0
	}
	return e, i
}

// Format formats the entry as one line of `conntrack -L` at now, e.g.
//
//	tcp      6 431999 ESTABLISHED src=10.244.1.2 dst=10.96.0.10 sport=40000 dport=53 src=10.244.2.3 dst=10.244.1.2 sport=53 dport=40000 [ASSURED] mark=0 use=1
func (e *Entry) Format(now time.Duration) string {
	b := make([]byte, 0, 192)
	name := protoName(e.Orig.Proto)
	b = append(b, name...)
	for i := len(name); i < 8; i++ {
		b = append(b, ' ')
	}
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(e.Orig.Proto), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(e.Timeout(now)/time.Second), 10)
	b = append(b, ' ')
	switch e.Orig.Proto {
	case datapath.ProtoTCP:
		b = append(b, e.TCPState.String()...)
		b = append(b, ' ')
	case datapath.ProtoSCTP:
		if e.Status&StatusSeenReply != 0 {
			b = append(b, "ESTABLISHED "...)
		} else {
			b = append(b, "COOKIE_WAIT "...)
		}
	}
	b = e.Orig.appendTo(b)
	b = append(b, ' ')
	if e.Status&StatusSeenReply == 0 {
		b = append(b, "[UNREPLIED] "...)
	}
	b = e.Reply.appendTo(b)
	b = append(b, ' ')
	if e.Status&StatusAssured != 0 {
		b = append(b, "[ASSURED] "...)
	}
	b = append(b, "mark="...)
	b = strconv.AppendUint(b, uint64(e.Mark), 10)
	b = append(b, " use=1"...)
	return string(b)
}

func protoName(p uint8) string {
	switch p {
	case datapath.ProtoTCP:
		return "tcp"
	case datapath.ProtoUDP:
		return "udp"
	case datapath.ProtoICMP:
		return "icmp"
	case 132:
		return "sctp"
	case 47:
		return "gre"
	}
	return "unknown"
}
