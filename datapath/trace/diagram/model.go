// Package diagram draws a recorded walk as pictures: a Mermaid sequence
// diagram (devices as participants, grouped by node) and a self-contained
// SVG (nodes left to right, the devices the walk touched inside them, the
// underlay below, the path as numbered arrows). It needs nothing but the
// trace: the topology is derived from the observations' node, netns and
// device names.
package diagram

import (
	"fmt"
	"strings"

	"github.com/kubewalk/kubewalk/datapath/trace"
)

// Kind is what a device is, as far as the observations tell.
type Kind uint8

// Device kinds, in the order they sit from a pod out to the wire.
const (
	PodIface Kind = iota // an interface inside a pod's network namespace
	Veth                 // the host end of a pod's veth pair
	Bridge               // a Linux bridge (cni0)
	Other                // anything else in a host namespace (lo, ...)
	VTEP                 // a VXLAN device (flannel.1)
	NIC                  // a physical NIC on the underlay
)

var kindNames = [...]string{PodIface: "pod interface", Veth: "veth", Bridge: "bridge", Other: "device", VTEP: "VXLAN VTEP", NIC: "NIC"}

// String names the kind the way the diagrams label it.
func (k Kind) String() string { return kindNames[k] }

// Device is one device the walk touched.
type Device struct {
	Node, Netns, Name string
	Kind              Kind
	// Peer is the other end of a pod's veth pair, when the walk crossed it.
	Peer *Device

	id    string // mermaid participant id
	order int    // first appearance
}

// Key is "node/netns/device", the pcapng interface name.
func (d *Device) Key() string { return d.Node + "/" + d.Netns + "/" + d.Name }

// Label is how diagrams name the device: "net/client eth0" inside a pod,
// the device name in a host namespace.
func (d *Device) Label() string {
	if d.Netns != "host" {
		return d.Netns + " " + d.Name
	}
	return d.Name
}

// Node is a machine the walk touched (a cluster node or an outside host),
// with its devices in drawing order: from the pods out to the NIC on the
// first node, mirrored (NIC first) on the others.
type Node struct {
	Name    string
	Devices []*Device
	// Pods are the pod namespaces in order of first appearance.
	Pods []string
}

// StepKind says what a Step shows.
type StepKind uint8

// Step kinds.
const (
	Hop        StepKind = iota + 1 // the packet moved from one device to another
	Rewrite                        // NAT changed addresses or ports
	Encap                          // wrapped in VXLAN
	Decap                          // VXLAN header removed
	Drop                           // discarded, with a reason
	Deliver                        // handed to a socket
	InFlight                       // the walk stopped with the packet still travelling
	ReplySpawn                     // a stack answered (SYN-ACK, echo reply) or sent an ARP request: a new packet starts here
)

// Step is one thing to draw: a hop between two devices or a note on one.
type Step struct {
	Kind   StepKind
	Packet int
	// From and To are set for hops; At (== To for hops) for notes.
	From, To, At *Device
	// Label is a short description: "routed: 10.244.2.0/24 via ...",
	// "VXLAN encap vni 1 to 192.168.122.22:8472", "dropped: no route".
	Label string
	// Obs is the index of the observation in the trace.
	Obs int
}

// Packet describes one packet copy of the walk.
type Packet struct {
	ID, Parent int
	// Origin says how the copy came about (trace.Outcome.Origin): sent by
	// the walk, a flooded copy of Parent, an answer to it, or an ARP
	// request for its next hop.
	Origin trace.Origin
	// Summary is the packet as it started, shortened: "10.244.1.2.40000 >
	// 10.244.2.2.80: Flags [S]".
	Summary string
	// Outcome: "delivered at ...", "dropped at ...: reason" or "in flight
	// at TIME, last seen at ...".
	Outcome string
	// SameAs is the id of an earlier packet that took exactly the same
	// path; such packets are listed but not drawn again in the SVG.
	SameAs int
	ARP    bool
	path   string
}

