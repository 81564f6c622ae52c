package play

import (
	"k8s.io/apimachinery/pkg/labels"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubewalk/kubewalk/sim/apiserver"
	"github.com/kubewalk/kubewalk/sim/kubectl"
)

// kubectlError is a kubectl failure, printed as kubectl prints it.
type kubectlError struct{ err error }

func (e *kubectlError) Error() string { return e.err.Error() }
func (e *kubectlError) Unwrap() error { return e.err }

func errorText(err error) string {
	var ke *kubectlError
	if errors.As(err, &ke) {
		return kubectl.ErrorText(ke.err)
	}
	return err.Error() + "\n"
}

func kerrorf(format string, a ...any) error {
	return &kubectlError{&kubectl.UsageError{Msg: fmt.Sprintf(format, a...)}}
}

// kubectlArgs are kubectl's flags (anywhere on the line, as kubectl takes
// them) and its positional words; after "--" come an exec's command words.
type kubectlArgs struct {
	namespace string
	all       bool
	output    string
	filename  string
	container string
	replicas  string
	patch     string
	patchType string
	overwrite bool
	noWait    bool
	selector  string
	set       map[string]bool
	pos       []string
	command   []string
}

// kubectlFlags are the flags play's kubectl takes: name → long name, and
// whether it takes a value.
var kubectlFlags = map[string]struct {
	long  string
	value bool
}{
	"-n": {"--namespace", true}, "--namespace": {"--namespace", true},
	"-A": {"--all-namespaces", false}, "--all-namespaces": {"--all-namespaces", false},
	"-o": {"--output", true}, "--output": {"--output", true},
	"-f": {"--filename", true}, "--filename": {"--filename", true},
	"-c": {"--container", true}, "--container": {"--container", true},
	"--replicas": {"--replicas", true},
	"-p":         {"--patch", true}, "--patch": {"--patch", true},
	"--type":      {"--type", true},
	"--overwrite": {"--overwrite", false},
	"--wait":      {"--wait", false},
	"-l":          {"--selector", true}, "--selector": {"--selector", true},
	"-i": {"--stdin", false}, "--stdin": {"--stdin", false},
	"-t": {"--tty", false}, "--tty": {"--tty", false}, "-it": {"--stdin", false},
}

func parseKubectl(words []string) (kubectlArgs, error) {
	a := kubectlArgs{set: map[string]bool{}}
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			a.command = words[i+1:]
			break
		}
		if !strings.HasPrefix(w, "-") || w == "-" {
			a.pos = append(a.pos, w)
			continue
		}
		name, val, hasVal := strings.Cut(w, "=")
		f, ok := kubectlFlags[name]
		if !ok {
			if strings.HasPrefix(name, "--") {
				return a, kerrorf("unknown flag: %s", name)
			}
			return a, kerrorf("unknown shorthand flag: %q in %s", name[1:2], w)
		}
		if f.value && !hasVal {
			if i+1 >= len(words) {
				return a, kerrorf("flag needs an argument: %s", name)
			}
			i++
			val = words[i]
		}
		a.set[f.long] = true
		switch f.long {
		case "--namespace":
			a.namespace = val
		case "--all-namespaces":
			a.all = true
		case "--output":
			a.output = val
		case "--filename":
			a.filename = val
		case "--container":
			a.container = val
		case "--replicas":
			a.replicas = val
		case "--patch":
			a.patch = val
		case "--type":
			a.patchType = val
		case "--selector":
			a.selector = val
		case "--overwrite":
			a.overwrite = true
		case "--wait":
			switch val {
			case "", "true":
			case "false":
				a.noWait = true
			default:
				return a, kerrorf("invalid argument %q for \"--wait\" flag: strconv.ParseBool: parsing %q: invalid syntax", val, val)
			}
		}
	}
	return a, nil
}

func (a *kubectlArgs) ns() string {
	if a.namespace == "" {
		return "default"
	}
	return a.namespace
}

