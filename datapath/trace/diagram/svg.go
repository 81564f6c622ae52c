package diagram

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Drawing constants, in SVG user units (pixels at 100%).
const (
	fontFamily = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
	nameSize   = 15.0
	smallSize  = 12.5
	charW      = 0.62 // average glyph width in ems, generous for DejaVu Sans
	lineH      = 18.0
	boxPadX    = 12.0
	minBoxW    = 128.0
	colGap     = 64.0
	rowGap     = 64.0
	nodePad    = 18.0
	nodeHead   = 34.0
	nodeGap    = 90.0
	margin     = 30.0
	tagWrap    = 46 // characters per tag line
)

var packetColors = []string{"#2563eb", "#16a34a", "#9333ea", "#db2777", "#0891b2", "#ca8a04"}

func textW(s string, size float64) float64 { return float64(len([]rune(s))) * size * charW }

type box struct{ x, y, w, h float64 }

func (b box) cx() float64 { return b.x + b.w/2 }
func (b box) cy() float64 { return b.y + b.h/2 }

type tag struct {
	kind  StepKind
	lines []string
}

type devBox struct {
	d    *Device
	tags []tag
	w, h float64
	row  int
	col  int
	box  box
}

type svgNode struct {
	n      *Node
	cols   []float64 // column widths
	colX   []float64
	devs   []*devBox
	pods   map[string]*box // pod netns boxes
	podCol map[string]int
	box    box
}

