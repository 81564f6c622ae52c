package pcap_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/datapath/trace/pcap"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
)

// crossNode records the TCP handshake net/client (cka-w1) -> net/web-2
// (cka-w2) through flannel's VXLAN overlay, with frames captured.
func crossNode(t *testing.T) *trace.Trace {
	t.Helper()
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	tr := &trace.Trace{Capture: true}
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web2.IP, 40000, 80, 1000, tr)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	require.True(t, c.Established)
	return tr
}

func TestWriteNGReadsBack(t *testing.T) {
	tr := crossNode(t)
	var buf bytes.Buffer
	require.NoError(t, pcap.WriteNG(&buf, tr))

	var again bytes.Buffer
	require.NoError(t, pcap.WriteNG(&again, crossNode(t)))
	require.Equal(t, buf.Bytes(), again.Bytes(), "deterministic")

	r, err := pcapgo.NewNgReader(bytes.NewReader(buf.Bytes()), pcapgo.DefaultNgReaderOptions)
	require.NoError(t, err)
	require.Equal(t, layers.LinkTypeEthernet, r.LinkType())
	require.Equal(t, "kubewalk", r.SectionInfo().Application)

	var want []trace.Observation
	for _, o := range tr.Obs {
		if pcap.Captured(&o) {
			want = append(want, o)
		}
	}
	require.NotEmpty(t, want)
	for i := 0; ; i++ {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			require.Equal(t, len(want), i, "one packet per captured rx/tx")
			break
		}
		require.NoError(t, err)
		o := want[i]
		require.Equal(t, o.Frame, data)
		require.True(t, ci.Timestamp.Equal(pcap.Epoch.Add(o.At)), "packet %d at %s", i, ci.Timestamp)
		intf, err := r.Interface(ci.InterfaceIndex)
		require.NoError(t, err)
		require.Equal(t, pcap.InterfaceName(&o), intf.Name)
	}
	names := pcap.Interfaces(tr)
	require.Equal(t, len(names), r.NInterfaces())
	require.Contains(t, names, "cka-w1/host/flannel.1")
	require.Contains(t, names, "cka-w1/net/client/eth0")
	require.Contains(t, names, "cka-w2/host/eth0")
}

func TestWriteNGWithoutFrames(t *testing.T) {
	tr := &trace.Trace{}
	tr.Add(trace.Observation{Packet: 1, Node: "n", Netns: "host", Device: "eth0", Stage: "tx", Action: trace.Transmitted})
	require.ErrorContains(t, pcap.WriteNG(io.Discard, tr), "no captured frames")
}

// TestTshark checks the file with Wireshark's dissectors: every frame
// decodes, UDP 8472 is VXLAN with VNI 1 and nothing is malformed.
func TestTshark(t *testing.T) {
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark); pcapng checked with pcapgo only")
	}
	var buf bytes.Buffer
	require.NoError(t, pcap.WriteNG(&buf, crossNode(t)))
	file := filepath.Join(t.TempDir(), "walk.pcapng")
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o644))
	tshark := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"-n", "-r", file, "-d", "udp.port==8472,vxlan"}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("tshark %v: %v\n%s", args, err, ee.Stderr)
		}
		require.NoError(t, err)
		return string(out)
	}
	vnis := strings.Fields(tshark("-Y", "vxlan", "-T", "fields", "-e", "vxlan.vni"))
	require.NotEmpty(t, vnis, "VXLAN decoded on UDP 8472")
	for _, v := range vnis {
		require.Equal(t, "1", v)
	}
	require.Empty(t, strings.TrimSpace(tshark("-Y", "_ws.malformed || _ws.expert.severity >= error")), "no malformed packets")
	inner := tshark("-Y", "vxlan && tcp.flags.syn == 1 && tcp.flags.ack == 0", "-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "frame.interface_name")
	require.Contains(t, inner, "192.168.122.21,10.244.1.2\t192.168.122.22,10.244.2.2\tcka-w1/host/eth0")
}
