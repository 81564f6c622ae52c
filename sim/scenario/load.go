package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// File is a parsed scenario: its Cluster document (defaulted and
// validated) and its manifests in file order.
type File struct {
	// Cluster is the kubewalk.io/v1alpha1 Cluster document, nil when the
	// stream has none (a file of manifests only, given with another -f).
	Cluster *Cluster
	// ClusterPos is where the Cluster document starts.
	ClusterPos Pos
	// Manifests are the Kubernetes objects, a List's items in their
	// place.
	Manifests []Manifest
}

// Objects returns the manifests' objects in file order, for
// sim.Cluster.Apply.
func (f *File) Objects() []Object {
	out := make([]Object, len(f.Manifests))
	for i := range f.Manifests {
		out[i] = f.Manifests[i].Object
	}
	return out
}

// syntaxLine finds the line in yaml.v3's "yaml: line 3: message".
var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError positions a YAML syntax error. yaml.v3 reports the line
// only; the column is that of the line's first non-blank character.
func syntaxError(name string, data []byte, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := syntaxLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	col := 1
	if line > 0 {
		lines := bytes.Split(data, []byte("\n"))
		if line <= len(lines) {
			l := lines[line-1]
			col = len(l) - len(bytes.TrimLeft(l, " \t")) + 1
		}
	} else {
		line = 1
	}
	return &Error{Pos: Pos{File: name, Line: line, Column: col}, Msg: "yaml: " + msg}
}

// Parse reads a scenario stream. name is the file name positions are
// reported with ("-" for stdin). Every problem is reported at once as
// Errors; nothing of a file with a problem is returned.
func Parse(name string, data []byte) (*File, error) {
	d := &nodeDecoder{file: name, pos: map[string]Pos{}, budget: maxNodes}
	f := &File{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.errs = append(d.errs, syntaxError(name, data, err))
			break
		}
		d.budget = maxNodes
		parseDocument(d, f, &doc)
	}
	if len(d.errs) == 0 {
		d.errs = duplicates(f.Manifests, nil)
	}
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return f, nil
}

func parseDocument(d *nodeDecoder, f *File, doc *yaml.Node) {
	if len(doc.Content) == 0 {
		return // only comments, or an empty document between ---
	}
	root := doc.Content[0]
	for root.Kind == yaml.AliasNode {
		root = root.Alias
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root, "a document must be a mapping (an object), not %s", describe(root))
		return
	}
	apiVersion, kind := mapValue(root, "apiVersion"), mapValue(root, "kind")
	if apiVersion != nil && schema.FromAPIVersionAndKind(apiVersion.Value, "").Group == "kubewalk.io" {
		if apiVersion.Value != APIVersion || kind == nil || kind.Value != ClusterKind {
			k := ""
			at := root
			if kind != nil {
				k, at = kind.Value, kind
			}
			d.errorf(at, "no matches for kind %q in version %q", k, apiVersion.Value)
			return
		}
		if f.Cluster != nil {
			d.errorf(root, "a second %s document (the first is at %s); a scenario has one", ClusterKind, f.ClusterPos)
			return
		}
		c, pos, errs := decodeCluster(d.file, root)
		if len(errs) > 0 {
			d.errs = append(d.errs, errs...)
			return
		}
		SetDefaults(c)
		if errs := Validate(c, d.file, pos); len(errs) > 0 {
			d.errs = append(d.errs, errs...)
			return
		}
		f.Cluster, f.ClusterPos = c, d.at(root)
		return
	}
	j := newJSONTree(d)
	raw, _ := j.value(root, "").(map[string]any)
	if raw == nil {
		return
	}
	k, _ := raw["kind"].(string)
	if isList(k, raw) {
		for _, m := range j.items(root, raw) {
			f.Manifests = append(f.Manifests, *m)
		}
		return
	}
	if m := j.decodeObject(root, raw, "", ""); m != nil {
		f.Manifests = append(f.Manifests, *m)
	}
}

// duplicates reports objects defined twice (the same kind, namespace and
// name), which kubectl apply would silently apply twice, the second
// winning. seen carries definitions from earlier files.
func duplicates(ms []Manifest, seen map[string]Pos) Errors {
	if seen == nil {
		seen = map[string]Pos{}
	}
	var errs Errors
	for _, m := range ms {
		if m.Object.GetName() == "" {
			continue // generateName: the API server picks a fresh name
		}
		gk := m.Object.GetObjectKind().GroupVersionKind().GroupKind().String()
		key := gk + "/" + m.Object.GetNamespace() + "/" + m.Object.GetName()
		if first, dup := seen[key]; dup {
			where := ""
			if ns := m.Object.GetNamespace(); ns != "" {
				where = fmt.Sprintf(" in namespace %q", ns)
			}
			errs = append(errs, &Error{Pos: m.Pos, Msg: fmt.Sprintf("%s %q%s is defined twice (first at %s)",
				m.Object.GetObjectKind().GroupVersionKind().Kind, m.Object.GetName(), where, first)})
			continue
		}
		seen[key] = m.Pos
	}
	return errs
}

// Concat joins several files (kubewalk -f a.yaml -f b.yaml) into one
// scenario: at most one of them may hold the Cluster document, and no
// object may be defined twice across them.
func Concat(files ...*File) (*File, error) {
	out := &File{}
	var errs Errors
	for _, f := range files {
		if f.Cluster != nil {
			if out.Cluster != nil {
				errs = append(errs, &Error{Pos: f.ClusterPos, Msg: fmt.Sprintf("a second %s document (the first is at %s); a scenario has one", ClusterKind, out.ClusterPos)})
			} else {
				out.Cluster, out.ClusterPos = f.Cluster, f.ClusterPos
			}
		}
		out.Manifests = append(out.Manifests, f.Manifests...)
	}
	errs = append(errs, duplicates(out.Manifests, nil)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}
