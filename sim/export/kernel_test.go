package export_test

// The real-kernel side of the differential tests: build an export in
// namespaces the test owns, capture with AF_PACKET sockets at every device,
// inject a frame with an AF_PACKET socket. Nothing here touches the host's
// namespace: sockets are opened on a locked OS thread that enters the
// target namespace and comes back, and every command is `ip -n`/`ip netns
// exec` on a namespace the test created.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/export"
	"golang.org/x/sys/unix"
)

// testPrefix starts the name of every namespace the differential tests
// create; a case's namespaces are testPrefix<pid>-<case>-*, so that runs
// in parallel (two work trees on one machine) never touch each other's.
const testPrefix = "kwdiff"

const (
	// setupTimeout bounds the setup and teardown scripts.
	setupTimeout = 60 * time.Second
	// captureWindow is how long captures run after the frame is sent:
	// every exchange here (ARP included) completes in well under it.
	captureWindow = 600 * time.Millisecond
)

// needKernel skips, with the reason, unless everything the differential
// tests use is here: root, the programs the setup script runs, and the
// kernel features it needs in a namespace of its own.
func needKernel(t *testing.T) {
	t.Helper()
	if reason := kernelMissing(); reason != "" {
		t.Skip("differential tests against the Linux kernel skipped: " + reason)
	}
}

// kernelTools are the programs the setup and teardown scripts run, with
// the Debian package that ships each.
var kernelTools = []struct{ bin, pkg string }{
	{"sh", "dash"},
	{"ip", "iproute2"},
	{"bridge", "iproute2"},
	{"sysctl", "procps"},
	{"iptables-restore", "iptables"},
	{"iptables-save", "iptables"},
}

// kernelMissing returns why the differential tests cannot run here, or ""
// when they can. It probes the kernel in a namespace it creates and
// deletes: a vxlan device (the vxlan module), a writable
// bridge-nf-call-iptables (br_netfilter, per namespace since Linux 5.3)
// and iptables-restore loading a nat rule like kube-proxy's.
func kernelMissing() string {
	if os.Geteuid() != 0 {
		return "they need root (network namespaces, AF_PACKET sockets)"
	}
	for _, tool := range kernelTools {
		if _, err := exec.LookPath(tool.bin); err != nil {
			return fmt.Sprintf("%s is not installed (Debian package %s)", tool.bin, tool.pkg)
		}
	}
	probe := fmt.Sprintf("%s-probe-%d", testPrefix, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot create a network namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
	defer exec.Command("ip", "netns", "del", probe).Run()
	if out, err := exec.Command("ip", "-n", probe, "link", "add", "kwprobe0", "type", "vxlan",
		"id", "1", "dstport", "8472", "nolearning").CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot create a vxlan device (vxlan module): %v: %s", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "netns", "exec", probe, "sh", "-c",
		"test -w /proc/sys/net/bridge/bridge-nf-call-iptables").CombinedOutput(); err != nil {
		return fmt.Sprintf("no per-namespace /proc/sys/net/bridge/bridge-nf-call-iptables (br_netfilter not loaded: modprobe br_netfilter): %v: %s",
			err, strings.TrimSpace(string(out)))
	}
	rules := "*nat\n:PREROUTING ACCEPT [0:0]\n:KWPROBE - [0:0]\n" +
		"-A PREROUTING -m comment --comment probe -j KWPROBE\n" +
		"-A KWPROBE -p tcp -m tcp --dport 80 -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.0.0.1:80\n" +
		"COMMIT\n"
	cmd := exec.Command("ip", "netns", "exec", probe, "iptables-restore", "-w")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("iptables-restore cannot load a nat rule in a namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}

// deleteStale removes the namespaces whose names start with prefix-, and
// those a killed run left (testPrefix<pid>- of a process that is gone).
func deleteStale(t *testing.T, prefix string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !(strings.HasPrefix(f[0], prefix+"-") || leftBehind(f[0])) {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", f[0]).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			t.Errorf("deleting stale namespace %s: %v: %s", f[0], err, out)
		}
	}
}

// leftBehind reports whether name is testPrefix<pid>-... of a process that
// no longer runs.
func leftBehind(name string) bool {
	rest, ok := strings.CutPrefix(name, testPrefix)
	pid, _, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || pid == "" || strings.Trim(pid, "0123456789") != "" {
		return false
	}
	_, err := os.Stat("/proc/" + pid)
	return errors.Is(err, os.ErrNotExist)
}

// buildReal exports c under testPrefix<pid>-name and runs the setup script; the
// teardown runs when the test ends, whatever happens.
func buildReal(t *testing.T, c *sim.Cluster, name string) *export.Export {
	t.Helper()
	prefix := fmt.Sprintf("%s%d-%s", testPrefix, os.Getpid(), name)
	deleteStale(t, prefix)
	exp, err := export.Generate(c, export.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "sh", "-c", exp.Teardown).CombinedOutput(); err != nil {
			t.Errorf("teardown: %v: %s", err, out)
		}
		deleteStale(t, prefix)
	})
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "sh", "-c", exp.Setup).CombinedOutput(); err != nil {
		t.Fatalf("setup script: %v\n%s", err, out)
	}
	return exp
}

