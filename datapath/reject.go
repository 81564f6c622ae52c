package datapath

import "gvisor.dev/gvisor/pkg/tcpip/header"

// SendICMPError sends an ICMP error of type typ and code about orig from
// this namespace, as the REJECT target's nf_send_unreach does through
// icmp_send: it is not sent about ICMP errors, broadcasts or non-first
// fragments, quotes as much of orig as fits in 576 bytes, and leaves
// through OUTPUT and POSTROUTING like any locally generated packet. orig is
// not modified or released.
func (ns *Netns) SendICMPError(w *Walk, orig *Packet, typ, code uint8) {
	ns.icmpError(w, orig, header.ICMPv4Type(typ), header.ICMPv4Code(code), 0)
}

// SendTCPReset answers the TCP segment in orig with a RST, as the REJECT
// target's --reject-with tcp-reset (nf_send_reset) does: nothing for a
// RST or a non-first fragment; if orig carries an ACK the RST's sequence
// number is orig's acknowledgement number, otherwise the RST acknowledges
// orig's sequence space (SYN and FIN count one). Addresses and ports are
// swapped, DF is set and the TTL is the namespace default. orig is not
// modified or released.
func (ns *Netns) SendTCPReset(w *Walk, orig *Packet) {
	ip := orig.IPv4()
	if ip.Protocol() != ProtoTCP || ip.FragmentOffset() != 0 {
		return
	}
	l4 := orig.L4()
	if len(l4) < header.TCPMinimumSize {
		return
	}
	t := header.TCP(l4)
	flags := t.Flags()
	if flags&header.TCPFlagRst != 0 {
		return
	}
	var seq, ack uint32
	rf := header.TCPFlagRst
	if flags&header.TCPFlagAck != 0 {
		seq = t.AckNumber()
	} else {
		off := int(t.DataOffset())
		if off > len(l4) {
			off = len(l4)
		}
		ack = t.SequenceNumber() + uint32(len(l4)-off)
		if flags&header.TCPFlagSyn != 0 {
			ack++
		}
		if flags&header.TCPFlagFin != 0 {
			ack++
		}
		rf |= header.TCPFlagAck
	}
	ns.tcpSend(w, orig, orig.InDev, seq, ack, rf, 0, 0, "RST (REJECT --reject-with tcp-reset)")
}
