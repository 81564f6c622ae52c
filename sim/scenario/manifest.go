package scenario

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"

	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// Object is a decoded manifest: any k8s.io/api type the API server
// serves.
type Object = apiserver.Object

// Manifest is one Kubernetes object of a scenario file.
type Manifest struct {
	// Object is the decoded object (*corev1.Pod, *appsv1.Deployment, ...)
	// with a namespace set ("default" when the manifest has none, as
	// kubectl does) and the fields the API server sets cleared.
	Object Object
	// Pos is where the object starts: its document, or its item of a List.
	Pos Pos
	// Ignored are the fields the manifest gives that kubewalk does not
	// model (IgnoredFields), as the manifest had them.
	Ignored []string
}

// Key names the object: "Pod net/web" or "Namespace net".
func (m *Manifest) Key() string { return objectKey(m.Object) }

func objectKey(o Object) string {
	kind := o.GetObjectKind().GroupVersionKind().Kind
	if o.GetNamespace() == "" {
		return kind + " " + o.GetName()
	}
	return kind + " " + o.GetNamespace() + "/" + o.GetName()
}

// jsonTree converts a YAML node into the values encoding/json produces,
// recording each value's position by its field path ("spec.ports[0].port")
// and by the path without list indices ("spec.ports.port"), which is how
// encoding/json names a field in a type error.
type jsonTree struct {
	d        *nodeDecoder
	pos      map[string]Pos
	stripped map[string]Pos
	keys     map[string]Pos // position of each field's key
}

func newJSONTree(d *nodeDecoder) *jsonTree {
	return &jsonTree{d: d, pos: map[string]Pos{}, stripped: map[string]Pos{}, keys: map[string]Pos{}}
}

func stripIndices(path string) string {
	var b strings.Builder
	skip := false
	for _, r := range path {
		switch {
		case r == '[':
			skip = true
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (j *jsonTree) record(n *yaml.Node, path string) {
	p := j.d.at(n)
	j.pos[path] = p
	if s := stripIndices(path); j.stripped[s] == (Pos{}) {
		j.stripped[s] = p
	}
}

func (j *jsonTree) value(n *yaml.Node, path string) any {
	d := j.d
	if !d.spend(n) {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		if !d.enter(n) {
			return nil
		}
		defer d.leave(n)
		return j.value(n.Alias, path)
	}
	j.record(n, path)
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		j.mapping(n, path, m, map[string]int{})
		return m
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, item := range n.Content {
			s[i] = j.value(item, fmt.Sprintf("%s[%d]", path, i))
		}
		return s
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return j.value(n.Content[0], path)
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			d.errorf(n, "%s: Invalid value: %q: not a boolean", path, n.Value)
		}
		return b
	case "!!int":
		var v any
		if err := n.Decode(&v); err != nil {
			d.errorf(n, "%s: Invalid value: %q: not an integer", path, n.Value)
		}
		if f, ok := v.(float64); ok {
			// Beyond int64: a JSON number all the same.
			return f
		}
		return v
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(n, "%s: Invalid value: %s: not a finite number", path, n.Value)
			return nil
		}
		return f
	}
	return n.Value
}

