package kubectl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// GetOptions are the flags of `kubectl get`.
type GetOptions struct {
	// Namespace is -n; "" means "default".
	Namespace string
	// AllNamespaces is -A.
	AllNamespaces bool
	// Output is -o: "" (the table), "wide", "yaml", "json" or "name".
	Output string
	// Selector is -l: a label selector ("app=web", "tier in (a,b)").
	Selector string
}

// UsageError is bad command-line input, printed by kubectl as "error: ..."
// with exit status 1.
type UsageError struct{ Msg string }

// Error implements the error interface.
func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// Get runs `kubectl get RESOURCE[,RESOURCE...] [NAME...]` against l: the
// tables or the objects on out, and on errOut what kubectl writes on
// stderr that is not an error ("No resources found in default
// namespace."). Several resources print one table each, separated by a
// blank line, with kind-qualified names ("deployment.apps/web"), as kubectl
// does. An object not found does not stop the others; every failure is
// returned (errors.Join) for the caller to print with ErrorText.
func Get(l Lister, args []string, opts GetOptions, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usagef("you must specify the type of resource to get. Use \"kubectl api-resources\" for a complete list of supported resources.")
	}
	switch opts.Output {
	case "", "wide", "yaml", "json", "name":
	default:
		return usagef("unable to match a printer suitable for the output format %q, allowed formats are: json,name,wide,yaml", opts.Output)
	}
	var rs []*Resource
	for _, name := range strings.Split(args[0], ",") {
		r, err := LookupResource(name)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "default"
	}
	names := args[1:]
	if len(names) > 0 && opts.AllNamespaces {
		return usagef("a resource cannot be retrieved by name across all namespaces")
	}
	if len(names) > 0 && opts.Selector != "" {
		return usagef("selectors and the all flag cannot be used when passing resource/name arguments")
	}
	sel, err := labels.Parse(opts.Selector)
	if err != nil {
		return usagef("%s", err)
	}
	type found struct {
		r    *Resource
		objs []Object
	}
	var all []found
	var errs []error
	total := 0
	for _, r := range rs {
		listNS := ns
		if !r.Namespaced || opts.AllNamespaces && len(names) == 0 {
			listNS = ""
		}
		var objs []Object
		if len(names) == 0 {
			for _, o := range l.List(r.Kind, listNS) {
				if sel.Matches(labels.Set(o.GetLabels())) {
					objs = append(objs, o)
				}
			}
		}
		for _, n := range names {
			o, err := l.Get(r.Kind, listNS, n)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			objs = append(objs, o)
		}
		all = append(all, found{r, objs})
		total += len(objs)
	}

	var buf bytes.Buffer
	switch opts.Output {
	case "", "wide":
		if total == 0 && len(names) == 0 {
			if (len(rs) > 1 || rs[0].Namespaced) && !opts.AllNamespaces {
				fmt.Fprintf(errOut, "No resources found in %s namespace.\n", ns)
			} else {
				fmt.Fprintln(errOut, "No resources found")
			}
		}
		first := true
		for _, f := range all {
			if len(f.objs) == 0 {
				continue
			}
			if !first {
				buf.WriteString("\n")
			}
			first = false
			if err := printTable(&buf, f.r, f.objs, l.Now(), opts.Output == "wide", opts.AllNamespaces, len(rs) > 1); err != nil {
				return err
			}
		}
	case "name":
		for _, f := range all {
			for _, o := range f.objs {
				fmt.Fprintln(&buf, f.r.NameOf(o.GetName()))
			}
		}
	case "yaml", "json":
		var items []typed
		for _, f := range all {
			for _, o := range f.objs {
				items = append(items, typed{f.r, o})
			}
		}
		if err := printObjects(&buf, items, len(rs) == 1 && len(names) == 1, opts.Output); err != nil {
			return err
		}
	}
	out.Write(buf.Bytes())
	return errors.Join(errs...)
}

// typed is an object with its resource.
type typed struct {
	r *Resource
	o Object
}

// toMap is the object as the API server serves it: apiVersion and kind
// set, managedFields dropped (kubectl hides them unless
// --show-managed-fields).
func toMap(r *Resource, o Object) (map[string]any, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	m["apiVersion"] = r.GroupVersionKind().GroupVersion().String()
	m["kind"] = r.Kind
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	return m, nil
}

// printObjects writes -o yaml or -o json: one object when one was asked
// for by name, else a v1 List. Keys are sorted, as kubectl prints the
// unstructured objects it gets from the server; JSON is indented by four
// spaces.
func printObjects(w io.Writer, objs []typed, single bool, format string) error {
	var v any
	if single && len(objs) == 1 {
		m, err := toMap(objs[0].r, objs[0].o)
		if err != nil {
			return err
		}
		v = m
	} else if single {
		return nil
	} else {
		items := make([]any, 0, len(objs))
		for _, o := range objs {
			m, err := toMap(o.r, o.o)
			if err != nil {
				return err
			}
			items = append(items, m)
		}
		v = map[string]any{
			"apiVersion": "v1",
			"kind":       "List",
			"items":      items,
			"metadata":   map[string]any{"resourceVersion": ""},
		}
	}
	if format == "json" {
		data, err := json.MarshalIndent(v, "", "    ")
		if err != nil {
			return err
		}
		w.Write(append(data, '\n'))
		return nil
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	w.Write(data)
	return nil
}

// ErrorText is what kubectl prints on stderr for err, one line per error:
// "Error from server (NotFound): pods \"x\" not found" for an API status,
// "The Service \"web\" is invalid: spec.ports[0].nodePort: ..." for an
// invalid object, "error: ..." for anything else.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var b strings.Builder
		for _, e := range j.Unwrap() {
			b.WriteString(ErrorText(e))
		}
		return b.String()
	}
	var st apiStatus
	if errors.As(err, &st) {
		return statusText(st)
	}
	return "error: " + err.Error() + "\n"
}
