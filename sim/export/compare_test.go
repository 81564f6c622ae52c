package export_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

// point is an observation point: a device in a simulated namespace.
type point struct{ Node, Netns, Dev string }

func (p point) String() string { return p.Node + "/" + p.Netns + " " + p.Dev }

// simFrames groups the frames a captured walk saw by point, in walk order.
func simFrames(tr *trace.Trace) map[point][]frame {
	out := map[point][]frame{}
	for _, o := range tr.Obs {
		if o.Frame == nil || (o.Action != trace.Received && o.Action != trace.Transmitted) {
			continue
		}
		pt := point{o.Node, o.Netns, o.Device}
		out[pt] = append(out[pt], frame{Out: o.Action == trace.Transmitted, B: o.Frame})
	}
	return out
}

// disagreement is one difference between what the kernel and kubewalk put
// on a device.
type disagreement struct {
	Point point
	What  string
}

func (d disagreement) String() string { return d.Point.String() + ": " + d.What }

func dir(out bool) string {
	if out {
		return "tx"
	}
	return "rx"
}

func describe(f frame) string { return dir(f.Out) + " " + datapath.Summarize(f.B) }

// compareAt matches the kernel's and kubewalk's frames at one point, in
// order: a kubewalk frame matches the first unmatched kernel frame that is
// equal after masking. Unmatched frames are paired by position to name
// the fields that differ; what is left over is missing or extra.
func compareAt(pt point, k, s []frame, inj maskCtx) []disagreement {
	var out []disagreement
	usedK := make([]bool, len(k))
	var restS []int
	for si, sf := range s {
		found := false
		for ki, kf := range k {
			if usedK[ki] || kf.Out != sf.Out {
				continue
			}
			km, sm, probs := applyMasks(kf.B, sf.B, inj)
			if bytes.Equal(km, sm) {
				usedK[ki], found = true, true
				for _, p := range probs {
					out = append(out, disagreement{pt, describe(sf) + ": " + p})
				}
				break
			}
		}
		if !found {
			restS = append(restS, si)
		}
	}
	var restK []int
	for ki := range k {
		if !usedK[ki] {
			restK = append(restK, ki)
		}
	}
	n := min(len(restK), len(restS))
	for i := 0; i < n; i++ {
		kf, sf := k[restK[i]], s[restS[i]]
		if kf.Out != sf.Out {
			out = append(out, disagreement{pt, fmt.Sprintf("direction: kernel %s %s, kubewalk %s %s",
				dir(kf.Out), datapath.Summarize(kf.B), dir(sf.Out), datapath.Summarize(sf.B))})
			continue
		}
		km, sm, probs := applyMasks(kf.B, sf.B, inj)
		for _, p := range probs {
			out = append(out, disagreement{pt, describe(sf) + ": " + p})
		}
		for _, d := range fieldDiffs(km, sm) {
			out = append(out, disagreement{pt, describe(kf) + ": " + d})
		}
	}
	for _, ki := range restK[n:] {
		out = append(out, disagreement{pt, "only the kernel: " + describe(k[ki])})
	}
	for _, si := range restS[n:] {
		out = append(out, disagreement{pt, "only kubewalk: " + describe(s[si])})
	}
	return out
}

// fieldDiffs names each field in which two masked frames differ.
func fieldDiffs(k, s []byte) []string {
	var out []string
	if len(k) != len(s) {
		out = append(out, fmt.Sprintf("frame length: kernel %d, kubewalk %d", len(k), len(s)))
	}
	kf, sf := fields(k), fields(s)
	seen := map[string]bool{}
	for _, f := range kf {
		if f.end > len(s) || seen[f.name] {
			continue
		}
		kv, sv := k[f.start:f.end], s[f.start:f.end]
		if !bytes.Equal(kv, sv) {
			seen[f.name] = true
			out = append(out, fmt.Sprintf("%s: kernel %s, kubewalk %s", f.name, hexv(kv), hexv(sv)))
		}
	}
	if len(out) == 0 && !bytes.Equal(k, s) {
		_ = sf
		for i := range min(len(k), len(s)) {
			if k[i] != s[i] {
				out = append(out, fmt.Sprintf("byte %d: kernel %#02x, kubewalk %#02x", i, k[i], s[i]))
				break
			}
		}
	}
	return out
}

func hexv(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x… (%d bytes)", b[:16], len(b))
	}
	return fmt.Sprintf("%#x", b)
}

type field struct {
	name       string
	start, end int
}

// fields lays out the named fields of a frame: Ethernet, ARP, IPv4, ICMP
// (with the quoted packet), UDP, TCP, VXLAN and its inner frame.
func fields(b []byte) []field {
	var out []field
	add := func(prefix string, base int, spec ...any) {
		for i := 0; i+2 < len(spec)+1; i += 3 {
			start, end := base+spec[i+1].(int), base+spec[i+2].(int)
			if end <= len(b) {
				out = append(out, field{prefix + spec[i].(string), start, end})
			}
		}
	}
	var eth func(prefix string, at int)
	var ipv4 func(prefix string, at int)
	ipv4 = func(prefix string, at int) {
		if at+20 > len(b) {
			return
		}
		add(prefix+"ipv4.", at, "version/ihl", 0, 1, "tos", 1, 2, "total_length", 2, 4, "id", 4, 6,
			"flags/fragment", 6, 8, "ttl", 8, 9, "protocol", 9, 10, "checksum", 10, 12, "src", 12, 16, "dst", 16, 20)
		l4 := at + int(b[at]&0xf)*4
		switch b[at+9] {
		case 1:
			add(prefix+"icmp.", l4, "type", 0, 1, "code", 1, 2, "checksum", 2, 4, "rest_of_header", 4, 8)
			if l4+1 <= len(b) && (b[l4] == 3 || b[l4] == 11 || b[l4] == 12) {
				ipv4(prefix+"icmp.quoted.", l4+8)
			} else {
				add(prefix+"icmp.", l4, "payload", 8, len(b)-l4)
			}
		case 17:
			add(prefix+"udp.", l4, "srcport", 0, 2, "dstport", 2, 4, "length", 4, 6, "checksum", 6, 8)
			if l4+4 <= len(b) && binary.BigEndian.Uint16(b[l4+2:]) == vxlanPort {
				add(prefix+"vxlan.", l4+8, "flags", 0, 4, "vni", 4, 7, "reserved", 7, 8)
				eth(prefix+"inner.", l4+16)
			} else {
				add(prefix+"udp.", l4, "payload", 8, len(b)-l4)
			}
		case 6:
			add(prefix+"tcp.", l4, "srcport", 0, 2, "dstport", 2, 4, "seq", 4, 8, "ack", 8, 12,
				"offset/flags", 12, 14, "window", 14, 16, "checksum", 16, 18, "urgent", 18, 20, "options/payload", 20, len(b)-l4)
		}
	}
	eth = func(prefix string, at int) {
		add(prefix+"eth.", at, "dst", 0, 6, "src", 6, 12, "type", 12, 14)
		if at+14 > len(b) {
			return
		}
		switch binary.BigEndian.Uint16(b[at+12:]) {
		case 0x0806:
			add(prefix+"arp.", at+14, "hw/proto", 0, 6, "op", 6, 8, "sha", 8, 14, "spa", 14, 18, "tha", 18, 24, "tpa", 24, 28)
		case 0x0800:
			ipv4(prefix, at+14)
		}
	}
	eth("", 0)
	return out
}

// report formats disagreements one per line, sorted by point.
func report(ds []disagreement) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString("  " + d.String() + "\n")
	}
	return b.String()
}
