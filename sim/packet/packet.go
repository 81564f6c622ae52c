// Package packet builds IPv4 packets for injection into the simulated
// datapath: ICMP echo, UDP datagrams, TCP segments (SYN, data, FIN) and
// SCTP INIT chunks,
// serialised with gopacket with lengths and checksums computed the way a
// real stack would send them. Builders allocate: build once, then copy the
// bytes into pooled packets on hot paths.
package packet

import (
	"fmt"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Error reports an invalid builder argument.
type Error struct{ Msg string }

// Error implements the error interface.
func (e *Error) Error() string { return "packet: " + e.Msg }

// IP holds the IPv4 header fields a sender chooses. Zero TTL means 64 (the
// Linux default); DF is set by default for TCP and UDP as Linux does with
// path MTU discovery, and can be cleared with NoDF.
type IP struct {
	Src, Dst netip.Addr
	TTL      uint8
	TOS      uint8
	ID       uint16
	NoDF     bool
}

func (ip IP) layer(proto layers.IPProtocol, df bool) (*layers.IPv4, error) {
	if !ip.Src.Is4() || !ip.Dst.Is4() {
		return nil, &Error{Msg: fmt.Sprintf("source %v and destination %v must be IPv4 addresses", ip.Src, ip.Dst)}
	}
	ttl := ip.TTL
	if ttl == 0 {
		ttl = 64
	}
	l := &layers.IPv4{Version: 4, IHL: 5, TOS: ip.TOS, Id: ip.ID, TTL: ttl, Protocol: proto,
		SrcIP: ip.Src.AsSlice(), DstIP: ip.Dst.AsSlice()}
	if df && !ip.NoDF {
		l.Flags = layers.IPv4DontFragment
	}
	return l, nil
}

func serialize(ls ...gopacket.SerializableLayer) ([]byte, error) {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	return buf.Bytes(), nil
}

// ICMPEcho builds an ICMP echo request (ping) with the given identifier,
// sequence number and payload. Like Linux ping, DF is clear unless the
// caller asks for it with IP.NoDF=false and df=true.
func ICMPEcho(ip IP, id, seq uint16, payload []byte) ([]byte, error) {
	l, err := ip.layer(layers.IPProtocolICMPv4, false)
	if err != nil {
		return nil, err
	}
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: id, Seq: seq}
	return serialize(l, ic, gopacket.Payload(payload))
}

// ICMPEchoDF is ICMPEcho with the DF bit set (`ping -M do`).
func ICMPEchoDF(ip IP, id, seq uint16, payload []byte) ([]byte, error) {
	b, err := ICMPEcho(ip, id, seq, payload)
	if err != nil {
		return nil, err
	}
	b[6] |= 0x40
	fixIPChecksum(b)
	return b, nil
}

func fixIPChecksum(b []byte) {
	b[10], b[11] = 0, 0
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	c := ^uint16(s)
	b[10], b[11] = byte(c>>8), byte(c)
}

// UDP builds a UDP datagram.
func UDP(ip IP, sport, dport uint16, payload []byte) ([]byte, error) {
	l, err := ip.layer(layers.IPProtocolUDP, true)
	if err != nil {
		return nil, err
	}
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if err := u.SetNetworkLayerForChecksum(l); err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	return serialize(l, u, gopacket.Payload(payload))
}

// TCPFlags selects the flags of a TCP segment.
type TCPFlags struct {
	SYN, ACK, FIN, RST, PSH bool
}

// TCPSegment describes a TCP segment's ports, numbers, flags and payload.
// A SYN carries an MSS option like a real client's first segment.
type TCPSegment struct {
	Sport, Dport uint16
	Seq, Ack     uint32
	Flags        TCPFlags
	Window       uint16 // 0 means 64240
	MSS          uint16 // MSS option on SYN; 0 means 1460
	Payload      []byte
}

// TCP builds a TCP segment.
func TCP(ip IP, s TCPSegment) ([]byte, error) {
	l, err := ip.layer(layers.IPProtocolTCP, true)
	if err != nil {
		return nil, err
	}
	win := s.Window
	if win == 0 {
		win = 64240
	}
	t := &layers.TCP{SrcPort: layers.TCPPort(s.Sport), DstPort: layers.TCPPort(s.Dport), Seq: s.Seq, Ack: s.Ack,
		SYN: s.Flags.SYN, ACK: s.Flags.ACK, FIN: s.Flags.FIN, RST: s.Flags.RST, PSH: s.Flags.PSH, Window: win}
	if s.Flags.SYN {
		mss := s.MSS
		if mss == 0 {
			mss = 1460
		}
		t.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{byte(mss >> 8), byte(mss)}}}
	}
	if err := t.SetNetworkLayerForChecksum(l); err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	return serialize(l, t, gopacket.Payload(s.Payload))
}

// TCPSYN builds the first segment of a connection.
func TCPSYN(ip IP, sport, dport uint16, seq uint32) ([]byte, error) {
	return TCP(ip, TCPSegment{Sport: sport, Dport: dport, Seq: seq, Flags: TCPFlags{SYN: true}})
}

// SCTPInit describes the INIT chunk that opens an SCTP association.
// Zero values get Linux's defaults: 10 outbound streams, 65535 inbound,
// a receiver window of 106496 bytes.
type SCTPInit struct {
	Sport, Dport    uint16
	InitiateTag     uint32 // the tag the peer must put in its packets; 0 means 1
	InitialTSN      uint32
	Window          uint32
	OutboundStreams uint16
	InboundStreams  uint16
}

// SCTP builds an SCTP packet holding one INIT chunk: the common header
// with verification tag 0 (RFC 9260 §8.5.1) and the CRC32c checksum, DF
// set as Linux sends it.
func SCTP(ip IP, c SCTPInit) ([]byte, error) {
	l, err := ip.layer(layers.IPProtocolSCTP, true)
	if err != nil {
		return nil, err
	}
	init := layers.SCTPInit{SCTPChunk: layers.SCTPChunk{Type: layers.SCTPChunkTypeInit},
		InitiateTag: c.InitiateTag, AdvertisedReceiverWindowCredit: c.Window,
		OutboundStreams: c.OutboundStreams, InboundStreams: c.InboundStreams, InitialTSN: c.InitialTSN}
	if init.InitiateTag == 0 {
		init.InitiateTag = 1 // 0 is not a valid initiate tag
	}
	if init.AdvertisedReceiverWindowCredit == 0 {
		init.AdvertisedReceiverWindowCredit = 106496
	}
	if init.OutboundStreams == 0 {
		init.OutboundStreams = 10
	}
	if init.InboundStreams == 0 {
		init.InboundStreams = 65535
	}
	return serialize(l, &layers.SCTP{SrcPort: layers.SCTPPort(c.Sport), DstPort: layers.SCTPPort(c.Dport)}, &init)
}

// Ethernet wraps an IPv4 packet in an Ethernet II header, for injecting a
// frame directly on a device.
func Ethernet(src, dst [6]byte, ip []byte) []byte {
	f := make([]byte, 14+len(ip))
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	f[12], f[13] = 0x08, 0x00
	copy(f[14:], ip)
	return f
}

// Decode parses a frame with gopacket for display and assertions in tests.
func Decode(frame []byte) gopacket.Packet {
	return gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
}

func init() {
	// flannel's VXLAN port; gopacket only maps 4789 by default.
	layers.RegisterUDPPortLayerType(8472, layers.LayerTypeVXLAN)
}
