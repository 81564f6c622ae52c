package datapath

import "fmt"

// DropReason says why the datapath discarded a packet. Every drop carries
// one, so a walk never ends silently.
type DropReason uint8

// Drop reasons, named after what the kernel would count or report.
const (
	ReasonNone               DropReason = iota
	ReasonMalformed                     // failed header validation
	ReasonNotForUs                      // destination MAC is another host's (PACKET_OTHERHOST)
	ReasonDeviceDown                    // device administratively down or detached
	ReasonUnknownProtocol               // EtherType or IP protocol not handled
	ReasonNoRoute                       // no route to the destination (ICMP net unreachable sent)
	ReasonForwardingOff                 // net.ipv4.ip_forward=0 and the packet is not local
	ReasonTTLExceeded                   // TTL reached zero while forwarding (ICMP time exceeded sent)
	ReasonFragNeeded                    // larger than the path MTU with DF set (ICMP frag needed sent)
	ReasonNeighUnresolved               // ARP got no answer after all probes (ICMP host unreachable sent)
	ReasonNeighQueueFull                // too many packets waiting for one neighbour (unres_qlen)
	ReasonPortUnreachable               // UDP to a port nothing listens on (ICMP port unreachable sent)
	ReasonTCPReset                      // TCP to a port nothing listens on (RST sent)
	ReasonHairpin                       // bridge would send the frame back out its ingress port without hairpin mode
	ReasonNetfilterDrop                 // a netfilter rule or policy dropped it
	ReasonNetfilterReject               // a netfilter REJECT rule dropped it and answered
	ReasonConntrackInvalid              // conntrack classified it INVALID
	ReasonConntrackFull                 // nf_conntrack_max reached
	ReasonNoVXLANDestination            // VXLAN device has no FDB entry for the inner destination MAC
	ReasonMTU                           // larger than the device MTU without DF: fragmentation is not modelled
	ReasonStage                         // a user-inserted stage dropped it
	ReasonDelivered                     // consumed by a local socket (not an error)
	ReasonBandwidth                     // a token bucket shaper dropped it
	ReasonEncapLoop                     // a tunnel's output was routed back into the tunnel
	ReasonNeighTableOverflow            // the neighbour table is at gc_thresh3 and nothing could be collected (NEIGH_CREATEFAIL)
	numReasons
)

var reasonNames = [...]string{
	ReasonNone: "none", ReasonMalformed: "malformed", ReasonNotForUs: "not for this host",
	ReasonDeviceDown: "device down", ReasonUnknownProtocol: "unknown protocol",
	ReasonNoRoute: "no route to host", ReasonForwardingOff: "ip_forward is 0",
	ReasonTTLExceeded: "TTL exceeded", ReasonFragNeeded: "fragmentation needed and DF set",
	ReasonNeighUnresolved: "neighbour unresolved", ReasonNeighQueueFull: "neighbour queue full",
	ReasonPortUnreachable: "port unreachable", ReasonTCPReset: "connection refused (RST)",
	ReasonHairpin: "hairpin mode off", ReasonNetfilterDrop: "netfilter DROP",
	ReasonNetfilterReject: "netfilter REJECT", ReasonConntrackInvalid: "conntrack INVALID",
	ReasonConntrackFull: "conntrack table full", ReasonNoVXLANDestination: "no VXLAN FDB entry",
	ReasonMTU: "exceeds MTU (fragmentation not modelled)", ReasonStage: "dropped by stage",
	ReasonDelivered: "delivered", ReasonBandwidth: "bandwidth limit", ReasonEncapLoop: "encapsulation loop",
	ReasonNeighTableOverflow: "neighbour table overflow",
}

// String returns the human-readable reason printed in traces.
func (r DropReason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// FrameError reports a frame that fails validation: which layer and what is
// wrong with it. Drops for malformed frames carry it in the trace.
type FrameError struct {
	Layer  string // "ethernet", "arp", "ipv4", "icmp", "udp", "tcp", "vxlan"
	Reason string
}

// Error implements the error interface.
func (e *FrameError) Error() string { return "malformed " + e.Layer + " frame: " + e.Reason }

// ConfigError reports an impossible or invalid configuration request: a
// duplicate device name, a route through a missing device, an address
// outside any prefix.
type ConfigError struct {
	Op     string // "add device", "add route", ...
	Object string
	Reason string
}

// Error implements the error interface.
func (e *ConfigError) Error() string {
	return e.Op + " " + e.Object + ": " + e.Reason
}
