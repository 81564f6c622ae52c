package play

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// applied is one object of an apply and what became of it.
type applied struct {
	kind, namespace, name string
	result                apiserver.ApplyResult
}

// applyObjects applies objs atomically through the cluster, as `kubectl
// apply` of one file does in kubewalk: every object or none.
func (r *Runner) applyObjects(objs []apiserver.Object) ([]applied, error) {
	in := make([]runtime.Object, len(objs))
	for i, o := range objs {
		in[i] = o
	}
	res, err := r.Cluster.ApplyObjects(in...)
	if err != nil {
		return nil, err
	}
	out := make([]applied, len(res))
	for i, x := range res {
		out[i] = applied{x.Kind, x.Namespace, x.Name, x.Result}
	}
	return out, nil
}

func (r *Runner) delete(kind, ns, name string) error { return r.Cluster.Delete(kind, ns, name) }
