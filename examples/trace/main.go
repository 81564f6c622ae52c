// Command trace prints, deterministically, packet walks through the
// reference kubeadm + flannel cluster: a ping and a TCP handshake between
// two pods on one node, then a TCP handshake between pods on two nodes
// through flannel's VXLAN overlay.
package main

import (
	"fmt"
	"os"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/packet"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trace:", err)
		os.Exit(1)
	}
}

func run() error {
	r, err := scenarios.NewReference(1)
	if err != nil {
		return err
	}
	w := r.World
	walk := func(title string, ip []byte) error {
		fmt.Printf("== %s\n", title)
		tr := &trace.Trace{}
		if err := w.Send(r.Client.Netns, ip, tr); err != nil {
			return err
		}
		if err := w.Run(); err != nil {
			return err
		}
		fmt.Print(tr.Text(trace.Summary))
		fmt.Println()
		return nil
	}
	ping, err := packet.ICMPEcho(packet.IP{Src: r.Client.IP, Dst: r.Web1.IP}, 1, 1, []byte("kubewalk"))
	if err != nil {
		return err
	}
	if err := walk(fmt.Sprintf("ping %s (net/client, cka-w1) -> %s (net/web-1, cka-w1)", r.Client.IP, r.Web1.IP), ping); err != nil {
		return err
	}
	dial := func(title string, dst *sim.Pod, sport uint16, isn uint32) error {
		fmt.Printf("== %s\n", title)
		tr := &trace.Trace{}
		if _, err := r.Client.Netns.DialTCP(r.Client.IP, dst.IP, sport, 80, isn, tr); err != nil {
			return err
		}
		if err := w.Run(); err != nil {
			return err
		}
		fmt.Print(tr.Text(trace.Summary))
		fmt.Println()
		return nil
	}
	if err := dial(fmt.Sprintf("TCP handshake %s:40000 -> %s:80 (net/web-1, same node)", r.Client.IP, r.Web1.IP), r.Web1, 40000, 1000); err != nil {
		return err
	}
	return dial(fmt.Sprintf("TCP handshake %s:40001 -> %s:80 (net/web-2 on cka-w2, over flannel VXLAN)", r.Client.IP, r.Web2.IP), r.Web2, 40001, 2000)
}
