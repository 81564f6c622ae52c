package netstack

import (
	"encoding/binary"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Linux's delayed ACK, applied to what gVisor sends.
//
// gVisor's TCP acknowledges every batch of segments it processes at once
// (handleSegmentsLocked; it keeps TCP_QUICKACK as an option but reads it
// nowhere), where Linux delays an ACK for in-order data by up to its
// delayed-ACK timeout, hoping to carry it on data the application is
// about to send. On a kept-alive HTTP connection that is the difference
// between four segments per request (request, ACK, response, ACK) and
// two. The stack's link endpoint therefore holds back the pure ACKs Linux
// would delay and drops a held ACK when the connection sends anything else
// first (which carries the same or a later acknowledgement); a held ACK
// whose timer runs out is sent then. The decision follows Linux 6.x
// (net/ipv4/tcp_input.c __tcp_ack_snd_check, tcp_event_data_recv,
// tcp_fin; tcp_output.c tcp_send_delayed_ack, tcp_event_data_sent,
// tcp_event_ack_sent; tcp_timer.c tcp_delack_timer_handler), per
// connection:
//
//   - An ACK goes out at once in quick-ACK mode: the first data a
//     connection receives, and data after a silence longer than the
//     retransmission timeout, allow up to 16 immediate ACKs
//     (TCP_MAX_QUICKACKS), unless the connection is interactive
//     (pingpong: it sent data less than the ACK timeout after it last
//     received some, the threshold net.ipv4.tcp_pingpong_thresh being 1).
//   - It goes out at once when more than one full segment is
//     unacknowledged, and when it acknowledges a FIN after the
//     connection sent its own (FIN-WAIT: TIME-WAIT or CLOSING follow).
//     A FIN received while established makes the connection
//     interactive, so its ACK waits for the application's close.
//   - What does not acknowledge new data (a duplicate ACK for
//     out-of-order data, with SACK blocks; a window update; a keepalive
//     probe or its answer) goes out at once, as do handshake segments.
//   - Otherwise it is delayed by the ACK timeout: 40 ms (TCP_DELACK_MIN,
//     which bounds the timeout while the smoothed RTT is below it, as it
//     is on every simulated path without a delay stage). A timer that
//     runs out takes an interactive connection out of pingpong mode;
//     otherwise it doubles the ACK timeout, up to the 200 ms minimum RTO.
//
// A delayed ACK that goes out late carries the timestamp of the moment it
// is sent (TSval advanced by the virtual milliseconds it waited, as
// gVisor's own timestamp clock would have it) and the window gVisor
// advertised when it made it. Not modelled: the ACK Linux sends when the
// application reads data that was pushed (tcp_cleanup_rbuf) outside quick
// mode, and ATOs above 40 ms on paths with an RTT that long.
const (
	ackTimeoutMin = 40 * time.Millisecond  // TCP_ATO_MIN, TCP_DELACK_MIN (HZ/25)
	rtoMin        = 200 * time.Millisecond // TCP_RTO_MIN: the RTO of a path whose RTT is far below it
	maxQuickAcks  = 16                     // TCP_MAX_QUICKACKS
	mssDefault    = 536                    // TCP_MSS_DEFAULT, the first estimate of the peer's MSS
)

// connKey identifies a TCP connection from the stack's side: local and
// remote address, local and remote port.
type connKey [12]byte

func keyOf(local, remote []byte, lport, rport uint16) connKey {
	var k connKey
	copy(k[0:4], local)
	copy(k[4:8], remote)
	binary.BigEndian.PutUint16(k[8:], lport)
	binary.BigEndian.PutUint16(k[10:], rport)
	return k
}

// ackState is Linux's icsk_ack for one connection, and the ACK held back.
type ackState struct {
	s   *Stack
	key connKey
	// ato is the ACK timeout (0 until the first data arrives); lrcvtime
	// when data last arrived; quick the immediate ACKs left; pingpong
	// set while the connection is interactive.
	ato, lrcvtime time.Duration
	quick         int
	pingpong      bool
	// rcvMSS estimates the peer's segment size (icsk_ack.rcv_mss);
	// advMSS is the MSS the connection offered.
	rcvMSS, advMSS int
	// lastAck is the acknowledgement of the last segment sent (acked:
	// one was sent), Linux's rcv_wup.
	lastAck uint32
	acked   bool
	// ackNow: the next ACK goes out at once (a FIN received after ours).
	ackNow           bool
	finSent, finRcvd bool

	held   *datapath.Packet
	heldAt time.Duration
	due    time.Duration // when the timer fires, while held
	timer  *ackTimer
}

func (st *ackState) quickMode() bool { return st.quick > 0 && !st.pingpong }

// incrQuick is tcp_incr_quickack with the window of any stack here: more
// than 32 segments' worth, so the 16-ACK bound applies.
func (st *ackState) incrQuick() { st.quick = max(st.quick, maxQuickAcks) }

// tcpOf returns the TCP header and payload length of an IPv4 packet, or
// nil when it is not a whole TCP segment.
func tcpOf(ip header.IPv4) (header.TCP, int) {
	if len(ip) < header.IPv4MinimumSize || ip.Protocol() != uint8(header.TCPProtocolNumber) {
		return nil, 0
	}
	ihl, tot := int(ip.HeaderLength()), int(ip.TotalLength())
	if ihl < header.IPv4MinimumSize || tot > len(ip) || tot < ihl+header.TCPMinimumSize {
		return nil, 0
	}
	tcp := header.TCP(ip[ihl:tot])
	doff := int(tcp.DataOffset())
	if doff < header.TCPMinimumSize || doff > len(tcp) {
		return nil, 0
	}
	return tcp, len(tcp) - doff
}

// ackInput notes a segment the stack is about to receive (before gVisor
// processes it): Linux's tcp_event_data_recv for in-order data, tcp_fin
// for a FIN, and the end of the connection on a RST.
func (s *Stack) ackInput(ip header.IPv4) {
	tcp, n := tcpOf(ip)
	if tcp == nil || s.acks == nil {
		return
	}
	k := keyOf(ip[16:20], ip[12:16], tcp.DestinationPort(), tcp.SourcePort())
	st := s.acks[k]
	if st == nil {
		return
	}
	flags := tcp.Flags()
	if flags&header.TCPFlagRst != 0 {
		st.forget()
		return
	}
	if n > 0 && (!st.acked || tcp.SequenceNumber() == st.expect()) {
		now := s.d.e.Now()
		if n >= st.rcvMSS {
			st.rcvMSS = min(n, st.advMSS)
		}
		switch m := now - st.lrcvtime; {
		case st.ato == 0:
			st.incrQuick()
			st.ato = ackTimeoutMin
		case m <= ackTimeoutMin/2:
			st.ato = st.ato/2 + ackTimeoutMin/2
		case m < st.ato:
			st.ato = min(st.ato/2+m, rtoMin)
		case m > rtoMin:
			st.incrQuick()
		}
		st.lrcvtime = now
	}
	if flags&header.TCPFlagFin != 0 && !st.finRcvd {
		st.finRcvd = true
		if st.finSent {
			st.ackNow = true // FIN-WAIT: tcp_send_ack
		} else {
			st.pingpong = true // to CLOSE-WAIT: inet_csk_enter_pingpong_mode
		}
	}
}

// expect is the sequence number of in-order data: what the last ACK sent
// acknowledged, or a held one.
func (st *ackState) expect() uint32 {
	if st.held != nil {
		if tcp, _ := tcpOf(st.held.IPv4()); tcp != nil {
			return tcp.AckNumber()
		}
	}
	return st.lastAck
}

// ackOutput decides about a segment the stack sends: it reports false
// when the segment is a pure ACK held back (the state keeps p).
func (s *Stack) ackOutput(p *datapath.Packet) bool {
	ip := p.IPv4()
	tcp, n := tcpOf(ip)
	if tcp == nil {
		return true
	}
	k := keyOf(ip[12:16], ip[16:20], tcp.SourcePort(), tcp.DestinationPort())
	flags := tcp.Flags()
	st := s.acks[k]
	if flags&header.TCPFlagSyn != 0 {
		// A new connection (a retransmitted SYN starts it again).
		if st != nil {
			st.forget()
		}
		if s.acks == nil {
			s.acks = map[connKey]*ackState{}
		}
		st = &ackState{s: s, key: k, rcvMSS: mssDefault, advMSS: mssDefault}
		if mss := header.ParseSynOptions(tcp.Options(), flags&header.TCPFlagAck != 0).MSS; mss > 0 {
			st.advMSS = int(mss)
			st.rcvMSS = min(mssDefault, int(mss))
		}
		s.acks[k] = st
	}
	if st == nil {
		return true
	}
	if flags&header.TCPFlagRst != 0 {
		st.forget()
		return true
	}
	now := s.d.e.Now()
	ack := tcp.AckNumber()
	if flags == header.TCPFlagAck && n == 0 && st.acked && seqAfter(ack, st.lastAck) &&
		!st.ackNow && !st.quickMode() && int(ack-st.lastAck) <= st.rcvMSS && !hasSACK(tcp) {
		// __tcp_ack_snd_check: tcp_send_delayed_ack.
		if st.held == nil || st.due-now > ackTimeoutMin/4 {
			if st.held != nil {
				st.held.Release()
			}
			st.held, st.heldAt = p, now
			if st.timer == nil {
				st.timer = &ackTimer{d: s.d, f: st.fire, delay: ackTimeoutMin}
			}
			if !st.timer.armed {
				st.due = now + ackTimeoutMin
				st.timer.Arm()
			}
			return false
		}
		// The pending timer is about to run out: send now.
	}
	st.drop()
	if flags&header.TCPFlagAck != 0 {
		st.sent(ack)
	}
	if n > 0 && st.ato != 0 && now-st.lrcvtime < st.ato {
		st.pingpong = true // tcp_event_data_sent: a reply within the ACK timeout
	}
	if flags&header.TCPFlagFin != 0 {
		st.finSent = true
	}
	if st.finSent && st.finRcvd {
		// Both FINs are out and this segment acknowledges the peer's:
		// nothing is left to delay.
		st.forget()
	}
	return true
}

// sent is tcp_event_ack_sent: an ACK for ack went out.
func (st *ackState) sent(ack uint32) {
	if st.quick > 0 && (!st.acked || seqAfter(ack, st.lastAck)) {
		// tcp_dec_quickack_mode: one ACK of new data.
		if st.quick--; st.quick == 0 {
			st.ato = ackTimeoutMin
		}
	}
	st.lastAck, st.acked, st.ackNow = ack, true, false
}

// drop forgets the held ACK: what the connection sends now carries it.
func (st *ackState) drop() {
	if st.held != nil {
		st.held.Release()
		st.held = nil
		st.timer.Stop()
	}
}

// forget ends the connection's state.
func (st *ackState) forget() {
	st.drop()
	if st.s.acks[st.key] == st {
		delete(st.s.acks, st.key)
	}
}

// fire is the delayed-ACK timer (tcp_delack_timer_handler): the held ACK
// goes out, stamped with the current time.
func (st *ackState) fire() {
	p := st.held
	if p == nil {
		return
	}
	st.held = nil
	if st.pingpong {
		st.pingpong = false // the delayed ACK was missed: not interactive after all
		st.ato = ackTimeoutMin
	} else {
		st.ato = min(st.ato*2, rtoMin)
	}
	ip := p.IPv4()
	tcp, _ := tcpOf(ip)
	ms := func(t time.Duration) uint32 { return uint32(t / time.Millisecond) }
	if d := ms(st.s.d.e.Now()) - ms(st.heldAt); d != 0 && restamp(tcp, d) {
		tcp.SetChecksum(0)
		xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber,
			tcpip.AddrFromSlice(ip[12:16]), tcpip.AddrFromSlice(ip[16:20]), uint16(len(tcp)))
		tcp.SetChecksum(^tcp.CalculateChecksum(xsum))
	}
	st.sent(tcp.AckNumber())
	if st.finSent && st.finRcvd {
		st.forget()
	}
	st.s.send(p)
}

