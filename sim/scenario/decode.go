package scenario

import (
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Pos is a position in a scenario file: 1-based line and column.
type Pos struct {
	File         string
	Line, Column int
}

// String formats p as file:line:column, the form compilers and editors
// jump to.
func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Error is one problem in a scenario file, at the position of the
// document, field or value it is about.
type Error struct {
	Pos Pos
	Msg string
}

// Error implements the error interface: "file:line:column: message".
func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// Errors is every problem found in a file, in file order. Loading reports
// them all at once instead of stopping at the first, as kind's validation
// does.
type Errors []*Error

// Error implements the error interface: one problem per line.
func (e Errors) Error() string {
	s := make([]string, len(e))
	for i, x := range e {
		s[i] = x.Error()
	}
	return strings.Join(s, "\n")
}

// maxNodes bounds the YAML nodes one document may reach through aliases
// (a "billion laughs" document is rejected, not expanded); nodes written
// out are not counted.
const maxNodes = 100_000

// nodeDecoder reads a YAML node tree into a Go value strictly: an unknown
// key, a duplicate key or a value of the wrong shape is an error with the
// position of the key or value; every error is gathered. It records the
// position of every value by its field path ("nodes[1].nics[0].address")
// for later validation messages.
type nodeDecoder struct {
	file    string
	errs    Errors
	pos     map[string]Pos
	budget  int
	inAlias int                 // > 0 while inside an alias's expansion
	active  map[*yaml.Node]bool // anchors being expanded, to catch cycles
}

// enter starts expanding alias n, reporting false (with yaml.v3's error)
// when n's anchor contains n itself.
func (d *nodeDecoder) enter(n *yaml.Node) bool {
	if d.active == nil {
		d.active = map[*yaml.Node]bool{}
	}
	if d.active[n.Alias] {
		d.errorf(n, "anchor '%s' value contains itself", n.Value)
		return false
	}
	d.active[n.Alias] = true
	d.inAlias++
	return true
}

func (d *nodeDecoder) leave(n *yaml.Node) {
	delete(d.active, n.Alias)
	d.inAlias--
}

// spend charges one node reached through an alias against the budget,
// reporting false (once with an error) when it is exhausted.
func (d *nodeDecoder) spend(n *yaml.Node) bool {
	if d.inAlias == 0 {
		return true
	}
	if d.budget--; d.budget < 0 {
		if d.budget == -1 {
			d.errorf(n, "document too large (more than %d YAML nodes after expanding aliases)", maxNodes)
		}
		return false
	}
	return true
}

func (d *nodeDecoder) at(n *yaml.Node) Pos { return Pos{File: d.file, Line: n.Line, Column: n.Column} }

func (d *nodeDecoder) errorf(n *yaml.Node, format string, a ...any) {
	d.errs = append(d.errs, &Error{Pos: d.at(n), Msg: fmt.Sprintf(format, a...)})
}

// enumValues lists the values each enum type accepts; "" (unset, to be
// defaulted) is always accepted.
var enumValues = map[reflect.Type][]string{
	reflect.TypeFor[NodeRole]():     {string(ControlPlaneRole), string(WorkerRole)},
	reflect.TypeFor[ServiceState](): {string(Running), string(Stopped)},
	reflect.TypeFor[CNI]():          {string(Flannel), string(NoCNI)},
	reflect.TypeFor[ProxyMode]():    {string(IPTablesProxyMode), string(NFTablesProxyMode), string(IPVSProxyMode)},
	reflect.TypeFor[Addons]():       {string(KubeadmAddons), string(NoAddons)},
}

var (
	addrType   = reflect.TypeFor[netip.Addr]()
	prefixType = reflect.TypeFor[netip.Prefix]()
)

// yamlName is a struct field's key: its yaml tag, or "" for an inline or
// untagged field.
func yamlName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	return name, opts == "inline"
}

