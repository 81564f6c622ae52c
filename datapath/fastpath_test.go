package datapath_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/datapath/route"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// fastWorld is one reference cluster of the fast path's equivalence test,
// with every frame delivered to any namespace's sockets logged.
type fastWorld struct {
	r         *scenarios.Reference
	delivered []string
	conns     map[string]*datapath.TCPConn
	savedMAC  datapath.MAC
	fast      bool    // the fast path is on
	flip      [2]bool // cka-w1's and cka-w2's flippers are on
	flips     [2]int
}

// sendDatagram sends "datagram 0 of a flow" from net/client to dst, from
// source port sport to port 9000.
func (w *fastWorld) sendDatagram(t *testing.T, dst netip.Addr, sport uint16) {
	t.Helper()
	ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: dst}, sport, 9000, []byte("datagram 0 of a flow"))
	require.NoError(t, err)
	_, err = w.r.Client.Netns.Send(ip)
	require.NoError(t, err)
}

// logOwner logs every frame the namespace delivers, then lets the minimal
// sockets have it.
type logOwner struct {
	ns  *datapath.Netns
	log *[]string
}

func (o logOwner) Deliver(w *datapath.Walk, dev *datapath.Device, p *datapath.Packet) bool {
	*o.log = append(*o.log, fmt.Sprintf("%v %s/%s %s %x", w.Now(), o.ns.Node, o.ns.Name, dev.Name, p.Frame()))
	return false
}

func (logOwner) Name() string { return "log" }

// frameLog is a hook stage that logs every frame it sees, the fast path's
// replays included (its effect is to log again): it makes the bytes of
// frames no socket gets (the VXLAN underlay's) part of what the test
// compares.
type frameLog struct {
	ns  *datapath.Netns
	log *[]string
}

func (l frameLog) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	*l.log = append(*l.log, fmt.Sprintf("%v %s/%s PREROUTING %x", w.Now(), l.ns.Node, l.ns.Name, p.Frame()))
	return datapath.VerdictContinue
}

func (l frameLog) ProcessFast(w *datapath.Walk, p *datapath.Packet) (datapath.Verdict, datapath.Effect, bool) {
	return l.Process(w, p), datapath.Effect{R: l}, true
}

func (frameLog) Valid(*datapath.Walk, *datapath.Effect) bool { return true }

func (l frameLog) Apply(w *datapath.Walk, p *datapath.Packet, _ *datapath.Effect) { l.Process(w, p) }

// BytesKept: logging changes no byte of the frame.
func (frameLog) BytesKept() {}

// flipper is a hook stage that, while on, flips the last byte of every
// other VXLAN frame carrying a datagram to port 9000 it sees, without
// mending its UDP checksum (a frame
// corrupted on the wire), the fast path's replays included: between the
// encapsulation and the decapsulation it makes the outer checksum wrong,
// which a replay must then verify (it is not BytesKept).
type flipper struct {
	on *bool
	n  *int
}

func (f flipper) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	b := p.Frame()
	if *f.on && len(b) > 90 && b[23] == datapath.ProtoUDP && binary.BigEndian.Uint16(b[36:]) == 8472 &&
		b[50+23] == datapath.ProtoUDP && binary.BigEndian.Uint16(b[50+36:]) == 9000 {
		if *f.n++; *f.n%2 == 0 {
			b[len(b)-1] ^= 0x01
		}
	}
	return datapath.VerdictContinue
}

// ProcessFast: while off, its effect is nothing and keeps the bytes
// (flipperOff), while on it may flip them; either holds while the
// flipper is as it was.
func (f flipper) ProcessFast(w *datapath.Walk, p *datapath.Packet) (datapath.Verdict, datapath.Effect, bool) {
	if !*f.on {
		return f.Process(w, p), datapath.Effect{R: flipperOff(f)}, true
	}
	return f.Process(w, p), datapath.Effect{R: f}, true
}

func (f flipper) Valid(*datapath.Walk, *datapath.Effect) bool { return *f.on }

func (f flipper) Apply(w *datapath.Walk, p *datapath.Packet, _ *datapath.Effect) { f.Process(w, p) }

type flipperOff flipper

func (f flipperOff) Valid(*datapath.Walk, *datapath.Effect) bool { return !*f.on }

func (flipperOff) Apply(*datapath.Walk, *datapath.Packet, *datapath.Effect) {}

func (flipperOff) BytesKept() {}

// ctLog is a hook stage that logs the connection attached to every
// packet it sees and its direction, the fast path's replays included:
// after conntrack, it reads what a flattened conntrack effect attaches
// (datapath.Flat.SetCT).
type ctLog struct {
	ns  *datapath.Netns
	log *[]string
}

func (l ctLog) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	s := "none"
	if e, ok := p.CT.Entry.(*conntrack.Entry); ok {
		s = fmt.Sprintf("%d %s reply %v", e.ID, e.Orig, p.CT.Reply)
	}
	*l.log = append(*l.log, fmt.Sprintf("%v %s/%s POSTROUTING ct %s", w.Now(), l.ns.Node, l.ns.Name, s))
	return datapath.VerdictContinue
}

func (l ctLog) ProcessFast(w *datapath.Walk, p *datapath.Packet) (datapath.Verdict, datapath.Effect, bool) {
	return l.Process(w, p), datapath.Effect{R: l}, true
}

func (ctLog) Valid(*datapath.Walk, *datapath.Effect) bool { return true }

func (l ctLog) Apply(w *datapath.Walk, p *datapath.Packet, _ *datapath.Effect) { l.Process(w, p) }

func (ctLog) BytesKept() {}

// stepTimer is a timer a step schedules.
type stepTimer func(w *datapath.Walk)

func (f stepTimer) Fire(w *datapath.Walk) { f(w) }

