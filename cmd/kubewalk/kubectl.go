package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubectl"
)

const getUsage = `List a scenario's API objects as kubectl get does: the same columns,
-o wide's extra ones, AGE on the simulation's virtual clock.

Usage:
  kubewalk get RESOURCE[,RESOURCE...] [NAME...] (--scenario NAME | -f FILE...) [-n NS | -A] [-l SELECTOR] [-o wide|yaml|json|name]

RESOURCE is nodes (no), pods (po), services (svc), endpointslices,
endpoints (ep), deployments (deploy), replicasets (rs), daemonsets (ds),
configmaps (cm), poddisruptionbudgets (pdb), namespaces (ns), events (ev)
or leases.

As kubectl does, "No resources found" and errors go to stderr; a NAME that
does not exist is an error (exit status 1) after the others are printed.

Examples:
  # The nodes with their InternalIPs, kernel and runtime
  kubewalk get nodes -o wide --scenario reference

  # Every pod, the system ones too, with IP and node
  kubewalk get pods -A -o wide --scenario reference

  # The web Deployment, its ReplicaSet and its pods, one table each
  kubewalk get deploy,rs,pods -l app=web -n net --scenario reference

  # One Service as YAML
  kubewalk get svc web -n net -o yaml --scenario reference
`

const describeUsage = `Describe a scenario's node, pod or Service as kubectl describe does:
conditions, taints, podCIDR, the pods on a node, a pod's containers and the
scheduler's reason it is Pending, a Service's ports and endpoints, events.

Usage:
  kubewalk describe node|pod|svc [NAME...] (--scenario NAME | -f FILE...) [-n NS]

A NAME that matches nothing exactly describes every object whose name
starts with it (kubectl's prefix match); no NAME describes them all.

Examples:
  kubewalk describe node cka-w1 --scenario reference
  kubewalk describe svc web -n net --scenario reference
`

// clusterFlags are the flags every command that builds a cluster takes.
type clusterFlags struct {
	scenario source
	seed     uint64
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	f.scenario = *scenarioFlags(fs)
	fs.Uint64Var(&f.seed, "seed", 1, "random seed of the simulated world")
}

func (f *clusterFlags) load() (*sim.Cluster, error) { return loadScenario(f.scenario, f.seed) }

// kubectlFlags are -n/--namespace, -A/--all-namespaces and -o/--output.
type kubectlFlags struct {
	namespace string
	all       bool
	output    string
	selector  string
}

func (f *kubectlFlags) register(fs *flag.FlagSet, output bool) {
	fs.StringVar(&f.namespace, "n", "", "namespace (default \"default\")")
	fs.StringVar(&f.namespace, "namespace", "", "same as -n")
	if output {
		fs.BoolVar(&f.all, "A", false, "list the objects of every namespace")
		fs.BoolVar(&f.all, "all-namespaces", false, "same as -A")
		fs.StringVar(&f.output, "o", "", "output: wide, yaml, json or name (default: the table)")
		fs.StringVar(&f.output, "output", "", "same as -o")
		fs.StringVar(&f.selector, "l", "", "label selector (app=web, 'tier in (a,b)')")
		fs.StringVar(&f.selector, "selector", "", "same as -l")
	}
}

// kubectlResult ends a kubectl-like command: what kubectl writes on stderr
// (notes such as "No resources found", errors in kubectl's words) and its
// exit status.
func kubectlResult(notes *bytes.Buffer, err error) error {
	code := 0
	if err != nil {
		notes.WriteString(kubectl.ErrorText(err))
		code = 1
	}
	if notes.Len() == 0 && code == 0 {
		return nil
	}
	return &exitStatus{code: code, stderr: notes.String()}
}

func runGet(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("get", getUsage, help)
	var cf clusterFlags
	var kf kubectlFlags
	cf.register(fs)
	kf.register(fs, true)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("a RESOURCE is required (nodes, pods, svc, endpointslices, deploy, rs, ds, cm, pdb, ns, events)")
	}
	for _, r := range strings.Split(pos[0], ",") {
		if _, err := kubectl.LookupResource(r); err != nil {
			return usagef("%s", err)
		}
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	var notes bytes.Buffer
	err = kubectl.Get(c.API, pos, kubectl.GetOptions{Namespace: kf.namespace, AllNamespaces: kf.all, Output: kf.output, Selector: kf.selector}, out, &notes)
	var ue *kubectl.UsageError
	if errors.As(err, &ue) {
		return usagef("%s", ue.Msg)
	}
	return kubectlResult(&notes, err)
}

func runDescribe(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("describe", describeUsage, help)
	var cf clusterFlags
	var kf kubectlFlags
	cf.register(fs)
	kf.register(fs, false)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("a RESOURCE is required: node, pod or svc")
	}
	if _, err := kubectl.LookupResource(pos[0]); err != nil {
		return usagef("%s", err)
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	var notes bytes.Buffer
	err = kubectl.Describe(c.API, pos, kf.namespace, out, &notes)
	var ue *kubectl.UsageError
	if errors.As(err, &ue) {
		return usagef("%s", ue.Msg)
	}
	return kubectlResult(&notes, err)
}
