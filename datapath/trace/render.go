package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Level selects how much of a walk the text renderer prints.
type Level uint8

// Text levels.
const (
	// Minimal prints one short line per observation without packet
	// summaries or details: stable enough to diff in golden tests.
	Minimal Level = iota
	// Summary adds the virtual time and what the packet looks like.
	Summary
	// Detailed adds the stage's details, rewrites and drop reasons.
	Detailed
)

// ParseLevel accepts "minimal", "summary" and "detailed".
func ParseLevel(s string) (Level, error) {
	switch s {
	case "minimal":
		return Minimal, nil
	case "summary":
		return Summary, nil
	case "detailed":
		return Detailed, nil
	}
	return 0, fmt.Errorf("trace: unknown level %q (want minimal, summary or detailed)", s)
}

// FormatTime prints a virtual time as seconds with microseconds, the way
// tcpdump -ttt style relative stamps read.
func FormatTime(d time.Duration) string {
	us := d.Microseconds()
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

func where(o *Observation) string {
	w := o.Node + "/" + o.Netns
	if o.Device != "" {
		w += " " + o.Device
	}
	return w
}

// WriteText renders observations at the given level, one line (Minimal,
// Summary) or a small block (Detailed) per observation.
func (t *Trace) WriteText(w io.Writer, lvl Level) error {
	var b strings.Builder
	for i := range t.Obs {
		o := &t.Obs[i]
		switch lvl {
		case Minimal:
			fmt.Fprintf(&b, "#%d %s %s %s", o.Packet, where(o), o.Stage, o.Action)
			if o.Reason != "" {
				fmt.Fprintf(&b, " (%s)", o.Reason)
			}
			b.WriteByte('\n')
		case Summary:
			text := o.Summary
			switch {
			case o.Action == Matched && o.Detail != "":
				text = o.Detail
			case o.Action == Rewritten && o.Before != "":
				text = o.Before + " -> " + o.After
			case text == "":
				text = o.Detail
			}
			fmt.Fprintf(&b, "%s #%-2d %-28s %-22s %-12s %s", FormatTime(o.At), o.Packet, where(o), o.Stage, o.Action, text)
			if o.Reason != "" {
				fmt.Fprintf(&b, " (%s)", o.Reason)
			}
			b.WriteByte('\n')
		default:
			fmt.Fprintf(&b, "%s #%d %s  [%s] %s", FormatTime(o.At), o.Packet, where(o), o.Stage, o.Action)
			if o.Parent != 0 {
				fmt.Fprintf(&b, " (from #%d)", o.Parent)
			}
			b.WriteByte('\n')
			if o.Summary != "" {
				fmt.Fprintf(&b, "    packet: %s\n", o.Summary)
			}
			if o.Detail != "" {
				fmt.Fprintf(&b, "    %s\n", o.Detail)
			}
			if o.Before != "" || o.After != "" {
				fmt.Fprintf(&b, "    before: %s\n    after:  %s\n", o.Before, o.After)
			}
			if o.Reason != "" {
				fmt.Fprintf(&b, "    reason: %s\n", o.Reason)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Text is WriteText into a string.
func (t *Trace) Text(lvl Level) string {
	var b strings.Builder
	_ = t.WriteText(&b, lvl)
	return b.String()
}

// SchemaVersion is the version of the JSON document WriteJSON emits. It
// changes only when a field is removed or changes meaning.
const SchemaVersion = 1

type jsonObs struct {
	AtNS    int64  `json:"at_ns"`
	Seq     int    `json:"seq"`
	Packet  int    `json:"packet"`
	Parent  int    `json:"parent,omitempty"`
	Node    string `json:"node"`
	Netns   string `json:"netns"`
	Device  string `json:"device,omitempty"`
	Stage   string `json:"stage"`
	Action  string `json:"action"`
	Summary string `json:"summary,omitempty"`
	Detail  string `json:"detail,omitempty"`
	Before  string `json:"before,omitempty"`
	After   string `json:"after,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Frame   []byte `json:"frame,omitempty"`
}

type jsonDoc struct {
	Schema       string    `json:"schema"`
	Version      int       `json:"version"`
	Observations []jsonObs `json:"observations"`
}

// WriteJSON writes the trace as a versioned JSON document:
// {"schema":"kubewalk.trace","version":1,"observations":[...]}.
// Frames, when captured, are base64 as encoding/json writes []byte.
func (t *Trace) WriteJSON(w io.Writer) error {
	d := jsonDoc{Schema: "kubewalk.trace", Version: SchemaVersion, Observations: make([]jsonObs, 0, len(t.Obs))}
	for _, o := range t.Obs {
		d.Observations = append(d.Observations, jsonObs{
			AtNS: int64(o.At), Seq: o.Seq, Packet: o.Packet, Parent: o.Parent,
			Node: o.Node, Netns: o.Netns, Device: o.Device, Stage: o.Stage,
			Action: o.Action.String(), Summary: o.Summary, Detail: o.Detail,
			Before: o.Before, After: o.After, Reason: o.Reason, Frame: o.Frame,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// ReadJSON parses a document written by WriteJSON.
func ReadJSON(r io.Reader) (*Trace, error) {
	var d jsonDoc
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("trace: decoding JSON: %w", err)
	}
	if d.Schema != "kubewalk.trace" {
		return nil, fmt.Errorf("trace: schema %q is not kubewalk.trace", d.Schema)
	}
	if d.Version != SchemaVersion {
		return nil, fmt.Errorf("trace: schema version %d not supported (want %d)", d.Version, SchemaVersion)
	}
	t := &Trace{}
	for _, j := range d.Observations {
		a, err := ParseAction(j.Action)
		if err != nil {
			return nil, err
		}
		t.Obs = append(t.Obs, Observation{
			At: time.Duration(j.AtNS), Seq: j.Seq, Packet: j.Packet, Parent: j.Parent,
			Node: j.Node, Netns: j.Netns, Device: j.Device, Stage: j.Stage, Action: a,
			Summary: j.Summary, Detail: j.Detail, Before: j.Before, After: j.After,
			Reason: j.Reason, Frame: j.Frame,
		})
		if j.Packet > t.packets {
			t.packets = j.Packet
		}
	}
	return t, nil
}