func newFastWorld(t *testing.T, fast bool) *fastWorld {
	r, err := scenarios.NewReference(7)
	require.NoError(t, err)
	r.World.SetFastPath(fast)
	w := &fastWorld{r: r, conns: map[string]*datapath.TCPConn{}, fast: fast}
	for _, ns := range w.netnses() {
		if ns.SocketOwner() == nil {
			ns.SetSocketOwner(logOwner{ns, &w.delivered})
		}
	}
	for _, n := range r.Nodes() {
		n.Host.AddHookStage(datapath.Prerouting, "log", -1000, frameLog{n.Host, &w.delivered})
	}
	r.W1.Host.AddHookStage(datapath.Postrouting, "flip", 1000, flipper{&w.flip[0], &w.flips[0]})
	r.W2.Host.AddHookStage(datapath.Prerouting, "flip", -999, flipper{&w.flip[1], &w.flips[1]})
	r.W2.Host.AddHookStage(datapath.Postrouting, "ctlog", 1000, ctLog{r.W2.Host, &w.delivered})
	_, err = r.Web1.Netns.ListenUDP(9000, false)
	require.NoError(t, err)
	_, err = r.Web2.Netns.ListenUDP(9000, true)
	require.NoError(t, err)
	return w
}

func (w *fastWorld) netnses() []*datapath.Netns {
	var out []*datapath.Netns
	for _, n := range w.r.Nodes() {
		out = append(out, n.Host)
	}
	for _, p := range w.r.Pods() {
		out = append(out, p.Netns)
	}
	for _, h := range w.r.ExternalHosts() {
		out = append(out, h.Netns)
	}
	return out
}

func (w *fastWorld) hits() uint64 {
	var n uint64
	for _, ns := range w.netnses() {
		n += ns.FastHits()
	}
	return n
}

// dump renders everything observable: iptables-save -c and the rules
// evaluated, conntrack entries with their exact expiry and the counters,
// each namespace's devices, FDBs, neighbours and counters, the sockets,
// every frame delivered, the clock and the queue.
func (w *fastWorld) dump() string {
	var b strings.Builder
	e := w.r.World
	fmt.Fprintf(&b, "now %v pending %d allocated %d\n", e.Now(), e.Pending(), e.Pool.Allocated)
	for _, n := range w.r.Nodes() {
		if nf := n.Netfilter; nf != nil {
			fmt.Fprintf(&b, "== %s evaluations %d\n%s", n.Name, nf.RulesEvaluated(), nf.Save(netfilter.SaveOptions{Counters: true}))
		}
		if ct := n.Conntrack; ct != nil {
			fmt.Fprintf(&b, "conntrack %+v\n", ct.Stats)
			for _, c := range ct.List() {
				fmt.Fprintf(&b, "%d %s expires %d status %v state %v\n", c.ID, c.Format(e.Now()), c.Expires(), c.Status, c.TCPState)
			}
		}
	}
	for _, ns := range w.netnses() {
		b.WriteString(ns.StateDigest())
		for _, port := range []uint16{80, 9000} {
			if l := ns.TCPListener(port); l != nil {
				fmt.Fprintf(&b, "tcp %d %+v\n", port, *l)
			}
			if s := ns.UDPSocket(port); s != nil {
				fmt.Fprintf(&b, "udp %d %d %d\n", port, s.Received, s.Bytes)
			}
		}
	}
	b.WriteString(strings.Join(w.delivered, "\n"))
	return b.String()
}

type fastStep struct {
	name string
	do   func(t *testing.T, w *fastWorld)
}

func sendUDP(from *datapath.Netns, src, dst netip.Addr, sport, dport uint16, n int) func(t *testing.T, w *fastWorld) {
	return func(t *testing.T, w *fastWorld) {
		for i := range n {
			ip, err := packet.UDP(packet.IP{Src: src, Dst: dst}, sport, dport, []byte(fmt.Sprintf("datagram %d of a flow", i)))
			require.NoError(t, err)
			_, err = from.Send(ip)
			require.NoError(t, err)
			require.NoError(t, w.r.World.Run())
			require.NoError(t, w.r.World.Advance(time.Millisecond))
		}
	}
}