func wrap(s string, n int) []string {
	var out []string
	for len([]rune(s)) > n {
		r := []rune(s)
		cut := strings.LastIndexAny(string(r[:n]), " ,")
		if cut <= 0 {
			cut = len(string(r[:n]))
		}
		out = append(out, strings.TrimSpace(s[:cut+1]))
		s = strings.TrimSpace(s[cut+1:])
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")
	return r.Replace(s)
}

func tagStyle(k StepKind) (color, prefix string) {
	switch k {
	case Rewrite:
		return "#c2410c", "✎ "
	case Encap, Decap:
		return "#b45309", "⊕ "
	case Deliver:
		return "#15803d", "✓ "
	case Drop:
		return "#dc2626", "✗ "
	case ReplySpawn:
		return "#475569", "↩ "
	}
	return "#6b7280", "… "
}

// WriteSVG draws the walk as a self-contained SVG picture: the nodes as
// boxes left to right, inside each the pods, veths, bridge, VTEP and NIC
// the walk touched, the underlay below them, and each packet's path as
// numbered arrows (one colour per packet; a packet that took exactly the
// path of an earlier one is listed but not drawn again). Rewrites,
// encapsulation and deliveries are written on the device where they
// happen; drops are marked with a red X and their reason. A legend below
// lists every hop by number.
func (w *Walk) WriteSVG(out io.Writer) error {
	var drawn []*Packet
	color := map[int]string{}
	lane := map[int]int{}
	for _, p := range w.Shown() {
		if p.SameAs == 0 && p.path != "" {
			lane[p.ID] = len(drawn)
			color[p.ID] = packetColors[len(drawn)%len(packetColors)]
			drawn = append(drawn, p)
		}
	}
	isDrawn := func(id int) bool { _, ok := lane[id]; return ok }

	// Tags per device, deduplicated.
	tags := map[*Device][]tag{}
	seen := map[string]bool{}
	for _, s := range w.Steps {
		if s.Kind == Hop || !isDrawn(s.Packet) {
			continue
		}
		k := s.At.Key() + "|" + s.Label
		if seen[k] {
			continue
		}
		seen[k] = true
		_, pre := tagStyle(s.Kind)
		tags[s.At] = append(tags[s.At], tag{kind: s.Kind, lines: wrap(pre+s.Label, tagWrap)})
	}

	// Measure devices and assign rows and columns.
	var nodes []*svgNode
	rowH := make([]float64, 4)
	for ni, n := range w.Nodes {
		sn := &svgNode{n: n, pods: map[string]*box{}, podCol: map[string]int{}}
		podCols := 0
		for _, p := range n.Pods {
			sn.podCol[p] = podCols
			podCols++
		}
		var vethOnly, vteps, nics, others []*devBox
		var bridges []*devBox
		for _, d := range n.Devices {
			db := &devBox{d: d, tags: tags[d]}
			db.w = math.Max(textW(d.Label(), nameSize), textW(d.Kind.String(), smallSize))
			lines := 0
			for _, t := range db.tags {
				for _, l := range t.lines {
					db.w = math.Max(db.w, textW(l, smallSize))
					lines++
				}
			}
			db.w = math.Max(db.w+2*boxPadX, minBoxW)
			db.h = 14 + lineH + lineH + float64(lines)*lineH + 8
			if d.Kind == PodIface {
				db.w = math.Max(db.w, textW("pod "+d.Netns, nameSize)+2*boxPadX)
			}
			sn.devs = append(sn.devs, db)
			switch d.Kind {
			case PodIface:
				db.row, db.col = 0, sn.podCol[d.Netns]
			case Veth:
				if d.Peer != nil {
					db.row, db.col = 1, sn.podCol[d.Peer.Netns]
				} else {
					vethOnly = append(vethOnly, db)
				}
			case Bridge:
				bridges = append(bridges, db)
			case VTEP:
				vteps = append(vteps, db)
			case NIC:
				nics = append(nics, db)
			default:
				others = append(others, db)
			}
		}
		for _, db := range vethOnly {
			db.row, db.col = 1, podCols
			podCols++
		}
		if podCols == 0 && len(bridges) > 0 {
			podCols = 1
		}
		edge := max(len(vteps), len(nics), len(others))
		ncols := podCols + edge
		place := func(l []*devBox, row int) {
			for i, db := range l {
				db.row, db.col = row, podCols+i
			}
		}
		place(others, 1)
		place(vteps, 2)
		place(nics, 3)
		for _, db := range bridges {
			db.row, db.col = 2, 0
		}
		// Mirror every node but the first: NIC side towards the left.
		if ni > 0 {
			for _, db := range sn.devs {
				if db.d.Kind == Bridge {
					db.col = edge
					continue
				}
				if db.col >= podCols {
					db.col = edge - 1 - (db.col - podCols)
				} else {
					db.col += edge
				}
			}
			for p := range sn.podCol {
				sn.podCol[p] += edge
			}
		}
		sn.cols = make([]float64, ncols)
		podH := map[string]float64{}
		for _, db := range sn.devs {
			if db.d.Kind == Bridge {
				continue
			}
			cw := db.w
			if db.d.Kind == PodIface {
				cw += 2 * 12
				podH[db.d.Netns] += db.h + 8
			}
			sn.cols[db.col] = math.Max(sn.cols[db.col], cw)
			if db.d.Kind != PodIface {
				rowH[db.row] = math.Max(rowH[db.row], db.h)
			}
		}
		for _, h := range podH {
			rowH[0] = math.Max(rowH[0], h+lineH+16)
		}
		// A bridge spans the pod columns; widen them if it needs more room.
		for _, db := range bridges {
			span := 0.0
			first, last := 0, max(podCols-1, 0)
			if ni > 0 {
				first, last = edge, edge+max(podCols-1, 0)
			}
			for c := first; c <= last; c++ {
				span += sn.cols[c]
			}
			span += float64(last-first) * colGap
			if span < db.w {
				sn.cols[last] += db.w - span
			}
			rowH[2] = math.Max(rowH[2], db.h)
		}
		nodes = append(nodes, sn)
	}

	// Place nodes and devices.
	title := w.Title
	titleY := margin + 8
	top := titleY + 34
	rowY := make([]float64, 4)
	y := top + nodeHead
	for r := range rowH {
		rowY[r] = y
		if rowH[r] > 0 {
			y += rowH[r] + rowGap
		}
	}
	nodeBottom := y - rowGap + nodePad
	x := margin
	hasNIC := false
	for _, sn := range nodes {
		sn.colX = make([]float64, len(sn.cols))
		cx := x + nodePad
		for i, cw := range sn.cols {
			sn.colX[i] = cx
			cx += cw + colGap
		}
		width := cx - colGap + nodePad - x
		width = math.Max(width, textW(sn.n.Name, 18)+2*nodePad)
		sn.box = box{x, top, width, nodeBottom - top}
		podY := map[string]float64{}
		for _, db := range sn.devs {
			c := db.col
			switch db.d.Kind {
			case PodIface:
				pb := sn.pods[db.d.Netns]
				if pb == nil {
					pb = &box{x: sn.colX[c], y: rowY[0], w: sn.cols[c], h: rowH[0]}
					sn.pods[db.d.Netns] = pb
					podY[db.d.Netns] = rowY[0] + lineH + 14
				}
				db.box = box{pb.x + 12, podY[db.d.Netns], pb.w - 24, db.h}
				podY[db.d.Netns] += db.h + 8
			case Bridge:
				last := c
				for l := c; l < len(sn.cols); l++ {
					if l == c || sn.isPodCol(l) {
						last = l
					}
				}
				wdt := sn.colX[last] + sn.cols[last] - sn.colX[c]
				db.box = box{sn.colX[c], rowY[2], wdt, db.h}
			default:
				db.box = box{sn.colX[c] + (sn.cols[c]-db.w)/2, rowY[db.row], db.w, db.h}
			}
			if db.d.Kind == NIC {
				hasNIC = true
			}
		}
		x += width + nodeGap
	}
	totalW := x - nodeGap + margin
	underY := nodeBottom + 46
	underH := 16.0 + float64(len(drawn)+1)*10
	legendY := nodeBottom + 30
	if hasNIC {
		legendY = underY + underH + 40
	}

	where := map[*Device]*devBox{}
	for _, sn := range nodes {
		for _, db := range sn.devs {
			where[db.d] = db
		}
	}

	// Legend lines.
	type legendLine struct {
		text, color string
		num         int
		bold        bool
	}
	var legend []legendLine
	legend = append(legend, legendLine{text: "Packets", bold: true})
	for _, p := range w.Shown() {
		t := fmt.Sprintf("#%d  %s", p.ID, p.Summary)
		if l := p.OriginLabel(); l != "" {
			t += " (" + l + ")"
		}
		if p.Outcome != "" {
			t += " — " + p.Outcome
		}
		c := color[p.ID]
		if p.SameAs != 0 {
			t += fmt.Sprintf(" — same path as #%d, not drawn again", p.SameAs)
			c = "#9ca3af"
		}
		legend = append(legend, legendLine{text: t, color: c})
	}
	legend = append(legend, legendLine{text: "Hops", bold: true})
	type arrow struct {
		s   Step
		num int
	}
	var arrows []arrow
	for _, s := range w.Steps {
		if s.Kind != Hop || !isDrawn(s.Packet) {
			continue
		}
		arrows = append(arrows, arrow{s, len(arrows) + 1})
		where := s.From.Node
		if s.To.Node != s.From.Node {
			where += " → " + s.To.Node
		}
		legend = append(legend, legendLine{
			text:  fmt.Sprintf("#%d  %s: %s → %s — %s", s.Packet, where, s.From.Label(), s.To.Label(), s.Label),
			color: color[s.Packet], num: len(arrows),
		})
	}
	for _, l := range legend {
		totalW = math.Max(totalW, margin+40+textW(l.text, 13.5)+margin)
	}
	totalW = math.Max(totalW, margin*2+textW(title, 20))
	totalH := legendY + float64(len(legend))*24 + margin

	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="%s">`+"\n", totalW, totalH, totalW, totalH, fontFamily)
	b.WriteString(`<defs>`)
	for i, c := range packetColors {
		fmt.Fprintf(&b, `<marker id="arrow%d" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="%s"/></marker>`, i, c)
	}
	b.WriteString("</defs>\n")
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", totalW, totalH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="20" font-weight="bold" fill="#111827">%s</text>`+"\n", margin, titleY+12, esc(title))

	// Underlay.
	if hasNIC {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8" fill="#f3f4f6" stroke="#9ca3af"/>`+"\n", margin, underY, totalW-2*margin, underH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%.1f" fill="#4b5563" text-anchor="end">underlay (node network)</text>`+"\n", totalW-margin-10, underY+underH+18, smallSize)
	}
	// Nodes, pods, devices.
	for i, sn := range nodes {
		nb := sn.box
		fmt.Fprintf(&b, `<g class="node" id="node-%s">`+"\n", esc(sn.n.Name))
		fill := []string{"#eff6ff", "#f0fdf4", "#fff7ed", "#faf5ff"}[i%4]
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="14" fill="%s" stroke="#64748b" stroke-width="1.5"/>`+"\n", nb.x, nb.y, nb.w, nb.h, fill)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="18" font-weight="bold" fill="#0f172a">%s</text>`+"\n", nb.x+nodePad, nb.y+24, esc(sn.n.Name))
		for _, p := range sn.n.Pods {
			pb := sn.pods[p]
			if pb == nil {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="10" fill="#ffffff" stroke="#94a3b8" stroke-dasharray="5 3"/>`+"\n", pb.x, pb.y, pb.w, pb.h)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%.1f" font-weight="bold" fill="#334155">pod %s</text>`+"\n", pb.x+12, pb.y+lineH+2, nameSize, esc(p))
		}
		for _, db := range sn.devs {
			bx := db.box
			if db.d.Kind == NIC && hasNIC {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#9ca3af" stroke-width="4"/>`+"\n", bx.cx(), bx.y+bx.h, bx.cx(), underY)
			}
			fmt.Fprintf(&b, `<g class="device" id="dev-%s">`, esc(db.d.Key()))
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="6" fill="%s" stroke="#475569" stroke-width="1.2"/>`, bx.x, bx.y, bx.w, bx.h, kindFill(db.d.Kind))
			ty := bx.y + 14 + nameSize - 2
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%.1f" font-weight="bold" fill="#111827">%s</text>`, bx.x+boxPadX, ty, nameSize, esc(db.d.Name))
			ty += lineH
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%.1f" fill="#64748b">%s</text>`, bx.x+boxPadX, ty, smallSize, esc(db.d.Kind.String()))
			for _, t := range db.tags {
				c, _ := tagStyle(t.kind)
				for _, l := range t.lines {
					ty += lineH
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%.1f" fill="%s">%s</text>`, bx.x+boxPadX, ty, smallSize, c, esc(l))
				}
				if t.kind == Drop {
					cx, cy := bx.x+bx.w-4, bx.y+4
					fmt.Fprintf(&b, `<g class="drop"><circle cx="%.1f" cy="%.1f" r="15" fill="#ffffff" stroke="#dc2626" stroke-width="2"/><path d="M%.1f,%.1f L%.1f,%.1f M%.1f,%.1f L%.1f,%.1f" stroke="#dc2626" stroke-width="4" stroke-linecap="round"/></g>`,
						cx, cy, cx-7, cy-7, cx+7, cy+7, cx-7, cy+7, cx+7, cy-7)
				}
			}
			b.WriteString("</g>\n")
		}
		b.WriteString("</g>\n")
	}

	// Arrows, then their numbers on top.
	// Arrows over the same pair of devices run in parallel lanes.
	pair := func(s Step) string {
		a, b := s.From.Key(), s.To.Key()
		if a > b {
			a, b = b, a
		}
		return a + "|" + b
	}
	lanes := map[string]int{}
	for _, a := range arrows {
		lanes[pair(a.s)]++
	}
	maxLanes := 1
	for _, n := range lanes {
		maxLanes = max(maxLanes, n)
	}
	slot := map[string]int{}
	var labels strings.Builder
	for _, a := range arrows {
		from, to := where[a.s.From], where[a.s.To]
		j := lane[a.s.Packet]
		k := pair(a.s)
		off := (float64(slot[k]) - float64(lanes[k]-1)/2) * 10
		slot[k]++
		side := 1.0
		if off < 0 {
			side = -1
		}
		// Labels sit outside all lanes, stacked outwards on their side.
		outer := float64(lanes[k]-1)/2*10 + 16 + math.Floor(math.Abs(off)/10)*24
		if lanes[k]%2 == 0 {
			outer = float64(lanes[k]-1)/2*10 + 16 + math.Floor((math.Abs(off)-5)/10)*24
		}
		c := color[a.s.Packet]
		mk := fmt.Sprintf("arrow%d", j%len(packetColors))
		var pts [][2]float64
		var lx, ly float64
		fb, tb := from.box, to.box
		switch {
		case a.s.From.Node != a.s.To.Node && a.s.From.Kind == NIC && a.s.To.Kind == NIC && hasNIC:
			uy := underY + underH/2 + off
			pts = [][2]float64{{fb.cx() + off, fb.y + fb.h}, {fb.cx() + off, uy}, {tb.cx() + off, uy}, {tb.cx() + off, tb.y + tb.h}}
			lx, ly = (fb.cx()+tb.cx())/2+side*60, uy
			if lanes[k] == 1 {
				lx = (fb.cx() + tb.cx()) / 2
			}
		case overlap(fb.x, fb.w, tb.x, tb.w) > 20:
			// Vertical: share an x inside both boxes.
			cx := sharedX(fb, tb, from.d, to.d) + off
			y1, y2 := fb.y+fb.h, tb.y
			if tb.y < fb.y {
				y1, y2 = fb.y, tb.y+tb.h
			}
			pts = [][2]float64{{cx, y1}, {cx, y2}}
			lx, ly = cx-off+side*outer, (y1+y2)/2
		case overlap(fb.y, fb.h, tb.y, tb.h) > 10:
			cy := (math.Max(fb.y, tb.y)+math.Min(fb.y+fb.h, tb.y+tb.h))/2 + off
			x1, x2 := fb.x+fb.w, tb.x
			if tb.x < fb.x {
				x1, x2 = fb.x, tb.x+tb.w
			}
			pts = [][2]float64{{x1, cy}, {x2, cy}}
			lx, ly = (x1+x2)/2, cy-off+side*outer
		default:
			pts = [][2]float64{{fb.cx() + off, fb.cy() + off}, {tb.cx() + off, tb.cy() + off}}
			lx, ly = (fb.cx()+tb.cx())/2+side*outer, (fb.cy()+tb.cy())/2
		}
		var d strings.Builder
		for i, p := range pts {
			if i == 0 {
				fmt.Fprintf(&d, "M%.1f,%.1f", p[0], p[1])
			} else {
				fmt.Fprintf(&d, " L%.1f,%.1f", p[0], p[1])
			}
		}
		fmt.Fprintf(&b, `<path class="hop" data-hop="%d" data-packet="%d" d="%s" fill="none" stroke="%s" stroke-width="2.5" marker-end="url(#%s)"><title>%s</title></path>`+"\n",
			a.num, a.s.Packet, d.String(), c, mk, esc(fmt.Sprintf("%d: %s → %s: %s", a.num, a.s.From.Key(), a.s.To.Key(), a.s.Label)))
		fmt.Fprintf(&labels, `<g class="hop-number"><circle cx="%.1f" cy="%.1f" r="11" fill="%s" stroke="#ffffff" stroke-width="1.5"/><text x="%.1f" y="%.1f" font-size="11.5" font-weight="bold" fill="#ffffff" text-anchor="middle">%d</text></g>`+"\n",
			lx, ly, c, lx, ly+4, a.num)
	}
	b.WriteString(labels.String())

	// Legend.
	ly := legendY
	for _, l := range legend {
		if l.bold {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="15" font-weight="bold" fill="#111827">%s</text>`+"\n", margin, ly, esc(l.text))
		} else {
			if l.num > 0 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="10" fill="%s"/><text x="%.1f" y="%.1f" font-size="11" font-weight="bold" fill="#ffffff" text-anchor="middle">%d</text>`, margin+10, ly-5, l.color, margin+10, ly-1, l.num)
			} else if l.color != "" {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="20" height="6" rx="3" fill="%s"/>`, margin, ly-8, l.color)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="13.5" fill="#1f2937">%s</text>`+"\n", margin+30, ly, esc(l.text))
		}
		ly += 24
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(out, b.String())
	return err
}

func (sn *svgNode) isPodCol(c int) bool {
	for _, pc := range sn.podCol {
		if pc == c {
			return true
		}
	}
	for _, db := range sn.devs {
		if db.col == c && db.d.Kind == Veth {
			return true
		}
	}
	return false
}

func overlap(a, aw, b, bw float64) float64 {
	return math.Min(a+aw, b+bw) - math.Max(a, b)
}

// sharedX picks the x where a vertical arrow between two boxes runs: the
// centre of the narrower one (a veth above a wide bridge), clamped to both.
func sharedX(a, b box, ad, bd *Device) float64 {
	if a.w <= b.w {
		return a.cx()
	}
	return b.cx()
}

func kindFill(k Kind) string {
	switch k {
	case PodIface:
		return "#e0f2fe"
	case Veth:
		return "#fef9c3"
	case Bridge:
		return "#dcfce7"
	case VTEP:
		return "#fde68a"
	case NIC:
		return "#e5e7eb"
	}
	return "#f3f4f6"
}
