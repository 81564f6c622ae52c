package datapath

import (
	"fmt"
	"slices"
	"strings"

	"go4.org/netipx"
)

// Dumps of namespace state in the layout iproute2 6.1 prints, so a user can
// set them beside the output of a real node. IPv6 is not modelled, so
// addresses are those of `ip -4 addr` and multicast FDB entries that IPv6
// and IGMP add on a real node are absent.

func (d *Device) flags() string {
	switch {
	case d.Kind == KindLoopback && d.up:
		return "<LOOPBACK,UP,LOWER_UP>"
	case d.Kind == KindLoopback:
		return "<LOOPBACK>"
	case d.Kind == KindDummy && d.up:
		return "<BROADCAST,NOARP,UP,LOWER_UP>"
	case d.Kind == KindDummy:
		return "<BROADCAST,NOARP>"
	case d.up:
		return "<BROADCAST,MULTICAST,UP,LOWER_UP>"
	}
	return "<BROADCAST,MULTICAST>"
}

func (d *Device) state() string {
	switch {
	case !d.up:
		return "DOWN"
	case d.Kind == KindLoopback || d.Kind == KindVXLAN:
		return "UNKNOWN"
	}
	return "UP"
}

func (d *Device) qdisc() string {
	if d.Kind == KindNIC {
		return "fq_codel"
	}
	if !d.up && d.Kind != KindBridge {
		return "noop"
	}
	return "noqueue"
}

// linkNetnsid is the " link-netnsid N" iproute2 prints for a veth whose
// peer is in another namespace, or "". The kernel numbers the peer
// namespaces a namespace refers to from 0, lowest free id first, as they
// are first needed (peernet2id_alloc); on a node that is the pods'
// namespaces in the order their veths were created, which kubewalk takes
// as ifindex order (a pod deleted and one created again may get another
// id on a real node). From a pod, the node is 0.
func (d *Device) linkNetnsid() string {
	if d.peer == nil || d.peer.ns == d.ns {
		return ""
	}
	var order []*Netns // peer namespaces in order of first veth
	for _, o := range d.ns.devs {
		if o.peer == nil || o.peer.ns == d.ns || slices.Contains(order, o.peer.ns) {
			continue
		}
		if o.peer.ns == d.peer.ns {
			break
		}
		order = append(order, o.peer.ns)
	}
	return " link-netnsid " + itoa(len(order))
}

