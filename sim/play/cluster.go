package play

import (
	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// applied is one object of an apply and what became of it.
type applied struct {
	kind, namespace, name string
	result                apiserver.ApplyResult
}

// applyObjects applies objs atomically, as `kubectl apply` of one file
// does in kubewalk: every object or none.
func (r *Runner) applyObjects(objs []apiserver.Object) ([]applied, error) {
	r.API.Begin()
	var out []applied
	for _, o := range objs {
		stored, res, err := r.API.Apply(o)
		if err != nil {
			r.API.Abort()
			return nil, err
		}
		out = append(out, applied{apiserver.KindOf(o), stored.GetNamespace(), stored.GetName(), res})
	}
	r.API.Commit()
	return out, nil
}

func (r *Runner) delete(kind, ns, name string) error { return r.API.Delete(kind, ns, name) }