// TestFastPathEquivalence runs the same scenario in two reference
// clusters, the fast path off in one and on in the other, and compares
// everything observable after every batch of packets: TCP through a
// ClusterIP across nodes (and its replies), a NodePort from outside, UDP
// on one node and across nodes with echoes, with the clock moved past
// neighbour, FDB and conntrack timeouts, a rule inserted and a DROP rule
// added and removed mid-flow, an endpoint deleted mid-stream, and traced
// packets among the fast ones.
func TestFastPathEquivalence(t *testing.T) {
	datapath.SetCheckLinks(true)
	defer datapath.SetCheckLinks(false)
	slow, fast := newFastWorld(t, false), newFastWorld(t, true)
	worlds := []*fastWorld{slow, fast}
	dial := func(key string, from func(*fastWorld) (*datapath.Netns, netip.Addr), dst func(*fastWorld) netip.Addr, sport, dport uint16) fastStep {
		return fastStep{"dial " + key, func(t *testing.T, w *fastWorld) {
			ns, src := from(w)
			c, err := ns.DialTCP(src, dst(w), sport, dport, 1000, nil)
			require.NoError(t, err)
			require.NoError(t, w.r.World.Run())
			require.True(t, c.Established, key)
			w.conns[key] = c
		}}
	}
	write := func(key string, n int, traced bool) fastStep {
		return fastStep{fmt.Sprintf("write %s x%d traced %v", key, n, traced), func(t *testing.T, w *fastWorld) {
			for i := range n {
				var tr *trace.Trace
				if traced {
					tr = &trace.Trace{}
				}
				w.conns[key].Write([]byte(fmt.Sprintf("segment %d", i)), tr)
				require.NoError(t, w.r.World.Run())
				require.NoError(t, w.r.World.Advance(time.Millisecond))
				if tr != nil {
					w.delivered = append(w.delivered, fmt.Sprintf("%v", tr.Find(func(*trace.Observation) bool { return true })))
				}
			}
		}}
	}
	client := func(w *fastWorld) (*datapath.Netns, netip.Addr) { return w.r.Client.Netns, w.r.Client.IP }
	outside := func(w *fastWorld) (*datapath.Netns, netip.Addr) { return w.r.Outside.Netns, w.r.Outside.IP }
	udp := func(name string, dst func(*fastWorld) netip.Addr, sport uint16, n int) fastStep {
		return fastStep{name, func(t *testing.T, w *fastWorld) {
			sendUDP(w.r.Client.Netns, w.r.Client.IP, dst(w), sport, 9000, n)(t, w)
		}}
	}
	web1 := func(w *fastWorld) netip.Addr { return w.r.Web1.IP }
	web2 := func(w *fastWorld) netip.Addr { return w.r.Web2.IP }
	advance := func(d time.Duration) fastStep {
		return fastStep{"advance " + d.String(), func(t *testing.T, w *fastWorld) { require.NoError(t, w.r.World.Advance(d)) }}
	}
	exec := func(args ...string) fastStep {
		return fastStep{"iptables " + strings.Join(args, " "), func(t *testing.T, w *fastWorld) {
			require.NoError(t, w.r.W1.Netfilter.Exec("filter", args...))
		}}
	}
	// xmit writes n frames to web-2 on the client's eth0, as the kernel
	// side by side does: no stack checksummed them (not CsumValid).
	xmit := func(t *testing.T, w *fastWorld, n int) {
		frame, err := w.r.ClientFrameToWeb2(9000)
		require.NoError(t, err)
		for range n {
			require.NoError(t, w.r.Client.Netns.Device("eth0").Transmit(frame, nil))
			require.NoError(t, w.r.World.Run())
			require.NoError(t, w.r.World.Advance(time.Millisecond))
		}
	}
	// across makes s require, in the fast world, that some frame crossing
	// the underlay was replayed at its receipt linked from the sending
	// node's replay (Engine.handOnLater, linkLater).
	across := func(s fastStep) fastStep {
		return fastStep{s.name + " (linked across the underlay)", func(t *testing.T, w *fastWorld) {
			l := datapath.LaterLinks(w.r.World.Engine)
			s.do(t, w)
			if w.fast {
				require.Greater(t, datapath.LaterLinks(w.r.World.Engine), l, "replays linked across the underlay")
			}
		}}
	}
	// timers makes s require, in the fast world, that cka-w1's fast path
	// (and cka-w2's, with both) holds conntrack refreshes flattened
	// (Flat.Timer) and that some event was replayed.
	timers := func(s fastStep, both bool) fastStep {
		return fastStep{s.name + " (conntrack flattened)", func(t *testing.T, w *fastWorld) {
			h := w.hits()
			s.do(t, w)
			if w.fast {
				require.Greater(t, w.hits(), h, "replays")
				require.Positive(t, datapath.FlatTimers(w.r.W1.Host), "cka-w1's flattened conntrack refreshes")
				if both {
					require.Positive(t, datapath.FlatTimers(w.r.W2.Host), "cka-w2's flattened conntrack refreshes")
				}
			}
		}}
	}
	steps := []fastStep{
		dial("clusterip", client, func(w *fastWorld) netip.Addr { return w.r.Web.ClusterIP() }, 40000, 80),
		timers(write("clusterip", 20, false), false), // TCP
		dial("clusterip2", client, func(w *fastWorld) netip.Addr { return w.r.Web.ClusterIP() }, 40001, 80),
		dial("clusterip3", client, func(w *fastWorld) netip.Addr { return w.r.Web.ClusterIP() }, 40002, 80),
		dial("clusterip4", client, func(w *fastWorld) netip.Addr { return w.r.Web.ClusterIP() }, 40003, 80),
		write("clusterip2", 10, false),
		write("clusterip3", 10, false),
		write("clusterip4", 10, false),
		// The client's FIN and the server's ACK of it move the connection
		// to CLOSE_WAIT with its status unchanged: the client's later
		// segments, keyed as before, refresh it with that state's timeout.
		{"close clusterip4", func(t *testing.T, w *fastWorld) {
			w.conns["clusterip4"].Close(nil)
			require.NoError(t, w.r.World.Run())
		}},
		write("clusterip4", 5, false),
		{"bad IPv4 checksum among good packets", func(t *testing.T, w *fastWorld) {
			for i := range 4 {
				ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: w.r.Web1.IP}, 42000, 9000, []byte("datagram 1 of a flow"))
				require.NoError(t, err)
				if i%2 == 1 {
					ip[10] ^= 0x40
				}
				p := w.r.World.Pool.Get()
				p.SetIPPacket(ip)
				w.r.Client.Netns.SendPacket(p)
				require.NoError(t, w.r.World.Run())
			}
		}},
		{"IPv4 IDs changed with and without their checksum among good packets", func(t *testing.T, w *fastWorld) {
			// The replay sums only the ID and checksum onto the rest of the
			// recorded header: a new ID with the old checksum is a bad
			// header, a new ID with its checksum a good one.
			for i := range 6 {
				ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: w.r.Web1.IP}, 42000, 9000, []byte("datagram 1 of a flow"))
				require.NoError(t, err)
				binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(0x101*i))
				if i%3 != 1 {
					ip[10], ip[11] = 0, 0
					binary.BigEndian.PutUint16(ip[10:], ^checksum.Checksum(ip[:20], 0))
				}
				p := w.r.World.Pool.Get()
				p.SetIPPacket(ip)
				w.r.Client.Netns.SendPacket(p)
				require.NoError(t, w.r.World.Run())
			}
		}},
		dial("nodeport", outside, func(w *fastWorld) netip.Addr { return w.r.W1.InternalIP }, 41000, scenarios.WebNodePort),
		write("nodeport", 20, false),
		udp("udp same node", web1, 42000, 20),
		timers(across(udp("udp cross node with echoes", web2, 42001, 20)), true),
		write("clusterip", 3, true),
		write("clusterip", 10, false),
		advance(31 * time.Second), // neighbours turn STALE on use
		write("clusterip", 10, false),
		udp("udp same node after 31s", web1, 42000, 10),
		exec("-I", "FORWARD", "-p", "tcp", "--dport", "80", "-j", "ACCEPT"),
		write("clusterip", 10, false),
		write("nodeport", 10, false),
		exec("-I", "FORWARD", "-p", "udp", "--dport", "9000", "-j", "DROP"),
		udp("udp cross node dropped", web2, 42001, 5),
		exec("-D", "FORWARD", "-p", "udp", "--dport", "9000", "-j", "DROP"),
		across(udp("udp cross node again", web2, 42001, 10)),
		// The decapsulating side's device, set directly: the replay's
		// decapsulation (fastDecap) reads it as deliver does.
		fastStep{"cka-w2's flannel.1 VNI set directly", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Device("flannel.1").VXLAN().VNI++ }},
		udp("udp cross node", web2, 42001, 3),
		fastStep{"cka-w2's flannel.1 VNI restored", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Device("flannel.1").VXLAN().VNI-- }},
		udp("udp cross node", web2, 42001, 3),
		fastStep{"cka-w2's flannel.1 port set directly", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Device("flannel.1").VXLAN().Port++ }},
		udp("udp cross node", web2, 42001, 3),
		fastStep{"cka-w2's flannel.1 port restored", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Device("flannel.1").VXLAN().Port-- }},
		udp("udp cross node", web2, 42001, 3),
		fastStep{"cka-w2's flannel.1 learning set directly", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Device("flannel.1").VXLAN().Learning = true }},
		udp("udp cross node", web2, 42001, 3),
		fastStep{"cka-w2's flannel.1 learning off", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Device("flannel.1").VXLAN().Learning = false }},
		udp("udp cross node", web2, 42001, 3),
		{"an outer frame with a bad UDP checksum among good ones, injected on cka-w2's eth0", func(t *testing.T, w *fastWorld) {
			// The last VXLAN frame cka-w2 took in, again: an injected frame
			// is not known to have a valid checksum, so the replay's
			// decapsulation verifies it as udpReceive does.
			var frame []byte
			for _, l := range w.delivered {
				if f := strings.Fields(l); len(f) == 4 && f[1] == "cka-w2/host" && f[2] == "PREROUTING" {
					if b, err := hex.DecodeString(f[3]); err == nil && len(b) > 50 && b[23] == datapath.ProtoUDP && binary.BigEndian.Uint16(b[36:]) == 8472 {
						frame = b
					}
				}
			}
			require.NotNil(t, frame)
			for i := range 5 {
				f := append([]byte(nil), frame...)
				if i == 3 {
					f[len(f)-1] ^= 0x01
				}
				_, err := w.r.W2.Host.Device("eth0").Inject(f)
				require.NoError(t, err)
				require.NoError(t, w.r.World.Run())
			}
		}},
		advance(200 * time.Second), // the UDP flows expire
		udp("udp same node after expiry", web1, 42000, 10),
		udp("udp cross node after expiry", web2, 42001, 10),
		write("clusterip", 10, false),
		advance(301 * time.Second), // bridge FDB entries age out
		write("clusterip", 10, false),
		udp("udp same node after FDB ageing", web1, 42000, 10),
	}
	// Configuration changed mid-flow, each way the fast path must notice
	// (a sysctl, a route, a device's fields set directly, a neighbour
	// entry, the underlay's latency, an address, a bridge's ageing time,
	// the VXLAN FDB in and out of the mesh), and timers that run out
	// between two packets of one step (no listing in between to collect
	// expired connections).
	w1 := func(w *fastWorld) *datapath.Netns { return w.r.W1.Host }
	change := func(name string, do func(t *testing.T, w *fastWorld)) fastStep { return fastStep{name, do} }
	udpX, udpS := udp("udp cross node", web2, 42001, 3), udp("udp same node", web1, 42000, 3)
	udpBig := change("udp cross node, 100-byte datagrams", func(t *testing.T, w *fastWorld) {
		for range 3 {
			ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: w.r.Web2.IP}, 42002, 9000, make([]byte, 100))
			require.NoError(t, err)
			_, err = w.r.Client.Netns.Send(ip)
			require.NoError(t, err)
			require.NoError(t, w.r.World.Run())
		}
	})
	web1From := func(w *fastWorld) (*datapath.Netns, netip.Addr) { return w.r.Web1.Netns, w.r.Web1.IP }
	// A kube-proxy-style load of the filter table (LoadShared): its
	// built-in chains stay as they were, so nothing but the ruleset
	// generation tells the fast path the walk changed.
	// KUBE-FORWARD's rules as kube-proxy wrote them, per world, taken at
	// the first load (a later load's rules include what it added).
	kubeForward := map[*fastWorld]string{}
	load := func(name, extra string) fastStep {
		return change(name, func(t *testing.T, w *fastWorld) {
			nf := w.r.W1.Netfilter
			rules, ok := kubeForward[w]
			if !ok {
				for _, l := range strings.Split(nf.Save(netfilter.SaveOptions{Tables: []string{"filter"}}), "\n") {
					if strings.HasPrefix(l, "-A KUBE-FORWARD ") {
						rules += l + "\n"
					}
				}
				kubeForward[w] = rules
			}
			s, err := netfilter.CompileShared("filter", nil, "*filter\n:KUBE-FORWARD - [0:0]\n"+extra+rules+"COMMIT\n")
			require.NoError(t, err)
			require.NoError(t, nf.LoadShared(netfilter.Load{Set: s, Declared: &netfilter.Declared{All: true}}))
		})
	}
	steps = append(steps,
		load("filter loaded as it is (LoadShared)", ""),
		udpX, udpS,
		load("filter loaded with a DROP for udp/9000 in KUBE-FORWARD", "-A KUBE-FORWARD -p udp -m udp --dport 9000 -j DROP\n"),
		udpX, udpS,
		load("filter loaded without it", ""),
		udpX, udpS,
		// The flow is forwarded again, and replayed on both nodes: the
		// steps below test the fast path, not two worlds dropping alike.
		change("udp cross node replayed at cka-w1 and cka-w2", func(t *testing.T, w *fastWorld) {
			e := w.r.World.Engine
			h1, h2, l, k := w.r.W1.Host.FastHits(), w.r.W2.Host.FastHits(), datapath.LaterLinks(e), datapath.SumsKnown(e)
			udpX.do(t, w)
			if w.fast {
				require.Greater(t, w.r.W1.Host.FastHits(), h1, "replays on cka-w1")
				require.Greater(t, w.r.W2.Host.FastHits(), h2, "replays on cka-w2")
				require.Greater(t, datapath.LaterLinks(e), l, "replays linked across the underlay")
				// The replays' table counters wait to be read.
				require.Positive(t, datapath.Deferred(e), "counter increments deferred")
				w.r.W1.Netfilter.Save(netfilter.SaveOptions{Counters: true})
				require.Zero(t, datapath.Deferred(e), "iptables-save settles the deferred increments")
			}
			// Frames no stack checksummed (not CsumValid): the replay
			// encapsulates them from its template, sums the outer
			// checksum in full and knows it right.
			s := datapath.EncSummed(e)
			xmit(t, w, 4)
			if w.fast {
				require.Greater(t, datapath.SumsKnown(e), k, "outer checksums known right")
				require.Greater(t, datapath.EncSummed(e), s, "encapsulations from the template, summed in full")
			}
		}),
		// Every other VXLAN frame corrupted after cka-w1 encapsulated it
		// (in its POSTROUTING) or on cka-w2 before it is decapsulated,
		// the replays included: the replay that encapsulated it knew
		// its checksum, but not after the flip.
		change("cka-w1 flips a byte of every other VXLAN frame", func(t *testing.T, w *fastWorld) { w.flip[0] = true }),
		change("frames to web-2 written on the client's eth0, every other one corrupted", func(t *testing.T, w *fastWorld) { xmit(t, w, 8) }),
		change("cka-w1 flips no more, cka-w2 does", func(t *testing.T, w *fastWorld) { w.flip = [2]bool{false, true} }),
		change("frames to web-2 written on the client's eth0, every other one corrupted", func(t *testing.T, w *fastWorld) { xmit(t, w, 8) }),
		change("cka-w2 flips no more", func(t *testing.T, w *fastWorld) { w.flip[1] = false }),
		change("frames to web-2 written on the client's eth0", func(t *testing.T, w *fastWorld) { xmit(t, w, 4) }),
		change("ip_forward off on cka-w1", func(t *testing.T, w *fastWorld) { w1(w).Sysctl.IPForward = false }),
		udpX,
		change("ip_forward on on cka-w1", func(t *testing.T, w *fastWorld) { w1(w).Sysctl.IPForward = true }),
		udpX,
		change("ip_forward off on cka-w2 (the decapsulated frame's)", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Sysctl.IPForward = false }),
		udpX,
		change("ip_forward on on cka-w2", func(t *testing.T, w *fastWorld) { w.r.W2.Host.Sysctl.IPForward = true }),
		udpX,
		change("ip_default_ttl 9 on cka-w1 (the outer VXLAN header's)", func(t *testing.T, w *fastWorld) { w1(w).Sysctl.DefaultTTL = 9 }),
		udpX,
		change("ip_default_ttl 64 on cka-w1", func(t *testing.T, w *fastWorld) { w1(w).Sysctl.DefaultTTL = 64 }),
		udpX,
		change("bridge-nf-call-iptables off on cka-w1", func(t *testing.T, w *fastWorld) { w1(w).Sysctl.BridgeNFCallIPTables = false }),
		udpS, udpX,
		change("bridge-nf-call-iptables on on cka-w1", func(t *testing.T, w *fastWorld) { w1(w).Sysctl.BridgeNFCallIPTables = true }),
		udpS, udpX,
		change("blackhole route to web-2 on cka-w1", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w1(w).AddRoute(datapath.RouteSpec{Dst: netip.PrefixFrom(w.r.Web2.IP, 32), Type: route.Blackhole}))
		}),
		udpX,
		change("blackhole route deleted", func(t *testing.T, w *fastWorld) {
			require.True(t, w1(w).Routes.Delete(netip.PrefixFrom(w.r.Web2.IP, 32), 0))
		}),
		udpX,
		change("blackhole route to web-2 added to cka-w1's table directly", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w1(w).Routes.Add(route.Route{Dst: netip.PrefixFrom(w.r.Web2.IP, 32), Type: route.Blackhole}))
		}),
		udpX,
		change("blackhole route deleted from cka-w1's table directly", func(t *testing.T, w *fastWorld) {
			require.True(t, w1(w).Routes.Delete(netip.PrefixFrom(w.r.Web2.IP, 32), 0))
		}),
		udpX,
		udpBig,
		change("flannel.1 MTU 68", func(t *testing.T, w *fastWorld) { require.NoError(t, w1(w).SetMTU("flannel.1", 68)) }),
		udpX, udpBig,
		change("flannel.1 MTU restored", func(t *testing.T, w *fastWorld) { require.NoError(t, w1(w).SetMTU("flannel.1", 1450)) }),
		udpX, udpBig,
		dial("hairpin", web1From, func(w *fastWorld) netip.Addr { return w.r.Web.ClusterIP() }, 43000, 80),
		dial("hairpin2", web1From, func(w *fastWorld) netip.Addr { return w.r.Web.ClusterIP() }, 43001, 80),
		dial("hairpin3", web1From, func(w *fastWorld) netip.Addr { return w.r.Web.ClusterIP() }, 43002, 80),
		write("hairpin", 3, false), write("hairpin2", 3, false), write("hairpin3", 3, false),
		change("web-1's host veth hairpin off", func(t *testing.T, w *fastWorld) {
			w.r.Web1.Netns.Device("eth0").Peer().SetHairpin(false)
		}),
		write("hairpin", 3, false), write("hairpin2", 3, false), write("hairpin3", 3, false),
		change("web-1's host veth hairpin on", func(t *testing.T, w *fastWorld) {
			w.r.Web1.Netns.Device("eth0").Peer().SetHairpin(true)
		}),
		advance(5*time.Second), // retransmissions
		write("hairpin", 3, false), write("hairpin2", 3, false), write("hairpin3", 3, false),
		change("web-1's eth0 MAC set", func(t *testing.T, w *fastWorld) {
			d := w.r.Web1.Netns.Device("eth0")
			w.savedMAC = d.MAC()
			d.SetMAC(datapath.MAC{0x02, 0, 0, 0, 0, 0x99})
		}),
		udpS,
		change("web-1's eth0 MAC restored", func(t *testing.T, w *fastWorld) { w.r.Web1.Netns.Device("eth0").SetMAC(w.savedMAC) }),
		udpS,
		change("cka-w1's neighbour web-1 replaced", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w1(w).SetNeigh("cni0", w.r.Web1.IP, datapath.MAC{0x02, 0, 0, 0, 0, 0x42}, datapath.NeighReachable))
		}),
		udp("udp client to web-1 via cka-w1", web1, 42000, 3),
		change("cka-w1's neighbour web-1 deleted", func(t *testing.T, w *fastWorld) {
			require.True(t, w1(w).DeleteNeigh("cni0", w.r.Web1.IP))
		}),
		udpS, udpX,
		change("underlay latency set directly", func(t *testing.T, w *fastWorld) {
			w.r.Segment(scenarios.UnderlaySegment).Latency += 3 * time.Millisecond
		}),
		udpX,
		change("web-2's address added on cka-w1", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w1(w).AddAddr("lo", netip.PrefixFrom(w.r.Web2.IP, 32)))
		}),
		udpX,
		change("web-2's address deleted on cka-w1", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w1(w).DeleteAddr("lo", netip.PrefixFrom(w.r.Web2.IP, 32)))
		}),
		udpX,
		change("cni0 ageing time 1s", func(t *testing.T, w *fastWorld) { w1(w).Device("cni0").SetAgeingTime(time.Second) }),
		advance(2*time.Second), udpS,
		change("cni0 ageing time 300s", func(t *testing.T, w *fastWorld) { w1(w).Device("cni0").SetAgeingTime(300 * time.Second) }),
		udpS,
		change("cka-w2's VTEP deleted from cka-w1's VXLAN FDB (out of the mesh)", func(t *testing.T, w *fastWorld) {
			w1(w).Device("flannel.1").VXLAN().DeleteFDB(w.r.W2.Host.Device("flannel.1").MAC())
		}),
		udpX,
		change("cka-w2's VTEP back in cka-w1's VXLAN FDB", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w1(w).Device("flannel.1").VXLAN().AddFDB(w.r.W2.Host.Device("flannel.1").MAC(), w.r.W2.InternalIP))
		}),
		udpX,
		change("cka-w2's VTEP deleted again", func(t *testing.T, w *fastWorld) {
			w1(w).Device("flannel.1").VXLAN().DeleteFDB(w.r.W2.Host.Device("flannel.1").MAC())
		}),
		udpX,
		change("cka-w2's VTEP back again", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w1(w).Device("flannel.1").VXLAN().AddFDB(w.r.W2.Host.Device("flannel.1").MAC(), w.r.W2.InternalIP))
		}),
		udpX,
		change("cka-w2's neighbour web-2 replaced", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w.r.W2.Host.SetNeigh("cni0", w.r.Web2.IP, datapath.MAC{0x02, 0, 0, 0, 0, 0x43}, datapath.NeighReachable))
		}),
		udpX,
		change("cka-w2's neighbour web-2 deleted", func(t *testing.T, w *fastWorld) {
			require.True(t, w.r.W2.Host.DeleteNeigh("cni0", w.r.Web2.IP))
		}),
		udpX,
		udpS,
		change("a frame like the flow's, not checksummed by a stack, with a bad UDP checksum", func(t *testing.T, w *fastWorld) {
			ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: w.r.Web1.IP}, 42000, 9000, []byte("datagram 0 of a flow"))
			require.NoError(t, err)
			ip[20+6] ^= 0x55
			dev := w.r.Web1.Netns.Device("eth0")
			dst, src := dev.MAC(), w.r.Client.Netns.Device("eth0").MAC()
			eth := append(append(append([]byte{}, dst[:]...), src[:]...), 0x08, 0x00)
			_, err = dev.Inject(append(eth, ip...))
			require.NoError(t, err)
			require.NoError(t, w.r.World.Run())
		}),
		udpS,
		change("client's MAC set to web-1's: cni0 learns web-1 behind the client's port", func(t *testing.T, w *fastWorld) {
			d := w.r.Client.Netns.Device("eth0")
			w.savedMAC = d.MAC()
			d.SetMAC(w.r.Web1.Netns.Device("eth0").MAC())
			udp("", web2, 42001, 1).do(t, w)
			d.SetMAC(w.savedMAC)
		}),
		udpS,
		change("web-1 answers the client's flow", func(t *testing.T, w *fastWorld) {
			sendUDP(w.r.Web1.Netns, w.r.Web1.IP, w.r.Client.IP, 9000, 42000, 1)(t, w)
		}),
		udpS,
		change("flannel.1's source port range set directly", func(t *testing.T, w *fastWorld) {
			v := w1(w).Device("flannel.1").VXLAN()
			v.SrcPortMin, v.SrcPortMax = 40000, 40100
		}),
		udpX,
		change("flannel.1's source port range restored", func(t *testing.T, w *fastWorld) {
			v := w1(w).Device("flannel.1").VXLAN()
			v.SrcPortMin, v.SrcPortMax = 32768, 60999
		}),
		udpX,
		change("flannel.1's destination port set directly", func(t *testing.T, w *fastWorld) { w1(w).Device("flannel.1").VXLAN().Port++ }),
		udpX,
		change("flannel.1's destination port restored", func(t *testing.T, w *fastWorld) { w1(w).Device("flannel.1").VXLAN().Port-- }),
		udpX,
		change("flannel.1's VNI set directly", func(t *testing.T, w *fastWorld) { w1(w).Device("flannel.1").VXLAN().VNI++ }),
		udpX,
		change("flannel.1's VNI restored", func(t *testing.T, w *fastWorld) { w1(w).Device("flannel.1").VXLAN().VNI-- }),
		udpX,
		change("UDP without checksum across nodes, among datagrams with one", func(t *testing.T, w *fastWorld) {
			s := datapath.EncSummed(w.r.World.Engine)
			defer func() {
				if w.fast {
					require.Greater(t, datapath.EncSummed(w.r.World.Engine), s, "datagrams without checksum encapsulated from the template")
				}
			}()
			for i := range 6 {
				ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: w.r.Web2.IP}, 42001, 9000, []byte("datagram 1 of a flow"))
				require.NoError(t, err)
				if i >= 2 && i%2 == 0 {
					ip[20+6], ip[20+7] = 0, 0
				}
				_, err = w.r.Client.Netns.Send(ip)
				require.NoError(t, err)
				require.NoError(t, w.r.World.Run())
			}
		}),
		change("a UDP flow expires between two packets", func(t *testing.T, w *fastWorld) {
			udp("", web2, 42001, 3).do(t, w)
			require.NoError(t, w.r.World.Advance(200*time.Second))
			udp("", web2, 42001, 3).do(t, w)
		}),
		change("a replied UDP flow becomes a stream between two packets", func(t *testing.T, w *fastWorld) {
			udp("", web2, 42007, 3).do(t, w)
			require.NoError(t, w.r.World.Advance(2*time.Second))
			udp("", web2, 42007, 3).do(t, w)
		}),
		// Events due at one instant: the engine hands a frame on to the
		// next device without the queue only when nothing queued is due
		// before it (with the fast path off it never does, so the order
		// of what is logged below differs if it hands one on wrongly).
		change("a timer sends two datagrams at once, others fire at that instant", func(t *testing.T, w *fastWorld) {
			send := func(dst netip.Addr, sport uint16) {
				w.sendDatagram(t, dst, sport)
			}
			logAt := func(what string) stepTimer {
				return func(dw *datapath.Walk) { w.delivered = append(w.delivered, fmt.Sprintf("%v %s", dw.Now(), what)) }
			}
			e, eth0 := w.r.World.Engine, w.r.Client.Netns.Device("eth0")
			for i := range 6 {
				e.ScheduleTimer(time.Millisecond, stepTimer(func(*datapath.Walk) {
					send(w.r.Web1.IP, 42000)
					if i%2 == 0 {
						send(w.r.Web1.IP, 42000)
					} else {
						send(w.r.Web2.IP, 42001)
					}
				}))
				e.ScheduleTimer(time.Millisecond, logAt("timer due with the datagrams"))
				if i >= 4 {
					// Due after the sending timer, before what it sent:
					// the client's eth0 is down when they leave.
					e.ScheduleTimer(time.Millisecond, stepTimer(func(*datapath.Walk) { eth0.SetUp(false) }))
					e.ScheduleTimer(2*time.Millisecond, stepTimer(func(*datapath.Walk) { eth0.SetUp(true) }))
				}
				e.ScheduleTimer(time.Millisecond+w.r.Segment(scenarios.UnderlaySegment).Latency, stepTimer(func(dw *datapath.Walk) {
					logAt("timer due with the underlay's frame")(dw)
					send(w.r.Web1.IP, 42000)
				}))
				require.NoError(t, w.r.World.Run())
			}
			udp("", web1, 42000, 2).do(t, w)
		}),
		// A frame crossing the underlay when RunUntil's bound comes, and
		// one whose receipt is due at the instant of a timer queued
		// before it (the timer runs first), with its replay linked.
		across(change("RunUntil stops while a frame crosses the underlay", func(t *testing.T, w *fastWorld) {
			e := w.r.World.Engine
			for range 3 {
				udp("", web2, 42001, 1).do(t, w)
				w.sendDatagram(t, w.r.Web2.IP, 42001)
				require.NoError(t, e.RunUntil(e.Now()+w.r.Segment(scenarios.UnderlaySegment).Latency/2))
				w.delivered = append(w.delivered, fmt.Sprintf("stopped at %v pending %d", e.Now(), e.Pending()))
				require.NoError(t, w.r.World.Run())
			}
		})),
		across(change("a timer due with the underlay's frame, queued before it", func(t *testing.T, w *fastWorld) {
			e := w.r.World.Engine
			for range 3 {
				udp("", web2, 42001, 1).do(t, w)
				e.ScheduleTimer(w.r.Segment(scenarios.UnderlaySegment).Latency, stepTimer(func(dw *datapath.Walk) {
					w.delivered = append(w.delivered, fmt.Sprintf("%v timer due with the underlay's frame", dw.Now()))
				}))
				w.sendDatagram(t, w.r.Web2.IP, 42001)
				require.NoError(t, w.r.World.Run())
			}
		})),
		across(change("a timer sends two datagrams to web-2, then one to web-1 (queued behind them)", func(t *testing.T, w *fastWorld) {
			e := w.r.World.Engine
			for range 3 {
				udp("", web2, 42001, 1).do(t, w)
				e.ScheduleTimer(time.Millisecond, stepTimer(func(*datapath.Walk) {
					for _, dst := range []netip.Addr{w.r.Web2.IP, w.r.Web2.IP, w.r.Web1.IP} {
						w.sendDatagram(t, dst, map[bool]uint16{true: 42001, false: 42000}[dst == w.r.Web2.IP])
					}
				}))
				require.NoError(t, w.r.World.Run())
			}
		})),
		// The counters read in the middle of a run, between replays, by
		// every way out of netfilter (a timer's iptables-save -c, a
		// chain's counters, the rules evaluated, a rule appended and
		// one inserted before the chain's first), must be what the slow
		// world's walks left.
		change("counters read and changed by timers between replayed datagrams", func(t *testing.T, w *fastWorld) {
			e := w.r.World.Engine
			nf := w.r.W1.Netfilter
			send := func(dst netip.Addr, sport uint16) {
				w.sendDatagram(t, dst, sport)
			}
			udp("", web2, 42001, 2).do(t, w)
			udp("", web1, 42000, 2).do(t, w)
			reads := []func(){
				func() {
					w.delivered = append(w.delivered, w.r.W2.Netfilter.Save(netfilter.SaveOptions{Counters: true}))
				},
				func() {
					c := nf.Table("filter").Chain("FORWARD")
					p, b := c.RuleCounters(1) // -j KUBE-FORWARD: every forwarded packet
					w.delivered = append(w.delivered, fmt.Sprintf("FORWARD %d %d rule 2 %d %d", c.Packets, c.Bytes, p, b))
				},
				func() {
					var n uint64
					for _, c := range w.r.W2.Netfilter.Table("filter").Chains() {
						n += c.Packets
						for i := range c.Rules() {
							p, _ := c.RuleCounters(i)
							n += p
						}
					}
					w.delivered = append(w.delivered, fmt.Sprintf("cka-w2 filter packets counted %d", n))
				},
				func() {
					w.delivered = append(w.delivered, fmt.Sprintf("cka-w2 evaluated %d", w.r.W2.Netfilter.RulesEvaluated()))
				},
				func() {
					require.NoError(t, nf.Exec("filter", "-A", "FORWARD", "-p", "udp", "--dport", "9001", "-j", "ACCEPT"))
				},
				func() {
					require.NoError(t, nf.Exec("filter", "-I", "FORWARD", "1", "-p", "udp", "--dport", "9002", "-j", "ACCEPT"))
				},
				func() { w.delivered = append(w.delivered, nf.Save(netfilter.SaveOptions{Counters: true})) },
			}
			for i, read := range reads {
				// Each read when the datagrams before it have arrived
				// (web-2's across the underlay).
				d := time.Duration(2*i+1) * time.Millisecond
				e.ScheduleTimer(d, stepTimer(func(*datapath.Walk) { send(w.r.Web2.IP, 42001); send(w.r.Web1.IP, 42000) }))
				e.ScheduleTimer(d+time.Millisecond, stepTimer(func(*datapath.Walk) { read() }))
			}
			h := w.hits()
			require.NoError(t, w.r.World.Run())
			if w.fast {
				require.Greater(t, w.hits(), h+uint64(len(reads)), "datagrams replayed between the reads")
			}
		}),
		exec("-D", "FORWARD", "-p", "udp", "--dport", "9001", "-j", "ACCEPT"),
		exec("-D", "FORWARD", "-p", "udp", "--dport", "9002", "-j", "ACCEPT"),
		udpX, udpS,
		// cka-w2's own conntrack entries for the flow and its outer VXLAN
		// flow are gone (cka-w1's hold): the receipt linked across the
		// underlay must see it (linkLater's checks).
		change("cka-w2's conntrack flushed", func(t *testing.T, w *fastWorld) { w.r.W2.Conntrack.Flush() }),
		across(udp("udp cross node after cka-w2's flush", web2, 42001, 5)),
		change("cka-w2's conntrack flushed again", func(t *testing.T, w *fastWorld) { w.r.W2.Conntrack.Flush() }),
		udpX,
		change("a timer due in the past sends a datagram, RunUntil stopping before now", func(t *testing.T, w *fastWorld) {
			e := w.r.World.Engine
			ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: w.r.Web1.IP}, 42000, 9000, []byte("datagram 0 of a flow"))
			require.NoError(t, err)
			e.ScheduleTimer(-time.Millisecond, stepTimer(func(*datapath.Walk) {
				_, err := w.r.Client.Netns.Send(ip)
				require.NoError(t, err)
			}))
			require.NoError(t, e.RunUntil(e.Now()-time.Millisecond))
			w.delivered = append(w.delivered, fmt.Sprintf("stopped at %v pending %d", e.Now(), e.Pending()))
			require.NoError(t, w.r.World.Run())
		}),
		fastStep{"delete web-2", func(t *testing.T, w *fastWorld) {
			require.NoError(t, w.r.DeletePod("net", "web-2"))
			require.NoError(t, w.r.Settle())
		}},
		write("clusterip", 10, false),
		write("clusterip2", 10, false),
		write("clusterip3", 10, false),
		write("clusterip4", 10, false),
		write("nodeport", 10, false),
		write("clusterip", 2, true),
		write("clusterip2", 2, true),
	)
	for _, s := range steps {
		for _, w := range worlds {
			s.do(t, w)
		}
		require.Equal(t, slow.dump(), fast.dump(), "after %s", s.name)
	}
	require.Zero(t, slow.hits(), "the fast path is off in the slow world")
	t.Log("replayed", fast.hits())
	require.Greater(t, fast.hits(), uint64(300), "the fast world replayed most events")
}

