package netstack

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// directOutput turns the short TCP output path (ipOutEndpoint.WritePacket)
// on; tests turn it off to compare the frames of both paths.
var directOutput = true

// ipv4Out is gVisor's IPv4 protocol whose endpoints send most TCP segments
// straight to the link (ipOutEndpoint): the output counterpart of
// directTCP. Everything else is gVisor's IPv4 as it is.
type ipv4Out struct {
	stack.MulticastForwardingNetworkProtocol
	stack.RejectIPv4WithHandler
	s *Stack
}

// newIPv4 is the stack's network protocol factory: gVisor's IPv4, wrapped.
func (s *Stack) newIPv4(st *stack.Stack) stack.NetworkProtocol {
	p := ipv4.NewProtocol(st)
	return &ipv4Out{
		MulticastForwardingNetworkProtocol: p.(stack.MulticastForwardingNetworkProtocol),
		RejectIPv4WithHandler:              p.(stack.RejectIPv4WithHandler),
		s:                                  s,
	}
}

// NewEndpoint implements stack.NetworkProtocol: gVisor's IPv4 endpoint for
// the NIC, with the short TCP output path.
func (p *ipv4Out) NewEndpoint(nic stack.NetworkInterface, d stack.TransportDispatcher) stack.NetworkEndpoint {
	ep := p.MulticastForwardingNetworkProtocol.NewEndpoint(nic, d)
	return &ipOutEndpoint{
		MulticastForwardingNetworkEndpoint: ep.(stack.MulticastForwardingNetworkEndpoint),
		AddressableEndpoint:                ep.(stack.AddressableEndpoint),
		GroupAddressableEndpoint:           ep.(stack.GroupAddressableEndpoint),
		LinkResolvableNetworkEndpoint:      ep.(stack.LinkResolvableNetworkEndpoint),
		IGMPEndpoint:                       ep.(ipv4.IGMPEndpoint),
		s:                                  p.s,
		id:                                 nic.ID(),
	}
}

// ipOutEndpoint is gVisor's IPv4 endpoint of one NIC (every interface it
// implements, each passed through), except that a TCP segment it would
// only put an IP header on and hand to the link goes to the link at once.
type ipOutEndpoint struct {
	stack.MulticastForwardingNetworkEndpoint
	stack.AddressableEndpoint
	stack.GroupAddressableEndpoint
	stack.LinkResolvableNetworkEndpoint
	ipv4.IGMPEndpoint
	s  *Stack
	id tcpip.NICID
	// direct counts the segments the short path sent (tests read it).
	direct uint64
}

var (
	_ stack.MulticastForwardingNetworkEndpoint = (*ipOutEndpoint)(nil)
	_ stack.AddressableEndpoint                = (*ipOutEndpoint)(nil)
	_ stack.GroupAddressableEndpoint           = (*ipOutEndpoint)(nil)
	_ stack.LinkResolvableNetworkEndpoint      = (*ipOutEndpoint)(nil)
	_ ipv4.IGMPEndpoint                        = (*ipOutEndpoint)(nil)
	_ stack.MulticastForwardingNetworkProtocol = (*ipv4Out)(nil)
	_ stack.RejectIPv4WithHandler              = (*ipv4Out)(nil)
)

// WritePacket implements stack.NetworkEndpoint. A TCP segment with the
// don't-fragment bit (every one a connection sends while path MTU
// discovery is on, as it is by default), without IP options, leaving by
// the NIC (not looped back inside gVisor) and fitting the link's MTU gets
// the IPv4 header gVisor's IPv4 would give it, the same bytes (addIPHeader:
// no options, ID 0 with DF, the route's addresses, the header checksum),
// and goes straight to the link. What gVisor's IPv4 would do besides is
// nothing here: its iptables and nftables are empty, the packet needs no
// fragmenting and no link-address resolution (the namespace's neighbour
// layer does that), and no packet socket is open to see it. Everything else
// takes gVisor's IPv4 output. Not kept: gVisor's IP and NIC send counters
// for those segments (nothing here reads them; its TCP counters move).
func (e *ipOutEndpoint) WritePacket(r *stack.Route, params stack.NetworkHeaderParams, pkt *stack.PacketBuffer) tcpip.Error {
	l := e.link()
	if !directOutput || l == nil || params.Protocol != header.TCPProtocolNumber || !params.DF ||
		params.ExperimentOptionValue != 0 || r.Loop() != stack.PacketOut {
		return e.MulticastForwardingNetworkEndpoint.WritePacket(r, params, pkt)
	}
	mtu := l.dev.MTU()
	size := pkt.Size() + header.IPv4MinimumSize
	if mtu < header.IPv4MinimumMTU || size > mtu {
		return e.MulticastForwardingNetworkEndpoint.WritePacket(r, params, pkt)
	}
	ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(size),
		TTL:         params.TTL,
		TOS:         params.TOS,
		Flags:       header.IPv4FlagDontFragment,
		Protocol:    uint8(params.Protocol),
		SrcAddr:     r.LocalAddress(),
		DstAddr:     r.RemoteAddress(),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	pkt.PktType = tcpip.PacketOutgoing
	e.direct++
	return l.write(pkt)
}

// link is the NIC's link endpoint, once the NIC exists.
func (e *ipOutEndpoint) link() *link {
	if i := int(e.id) - 1; i >= 0 && i < len(e.s.byDev) {
		return e.s.byDev[i]
	}
	return nil
}