// linkHeader is the first line of `ip link` / `ip addr` for d. `ip -4
// addr` has no link/ether line and prints link-netnsid at the end of this
// one (withNetnsid); `ip link` prints it on the link/ether line.
func (d *Device) linkHeader(mode, withNetnsid bool) string {
	name := d.Name
	if d.peer != nil {
		if d.peer.ns == d.ns {
			name += "@" + d.peer.Name
		} else {
			name += "@if" + itoa(d.peer.Index)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d: %s: %s mtu %d qdisc %s", d.Index, name, d.flags(), d.mtu, d.qdisc())
	if d.master != nil {
		b.WriteString(" master " + d.master.Name)
	}
	b.WriteString(" state " + d.state())
	if mode {
		b.WriteString(" mode DEFAULT")
	}
	b.WriteString(" group default ")
	if d.Kind != KindDummy {
		// A dummy device made over netlink with IFLA_TXQLEN 0 (as
		// kube-proxy makes kube-ipvs0) has no queue length, which ip
		// omits ("group %s " then "qlen %d" only when non-zero).
		b.WriteString("qlen 1000")
	}
	if withNetnsid {
		b.WriteString(d.linkNetnsid())
	}
	return b.String()
}

// IPAddr prints the namespace's IPv4 addresses as `ip -4 addr show` does.
func (ns *Netns) IPAddr() string {
	var b strings.Builder
	for _, d := range ns.devs {
		var lines []string
		for _, a := range ns.addrs {
			if a.Dev != d {
				continue
			}
			l := "    inet " + a.Prefix.String()
			if a.Prefix.Bits() < 31 && d.Kind != KindLoopback {
				l += " brd " + netipx.PrefixLastIP(a.Prefix).String()
			}
			scope := "global"
			if d.Kind == KindLoopback {
				scope = "host"
			}
			l += " scope " + scope + " " + d.Name
			lines = append(lines, l, "       valid_lft forever preferred_lft forever")
		}
		if len(lines) == 0 {
			continue
		}
		b.WriteString(d.linkHeader(false, true))
		b.WriteByte('\n')
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// IPLink prints one device as `ip link show dev NAME` (or `ip -d link
// show` when detail is set) does. It returns "" for an unknown device.
func (ns *Netns) IPLink(name string, detail bool) string {
	d := ns.Device(name)
	if d == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(d.linkHeader(true, false) + "\n")
	if d.Kind == KindLoopback {
		b.WriteString("    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00")
	} else {
		b.WriteString("    link/ether " + d.mac.String() + " brd ff:ff:ff:ff:ff:ff" + d.linkNetnsid())
	}
	if !detail {
		return b.String() + "\n"
	}
	if d.Kind == KindDummy {
		b.WriteString(" promiscuity 0  allmulti 0 minmtu 0 maxmtu 0 \n    dummy ")
	} else {
		// A bridge puts its ports in promiscuous and all-multicast mode
		// (br_add_if: dev_set_promiscuity, dev_set_allmulti).
		promisc := 0
		if d.master != nil {
			promisc = 1
		}
		fmt.Fprintf(&b, " promiscuity %d  allmulti %d minmtu 68 maxmtu 65535 \n", promisc, promisc)
	}
	switch d.Kind {
	case KindVXLAN:
		v := d.vx
		fmt.Fprintf(&b, "    vxlan id %d local %s", v.VNI, v.Local)
		if v.Dev != "" {
			b.WriteString(" dev " + v.Dev)
		}
		sp := "0 0"
		if v.SrcPortMin != 32768 || v.SrcPortMax != 60999 {
			sp = fmt.Sprintf("%d %d", v.SrcPortMin, v.SrcPortMax)
		}
		fmt.Fprintf(&b, " srcport %s dstport %d", sp, v.Port)
		if !v.Learning {
			b.WriteString(" nolearning")
		}
		b.WriteString(" ttl auto ageing 300 udpcsum noudp6zerocsumtx noudp6zerocsumrx ")
	case KindBridge:
		fmt.Fprintf(&b, "    bridge forward_delay 1500 hello_time 200 max_age 2000 ageing_time %d stp_state 0 priority 32768 ", d.br.AgeingTime.Milliseconds()/10)
	case KindVeth:
		b.WriteString("    veth ")
		if d.master != nil {
			hp := "off"
			if d.hairpin {
				hp = "on"
			}
			b.WriteString("\n    bridge_slave state forwarding priority 32 cost 2 hairpin " + hp + " ")
		}
	}
	b.WriteString("addrgenmode eui64 numtxqueues 1 numrxqueues 1 gso_max_size 65536 gso_max_segs 65535 tso_max_size 524280 tso_max_segs 65535 gro_max_size 65536 \n")
	return b.String()
}

// IPRoute prints the main routing table as `ip route show` does.
func (ns *Netns) IPRoute() string {
	var b strings.Builder
	for _, r := range ns.Routes.List() {
		if d := ns.devByIndex(r.Dev); d != nil && !d.up && r.Type == 0 {
			r.LinkDown = true
		}
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// IPNeigh prints the neighbour table as `ip neigh show` does, or as
// `ip neigh show dev DEV` (without the dev column) when dev is not empty.
func (ns *Netns) IPNeigh(dev string) string {
	var b strings.Builder
	for _, n := range ns.Neighbors() {
		if dev != "" && n.Dev != dev {
			continue
		}
		b.WriteString(n.IP.String())
		if dev == "" {
			b.WriteString(" dev " + n.Dev)
		}
		if n.State != NeighIncomplete && n.State != NeighFailed {
			b.WriteString(" lladdr " + n.MAC.String())
		}
		b.WriteString(" " + n.State.String() + " \n")
	}
	return b.String()
}

// BridgeFDB prints forwarding entries as `bridge fdb show` does: bridge
// ports' entries (learned and permanent) and VXLAN devices' remote
// entries; with dev set, as `bridge fdb show dev DEV` (without the dev
// column).
func (ns *Netns) BridgeFDB(dev string) string {
	var b strings.Builder
	for _, d := range ns.devs {
		if dev != "" && d.Name != dev {
			continue
		}
		devCol := " dev " + d.Name
		if dev != "" {
			devCol = ""
		}
		if d.vx != nil {
			for _, e := range d.vx.FDB() {
				fmt.Fprintf(&b, "%s%s dst %s self permanent\n", e.MAC, devCol, e.Dst)
			}
		}
		if d.br != nil {
			fmt.Fprintf(&b, "%s%s master %s permanent\n", d.mac, devCol, d.Name)
		}
		if d.master != nil {
			for _, e := range d.master.FDB(ns.e.now) {
				if e.Port != d.Name {
					continue
				}
				state := ""
				if e.Local || e.Static {
					state = "permanent"
				}
				fmt.Fprintf(&b, "%s%s master %s %s\n", e.MAC, devCol, d.master.Name, state)
			}
		}
	}
	return b.String()
}