// Walk is a trace prepared for drawing.
type Walk struct {
	// Title is Options.Title or the first shown packet's summary.
	Title   string
	Nodes   []*Node
	Packets []*Packet
	Steps   []Step
	devices map[string]*Device
	opt     Options
}

// Options tune what a diagram shows.
type Options struct {
	// ARP includes ARP requests and replies; they are left out by default
	// because they are the plumbing of a walk, not its story.
	ARP bool
	// Title is printed on top of the SVG; the first packet's summary when
	// empty.
	Title string
}

// ShortSummary cuts a tcpdump-style summary after the part a reader needs:
// addresses and TCP flags or ICMP type. For VXLAN it keeps the inner packet.
func ShortSummary(s string) string {
	if i := strings.Index(s, "VXLAN, vni "); i >= 0 {
		if j := strings.Index(s[i:], ": "); j >= 0 {
			s = s[i+j+2:]
		}
	}
	cut := len(s)
	for _, sep := range []string{", seq ", ", id ", ", length ", ", ttl ", ", win "} {
		if i := strings.Index(s, sep); i >= 0 && i < cut {
			cut = i
		}
	}
	return s[:cut]
}

func isARP(s string) bool { return strings.HasPrefix(s, "ARP") }

func classify(t *trace.Trace) map[string]Kind {
	ev := map[string]Kind{}
	for _, o := range t.Obs {
		if o.Device == "" {
			continue
		}
		k := o.Node + "/" + o.Netns + "/" + o.Device
		switch o.Stage {
		case "bridge":
			ev[k] = Bridge
		case "vxlan":
			ev[k] = VTEP
		}
	}
	return ev
}

func kindOf(o *trace.Observation, evidence map[string]Kind) Kind {
	if k, ok := evidence[o.Node+"/"+o.Netns+"/"+o.Device]; ok {
		return k
	}
	n := o.Device
	switch {
	case o.Netns != "host":
		return PodIface
	case strings.HasPrefix(n, "veth"):
		return Veth
	case n == "cni0" || n == "cbr0" || n == "docker0" || strings.HasPrefix(n, "br"):
		return Bridge
	case strings.HasPrefix(n, "flannel.") || strings.HasPrefix(n, "vxlan"):
		return VTEP
	case n == "lo":
		return Other
	}
	return NIC
}