// mapping adds n's keys to m, following YAML merge keys (<<); keys set
// directly win over merged ones.
func (j *jsonTree) mapping(n *yaml.Node, path string, m map[string]any, seen map[string]int) {
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			j.d.errorf(k, "%s: keys must be strings, got %s", path, describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if line, dup := seen[k.Value]; dup {
			j.d.errorf(k, "mapping key %q already defined at line %d", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		j.keys[join(path, k.Value)] = j.d.at(k)
		m[k.Value] = j.value(v, join(path, k.Value))
	}
	// Merged mappings are counted as aliases are: merging is copying.
	j.d.inAlias++
	defer func() { j.d.inAlias-- }()
	var merge func(v *yaml.Node)
	merge = func(v *yaml.Node) {
		if !j.d.spend(v) {
			return
		}
		switch {
		case v.Kind == yaml.AliasNode:
			if j.d.enter(v) {
				merge(v.Alias)
				j.d.leave(v)
			}
		case v.Kind == yaml.SequenceNode:
			for _, src := range v.Content {
				merge(src)
			}
		case v.Kind == yaml.MappingNode:
			tmp := map[string]any{}
			j.mapping(v, path, tmp, map[string]int{})
			for k, x := range tmp {
				if _, set := m[k]; !set {
					m[k] = x
				}
			}
		default:
			j.d.errorf(v, "%s: map merge requires map or sequence of maps as the value", path)
		}
	}
	for _, v := range merges {
		merge(v)
	}
}

// typeErrorField finds the field path in encoding/json's "cannot
// unmarshal X into Go struct field Pod.spec.containers.name of type T".
var typeErrorField = regexp.MustCompile(`Go struct field [^.\s]+\.(\S+) of type`)

// decodeObject turns one object (a document, or an item of a List) into a
// typed object, reporting problems in the API server's words at the
// position of the field concerned. apiVersion and kind default to
// defVersion and defKind (a typed list's items carry none).
func (j *jsonTree) decodeObject(n *yaml.Node, raw map[string]any, defVersion, defKind string) *Manifest {
	d := j.d
	apiVersion, _ := raw["apiVersion"].(string)
	kind, _ := raw["kind"].(string)
	if apiVersion == "" && kind == "" && defKind != "" {
		apiVersion, kind = defVersion, defKind
		raw["apiVersion"], raw["kind"] = apiVersion, kind
	}
	var missing []string
	if apiVersion == "" {
		missing = append(missing, "apiVersion not set")
	}
	if kind == "" {
		missing = append(missing, "kind not set")
	}
	if len(missing) > 0 {
		d.errorf(n, "error validating data: [%s]", strings.Join(missing, ", "))
		return nil
	}
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	at := n
	served, ok := apiserver.LookupKind(kind)
	obj, err := apiserver.Scheme.New(gvk)
	if err != nil || !ok || served.GV != gvk.GroupVersion() {
		d.errs = append(d.errs, &Error{Pos: j.posOf("kind", at), Msg: fmt.Sprintf("no matches for kind %q in version %q (kubewalk serves %s)", kind, apiVersion, servedKinds())})
		return nil
	}
	typed, ok := obj.(Object)
	if !ok {
		d.errs = append(d.errs, &Error{Pos: j.posOf("kind", at), Msg: fmt.Sprintf("kind %q in version %q is not an object a scenario can hold", kind, apiVersion)})
		return nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		d.errorf(n, "%s in version %q cannot be handled as a %s: %v", kind, gvk.Version, kind, err)
		return nil
	}
	strict, err := sigsjson.UnmarshalStrict(data, typed)
	cannot := fmt.Sprintf("%s in version %q cannot be handled as a %s: ", kind, gvk.Version, kind)
	if err != nil {
		p := j.d.at(n)
		if m := typeErrorField.FindStringSubmatch(err.Error()); m != nil {
			if q, ok := j.stripped[m[1]]; ok {
				p = q
			}
		}
		d.errs = append(d.errs, &Error{Pos: p, Msg: cannot + err.Error()})
		return nil
	}
	if len(strict) > 0 {
		for _, e := range strict {
			p := j.d.at(n)
			if fe, ok := e.(interface{ FieldPath() string }); ok {
				if q, ok := j.keys[fe.FieldPath()]; ok {
					p = q
				}
			}
			d.errs = append(d.errs, &Error{Pos: p, Msg: cannot + "strict decoding error: " + e.Error()})
		}
		return nil
	}
	typed.GetObjectKind().SetGroupVersionKind(gvk)
	if typed.GetName() == "" && typed.GetGenerateName() == "" {
		d.errs = append(d.errs, &Error{Pos: j.posOf("metadata", n), Msg: fmt.Sprintf("%s %q is invalid: metadata.name: Required value: name or generateName is required", kind, "")})
		return nil
	}
	m := &Manifest{Object: typed, Pos: j.d.at(n), Ignored: IgnoredFields(typed)}
	if !served.Namespaced {
		typed.SetNamespace("")
	} else if typed.GetNamespace() == "" {
		typed.SetNamespace(metav1.NamespaceDefault)
	}
	clearServerFields(typed)
	return m
}

// posOf returns the position of path's value, or n's.
func (j *jsonTree) posOf(path string, n *yaml.Node) Pos {
	if p, ok := j.pos[path]; ok {
		return p
	}
	return j.d.at(n)
}

// clearServerFields clears what the API server sets and a user's
// kubectl get -o yaml dump carries (uid, resourceVersion, generation,
// creationTimestamp, managedFields, selfLink, status), so the dump
// creates its objects afresh. A Service keeps status.loadBalancer: the
// address a load balancer implementation gave it, which the scenario
// describes as the cluster has it.
func clearServerFields(o Object) {
	o.SetUID("")
	o.SetResourceVersion("")
	o.SetGeneration(0)
	o.SetCreationTimestamp(metav1.Time{})
	o.SetManagedFields(nil)
	o.SetSelfLink("")
	if svc, ok := o.(*corev1.Service); ok {
		// What a load balancer implementation (MetalLB, a cloud's
		// controller) wrote: the Service's external address.
		lb := svc.Status.LoadBalancer
		svc.Status = corev1.ServiceStatus{LoadBalancer: lb}
		return
	}
	v := reflect.ValueOf(o).Elem()
	if f := v.FieldByName("Status"); f.IsValid() && f.CanSet() {
		f.SetZero()
	}
}

// servedKinds lists the kinds the API server serves, with their
// apiVersion.
func servedKinds() string {
	var s []string
	for _, k := range apiserver.Kinds {
		s = append(s, k.GV.String()+" "+k.Name)
	}
	return strings.Join(s, ", ")
}

// IsList reports whether a document of this kind holds items: kind List
// (kubectl get -o yaml of several objects) or a typed list (PodList).
func isList(kind string, raw map[string]any) bool {
	_, has := raw["items"]
	return has && strings.HasSuffix(kind, "List")
}

// items decodes a List's items, each an object of its own.
func (j *jsonTree) items(n *yaml.Node, raw map[string]any) []*Manifest {
	apiVersion, _ := raw["apiVersion"].(string)
	kind, _ := raw["kind"].(string)
	defKind := ""
	if kind != "List" {
		defKind = strings.TrimSuffix(kind, "List")
	}
	itemsNode := mapValue(n, "items")
	list, ok := raw["items"].([]any)
	if !ok || itemsNode == nil || itemsNode.Kind != yaml.SequenceNode {
		if raw["items"] != nil {
			j.d.errs = append(j.d.errs, &Error{Pos: j.posOf("items", n), Msg: kind + ": items: Invalid value: must be a list"})
		}
		return nil
	}
	var out []*Manifest
	for i, it := range list {
		item := itemsNode.Content[i]
		for item.Kind == yaml.AliasNode {
			item = item.Alias
		}
		obj, ok := it.(map[string]any)
		if !ok {
			j.d.errorf(item, "items[%d]: Invalid value: %s: must be an object", i, describe(item))
			continue
		}
		// Positions inside the item, by the item's own paths.
		// (A second walk of the item, its problems already reported.)
		sub := newJSONTree(&nodeDecoder{file: j.d.file, budget: maxNodes})
		sub.value(item, "")
		sub.d = j.d
		if m := sub.decodeObject(item, obj, apiVersion, defKind); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// mapValue returns the value node of key in mapping n.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// modelled lists, per kind, the fields kubewalk acts on; a path names a
// field and everything below it, "[]" stands for every list item. Fields
// not listed are accepted, stored by the API server and ignored by the
// simulation; IgnoredFields names them.
var modelled = map[string][]string{
	"*":   {"apiVersion", "kind", "metadata.name", "metadata.generateName", "metadata.namespace", "metadata.labels", "metadata.annotations"},
	"Pod": podFields(""),
	"Service": {"status.loadBalancer", "spec.type", "spec.selector", "spec.ports", "spec.clusterIP", "spec.clusterIPs", "spec.externalIPs",
		"spec.sessionAffinity", "spec.sessionAffinityConfig", "spec.externalTrafficPolicy", "spec.internalTrafficPolicy",
		"spec.loadBalancerSourceRanges", "spec.loadBalancerIP", "spec.healthCheckNodePort", "spec.publishNotReadyAddresses"},
	"Deployment":          append(podFields("spec.template."), "spec.replicas", "spec.selector", "spec.template.metadata.labels"),
	"ReplicaSet":          append(podFields("spec.template."), "spec.replicas", "spec.selector", "spec.template.metadata.labels"),
	"DaemonSet":           append(podFields("spec.template."), "spec.selector", "spec.template.metadata.labels"),
	"EndpointSlice":       {"addressType", "endpoints", "ports"},
	"Endpoints":           {"subsets"},
	"ConfigMap":           {"data"},
	"PodDisruptionBudget": {"spec.minAvailable", "spec.maxUnavailable", "spec.selector"},
	"Namespace":           {},
	"Node":                {"spec.podCIDR", "spec.podCIDRs", "spec.taints", "spec.unschedulable"},
}

func podFields(prefix string) []string {
	f := []string{"spec.nodeName", "spec.nodeSelector", "spec.affinity.nodeAffinity", "spec.tolerations", "spec.hostNetwork",
		"spec.containers[].name", "spec.containers[].image", "spec.containers[].ports"}
	for i := range f {
		f[i] = prefix + f[i]
	}
	return f
}

// fieldTree is a compiled modelled list: a leaf accepts everything below.
type fieldTree map[string]fieldTree

func compile(lists ...[]string) fieldTree {
	t := fieldTree{}
	for _, ps := range lists {
		for _, p := range ps {
			segs := strings.Split(strings.ReplaceAll(p, "[]", ".[]"), ".")
			cur := t
			for i, s := range segs {
				next, ok := cur[s]
				if ok && next == nil {
					break // a shorter path already takes everything below
				}
				if i == len(segs)-1 {
					cur[s] = nil
					break
				}
				if !ok {
					next = fieldTree{}
					cur[s] = next
				}
				cur = next
			}
		}
	}
	return t
}

// IgnoredFields returns the field paths obj sets that kubewalk does not
// model ("spec.containers[0].image", "status", "metadata.managedFields"),
// sorted: what kubewalk apply --dry-run lists and a loader warns about.
// Empty values (null, "", 0, false, {} and []) are not reported.
func IgnoredFields(obj runtime.Object) []string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		kind = apiserver.KindOf(obj)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	var raw map[string]any
	if json.Unmarshal(data, &raw) != nil {
		return nil
	}
	// apiVersion and kind may be empty on a Go-built object.
	delete(raw, "apiVersion")
	delete(raw, "kind")
	var out []string
	walkIgnored(raw, compile(modelled["*"], modelled[kind]), "", &out)
	return out
}

func walkIgnored(v any, t fieldTree, path string, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub, ok := t[k]
			switch {
			case isEmpty(x[k]):
			case !ok:
				*out = append(*out, join(path, k))
			case sub != nil:
				walkIgnored(x[k], sub, join(path, k), out)
			}
		}
	case []any:
		sub, ok := t["[]"]
		if !ok {
			if !isEmpty(x) {
				*out = append(*out, path)
			}
			return
		}
		if sub == nil {
			return
		}
		for i, e := range x {
			if !isEmpty(e) {
				walkIgnored(e, sub, path+"["+strconv.Itoa(i)+"]", out)
			}
		}
	}
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case float64:
		return x == 0
	case bool:
		return !x
	case map[string]any:
		for _, e := range x {
			if !isEmpty(e) {
				return false
			}
		}
		return true
	case []any:
		return len(x) == 0
	}
	return false
}
