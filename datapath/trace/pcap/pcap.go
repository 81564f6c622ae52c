// Package pcap exports a walk's captured frames as a pcapng file, one
// interface per device (named node/netns/device), so a walk can be opened in
// Wireshark or tshark next to a capture from a real node.
//
// It lives beside package trace rather than in it so that importing the
// datapath does not pull in gopacket.
package pcap

import (
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

// Epoch is the wall-clock time virtual time zero is mapped to, so that the
// same walk always gives the same file.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// InterfaceName is the pcapng interface name of the device an observation
// is about: "node/netns/device", e.g. "cka-w1/host/flannel.1" or
// "cka-w1/net/client/eth0".
func InterfaceName(o *trace.Observation) string {
	return o.Node + "/" + o.Netns + "/" + o.Device
}

// Captured reports whether o becomes a packet in the file: a device rx or
// tx observation carrying frame bytes.
func Captured(o *trace.Observation) bool {
	return len(o.Frame) > 0 && o.Device != "" && (o.Action == trace.Received || o.Action == trace.Transmitted)
}

// Interfaces returns the interface names WriteNG declares, in order of first
// capture: interface i of the file is Interfaces(t)[i].
func Interfaces(t *trace.Trace) []string {
	var names []string
	seen := map[string]bool{}
	for i := range t.Obs {
		o := &t.Obs[i]
		if !Captured(o) {
			continue
		}
		if n := InterfaceName(o); !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return names
}

// WriteNG writes t's captured frames as pcapng to w: a section header
// (application "kubewalk"), one Ethernet interface description per device
// in order of first capture, then one enhanced packet block per device rx
// or tx observation that has Frame bytes, in trace order, stamped Epoch +
// the observation's virtual time. The trace must have been recorded with
// Capture set; a trace without frames is an error rather than an empty
// file. Output is deterministic.
func WriteNG(w io.Writer, t *trace.Trace) error {
	names := Interfaces(t)
	if len(names) == 0 {
		return fmt.Errorf("pcap: the trace has no captured frames (record it with trace.Trace{Capture: true})")
	}
	intf := func(name string) pcapgo.NgInterface {
		return pcapgo.NgInterface{
			Name:                name,
			Description:         "kubewalk simulated device " + name,
			LinkType:            layers.LinkTypeEthernet,
			TimestampResolution: 9,
		}
	}
	nw, err := pcapgo.NewNgWriterInterface(w, intf(names[0]), pcapgo.NgWriterOptions{
		SectionInfo: pcapgo.NgSectionInfo{Application: "kubewalk", Comment: "simulated walk; timestamps are virtual time from " + Epoch.Format(time.RFC3339)},
	})
	if err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	index := map[string]int{names[0]: 0}
	for _, n := range names[1:] {
		id, err := nw.AddInterface(intf(n))
		if err != nil {
			return fmt.Errorf("pcap: %w", err)
		}
		index[n] = id
	}
	for i := range t.Obs {
		o := &t.Obs[i]
		if !Captured(o) {
			continue
		}
		ci := gopacket.CaptureInfo{
			Timestamp:      Epoch.Add(o.At),
			CaptureLength:  len(o.Frame),
			Length:         len(o.Frame),
			InterfaceIndex: index[InterfaceName(o)],
		}
		if err := nw.WritePacket(ci, o.Frame); err != nil {
			return fmt.Errorf("pcap: %w", err)
		}
	}
	if err := nw.Flush(); err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	return nil
}
