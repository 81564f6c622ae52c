package datapath

import (
	"testing"
)

// FuzzFrameRx injects arbitrary frames on a pod's eth0 and on a bridge
// port: the walk must never panic or loop, whatever the bytes.
func FuzzFrameRx(f *testing.F) {
	tp := newTopo(f)
	macB := tp.b.Device("eth0").mac
	good := udp(ipA, ipB, 1, 9, 64, []byte("x"))
	eth := append(append(append([]byte{}, macB[:]...), 2, 0, 0, 0, 0, 1, 0x08, 0x00), good...)
	f.Add(eth)
	f.Add(eth[:20])
	f.Add(append(append(append([]byte{}, BroadcastMAC[:]...), 2, 0, 0, 0, 0, 1, 0x08, 0x06), make([]byte, 28)...))
	trunc := append([]byte{}, eth...)
	trunc[14] = 0x4f
	f.Add(trunc)
	f.Add([]byte{})
	sctp := ipv4(ipA, ipB, ProtoSCTP, 64, make([]byte, 32))
	sctp[20+12] = 1 // INIT
	f.Add(append(append(append([]byte{}, macB[:]...), 2, 0, 0, 0, 0, 1, 0x08, 0x00), sctp...))
	f.Fuzz(func(t *testing.T, frame []byte) {
		tp := newTopo(t)
		tp.e.MaxEvents = 10000
		_, _ = tp.b.ListenUDP(9, true)
		_, _ = tp.b.ListenTCP(80)
		_, _ = tp.b.ListenSCTP(0)
		if _, err := tp.b.Device("eth0").Inject(frame); err != nil {
			return
		}
		if _, err := tp.va.Inject(frame); err != nil {
			return
		}
		if err := tp.e.Run(); err != nil {
			t.Fatalf("walk did not end: %v", err)
		}
		_ = Summarize(frame)
	})
}

// FuzzValidateIPv4 checks the validator against its own promises: success
// means a consistent header.
func FuzzValidateIPv4(f *testing.F) {
	f.Add(udp(ipA, ipB, 1, 2, 64, nil))
	f.Add([]byte{0x45, 0, 0, 20})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ValidateIPv4(b)
		if err != nil {
			return
		}
		if n < 20 || n > len(b) || int(b[0]&0xf)*4 > n {
			t.Fatalf("accepted inconsistent header: total %d, len %d", n, len(b))
		}
	})
}
