package diagram_test

import (
	"bytes"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/datapath/trace/diagram"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/packet"
	"github.com/stretchr/testify/require"
)

var (
	dumpDir = flag.String("dump", "", "also write every rendered SVG into this directory (to look at them)")
)

// walks are the reference cluster's walks, plus the broken labs'.
var walks = []struct {
	name string
	run  func(t *testing.T) *trace.Trace
}{
	{"cross-node-tcp", func(t *testing.T) *trace.Trace {
		r, err := scenarios.NewReference(1)
		require.NoError(t, err)
		tr := &trace.Trace{}
		_, err = r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1000, tr)
		require.NoError(t, err)
		require.NoError(t, r.World.Run())
		return tr
	}},
	{"same-node-ping", func(t *testing.T) *trace.Trace {
		r, err := scenarios.NewReference(1)
		require.NoError(t, err)
		tr := &trace.Trace{}
		ping, err := packet.ICMPEcho(packet.IP{Src: r.Client.IP, Dst: r.Web1.IP}, 1, 1, []byte("kubewalk"))
		require.NoError(t, err)
		require.NoError(t, r.World.Send(r.Client.Netns, ping, tr))
		require.NoError(t, r.World.Run())
		return tr
	}},
	{"outside-to-pod-udp", func(t *testing.T) *trace.Trace {
		r, err := scenarios.NewReference(1)
		require.NoError(t, err)
		require.NoError(t, r.Outside.Netns.AddRoute(datapathRoute()))
		tr := &trace.Trace{}
		ip, err := packet.UDP(packet.IP{Src: r.Outside.IP, Dst: r.Web2.IP}, 40000, 53, []byte("q"))
		require.NoError(t, err)
		require.NoError(t, r.World.Send(r.Outside.Netns, ip, tr))
		require.NoError(t, r.World.Run())
		return tr
	}},
	{"duplicate-podcidr", func(t *testing.T) *trace.Trace {
		r, err := scenarios.NewDuplicatePodCIDR(1)
		require.NoError(t, err)
		tr := &trace.Trace{}
		ip, _ := packet.UDP(packet.IP{Src: r.Probe.IP, Dst: r.Web1.IP}, 40001, 80, nil)
		require.NoError(t, r.World.Send(r.Probe.Netns, ip, tr))
		require.NoError(t, r.World.Run())
		return tr
	}},
	{"wrong-nic", func(t *testing.T) *trace.Trace {
		r, err := scenarios.NewWrongNIC(1, false)
		require.NoError(t, err)
		tr := &trace.Trace{}
		_, err = r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1, tr)
		require.NoError(t, err)
		require.NoError(t, r.World.Run())
		return tr
	}},
}

func TestSVGWellFormedWithEveryHop(t *testing.T) {
	for _, wk := range walks {
		t.Run(wk.name, func(t *testing.T) {
			tr := wk.run(t)
			w := diagram.Build(tr, diagram.Options{})
			var buf bytes.Buffer
			require.NoError(t, w.WriteSVG(&buf))
			svg := buf.String()
			if *dumpDir != "" {
				require.NoError(t, os.WriteFile(filepath.Join(*dumpDir, wk.name+".svg"), buf.Bytes(), 0o644))
			}
			dec := xml.NewDecoder(strings.NewReader(svg))
			hops := 0
			for {
				tok, err := dec.Token()
				if err == io.EOF {
					break
				}
				require.NoError(t, err, "well-formed XML")
				if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
					for _, a := range se.Attr {
						if a.Name.Local == "class" && a.Value == "hop" {
							hops++
						}
					}
				}
			}
			// Every hop of every drawn packet is an arrow and a legend line.
			drawn := map[int]bool{}
			for _, p := range w.Shown() {
				drawn[p.ID] = p.SameAs == 0
			}
			n := 0
			for _, h := range w.Hops() {
				if !drawn[h.Packet] {
					continue
				}
				n++
				require.Contains(t, svg, fmt.Sprintf(`data-hop="%d" data-packet="%d"`, n, h.Packet))
				require.Contains(t, svg, esc(h.From.Label()+" → "+h.To.Label()))
			}
			require.Equal(t, n, hops)
			require.NotZero(t, hops)
			for _, s := range w.Steps {
				if s.Kind == diagram.Drop && drawn[s.Packet] {
					require.Contains(t, svg, `class="drop"`)
					require.Contains(t, svg, esc(s.Label))
				}
			}
		})
	}
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return strings.ReplaceAll(b.String(), "&#39;", "&apos;")
}

// TestLegendSaysWhatEachPacketIs: with ARP shown, every packet's legend
// line says truthfully where it came from and how it ended: flooded ARP
// requests are copies (not answers), resolved ARP replies are delivered
// (not in flight), and a walk cut short says when it stopped.
func TestLegendSaysWhatEachPacketIs(t *testing.T) {
	tr := walks[0].run(t)
	w := diagram.Build(tr, diagram.Options{ARP: true})
	var b bytes.Buffer
	require.NoError(t, w.WriteSVG(&b))
	svg := b.String()
	require.NotContains(t, svg, "in flight")
	copies := 0
	byID := map[int]*diagram.Packet{}
	for _, p := range w.Packets {
		byID[p.ID] = p
	}
	for _, p := range w.Shown() {
		line := fmt.Sprintf("#%d  %s", p.ID, strings.ReplaceAll(p.Summary, ">", "&gt;"))
		require.Contains(t, svg, line, "#%d has a legend line", p.ID)
		require.True(t, strings.HasPrefix(p.Outcome, "delivered at ") || strings.HasPrefix(p.Outcome, "dropped at "), "#%d: %s", p.ID, p.Outcome)
		switch {
		case strings.HasPrefix(p.Summary, "ARP, Request") && p.Parent != 0 && strings.HasPrefix(byID[p.Parent].Summary, "ARP, Request"):
			require.Equal(t, trace.Copy, p.Origin, "#%d", p.ID)
			require.Contains(t, svg, line+" (copy of #"+fmt.Sprint(p.Parent)+")")
			copies++
		case strings.HasPrefix(p.Summary, "ARP, Request"):
			require.Contains(t, svg, line+" (ARP request for #"+fmt.Sprint(p.Parent)+")")
		case strings.HasPrefix(p.Summary, "ARP, Reply"):
			require.Contains(t, svg, line+" (answer to #"+fmt.Sprint(p.Parent)+") — delivered at ")
			require.Contains(t, p.Outcome, "(resolved ")
		}
	}
	require.Positive(t, copies, "the walk floods ARP requests")

	cut := &trace.Trace{Obs: tr.Obs[:len(tr.Obs)/2]}
	w = diagram.Build(cut, diagram.Options{})
	var inFlight int
	for _, p := range w.Shown() {
		if strings.HasPrefix(p.Outcome, "in flight at ") {
			inFlight++
			require.Regexp(t, `^in flight at \d+\.\d{6}, last seen at \S+ `, p.Outcome)
		}
	}
	require.Positive(t, inFlight)
}
