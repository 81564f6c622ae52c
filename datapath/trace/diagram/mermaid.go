package diagram

import (
	"fmt"
	"io"
	"strings"
)

// mermaidText escapes text for a Mermaid sequence diagram: ';' ends a
// statement and '#' starts an entity code, so both become entity codes.
func mermaidText(s string) string {
	return mermaidEscaper.Replace(s)
}

// WriteMermaid writes the walk as a Mermaid sequence diagram: one
// participant per device, grouped in a box per node; a message per hop
// (the first hop of each packet names the packet); notes for rewrites,
// encapsulation, decapsulation, deliveries and drops (with the reason).
func (w *Walk) WriteMermaid(out io.Writer) error {
	var b strings.Builder
	b.WriteString("sequenceDiagram\n")
	if w.Title != "" {
		fmt.Fprintf(&b, "    title %s\n", mermaidText(w.Title))
	}
	for i, n := range w.Nodes {
		fmt.Fprintf(&b, "    box %s %s\n", boxColors[i%len(boxColors)], mermaidText(n.Name))
		for _, d := range n.Devices {
			fmt.Fprintf(&b, "        participant %s as %s\n", d.id, mermaidText(d.Label()))
		}
		b.WriteString("    end\n")
	}
	started := map[int]bool{}
	pk := map[int]*Packet{}
	for _, p := range w.Packets {
		pk[p.ID] = p
	}
	for _, s := range w.Steps {
		switch s.Kind {
		case Hop:
			label := s.Label
			if !started[s.Packet] {
				label = fmt.Sprintf("[%d] %s", s.Packet, pk[s.Packet].Summary)
			}
			fmt.Fprintf(&b, "    %s->>%s: %s\n", s.From.id, s.To.id, mermaidText(label))
		case Drop:
			fmt.Fprintf(&b, "    Note over %s: ❌ %s\n", s.At.id, mermaidText(s.Label))
		case ReplySpawn:
			fmt.Fprintf(&b, "    Note over %s: [%d] %s\n", s.At.id, s.Packet, mermaidText(s.Label))
		default:
			fmt.Fprintf(&b, "    Note over %s: [%d] %s\n", s.At.id, s.Packet, mermaidText(s.Label))
		}
		started[s.Packet] = true
	}
	_, err := io.WriteString(out, b.String())
	return err
}

var mermaidEscaper = strings.NewReplacer("#", "#35;", ";", "#59;")

// Pastel box colours, one per node in turn.
var boxColors = []string{"rgb(232,240,254)", "rgb(230,246,236)", "rgb(254,243,224)", "rgb(243,232,253)"}
