package scenarios

import (
	"embed"
	"fmt"
	"sync"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/scenario"
)

// files are the built-in scenarios as scenario files: what
// kubewalk scenarios show prints and what every constructor builds from.
//
//go:embed *.yaml
var files embed.FS

var parsed sync.Map // name -> *scenario.File

// Source returns the built-in scenario file named name ("reference"), as
// kubewalk scenarios show prints it.
func Source(name string) ([]byte, bool) {
	b, err := files.ReadFile(name + ".yaml")
	return b, err == nil
}

// Load returns the parsed built-in scenario file named name. The File is
// shared: Build copies what it applies, so it must not be modified.
func Load(name string) (*scenario.File, error) {
	if f, ok := parsed.Load(name); ok {
		return f.(*scenario.File), nil
	}
	src, ok := Source(name)
	if !ok {
		return nil, fmt.Errorf("no built-in scenario %q", name)
	}
	f, err := scenario.Parse(name+".yaml", src)
	if err != nil {
		return nil, err
	}
	parsed.Store(name, f)
	return f, nil
}

// build builds the built-in scenario name with the world seeded by seed,
// with kube-proxy in mode unless it is "" (the file's mode).
func build(name string, seed uint64, mode kubeproxy.Mode) (*sim.Cluster, error) {
	f, err := Load(name)
	if err != nil {
		return nil, err
	}
	if mode != "" {
		cl := *f.Cluster
		cl.Networking.KubeProxyMode = scenario.ProxyMode(mode)
		g := *f
		g.Cluster = &cl
		f = &g
	}
	return scenario.Build(f, seed)
}

// lookup finds the named objects of a built cluster for a constructor's
// typed fields; a missing one is an error naming it (a file edited out of
// step with its constructor).
type lookup struct {
	c    *sim.Cluster
	name string
	err  error
}

func (l *lookup) fail(what string) {
	if l.err == nil {
		l.err = fmt.Errorf("scenario %s: %s not found after building its file", l.name, what)
	}
}

func (l *lookup) node(name string) *sim.Node {
	n := l.c.Node(name)
	if n == nil {
		l.fail("node " + name)
	}
	return n
}

func (l *lookup) pod(ns, name string) *sim.Pod {
	p := l.c.Pod(ns, name)
	if p == nil {
		l.fail("running pod " + ns + "/" + name)
	}
	return p
}

func (l *lookup) host(name string) *sim.Host {
	h := l.c.ExternalHost(name)
	if h == nil {
		l.fail("external host " + name)
	}
	return h
}

func (l *lookup) service(ns, name string) *sim.Service {
	s := l.c.Service(ns, name)
	if s == nil {
		l.fail("service " + ns + "/" + name)
	}
	return s
}