// Build prepares t for drawing: it follows every packet copy from device to
// device and collects the notes (rewrites, encapsulation, drops,
// deliveries) where they happen.
func Build(t *trace.Trace, opt Options) *Walk {
	w := &Walk{devices: map[string]*Device{}}
	evidence := classify(t)
	pkts := map[int]*Packet{}
	outcomes := map[int]trace.Outcome{}
	for _, oc := range t.Outcomes() {
		outcomes[oc.Packet] = oc
	}
	for _, o := range t.Obs {
		p := pkts[o.Packet]
		if p == nil {
			p = &Packet{ID: o.Packet, Parent: o.Parent, Origin: outcomes[o.Packet].Origin}
			pkts[o.Packet] = p
			w.Packets = append(w.Packets, p)
		}
		if p.Summary == "" && o.Summary != "" {
			p.Summary = ShortSummary(o.Summary)
			p.ARP = isARP(o.Summary)
		}
	}
	shown := func(id int) bool { p := pkts[id]; return p != nil && (opt.ARP || !p.ARP) }
	nodes := map[string]*Node{}
	device := func(o *trace.Observation) *Device {
		k := o.Node + "/" + o.Netns + "/" + o.Device
		if d := w.devices[k]; d != nil {
			return d
		}
		d := &Device{Node: o.Node, Netns: o.Netns, Name: o.Device, Kind: kindOf(o, evidence), order: len(w.devices)}
		d.id = fmt.Sprintf("d%d", len(w.devices))
		w.devices[k] = d
		n := nodes[o.Node]
		if n == nil {
			n = &Node{Name: o.Node}
			nodes[o.Node] = n
			w.Nodes = append(w.Nodes, n)
		}
		n.Devices = append(n.Devices, d)
		if d.Kind == PodIface && !containsStr(n.Pods, d.Netns) {
			n.Pods = append(n.Pods, d.Netns)
		}
		return d
	}
	cur := map[int]*Device{}
	for i := range t.Obs {
		o := &t.Obs[i]
		if !shown(o.Packet) {
			continue
		}
		p := pkts[o.Packet]
		at := cur[o.Packet]
		// Netfilter and conntrack observations name the packet's input
		// device, not where it is: they annotate, they do not move it.
		if o.Device != "" && (at == nil || moves(o)) {
			d := device(o)
			if at == nil && o.Parent != 0 && o.Action == trace.Replied {
				verb := "replies: "
				if p.Origin == trace.ARPRequest {
					verb = "asks: "
				}
				w.Steps = append(w.Steps, Step{Kind: ReplySpawn, Packet: o.Packet, At: d, Label: verb + ShortSummary(o.Summary), Obs: i})
			}
			if at != nil && at != d {
				w.Steps = append(w.Steps, Step{Kind: Hop, Packet: o.Packet, From: at, To: d, At: d, Label: hopLabel(o, at, d), Obs: i})
				p.path += at.Key() + ">" + d.Key() + ";"
				if at.Kind == PodIface && d.Kind == Veth && d.Node == at.Node {
					at.Peer, d.Peer = d, at
				}
				if at.Kind == Veth && d.Kind == PodIface && d.Node == at.Node {
					at.Peer, d.Peer = d, at
				}
			}
			at = d
			cur[o.Packet] = d
		}
		if at == nil {
			continue
		}
		note := Step{Packet: o.Packet, At: at, Obs: i}
		switch o.Action {
		case trace.Rewritten:
			note.Kind = Rewrite
			note.Label = rewriteLabel(o)
		case trace.Encapsulated:
			note.Kind = Encap
			note.Label = "VXLAN encap " + cutParen(o.Detail)
		case trace.Decapsulated:
			note.Kind = Decap
			note.Label = "VXLAN decap " + cutParen(o.Detail)
		case trace.Dropped:
			note.Kind = Drop
			note.Label = "dropped: " + o.Reason
			p.Outcome = fmt.Sprintf("dropped at %s %s: %s", at.Node, at.Label(), o.Reason)
		case trace.Delivered:
			note.Kind = Deliver
			note.Label = "delivered: " + cutParen(o.Detail)
			p.Outcome = fmt.Sprintf("delivered at %s %s", at.Node, at.Label())
			if o.Stage == "arp" && o.Detail != "" {
				// The ARP layer consumed it: say what it did with it.
				p.Outcome += " (" + cutParen(o.Detail) + ")"
			}
		case trace.Resolved:
			// The ARP layer consumed the reply: the walk of this copy ends.
			note.Kind = Deliver
			note.Label = "resolved: " + cutParen(o.Detail)
			p.Outcome = fmt.Sprintf("delivered at %s %s (resolved %s)", at.Node, at.Label(), cutParen(o.Detail))
		default:
			continue
		}
		p.path += fmt.Sprintf("%d@%s;", note.Kind, at.Key())
		w.Steps = append(w.Steps, note)
	}
	// Packets that ended neither delivered nor dropped are still in flight.
	for _, p := range w.Packets {
		if !shown(p.ID) || p.Outcome != "" {
			continue
		}
		d := cur[p.ID]
		if d == nil {
			continue
		}
		at := trace.FormatTime(outcomes[p.ID].At)
		p.Outcome = fmt.Sprintf("in flight at %s, last seen at %s %s", at, d.Node, d.Label())
		w.Steps = append(w.Steps, Step{Kind: InFlight, Packet: p.ID, At: d, Label: "in flight at " + at + " (the walk stopped)", Obs: len(t.Obs)})
	}
	for i, p := range w.Packets {
		for _, q := range w.Packets[:i] {
			if p.path != "" && q.path == p.path && q.SameAs == 0 && shown(q.ID) {
				p.SameAs = q.ID
				break
			}
		}
	}
	for i, n := range w.Nodes {
		orderDevices(n, i == 0)
	}
	w.Title = opt.Title
	for _, p := range w.Packets {
		if w.Title == "" && shown(p.ID) {
			w.Title = p.Summary
		}
	}
	w.opt = opt
	return w
}

