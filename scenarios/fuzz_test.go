package scenarios

import (
	"testing"

	"github.com/kubewalk/kubewalk/sim/packet"
)

// FuzzWalk injects arbitrary frames into the reference cluster, with
// kube-proxy's and flannel's rules loaded: on a pod's host-side veth, on a
// node's underlay NIC, and as the payload of a VXLAN packet to cka-w2.
// Whatever the bytes, the walk must end (no panic, no endless loop).
func FuzzWalk(f *testing.F) {
	r, _ := NewReference(1)
	syn, _ := packet.TCPSYN(packet.IP{Src: r.Client.IP, Dst: r.Web.ClusterIP()}, 1, 80, 1)
	eth := packet.Ethernet([6]byte{2, 0, 0, 0, 0, 1}, [6]byte(r.W1.Host.Device("cni0").MAC()), syn)
	f.Add(eth, uint8(0))
	f.Add(eth[:30], uint8(1))
	f.Add(append(append([]byte{}, eth...), 0, 0, 0), uint8(2))
	f.Fuzz(func(t *testing.T, frame []byte, where uint8) {
		r, err := NewReference(1)
		if err != nil {
			t.Fatal(err)
		}
		r.World.MaxEvents = 20000
		switch where % 3 {
		case 0:
			_, err = r.Client.HostVeth.Inject(frame)
		case 1:
			_, err = r.W2.Host.Device("eth0").Inject(frame)
		default:
			inner := frame
			ip, perr := packet.UDP(packet.IP{Src: r.W1.InternalIP, Dst: r.W2.InternalIP}, 40000, 8472, append([]byte{8, 0, 0, 0, 0, 0, 1, 0}, inner...))
			if perr != nil {
				return
			}
			outer := packet.Ethernet([6]byte(r.W1.Host.Device("eth0").MAC()), [6]byte(r.W2.Host.Device("eth0").MAC()), ip)
			_, err = r.W2.Host.Device("eth0").Inject(outer)
		}
		if err != nil {
			return
		}
		if err := r.World.Run(); err != nil {
			t.Fatalf("walk did not end: %v", err)
		}
	})
}
