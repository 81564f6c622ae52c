package ipvs

import (
	"fmt"
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
)

// IPVS TCP connection states (IP_VS_TCP_S_*), in the kernel's order.
const (
	tcpNone uint8 = iota
	tcpEstablished
	tcpSynSent
	tcpSynRecv
	tcpFinWait
	tcpTimeWait
	tcpClose
	tcpCloseWait
	tcpLastAck
	tcpListen
	tcpSynAck
	numTCPStates
)

var tcpStateNames = [numTCPStates]string{"NONE", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT",
	"TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "SYNACK"}

const (
	sNO = tcpNone
	sES = tcpEstablished
	sSS = tcpSynSent
	sSR = tcpSynRecv
	sFW = tcpFinWait
	sTW = tcpTimeWait
	sCL = tcpClose
	sCW = tcpCloseWait
	sLA = tcpLastAck
	sLI = tcpListen
	sSA = tcpSynAck
)

// tcpStates is tcp_states in ip_vs_proto_tcp.c for connections that see
// both directions (NAT): [direction][syn,fin,ack,rst][state].
var tcpStates = [2][4][numTCPStates]uint8{
	{ // INPUT (client to server)
		/*        sNO, sES, sSS, sSR, sFW, sTW, sCL, sCW, sLA, sLI, sSA */
		/*syn*/ {sSR, sES, sES, sSR, sSR, sSR, sSR, sSR, sSR, sSR, sSR},
		/*fin*/ {sCL, sCW, sSS, sTW, sTW, sTW, sCL, sCW, sLA, sLI, sTW},
		/*ack*/ {sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sCL, sLI, sES},
		/*rst*/ {sCL, sCL, sCL, sSR, sCL, sCL, sCL, sCL, sLA, sLI, sSR},
	},
	{ // OUTPUT (server to client)
		/*        sNO, sES, sSS, sSR, sFW, sTW, sCL, sCW, sLA, sLI, sSA */
		/*syn*/ {sSS, sES, sSS, sSR, sSS, sSS, sSS, sSS, sSS, sLI, sSR},
		/*fin*/ {sTW, sFW, sSS, sTW, sFW, sTW, sCL, sTW, sLA, sLI, sTW},
		/*ack*/ {sES, sES, sSS, sES, sFW, sTW, sCL, sCW, sLA, sES, sES},
		/*rst*/ {sCL, sCL, sSS, sCL, sCL, sTW, sCL, sCL, sCL, sCL, sCL},
	},
}

// tcpStateIdx is tcp_state_idx: rst, then syn, fin, ack.
func tcpStateIdx(flags uint8) int {
	const fin, syn, rst, ack = 0x01, 0x02, 0x04, 0x10
	switch {
	case flags&rst != 0:
		return 3
	case flags&syn != 0:
		return 0
	case flags&fin != 0:
		return 1
	case flags&ack != 0:
		return 2
	}
	return -1
}

// connKey identifies a connection in one direction: for requests
// (client, virtual address), for replies (real server, client).
type connKey struct {
	proto        uint8
	saddr, daddr [4]byte
	sport, dport uint16
}

// Conn is one IPVS connection entry (struct ip_vs_conn): client,
// virtual and destination address and port, state and expiry. A template
// (persistence) has client port 0 and state NONE.
type Conn struct {
	Proto    uint8
	CAddr    [4]byte
	CPort    uint16
	VAddr    [4]byte
	VPort    uint16
	DAddr    [4]byte
	DPort    uint16
	State    uint8
	Template bool
	expires  time.Duration
	timeout  time.Duration
	dest     *Dest
	dead     bool
	id       uint64
}

// Dest is the real server the connection was scheduled to.
func (c *Conn) Dest() *Dest { return c.dest }

// StateName is the state as /proc/net/ip_vs_conn shows it.
func (c *Conn) StateName() string {
	if c.Proto == datapath.ProtoUDP && !c.Template {
		return "UDP"
	}
	return tcpStateNames[c.State]
}

// Expires is the virtual time the entry expires at.
func (c *Conn) Expires() time.Duration { return c.expires }

func (v *IPVS) now() time.Duration { return v.ns.Engine().Now() }

func (c *Conn) inKey() connKey {
	return connKey{c.Proto, c.CAddr, c.VAddr, c.CPort, c.VPort}
}

func (c *Conn) outKey() connKey {
	return connKey{c.Proto, c.DAddr, c.CAddr, c.DPort, c.CPort}
}

// setState moves a TCP connection and keeps the destination's active and
// inactive counters (set_tcp_state).
func (v *IPVS) setState(c *Conn, ns uint8) {
	if c.Proto != datapath.ProtoTCP {
		return
	}
	if d := c.dest; d != nil && ns != c.State {
		if c.State == tcpEstablished && ns != tcpEstablished {
			d.ActiveConns--
			d.InactConns++
		} else if c.State != tcpEstablished && ns == tcpEstablished {
			d.ActiveConns++
			d.InactConns--
		}
	}
	c.State = ns
	c.timeout = v.timeouts.TCP[ns]
}

// transition applies one packet's TCP flags in direction dir (0 in, 1
// out) and restarts the timer.
func (v *IPVS) transition(c *Conn, dir int, flags uint8) {
	if c.Proto == datapath.ProtoTCP {
		if i := tcpStateIdx(flags); i >= 0 {
			v.setState(c, tcpStates[dir][i][c.State])
		}
	} else {
		c.timeout = v.timeouts.UDP
	}
	c.expires = v.now() + c.timeout
}

func (v *IPVS) expire(c *Conn) {
	if c.dead {
		return
	}
	c.dead = true
	if c.Template {
		delete(v.tmpl, c.inKey())
		if c.dest != nil {
			c.dest.PersistConns--
		}
		return
	}
	if v.in[c.inKey()] == c {
		delete(v.in, c.inKey())
	}
	if v.out[c.outKey()] == c {
		delete(v.out, c.outKey())
	}
	if d := c.dest; d != nil && c.Proto == datapath.ProtoTCP {
		if c.State == tcpEstablished {
			d.ActiveConns--
		} else {
			d.InactConns--
		}
	} else if d != nil {
		d.InactConns--
	}
}

// lookup finds a live connection in m, expiring a dead one.
func (v *IPVS) lookup(m map[connKey]*Conn, k connKey) *Conn {
	v.Lookups++
	c := m[k]
	if c == nil {
		return nil
	}
	if c.expires <= v.now() {
		v.expire(c)
		return nil
	}
	return c
}

// Conns returns the live connection entries (templates included) in
// creation order.
func (v *IPVS) Conns() []*Conn {
	now := v.now()
	live := v.conns[:0]
	for _, c := range v.conns {
		if !c.dead && c.expires <= now {
			v.expire(c)
		}
		if !c.dead {
			live = append(live, c)
		}
	}
	v.conns = live
	return append([]*Conn(nil), live...)
}

// ListConns is `ipvsadm -Lnc`: "pro expire state source virtual
// destination", expire as minutes:seconds.
func (v *IPVS) ListConns() string {
	var b strings.Builder
	b.WriteString("IPVS connection entries\n")
	fmt.Fprintf(&b, "pro expire %-11s %-18s %-18s %s\n", "state", "source", "virtual", "destination")
	now := v.now()
	for _, c := range v.Conns() {
		secs := int((c.expires - now) / time.Second) // (expires - jiffies) / HZ
		exp := fmt.Sprintf("%02d:%02d", secs/60, secs%60)
		fmt.Fprintf(&b, "%-3s %-6s %-11s %-18s %-18s %s\n", protoName(c.Proto), exp, c.StateName(),
			ap(c.CAddr, c.CPort), ap(c.VAddr, c.VPort), ap(c.DAddr, c.DPort))
	}
	return b.String()
}