// kubectlCommands are play's kubectl subcommands.
var kubectlCommands map[string]func(r *Runner, a kubectlArgs, stdin string, out io.Writer) error

func init() {
	kubectlCommands = map[string]func(r *Runner, a kubectlArgs, stdin string, out io.Writer) error{
		"get":      kubectlGet,
		"describe": kubectlDescribe,
		"apply":    kubectlApply,
		"delete":   kubectlDelete,
		"scale":    kubectlScale,
		"label":    kubectlLabel,
		"patch":    kubectlPatch,
		"exec":     kubectlExec,
	}
}

func runKubectl(r *Runner, args []string, stdin string, out io.Writer) error {
	a, err := parseKubectl(args[1:])
	if err != nil {
		return err
	}
	if len(a.pos) == 0 {
		return kerrorf("kubewalk play's kubectl wants a command: %s", strings.Join(slices.Sorted(maps.Keys(kubectlCommands)), ", "))
	}
	sub, ok := kubectlCommands[a.pos[0]]
	if !ok {
		return kerrorf("unknown command %q for \"kubectl\"", a.pos[0])
	}
	a.pos = a.pos[1:]
	return sub(r, a, stdin, out)
}

func kubectlGet(r *Runner, a kubectlArgs, _ string, out io.Writer) error {
	err := kubectl.Get(r.API, a.pos, kubectl.GetOptions{Namespace: a.namespace, AllNamespaces: a.all, Output: a.output, Selector: a.selector}, out, out)
	if err != nil {
		return &kubectlError{err}
	}
	return nil
}

func kubectlDescribe(r *Runner, a kubectlArgs, _ string, out io.Writer) error {
	if err := kubectl.Describe(r.API, a.pos, a.namespace, out, out); err != nil {
		return &kubectlError{err}
	}
	return nil
}

// kubectlApply is `kubectl apply -f -` with the heredoc as stdin: each
// object's "kind/name created|configured|unchanged", atomically (nothing
// is applied when one object is refused).
func kubectlApply(r *Runner, a kubectlArgs, stdin string, out io.Writer) error {
	if a.filename == "" {
		return kerrorf("must specify one of -f and -k")
	}
	if a.filename != "-" {
		return kerrorf("the path %q does not exist (kubewalk play applies inline manifests: kubectl apply -f - <<EOF)", a.filename)
	}
	objs, err := decodeManifests(stdin, a.namespace)
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return kerrorf("no objects passed to apply")
	}
	res, err := r.applyObjects(objs)
	if err != nil {
		return &kubectlError{sourceError(err, objs, r)}
	}
	for _, x := range res {
		rs, _ := kubectl.ResourceForKind(x.kind)
		fmt.Fprintf(out, "%s %s\n", rs.NameOf(x.name), x.result)
	}
	return r.settle()
}

// sourceError is cmdutil.AddSourceToErr: an API status (other than
// Invalid, which kubectl prints from its details) says where the object
// came from: `error when creating "STDIN": namespaces "x" not found`.
func sourceError(err error, objs []apiserver.Object, r *Runner) error {
	var st *apierrors.StatusError
	if !errors.As(err, &st) || apierrors.IsInvalid(err) {
		return err
	}
	c := *st
	c.ErrStatus.Message = fmt.Sprintf("error when creating %q: %s", "STDIN", st.ErrStatus.Message)
	return &c
}

