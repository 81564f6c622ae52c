// Command trace prints, deterministically, packet walks through the
// reference kubeadm + flannel cluster: a ping and a TCP handshake between
// two pods on one node, a TCP handshake between pods on two nodes through
// flannel's VXLAN overlay, a connection to a ClusterIP Service (every
// endpoint it can reach, then the branch to the other node), and an outside
// client using a NodePort on a node that runs no endpoint.
package main

import (
	"fmt"
	"os"
	"strings"

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
	if err := dial(fmt.Sprintf("TCP handshake %s:40001 -> %s:80 (net/web-2 on cka-w2, over flannel VXLAN)", r.Client.IP, r.Web2.IP), r.Web2, 40001, 2000); err != nil {
		return err
	}
	return services()
}

// services walks traffic to the net/web Service: first every endpoint a
// new connection can reach (explore mode), then the branch that DNATs to
// the endpoint on cka-w2, then an outside client using the NodePort on
// cka-cp1, which runs no web pod.
func services() error {
	clusterIP := func(c *sim.Cluster, tr *trace.Trace) error {
		client := c.Pod("net", "client")
		if _, err := client.Netns.DialTCP(client.IP, c.Service("net", "web").ClusterIP(), 40002, 80, 3000, tr); err != nil {
			return err
		}
		return c.World.Run()
	}
	build := func() (*sim.Cluster, error) {
		r, err := scenarios.NewReference(1)
		if err != nil {
			return nil, err
		}
		return r.Cluster, nil
	}
	branches, err := sim.Explore(build, clusterIP)
	if err != nil {
		return err
	}
	fmt.Println("== net/client -> Service net/web 10.111.80.136:80: every branch of the first packet (explore)")
	for _, b := range branches {
		var rule string
		for _, o := range b.Trace.Obs {
			if o.Action == trace.Matched && strings.HasPrefix(o.Stage, "nat/KUBE-SEP-") && strings.Contains(o.Detail, "DNAT") {
				rule = o.Detail
				break
			}
		}
		fmt.Printf("%5.1f%%  %s\n", 100*b.Probability, rule)
	}
	fmt.Println()

	// Follow the branch to the endpoint on cka-w2: the statistic rule for
	// 10.244.1.3 (probability 0.5) does not match.
	r, err := scenarios.NewReference(1)
	if err != nil {
		return err
	}
	r.World.Walk().Chooser = func(p float64) bool { return false }
	tr := &trace.Trace{}
	if err := clusterIP(r.Cluster, tr); err != nil {
		return err
	}
	fmt.Println("== the branch to net/web-2 on cka-w2: DNAT on cka-w1, VXLAN, reply un-DNATed by conntrack")
	fmt.Print(tr.Text(trace.Summary))
	fmt.Println()

	r, err = scenarios.NewReference(1)
	if err != nil {
		return err
	}
	tr = &trace.Trace{}
	if _, err := r.Outside.Netns.DialTCP(r.Outside.IP, r.CP1.InternalIP, 50000, scenarios.WebNodePort, 4000, tr); err != nil {
		return err
	}
	if err := r.World.Run(); err != nil {
		return err
	}
	fmt.Printf("== outside %s -> NodePort %s:%d on cka-cp1 (no web pod there): DNAT + masquerade, reply back through cka-cp1\n",
		r.Outside.IP, r.CP1.InternalIP, scenarios.WebNodePort)
	fmt.Print(tr.Text(trace.Summary))
	fmt.Println("\nconntrack -L on cka-cp1:")
	fmt.Print(r.CP1.Conntrack.Dump())
	return nil
}