// TestHandedOnEventsCountTowardTheLimit: an event handed on to run right
// after the one that scheduled it (not through the queue), and each
// replay a chain of linked replays runs in place, is one of Run's
// MaxEvents, so a limit stops the walk where it stops with the fast path
// off, where every event is queued. In "linked" the flow is warmed until
// its replays link and a timer sends a second datagram within the same
// RunUntil (the world's runner would split it), so a miscount shows.
func TestHandedOnEventsCountTowardTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warm   int
		limits int
		linked bool
		across bool // to web-2, across the underlay
	}{
		{"handed on", 2, 8, false, false},
		{"linked", 4, 16, true, false},
		// One Engine.Run with nothing else due: the receipt across the
		// underlay is handed on and linked (handOnLater, linkLater).
		{"linked across the underlay", 4, 24, false, true},
		// The timer is due before the receipt: it is queued again
		// (runNext), and counted once.
		{"across the underlay, a timer due first", 4, 24, true, true},
	} {
		for limit := 1; limit <= tc.limits; limit++ {
			var got []string
			for _, fast := range []bool{false, true} {
				w := newFastWorld(t, fast)
				dst := w.r.Web1.IP
				if tc.across {
					dst = w.r.Web2.IP
				}
				udp := sendUDP(w.r.Client.Netns, w.r.Client.IP, dst, 42000, 9000, tc.warm)
				udp(t, w)
				w.r.World.MaxEvents = limit
				// The same length as the flow's datagrams, so they replay.
				datagram := func(i int) []byte {
					ip, err := packet.UDP(packet.IP{Src: w.r.Client.IP, Dst: dst}, 42000, 9000, []byte(fmt.Sprintf("datagram %d of a flow", i)))
					require.NoError(t, err)
					return ip
				}
				_, err := w.r.Client.Netns.Send(datagram(8))
				require.NoError(t, err)
				if tc.across && !tc.linked {
					l := datapath.LaterLinks(w.r.World.Engine)
					err = w.r.World.Engine.Run()
					if fast && limit == tc.limits {
						require.Greater(t, datapath.LaterLinks(w.r.World.Engine), l, "linked across the underlay")
					}
				} else if tc.linked {
					var sendErr error
					w.r.World.Engine.ScheduleTimer(time.Microsecond, sendTimer{w.r.Client.Netns, datagram(9), &sendErr})
					err = w.r.World.Engine.Run()
					require.NoError(t, sendErr)
				} else {
					err = w.r.World.Run()
				}
				got = append(got, fmt.Sprintf("%v pending %d now %v\n%s", err, w.r.World.Pending(), w.r.World.Now(), w.dump()))
			}
			require.Equal(t, got[0], got[1], "%s: limit %d", tc.name, limit)
		}
	}
}

// sendTimer sends a datagram from a namespace when it fires (the error,
// if any, in err).
type sendTimer struct {
	ns  *datapath.Netns
	ip  []byte
	err *error
}

func (s sendTimer) Fire(*datapath.Walk) { _, *s.err = s.ns.Send(s.ip) }