func kubectlDelete(r *Runner, a kubectlArgs, _ string, out io.Writer) error {
	if len(a.pos) == 1 && a.selector != "" {
		// kubectl delete TYPE -l SELECTOR: the objects the selector picks,
		// in name order.
		rs, err := kubectl.LookupResource(a.pos[0])
		if err != nil {
			return &kubectlError{err}
		}
		sel, err := labels.Parse(a.selector)
		if err != nil {
			return &kubectlError{err}
		}
		for _, o := range r.API.List(rs.Kind, a.ns()) {
			if sel.Matches(labels.Set(o.GetLabels())) {
				a.pos = append(a.pos, o.GetName())
			}
		}
		if len(a.pos) == 1 {
			fmt.Fprintf(out, "No resources found\n")
			return nil
		}
	}
	if len(a.pos) < 2 {
		return kerrorf("resource(s) were provided, but no name was specified")
	}
	rs, err := kubectl.LookupResource(a.pos[0])
	if err != nil {
		return &kubectlError{err}
	}
	var errs []error
	for _, name := range a.pos[1:] {
		if err := r.delete(rs.Kind, a.ns(), name); err != nil {
			errs = append(errs, err)
			continue
		}
		kind := strings.ToLower(rs.Kind)
		if rs.Group != "" {
			kind += "." + rs.Group
		}
		if rs.Namespaced {
			fmt.Fprintf(out, "%s %q deleted from %s namespace\n", kind, name, a.ns())
		} else {
			fmt.Fprintf(out, "%s %q deleted\n", kind, name)
		}
	}
	if err := r.settle(); err != nil {
		return err
	}
	if !a.noWait {
		for _, name := range a.pos[1:] {
			if err := r.waitGone(rs.Kind, a.ns(), name); err != nil {
				return err
			}
		}
	}
	if len(errs) > 0 {
		return &kubectlError{errors.Join(errs...)}
	}
	return nil
}

// deleteTimeout bounds kubectl delete's wait (its --timeout=0 waits a
// week; a pod's grace period is 30s, a stuck one would stop the script).
const deleteTimeout = 5 * time.Minute

// waitGone is kubectl delete's --wait=true: it returns once the object is
// gone (a pod's kubelet has stopped it after its grace period), letting
// virtual time pass a second at a time.
func (r *Runner) waitGone(kind, ns, name string) error {
	for waited := time.Duration(0); ; waited += time.Second {
		if _, err := r.API.Get(kind, ns, name); apierrors.IsNotFound(err) {
			return nil
		}
		if waited >= deleteTimeout {
			return kerrorf("timed out waiting for the condition on %s/%s", strings.ToLower(kind)+"s", name)
		}
		if err := r.Cluster.RunFor(time.Second); err != nil {
			return err
		}
	}
}

// kubectlScale sets spec.replicas of Deployments and ReplicaSets.
func kubectlScale(r *Runner, a kubectlArgs, _ string, out io.Writer) error {
	if !a.set["--replicas"] {
		return kerrorf("required flag(s) \"replicas\" not set")
	}
	n, err := strconv.Atoi(a.replicas)
	if err != nil || n < 0 {
		return kerrorf("invalid argument %q for \"--replicas\" flag: strconv.ParseInt: parsing %q: invalid syntax", a.replicas, a.replicas)
	}
	if len(a.pos) < 2 {
		return kerrorf("resource(s) were provided, but no name was specified")
	}
	rs, err := kubectl.LookupResource(a.pos[0])
	if err != nil {
		return &kubectlError{err}
	}
	for _, name := range a.pos[1:] {
		o, err := r.API.Get(rs.Kind, a.ns(), name)
		if err != nil {
			return &kubectlError{err}
		}
		replicas := int32(n)
		switch x := o.(type) {
		case *appsv1.Deployment:
			x.Spec.Replicas = &replicas
		case *appsv1.ReplicaSet:
			x.Spec.Replicas = &replicas
		default:
			return kerrorf("cannot scale %s: kubewalk scales deployments and replicasets", rs.Plural)
		}
		if _, err := r.API.Update(o); err != nil {
			return &kubectlError{err}
		}
		fmt.Fprintf(out, "%s scaled\n", rs.NameOf(name))
	}
	return r.settle()
}

