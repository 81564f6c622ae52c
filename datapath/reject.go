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
	if ip.Protocol() != ProtoTCP || ip.FragmentOffset() != 0 || len(orig.L4()) < header.TCPMinimumSize {
		return
	}
	ns.sendReset(w, orig, orig.InDev, "RST (REJECT --reject-with tcp-reset)")
}

// sendReset answers the TCP segment in orig with a RST as
// tcp_v4_send_reset (and nf_send_reset) build it: nothing for a RST; if
// orig carries an ACK the RST's sequence number is orig's acknowledgement
// number, otherwise the RST acknowledges orig's sequence space (SYN and FIN
// count one). It reports whether a RST was sent.
func (ns *Netns) sendReset(w *Walk, orig *Packet, dev *Device, what string) bool {
	l4 := orig.L4()
	t := header.TCP(l4)
	flags := t.Flags()
	if flags&header.TCPFlagRst != 0 {
		return false
	}
	var seq, ack uint32
	rf := header.TCPFlagRst
	if flags&header.TCPFlagAck != 0 {
		seq = t.AckNumber()
	} else {
		off := min(int(t.DataOffset()), len(l4))
		ack = t.SequenceNumber() + uint32(len(l4)-off)
		if flags&header.TCPFlagSyn != 0 {
			ack++
		}
		if flags&header.TCPFlagFin != 0 {
			ack++
		}
		rf |= header.TCPFlagAck
	}
	ns.tcpSend(w, orig, dev, seq, ack, rf, 0, 0, what)
	return true
}
