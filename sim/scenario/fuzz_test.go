package scenario

import (
	"errors"
	"testing"
)

// FuzzLoad feeds the loader arbitrary streams: it returns a File or
// Errors, each with a position in the file, and never panics.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(small))
	f.Add([]byte(dump))
	f.Add([]byte(small + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: net}\nspec: {nodeName: w1, containers: [{name: c, ports: [{containerPort: 80}]}]}\n"))
	f.Add([]byte("a: &a [x, x]\nb: [*a, *a]\nc: {<<: {k: v}}\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [1, {kind: Pod}]\n"))
	f.Add([]byte("apiVersion: kubewalk.io/v1alpha1\nkind: Cluster\nnodes: [{name: a, nics: [{network: n, address: 1.2.3.4/8, gateway: 1.1.1.1}], sysctls: {a: b}}]\n"))
	f.Add([]byte("\tfoo: bar\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.yaml", data)
		if err == nil {
			if file == nil {
				t.Fatal("no file and no error")
			}
			return
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error is not a non-empty Errors: %T %v", err, err)
		}
		for _, e := range errs {
			if e.Pos.File != "fuzz.yaml" || e.Pos.Line < 1 || e.Pos.Column < 1 {
				t.Fatalf("error without a position: %q (%+v)", e.Error(), e.Pos)
			}
		}
	})
}