// kubectlLabel is `kubectl label KIND NAME k=v k2-` (--overwrite to
// change a value).
func kubectlLabel(r *Runner, a kubectlArgs, _ string, out io.Writer) error {
	if len(a.pos) < 2 {
		return kerrorf("one or more resources must be specified as <resource> <name> or <resource>/<name>")
	}
	rs, err := kubectl.LookupResource(a.pos[0])
	if err != nil {
		return &kubectlError{err}
	}
	var names []string
	add, remove := map[string]string{}, []string{}
	for _, w := range a.pos[1:] {
		switch {
		case strings.Contains(w, "="):
			k, v, _ := strings.Cut(w, "=")
			add[k] = v
		case strings.HasSuffix(w, "-"):
			remove = append(remove, strings.TrimSuffix(w, "-"))
		default:
			names = append(names, w)
		}
	}
	if len(add) == 0 && len(remove) == 0 {
		return kerrorf("at least one label update is required")
	}
	for _, name := range names {
		o, err := r.API.Get(rs.Kind, a.ns(), name)
		if err != nil {
			return &kubectlError{err}
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		added, removed := false, false
		for _, k := range slices.Sorted(maps.Keys(add)) {
			if cur, ok := labels[k]; ok && !a.overwrite && cur != add[k] {
				return kerrorf("'%s' already has a value (%s), and --overwrite is false", k, cur)
			}
			if labels[k] != add[k] || !hasKey(labels, k) {
				added = true
			}
			labels[k] = add[k]
		}
		for _, k := range remove {
			if _, ok := labels[k]; ok {
				delete(labels, k)
				removed = true
			}
		}
		msg := "not labeled"
		switch {
		case added && removed:
			msg = "modified"
		case added:
			msg = "labeled"
		case removed:
			msg = "unlabeled"
		}
		if added || removed {
			o.SetLabels(labels)
			if _, err := r.API.Update(o); err != nil {
				return &kubectlError{err}
			}
		}
		fmt.Fprintf(out, "%s %s\n", rs.NameOf(name), msg)
	}
	return r.settle()
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// kubectlPatch is `kubectl patch KIND NAME -p PATCH` with a strategic
// merge patch (the default) or a JSON merge patch (--type merge).
func kubectlPatch(r *Runner, a kubectlArgs, _ string, out io.Writer) error {
	if len(a.pos) != 2 {
		return kerrorf("resource(s) were provided, but no name was specified")
	}
	if !a.set["--patch"] {
		return kerrorf("must specify -p to patch")
	}
	rs, err := kubectl.LookupResource(a.pos[0])
	if err != nil {
		return &kubectlError{err}
	}
	o, err := r.API.Get(rs.Kind, a.ns(), a.pos[1])
	if err != nil {
		return &kubectlError{err}
	}
	patch := []byte(a.patch)
	if !json.Valid(patch) {
		if p, err := yamlToJSON(patch); err == nil {
			patch = p
		}
	}
	orig, err := json.Marshal(o)
	if err != nil {
		return err
	}
	var patched []byte
	switch a.patchType {
	case "", "strategic":
		patched, err = strategicMerge(orig, patch, reflect.TypeOf(o))
	case "merge":
		patched, err = mergePatch(orig, patch)
	default:
		return kerrorf("--type %q: kubewalk play patches with strategic (the default) or merge", a.patchType)
	}
	if err != nil {
		return kerrorf("unable to parse %q: %v", a.patch, err)
	}
	n := o.DeepCopyObject().(apiserver.Object)
	if err := json.Unmarshal(patched, n); err != nil {
		return kerrorf("%v", err)
	}
	after, _ := json.Marshal(n)
	if bytes.Equal(normJSON(orig), normJSON(after)) {
		fmt.Fprintf(out, "%s patched (no change)\n", rs.NameOf(a.pos[1]))
		return nil
	}
	if _, err := r.API.Update(n); err != nil {
		return &kubectlError{err}
	}
	fmt.Fprintf(out, "%s patched\n", rs.NameOf(a.pos[1]))
	return r.settle()
}

func normJSON(b []byte) []byte {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	n, _ := json.Marshal(v)
	return n
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var d, p any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	return json.Marshal(mergeValue(d, p))
}

func mergeValue(d, p any) any {
	pm, ok := p.(map[string]any)
	if !ok {
		return p
	}
	dm, ok := d.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(dm, k)
			continue
		}
		dm[k] = mergeValue(dm[k], v)
	}
	return dm
}
