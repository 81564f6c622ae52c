package export_test

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/export"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/stretchr/testify/require"
)

// hostile are values that would run a command, split a word, end a line or
// pass for an option if they reached the script unquoted.
var hostile = []string{
	"x;echo INJECTED #",
	"$(echo INJECTED)",
	"`echo INJECTED`",
	"x && echo INJECTED",
	"x|echo INJECTED",
	"x\necho INJECTED",
	"x y",
	"x'y",
	`x"y`,
	`x\y`,
	"-rf",
	"x>y",
	"*",
}

func TestHostilePrefixRefused(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	bad := append([]string{"KW", "kw_1", "kw.1", "kw-", "-kw", "kw/x", "../kw", "kw\u00e9", strings.Repeat("a", export.MaxPrefixLen+1)}, hostile...)
	for _, p := range bad {
		_, err := export.Generate(r.Cluster, export.Options{Prefix: p})
		var ee *export.Error
		require.True(t, errors.As(err, &ee), "prefix %q: %v", p, err)
		require.Contains(t, err.Error(), "invalid prefix")
		require.NotContains(t, err.Error(), "\n", "one line")
	}
	for _, p := range []string{"kw", "kw-1", "k", "kwdiff-svc-clusterip-remote-endpoint", strings.Repeat("a", export.MaxPrefixLen)} {
		_, err := export.Generate(r.Cluster, export.Options{Prefix: p})
		require.NoError(t, err, "prefix %q", p)
	}
}

// tinyCluster is one node with one pod, an outside host and a Service,
// every name given by the caller; it returns the simulator's error when
// the simulator itself refuses a name.
type names struct{ node, nic, podNS, pod, host, svc string }

func tinyCluster(n names) (*sim.Cluster, error) {
	c, err := sim.NewCluster(sim.DefaultConfig())
	if err != nil {
		return nil, err
	}
	if _, err = c.AddNode(sim.NodeSpec{Name: n.node, NICs: []sim.NICSpec{{Name: n.nic, Segment: "u", Addr: netip.MustParsePrefix("192.168.1.2/24")}}}); err != nil {
		return nil, err
	}
	if _, err = c.AddPod(sim.PodSpec{Namespace: n.podNS, Name: n.pod, Node: n.node, Labels: map[string]string{"app": "a"},
		Containers: []sim.Container{{Name: "c", Ports: []sim.ContainerPort{{ContainerPort: 80}}}}}); err != nil {
		return nil, err
	}
	if _, err = c.AddExternalHost(n.host, "u", netip.MustParsePrefix("192.168.1.100/24"), netip.Addr{}); err != nil {
		return nil, err
	}
	_, err = c.AddService(sim.ServiceSpec{Selector: map[string]string{"app": "a"}, Service: kubeproxy.Service{
		Namespace: "default", Name: n.svc, Ports: []kubeproxy.ServicePort{{Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}},
	}})
	return c, err
}

var good = names{node: "n1", nic: "eth0", podNS: "ns", pod: "p", host: "out", svc: "s"}