// OriginLabel says where the packet came from: "" for a packet the walk
// sent, else "copy of #2" (flooded), "answer to #3" or "ARP request for
// #1".
func (p *Packet) OriginLabel() string {
	return trace.Outcome{Parent: p.Parent, Origin: p.Origin}.OriginLabel()
}

// Shown returns the packets the diagrams show, in order of first
// observation.
func (w *Walk) Shown() []*Packet {
	var out []*Packet
	for _, p := range w.Packets {
		if w.opt.ARP || !p.ARP {
			out = append(out, p)
		}
	}
	return out
}

// Hops returns the hop steps, in walk order.
func (w *Walk) Hops() []Step {
	var out []Step
	for _, s := range w.Steps {
		if s.Kind == Hop {
			out = append(out, s)
		}
	}
	return out
}

// moves reports whether o says where the packet is now: device rx/tx,
// bridge, routing, neighbour, VXLAN and socket stages do; netfilter
// ("nat/PREROUTING", "filter/FORWARD") and conntrack stages do not.
func moves(o *trace.Observation) bool {
	return !strings.Contains(o.Stage, "/") && o.Stage != "conntrack"
}

func containsStr(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func cutParen(s string) string {
	if i := strings.Index(s, " ("); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func rewriteLabel(o *trace.Observation) string {
	what := strings.TrimSpace(o.Detail)
	if what == "" {
		what = "rewrite"
	}
	if strings.Contains(strings.ToUpper(what), "MASQ") {
		what = "masquerade"
	}
	l := what + " (" + o.Stage + ")"
	if o.Before != "" || o.After != "" {
		l += ": " + o.Before + " → " + o.After
	}
	return l
}

func hopLabel(o *trace.Observation, from, to *Device) string {
	switch {
	case o.Stage == "route":
		return "routed: " + strings.TrimSpace(o.Detail)
	case from.Node != to.Node:
		return "underlay " + from.Node + " → " + to.Node
	case o.Action == trace.Decapsulated:
		return "UDP 8472 to the VTEP, decapsulated"
	case from.Peer == to || (from.Kind == PodIface && to.Kind == Veth) || (from.Kind == Veth && to.Kind == PodIface):
		return "veth pair"
	case to.Kind == Bridge:
		return "into bridge " + to.Name
	case from.Kind == Bridge:
		return "bridge forwards to " + to.Name
	}
	return o.Stage + " " + o.Action.String()
}

// orderDevices sorts a node's devices from pods out to the NIC (first) or
// NIC in to the pods (mirror), keeping veths under their pods.
func orderDevices(n *Node, first bool) {
	podIdx := func(d *Device) int {
		ns := d.Netns
		if d.Kind == Veth && d.Peer != nil {
			ns = d.Peer.Netns
		} else if d.Kind == Veth {
			return len(n.Pods) + d.order
		}
		for i, p := range n.Pods {
			if p == ns {
				return i
			}
		}
		return len(n.Pods) + d.order
	}
	less := func(a, b *Device) bool {
		ra, rb := rank(a.Kind), rank(b.Kind)
		if !first {
			ra, rb = -ra, -rb
		}
		if ra != rb {
			return ra < rb
		}
		if a.Kind == PodIface || a.Kind == Veth {
			return podIdx(a) < podIdx(b)
		}
		return a.order < b.order
	}
	d := n.Devices
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && less(d[j], d[j-1]); j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

func rank(k Kind) int { return int(k) }
