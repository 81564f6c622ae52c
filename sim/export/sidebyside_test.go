package export_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/scenarios"
	"golang.org/x/sys/unix"
)

// TestKernelSideBySide times one walk through the Linux kernel and through
// kubewalk in the same run and prints both and their ratio: a UDP datagram
// from net/client on cka-w1 to net/web-2 on cka-w2 (cni0, routing,
// iptables with kube-proxy's and flannel's rules, conntrack, flannel.1
// VXLAN, the underlay, decapsulation, cni0 on cka-w2), written as a frame
// with an AF_PACKET socket on the client's eth0 and read from a UDP socket
// bound in web-2 (kubewalk: Device.Transmit on the same eth0, counted by
// web-2's socket). The kernel figure includes the two system calls per
// datagram. It is a measurement, printed with t.Log; it fails only if a
// datagram is lost. Root only (see needKernel); skipped with -short.
func TestKernelSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("timing run skipped with -short")
	}
	needKernel(t)
	const (
		n     = 20000 // datagrams per side
		batch = 100   // kernel: written, then read, so the socket buffer never overflows
		port  = 9000
	)
	r, err := scenarios.NewReference(1)
	if err != nil {
		t.Fatal(err)
	}
	exp := buildReal(t, r.Cluster, "sidebyside")
	clientNS, _ := exp.Netns("cka-w1", "net/client")
	webNS, _ := exp.Netns("cka-w2", "net/web-2")

	frame, err := r.ClientFrameToWeb2(port)
	if err != nil {
		t.Fatal(err)
	}
	eth0 := r.Client.Netns.Device("eth0")

	// The kernel: a UDP socket in web-2, an AF_PACKET socket on client eth0.
	var rx int
	if err := inNetns(webNS, func() error {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		rx = s
		a := netip.MustParseAddr("0.0.0.0").As4()
		return unix.Bind(s, &unix.SockaddrInet4{Port: port, Addr: a})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rx)
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	tx, err := packetSocket(clientNS, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tx)
	buf := make([]byte, 2048)
	kernel := func(count int) time.Duration {
		start := time.Now()
		for sent := 0; sent < count; sent += batch {
			for i := 0; i < batch; i++ {
				if _, err := unix.Write(tx, frame); err != nil {
					t.Fatalf("AF_PACKET write: %v", err)
				}
			}
			for i := 0; i < batch; i++ {
				if _, _, err := unix.Recvfrom(rx, buf, 0); err != nil {
					t.Fatalf("kernel: datagram %d of %d not received: %v", sent+i+1, count, err)
				}
			}
		}
		return time.Since(start)
	}
	kernel(batch) // ARP for web-2 on cka-w2's cni0, caches warm

	// kubewalk: the same frame on the same eth0.
	sock, err := r.Web2.Netns.ListenUDP(port, false)
	if err != nil {
		t.Fatal(err)
	}
	e := r.World.Engine
	kubewalk := func(count int) time.Duration {
		start := time.Now()
		for i := 0; i < count; i++ {
			if err := eth0.Transmit(frame, nil); err != nil {
				t.Fatal(err)
			}
			if err := e.Run(); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start)
	}
	kubewalk(batch)
	before := sock.Received

	k, w := kernel(n), kubewalk(n)
	if got := sock.Received - before; got != n {
		t.Fatalf("kubewalk: web-2 received %d of %d datagrams", got, n)
	}
	kns, wns := float64(k.Nanoseconds())/n, float64(w.Nanoseconds())/n
	t.Logf("client -> web-2 UDP over VXLAN, %d datagrams each: kernel %.0f ns/packet, kubewalk %.0f ns/packet, kubewalk is %.1fx faster",
		n, kns, wns, kns/wns)
}
