package kubectl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

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
}

// UsageError is bad command-line input, printed by kubectl as "error: ..."
// with exit status 1.
type UsageError struct{ Msg string }

// Error implements the error interface.
func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// Get runs `kubectl get RESOURCE [NAME...]` against l: the table or the
// objects on out, and on errOut what kubectl writes on stderr that is not
// an error ("No resources found in default namespace."). An object not
// found does not stop the others; every failure is returned (errors.Join)
// for the caller to print with ErrorText.
func Get(l Lister, args []string, opts GetOptions, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usagef("you must specify the type of resource to get. Use \"kubectl api-resources\" for a complete list of supported resources.")
	}
	switch opts.Output {
	case "", "wide", "yaml", "json", "name":
	default:
		return usagef("unable to match a printer suitable for the output format %q, allowed formats are: json,name,wide,yaml", opts.Output)
	}
	r, err := LookupResource(args[0])
	if err != nil {
		return err
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "default"
	}
	names := args[1:]
	if len(names) > 0 && opts.AllNamespaces {
		return usagef("a resource cannot be retrieved by name across all namespaces")
	}
	listNS := ns
	if !r.Namespaced {
		listNS = ""
	}
	var objs []Object
	var errs []error
	if len(names) == 0 {
		if opts.AllNamespaces {
			listNS = ""
		}
		objs = l.List(r.Kind, listNS)
	} else {
		for _, n := range names {
			o, err := l.Get(r.Kind, listNS, n)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			objs = append(objs, o)
		}
	}

	var buf bytes.Buffer
	switch opts.Output {
	case "", "wide":
		if len(objs) == 0 && len(names) == 0 {
			if r.Namespaced && !opts.AllNamespaces {
				fmt.Fprintf(errOut, "No resources found in %s namespace.\n", ns)
			} else {
				fmt.Fprintln(errOut, "No resources found")
			}
		}
		err = PrintTable(&buf, r, objs, l.Now(), opts.Output == "wide", opts.AllNamespaces)
	case "name":
		for _, o := range objs {
			fmt.Fprintln(&buf, r.NameOf(o.GetName()))
		}
	case "yaml", "json":
		err = printObjects(&buf, r, objs, len(names) == 1, opts.Output)
	}
	if err != nil {
		return err
	}
	out.Write(buf.Bytes())
	return errors.Join(errs...)
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
func printObjects(w io.Writer, r *Resource, objs []Object, single bool, format string) error {
	var v any
	if single && len(objs) == 1 {
		m, err := toMap(r, objs[0])
		if err != nil {
			return err
		}
		v = m
	} else if single {
		return nil
	} else {
		items := make([]any, 0, len(objs))
		for _, o := range objs {
			m, err := toMap(r, o)
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
