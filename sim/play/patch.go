package play

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// strategicMerge applies a strategic merge patch (kubectl patch's default
// type) to doc, an object of Go type t: maps merge as in a JSON merge patch
// (null deletes), a list whose field is tagged patchStrategy:"merge" merges
// its items by the patchMergeKey (containers by name, Service ports by
// port) or, for scalars, by value; any other list is replaced. The
// $patch, $retainKeys and $setElementOrder directives are not supported.
func strategicMerge(doc, patch []byte, t reflect.Type) ([]byte, error) {
	var d, p any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	if _, ok := p.(map[string]any); !ok {
		return nil, fmt.Errorf("a strategic merge patch is a JSON object")
	}
	v, err := smpValue(d, p, t)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// fieldByJSON finds the struct field of t serialized as name, looking
// into inlined (embedded) structs.
func fieldByJSON(t reflect.Type, name string) (reflect.StructField, bool) {
	t = deref(t)
	if t == nil || t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		n, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && (n == "" || strings.Contains(opts, "inline")) {
			if g, ok := fieldByJSON(f.Type, name); ok {
				return g, true
			}
			continue
		}
		if n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func smpValue(d, p any, t reflect.Type) (any, error) {
	pm, ok := p.(map[string]any)
	if !ok {
		return p, nil
	}
	dm, ok := d.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	t = deref(t)
	for k, pv := range pm {
		if strings.HasPrefix(k, "$") {
			return nil, fmt.Errorf("the %s directive is not supported by kubewalk", k)
		}
		if pv == nil {
			delete(dm, k)
			continue
		}
		var ft reflect.Type
		var f reflect.StructField
		found := false
		if t != nil && t.Kind() == reflect.Struct {
			f, found = fieldByJSON(t, k)
			ft = f.Type
		} else if t != nil && t.Kind() == reflect.Map {
			ft = t.Elem()
		}
		pl, isList := pv.([]any)
		if found && isList && strings.Contains(f.Tag.Get("patchStrategy"), "merge") {
			dl, _ := dm[k].([]any)
			merged, err := mergeList(dl, pl, deref(ft).Elem(), f.Tag.Get("patchMergeKey"))
			if err != nil {
				return nil, err
			}
			dm[k] = merged
			continue
		}
		v, err := smpValue(dm[k], pv, ft)
		if err != nil {
			return nil, err
		}
		dm[k] = v
	}
	return dm, nil
}

func mergeList(d, p []any, elem reflect.Type, key string) ([]any, error) {
	out := append([]any(nil), d...)
	for _, pi := range p {
		if key == "" {
			dup := false
			for _, x := range out {
				dup = dup || reflect.DeepEqual(x, pi)
			}
			if !dup {
				out = append(out, pi)
			}
			continue
		}
		pm, ok := pi.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("list items merged by %q must be objects", key)
		}
		i := -1
		for j, x := range out {
			if xm, ok := x.(map[string]any); ok && reflect.DeepEqual(xm[key], pm[key]) {
				i = j
				break
			}
		}
		if i < 0 {
			out = append(out, pi)
			continue
		}
		v, err := smpValue(out[i], pi, elem)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