// fields maps the keys of struct type t (with inline structs flattened) to
// field index paths.
func fields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := yamlName(f)
		if inline {
			for k, idx := range fields(f.Type) {
				out[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name != "" && name != "-" {
			out[name] = []int{i}
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// decode reads n into v (addressable) at field path path.
func (d *nodeDecoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if !d.spend(n) {
		return
	}
	if n.Kind == yaml.AliasNode {
		if d.enter(n) {
			d.decode(n.Alias, v, path)
			d.leave(n)
		}
		return
	}
	d.pos[path] = d.at(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // unset: keep the zero value, to be defaulted
	}
	t := v.Type()
	switch {
	case t == addrType:
		if !d.scalar(n, path, "an IP address") {
			return
		}
		a, err := netip.ParseAddr(n.Value)
		if err != nil {
			d.errorf(n, "%s: Invalid value: %q: must be a valid IP address, (e.g. 10.9.8.7)", path, n.Value)
			return
		}
		v.Set(reflect.ValueOf(a))
		return
	case t == prefixType:
		if !d.scalar(n, path, "a CIDR") {
			return
		}
		p, err := netip.ParsePrefix(n.Value)
		if err != nil {
			d.errorf(n, "%s: Invalid value: %q: must be a valid CIDR value, (e.g. 10.9.8.0/24)", path, n.Value)
			return
		}
		v.Set(reflect.ValueOf(p))
		return
	}
	switch t.Kind() {
	case reflect.String:
		if !d.scalar(n, path, "a string") {
			return
		}
		if vals, ok := enumValues[t]; ok && n.Value != "" && !contains(vals, n.Value) {
			d.errorf(n, "%s: Unsupported value: %q: supported values: %s", path, n.Value, quoteAll(vals))
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		if !d.scalar(n, path, "an integer") {
			return
		}
		i, err := strconv.ParseInt(n.Value, 0, 64)
		if err != nil || n.ShortTag() != "!!int" {
			d.errorf(n, "%s: Invalid value: %s: must be an integer", path, describe(n))
			return
		}
		v.SetInt(i)
	case reflect.Uint64:
		if !d.scalar(n, path, "an integer") {
			return
		}
		u, err := strconv.ParseUint(n.Value, 0, 64)
		if err != nil || n.ShortTag() != "!!int" {
			d.errorf(n, "%s: Invalid value: %s: must be a non-negative integer", path, describe(n))
			return
		}
		v.SetUint(u)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, "%s: Invalid value: %s: must be a list", path, describe(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.errorf(n, "%s: Invalid value: %s: must be a mapping", path, describe(n))
			return
		}
		m := reflect.MakeMap(t)
		d.pairs(n, path, func(k, val *yaml.Node) {
			e := reflect.New(t.Elem()).Elem()
			d.decode(val, e, join(path, k.Value))
			m.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), e)
		})
		v.Set(m)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.errorf(n, "%s: Invalid value: %s: must be a mapping", path, describe(n))
			return
		}
		fs := fields(t)
		d.pairs(n, path, func(k, val *yaml.Node) {
			idx, ok := fs[k.Value]
			if !ok {
				d.errorf(k, "unknown field %q", join(path, k.Value))
				return
			}
			d.decode(val, v.FieldByIndex(idx), join(path, k.Value))
		})
	default:
		panic("scenario: no decoder for " + t.String())
	}
}

// scalar reports whether n is a scalar, recording an error if not.
func (d *nodeDecoder) scalar(n *yaml.Node, path, want string) bool {
	if n.Kind == yaml.ScalarNode {
		return true
	}
	d.errorf(n, "%s: Invalid value: %s: must be %s", path, describe(n), want)
	return false
}

// pairs calls fn for each key/value of mapping n, rejecting non-scalar
// and duplicate keys with yaml.v3's words.
func (d *nodeDecoder) pairs(n *yaml.Node, path string, fn func(k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: keys must be strings, got %s", path, describe(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.errorf(k, "mapping key %q already defined at line %d", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		fn(k, v)
	}
}

func contains(vals []string, s string) bool {
	for _, v := range vals {
		if v == s {
			return true
		}
	}
	return false
}

func quoteAll(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// decodeCluster reads the Cluster document strictly.
func decodeCluster(file string, doc *yaml.Node) (*Cluster, map[string]Pos, Errors) {
	d := &nodeDecoder{file: file, pos: map[string]Pos{}, budget: maxNodes}
	c := &Cluster{}
	d.decode(doc, reflect.ValueOf(c).Elem(), "")
	return c, d.pos, d.errs
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}