// restamp adds d to the segment's TSval and reports whether it has one.
func restamp(tcp header.TCP, d uint32) bool {
	opts := tcp.Options()
	for i := 0; i < len(opts); {
		switch opts[i] {
		case header.TCPOptionEOL:
			return false
		case header.TCPOptionNOP:
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts) {
			return false
		}
		if opts[i] == header.TCPOptionTS && opts[i+1] == header.TCPOptionTSLength {
			v := binary.BigEndian.Uint32(opts[i+2:])
			binary.BigEndian.PutUint32(opts[i+2:], v+d)
			return true
		}
		i += int(opts[i+1])
	}
	return false
}

// hasSACK reports whether the segment carries SACK blocks (a duplicate
// ACK for out-of-order data): what len(header.ParseTCPOptions(opts).
// SACKBlocks) > 0 says, the same walk over the options without building
// them.
func hasSACK(tcp header.TCP) bool { return optsHaveSACK(tcp.Options()) }

func optsHaveSACK(b []byte) bool {
	blocks := false
	for i := 0; i < len(b); {
		switch b[i] {
		case header.TCPOptionEOL:
			return blocks
		case header.TCPOptionNOP:
			i++
		case header.TCPOptionTS:
			if i+10 > len(b) || b[i+1] != 10 {
				return blocks
			}
			i += 10
		case header.TCPOptionSACK:
			if i+2 > len(b) {
				return blocks
			}
			l := int(b[i+1])
			if i+l > len(b) || (l-2)%8 != 0 {
				return blocks
			}
			blocks = l >= 10
			i += l
		default:
			if i+2 > len(b) {
				return blocks
			}
			l := int(b[i+1])
			if l < 2 || i+l > len(b) {
				return blocks
			}
			i += l
		}
	}
	return blocks
}

// seqAfter reports a > b in sequence space.
func seqAfter(a, b uint32) bool { return int32(a-b) > 0 }