// inNetns runs f on an OS thread that has entered the named namespace. The
// thread leaves the namespace before it is released; if it cannot, it is
// never released and dies with its goroutine.
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back from %s: %w (thread discarded)", name, err)
			return // thread stays locked and exits with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocket opens an AF_PACKET socket bound to dev in namespace ns.
func packetSocket(ns, dev string) (int, error) {
	fd := -1
	err := inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		s, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.Bind(s, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(s)
			return err
		}
		fd = s
		return nil
	})
	return fd, err
}

// frame is one frame seen at an observation point.
type frame struct {
	// Out is set for frames the device transmitted (PACKET_OUTGOING, or
	// trace.Transmitted), clear for frames it received.
	Out bool
	B   []byte
	// CsumCompleted is set when the kernel handed the frame over with
	// CHECKSUM_PARTIAL (TP_STATUS_CSUMNOTREADY) and the capture filled in
	// the transport checksum the way a NIC's checksum offload would.
	CsumCompleted bool
}

// capture is an AF_PACKET socket collecting frames at one point.
type capture struct {
	pt     point
	fd     int
	frames []frame
	err    error
}

func openCapture(ns string, pt point) (*capture, error) {
	fd, err := packetSocket(ns, pt.Dev)
	if err != nil {
		return nil, fmt.Errorf("capture on %s %s: %w", ns, pt.Dev, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		unix.Close(fd)
		return nil, err
	}
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Drop anything queued between socket() and bind().
	buf := make([]byte, 65536)
	for {
		if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	return &capture{pt: pt, fd: fd}, nil
}

// run collects frames until stop, then drains what is already queued: a
// capture goroutine scheduled late on a loaded machine must still see the
// frames the kernel queued to its socket inside the window.
func (c *capture) run(stop time.Time) {
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	for time.Now().Before(stop) {
		if !c.recv(buf, oob, 0) {
			return
		}
	}
	for c.recv(buf, oob, unix.MSG_DONTWAIT) {
	}
}

// recv reads one frame into c.frames. It reports false when the read
// failed for good, or, with MSG_DONTWAIT, when nothing is queued.
func (c *capture) recv(buf, oob []byte, flags int) bool {
	n, oobn, _, from, err := unix.Recvmsg(c.fd, buf, oob, flags)
	if err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return flags&unix.MSG_DONTWAIT == 0
		}
		c.err = err
		return false
	}
	if isIgnored(buf[:n]) {
		return true
	}
	f := frame{B: append([]byte(nil), buf[:n]...)}
	if sll, ok := from.(*unix.SockaddrLinklayer); ok && sll.Pkttype == unix.PACKET_OUTGOING {
		f.Out = true
	}
	if partial(oob[:oobn]) {
		f.CsumCompleted = completeChecksum(f.B)
	}
	c.frames = append(c.frames, f)
	return true
}

// partial reports whether the auxdata says the checksum is not ready.
func partial(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data[0:4])&unix.TP_STATUS_CSUMNOTREADY != 0
		}
	}
	return false
}

// realRun is one injection into the real namespaces with captures at
// every point.
type realRun struct {
	exp  *export.Export
	pts  []point
	src  point
	send []byte
}

// do opens the captures, sends the frame from src and returns what each
// point saw.
func (r realRun) do() (map[point][]frame, error) {
	var caps []*capture
	defer func() {
		for _, c := range caps {
			unix.Close(c.fd)
		}
	}()
	for _, pt := range r.pts {
		ns, ok := r.exp.Netns(pt.Node, pt.Netns)
		if !ok {
			return nil, fmt.Errorf("no real namespace for %s", pt)
		}
		c, err := openCapture(ns, pt)
		if err != nil {
			return nil, err
		}
		caps = append(caps, c)
	}
	srcNS, ok := r.exp.Netns(r.src.Node, r.src.Netns)
	if !ok {
		return nil, fmt.Errorf("no real namespace for %s", r.src)
	}
	fd, err := packetSocket(srcNS, r.src.Dev)
	if err != nil {
		return nil, fmt.Errorf("send socket: %w", err)
	}
	defer unix.Close(fd)
	stop := time.Now().Add(captureWindow)
	var wg sync.WaitGroup
	for _, c := range caps {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(stop) }()
	}
	if _, err := unix.Write(fd, r.send); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	wg.Wait()
	out := map[point][]frame{}
	for _, c := range caps {
		if c.err != nil {
			return nil, fmt.Errorf("capture %s: %w", c.pt, c.err)
		}
		out[c.pt] = c.frames
	}
	return out, nil
}

// TestKernelMissingNamesEachTool hides the tools one at a time behind a
// PATH of stand-ins for all the others and checks that the differential
// tests skip and name the missing tool and its package.
func TestKernelMissingNamesEachTool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("kernelMissing reports missing root before it looks at tools")
	}
	for _, hide := range kernelTools {
		t.Run(hide.bin, func(t *testing.T) {
			dir := t.TempDir()
			for _, tool := range kernelTools {
				if tool.bin != hide.bin {
					// Never run: kernelMissing checks every tool first.
					if err := os.WriteFile(dir+"/"+tool.bin, []byte("#!/bin/false\n"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Setenv("PATH", dir)
			want := hide.bin + " is not installed (Debian package " + hide.pkg + ")"
			if got := kernelMissing(); got != want {
				t.Fatalf("with %s hidden, kernelMissing() = %q, want %q", hide.bin, got, want)
			}
		})
	}
}
