package kubewalk_test

import (
	"fmt"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/packet"
)

// A ping from one pod to a pod on another node, through flannel's VXLAN
// overlay, printed at the minimal trace level (only the IPv4 packets, not
// the ARP exchanges they trigger).
func Example() {
	cluster, _ := scenarios.NewReference(1)
	client, web2 := cluster.Client, cluster.Web2 // net/client on cka-w1, net/web-2 on cka-w2

	ping, _ := packet.ICMPEcho(packet.IP{Src: client.IP, Dst: web2.IP}, 1, 1, []byte("hello"))
	tr := &trace.Trace{}
	_ = cluster.World.Send(client.Netns, ping, tr)
	_ = cluster.World.Run()

	for _, o := range tr.Obs {
		if o.Packet == 1 && (o.Action == trace.Encapsulated || o.Action == trace.Decapsulated || o.Action == trace.Delivered) {
			fmt.Println(o.Node, o.Device, o.Action, "|", o.Summary)
		}
	}
	last := tr.Outcomes()[len(tr.Outcomes())-1]
	fmt.Println("reply:", last.Action, "in", last.Where)
	// Output:
	// cka-w1 flannel.1 encapsulated | 192.168.122.21.36811 > 192.168.122.22.8472: UDP, length 55 VXLAN, vni 1: 10.244.1.2 > 10.244.2.2: ICMP echo request, id 1, seq 1, ttl 63
	// cka-w2 flannel.1 decapsulated | 10.244.1.2 > 10.244.2.2: ICMP echo request, id 1, seq 1, ttl 63
	// cka-w2 eth0 delivered | 10.244.1.2 > 10.244.2.2: ICMP echo request, id 1, seq 1, ttl 62
	// reply: delivered in cka-w1/net/client eth0
}
