package main

import (
	"github.com/kubewalk/kubewalk/sim/apiserver"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/scenario"
)

const scenariosUsage = `List the built-in scenarios (clusters) the other commands can use, or
print one's scenario file.

Every built-in scenario is a scenario file (a kubewalk.io/v1alpha1 Cluster
document followed by Kubernetes manifests) embedded in kubewalk. Print one,
edit it, and give it back with -f instead of --scenario.

Usage:
  kubewalk scenarios
  kubewalk scenarios show NAME

Examples:
  kubewalk scenarios

  # The reference cluster as a file, walked from the file
  kubewalk scenarios show reference > ref.yaml
  kubewalk trace -f ref.yaml --from net/client --to service/net/web:80
`

func runScenarios(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("scenarios", scenariosUsage, help)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		if pos[0] != "show" {
			return usagef("unexpected argument %q (want show NAME)", pos[0])
		}
		if len(pos) != 2 {
			return usagef("show takes one scenario name (one of: %s)", scenarios.Names())
		}
		src, ok := scenarios.Source(pos[1])
		if !ok {
			return usagef("unknown scenario %q (one of: %s)", pos[1], scenarios.Names())
		}
		out.Write(src)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION")
	for _, s := range scenarios.Registry() {
		fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Description)
	}
	return tw.Flush()
}

// source is where a command's cluster comes from: --scenario NAME, -f FILE
// (repeatable; - reads stdin), or both (the built-in file first). The
// files are read and parsed once, however often the cluster is built.
type source struct{ *sourceState }

type sourceState struct {
	name  string
	files []string
	fs    *flag.FlagSet
	file  *scenario.File
	err   error
	read  bool
}

// fileList is the repeatable -f flag.
type fileList struct{ s *sourceState }

func (f fileList) String() string { return "" }

func (f fileList) Set(v string) error {
	f.s.files = append(f.s.files, v)
	return nil
}

// scenarioFlags defines --scenario and -f on fs.
func scenarioFlags(fs *flag.FlagSet) *source {
	s := &source{&sourceState{fs: fs}}
	fs.StringVar(&s.name, "scenario", "", "built-in scenario (see kubewalk scenarios)")
	fs.Var(fileList{s.sourceState}, "f", "scenario file (repeatable; - reads stdin); see kubewalk scenarios show")
	return s
}

// load reads and joins the scenario's files.
func (s source) load() (*scenario.File, error) {
	if s.read {
		return s.file, s.err
	}
	s.read = true
	s.file, s.err = s.parse()
	return s.file, s.err
}

func (s source) parse() (*scenario.File, error) {
	if s.name == "" && len(s.files) == 0 {
		return nil, usagef("--scenario NAME or -f FILE is required (scenarios: %s)", scenarios.Names())
	}
	var parts []*scenario.File
	if s.name != "" {
		f, err := scenarios.Load(s.name)
		if err != nil {
			return nil, usagef("unknown scenario %q (one of: %s)", s.name, scenarios.Names())
		}
		parts = append(parts, f)
	}
	usedStdin := false
	for _, name := range s.files {
		var data []byte
		var err error
		if name == "-" {
			if usedStdin {
				return nil, usagef("-f -: standard input can be read once")
			}
			usedStdin = true
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, usagef("-f %s: %v", name, err)
		}
		shown := name
		if name == "-" {
			shown = "STDIN" // as kubectl names it
		}
		f, err := scenario.Parse(shown, data)
		if err != nil {
			return nil, fileError{err}
		}
		parts = append(parts, f)
	}
	f, err := scenario.Concat(parts...)
	if err != nil {
		return nil, fileError{err}
	}
	if f.Cluster == nil {
		return nil, usagef("no kubewalk.io/v1alpha1 Cluster document in %v: a scenario needs one to say what the nodes are", s.files)
	}
	return f, nil
}

// loadScenario builds the scenario with the world seeded by seed, or by
// the file's seed when --seed was not given (the built-in files say 1,
// the flag's default).
func loadScenario(s source, seed uint64) (*sim.Cluster, error) {
	f, err := s.load()
	if err != nil {
		return nil, err
	}
	if !given(s.fs)["seed"] {
		seed = f.Cluster.Seed
	}
	for _, m := range f.Manifests {
		if len(m.Ignored) > 0 {
			fmt.Fprintf(warnOut, "Warning: %s: %s: kubewalk does not model %s; ignored\n", m.Pos, m.Key(), strings.Join(m.Ignored, ", "))
		}
	}
	c, err := scenario.Build(f, seed)
	if err != nil {
		return nil, fileError{err}
	}
	// A Service whose selector matches no pod is valid, and kubectl says
	// nothing; a learner's own file gets a warning here (describe shows
	// Endpoints: <none>). Built-in scenarios mean theirs.
	for _, m := range f.Manifests {
		if len(s.files) == 0 {
			break
		}
		svc, ok := m.Object.(*corev1.Service)
		if !ok || len(svc.Spec.Selector) == 0 {
			continue
		}
		if !selectsAnyPod(c, svc) {
			fmt.Fprintf(warnOut, "Warning: %s: %s: selector %s matches no pod\n", m.Pos, m.Key(), labels.SelectorFromSet(svc.Spec.Selector))
		}
	}
	return c, nil
}

func selectsAnyPod(c *sim.Cluster, svc *corev1.Service) bool {
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	return len(c.API.ByIndexFunc("Pod", apiserver.IndexNamespace, svc.Namespace, func(o apiserver.Object) bool {
		return sel.Matches(labels.Set(o.GetLabels()))
	})) > 0
}

// warnOut is where warnings go (stderr while a command runs): a scenario
// file's fields kubewalk does not model, as kubectl prints the API
// server's warnings.
var warnOut io.Writer = io.Discard

// fileError is a problem with a scenario file: bad input (exit status 2),
// printed one problem per line.
type fileError struct{ err error }

func (e fileError) Error() string { return e.err.Error() }
func (e fileError) Unwrap() error { return e.err }