// TestHostileObjectNamesRefused gives each name that reaches the script a
// hostile value in turn: the export is refused, with one line naming it.
func TestHostileObjectNamesRefused(t *testing.T) {
	c, err := tinyCluster(good)
	require.NoError(t, err)
	_, err = export.Generate(c, export.Options{Prefix: "kwt"})
	require.NoError(t, err, "the control case exports")
	refused := 0
	set := map[string]func(*names, string){
		"node":          func(n *names, v string) { n.node = v },
		"pod namespace": func(n *names, v string) { n.podNS = v },
		"pod":           func(n *names, v string) { n.pod = v },
		"host":          func(n *names, v string) { n.host = v },
		"interface":     func(n *names, v string) { n.nic = v },
	}
	for what, f := range set {
		vals := append([]string{"..", "-x"}, hostile...)
		if what == "interface" {
			vals = append(vals, "averylongifname0", "a:b", "a/b", ".", "")
		} else {
			vals = append(vals, "UPPER", "a.b/c", "x.", strings.Repeat("a", 254))
		}
		if what == "pod namespace" {
			vals = append(vals, "a.b")
		}
		for _, v := range vals {
			n := good
			f(&n, v)
			if what == "pod namespace" && strings.Contains(v, "/") {
				continue // "ns/name" could not be told apart in the simulator either
			}
			c, err := tinyCluster(n)
			if err != nil {
				continue // the simulator refuses it already
			}
			refused++
			_, err = export.Generate(c, export.Options{Prefix: "kwt"})
			var ee *export.Error
			require.True(t, errors.As(err, &ee), "%s %q: %v", what, v, err)
			require.NotContains(t, err.Error(), "\n", "%s %q: one line", what, v)
			require.Contains(t, err.Error(), "cannot be exported", "%s %q", what, v)
		}
	}
	// The API server refuses invalid object names (pods, namespaces, nodes)
	// first; host and interface names reach the export, which must refuse them.
	require.Greater(t, refused, 20, "names the simulator accepts: the export is what refuses them")
}

// TestScriptRunsOnlyIPAndBridge parses and runs the setup and teardown
// scripts with bash, with ip and bridge replaced by stand-ins that log
// their arguments and nothing else on PATH: every command the scripts run
// is ip or bridge with the arguments the generator meant, nothing is
// printed and nothing else runs.
func TestScriptRunsOnlyIPAndBridge(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	e, err := export.Generate(r.Cluster, export.Options{Prefix: "kwt"})
	require.NoError(t, err)
	for name, script := range map[string]string{"setup": e.Setup, "teardown": e.Teardown} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			f := filepath.Join(dir, "script.sh")
			require.NoError(t, os.WriteFile(f, []byte(script), 0o644))
			out, err := exec.Command(bash, "-n", f).CombinedOutput()
			require.NoError(t, err, "bash -n: %s", out)

			bin := filepath.Join(dir, "bin")
			require.NoError(t, os.Mkdir(bin, 0o755))
			log := filepath.Join(dir, "log")
			for _, tool := range []string{"ip", "bridge"} {
				stub := "#!" + bash + "\nprintf '%s' " + tool + " >> " + log + "\nfor a; do printf ' [%s]' \"$a\" >> " + log +
					"; done\nprintf '\\n' >> " + log + "\nexec 0<&-\n"
				require.NoError(t, os.WriteFile(filepath.Join(bin, tool), []byte(stub), 0o755))
			}
			cmd := exec.Command(bash, f)
			cmd.Env = []string{"PATH=" + bin}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
			require.Empty(t, stdout.String())
			require.Empty(t, stderr.String())
			logged, err := os.ReadFile(log)
			require.NoError(t, err)
			// One logged command per command line of the script, each
			// the same words (a here-document's body is not a command).
			var want []string
			inDoc := false
			for _, l := range strings.Split(script, "\n") {
				switch {
				case inDoc:
					inDoc = l != "KUBEWALK_EOF"
				case strings.HasPrefix(l, "ip ") || strings.HasPrefix(l, "bridge "):
					want = append(want, l)
					inDoc = strings.Contains(l, "<<'KUBEWALK_EOF'")
				case l == "" || strings.HasPrefix(l, "#") || l == "set -e":
				default:
					t.Fatalf("a line that is neither ip nor bridge: %q", l)
				}
			}
			got := strings.Split(strings.TrimSuffix(string(logged), "\n"), "\n")
			require.Len(t, got, len(want))
			for i, l := range got {
				require.Equal(t, strings.Fields(want[i])[0], strings.Fields(l)[0])
				require.NotContains(t, l, "INJECTED")
			}
			if name == "setup" {
				require.Contains(t, string(logged), "ip [netns] [add] [kwt-cka-w1-net.client]\n")
				require.Contains(t, string(logged), "[addr] [add] [10.244.1.1/24] [brd] [+] [dev] [cni0]\n")
			} else {
				require.Contains(t, string(logged), "ip [netns] [del] [kwt-cka-w1-net.client]\n")
			}
		})
	}
}
