package apiserver

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// IndexFunc maps an object to the index values it is found under, as a
// client-go cache indexer does.
type IndexFunc func(Object) []string

// The indexes the controllers use. Lookups through them cost what the
// answer costs, not what the store holds, so a cluster of 150,000 pods
// schedules and computes slices without scanning every pod.
const (
	IndexNamespace = "namespace"  // every namespaced kind: metadata.namespace
	IndexNode      = "node"       // Pod: spec.nodeName
	IndexLabel     = "label"      // Pod: "<namespace>/<key>=<value>" per label
	IndexService   = "service"    // EndpointSlice: "<namespace>/<kubernetes.io/service-name>"
	IndexOwner     = "controller" // Pod, ReplicaSet: "<namespace>/<kind>/<name>" of the controller
	IndexInvolved  = "involved"   // Event: "<kind>/<namespace>/<name>" of the involved object
	IndexClusterIP = "clusterIP"  // Service: spec.clusterIP
	IndexNodePort  = "nodePort"   // Service: "<PROTOCOL>/<nodePort>" per port with one
)

func (s *Server) initIndexes() {
	s.indexers = map[string]map[string]IndexFunc{}
	s.indexes = map[string]map[string]map[string]map[string]struct{}{}
	for _, k := range Kinds {
		if k.Namespaced {
			s.AddIndex(k.Name, IndexNamespace, func(o Object) []string { return []string{o.GetNamespace()} })
		}
	}
	s.AddIndex("Pod", IndexNode, func(o Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	})
	s.AddIndex("Pod", IndexLabel, func(o Object) []string {
		var out []string
		for k, v := range o.GetLabels() {
			out = append(out, o.GetNamespace()+"/"+k+"="+v)
		}
		return out
	})
	owner := func(o Object) []string {
		for _, r := range o.GetOwnerReferences() {
			if r.Controller != nil && *r.Controller {
				return []string{o.GetNamespace() + "/" + r.Kind + "/" + r.Name}
			}
		}
		return nil
	}
	s.AddIndex("Pod", IndexOwner, owner)
	s.AddIndex("ReplicaSet", IndexOwner, owner)
	s.AddIndex("EndpointSlice", IndexService, func(o Object) []string {
		if n, ok := o.GetLabels()[discoveryv1.LabelServiceName]; ok {
			return []string{o.GetNamespace() + "/" + n}
		}
		return nil
	})
	s.AddIndex("Service", IndexClusterIP, func(o Object) []string {
		if ip := o.(*corev1.Service).Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
			return []string{ip}
		}
		return nil
	})
	s.AddIndex("Service", IndexNodePort, func(o Object) []string {
		var out []string
		for _, p := range o.(*corev1.Service).Spec.Ports {
			if p.NodePort != 0 {
				out = append(out, string(p.Protocol)+"/"+strconv.Itoa(int(p.NodePort)))
			}
		}
		return out
	})
	s.AddIndex("Event", IndexInvolved, func(o Object) []string {
		r := o.(*corev1.Event).InvolvedObject
		return []string{r.Kind + "/" + r.Namespace + "/" + r.Name}
	})
}

// AddIndex registers an index on kind. It is built from the objects
// stored when it is first looked up, and kept up to date by every write
// from then on: an index nobody asks for (the Events' by namespace, at
// 450,000 Events) costs nothing.
func (s *Server) AddIndex(kind, name string, f IndexFunc) {
	if s.indexers[kind] == nil {
		s.indexers[kind] = map[string]IndexFunc{}
		s.indexes[kind] = map[string]map[string]map[string]struct{}{}
	}
	s.indexers[kind][name] = f
	delete(s.indexes[kind], name)
}

// index returns the named index of kind, building it on first use (nil
// when there is no such index).
func (s *Server) index(kind, name string) map[string]map[string]struct{} {
	if idx, ok := s.indexes[kind][name]; ok {
		return idx
	}
	f := s.indexers[kind][name]
	if f == nil {
		return nil
	}
	idx := map[string]map[string]struct{}{}
	s.indexes[kind][name] = idx
	for k, o := range s.objsOf(kind) {
		s.indexAdd(idx, f, k, o)
	}
	return idx
}

func (s *Server) indexAdd(idx map[string]map[string]struct{}, f IndexFunc, k string, o Object) {
	for _, v := range f(o) {
		set := idx[v]
		if set == nil {
			set = map[string]struct{}{}
			idx[v] = set
		}
		set[k] = struct{}{}
	}
}

// reindex moves k from old's index entries to obj's (either may be nil),
// in the indexes built so far.
func (s *Server) reindex(kind, k string, old, obj Object) {
	for name, idx := range s.indexes[kind] {
		f := s.indexers[kind][name]
		if old != nil {
			for _, v := range f(old) {
				if set := idx[v]; set != nil {
					delete(set, k)
					if len(set) == 0 {
						delete(idx, v)
					}
				}
			}
		}
		if obj != nil {
			s.indexAdd(idx, f, k, obj)
		}
	}
}

// ByIndex returns copies of the objects of kind found under value in the
// named index, sorted by namespace, then name.
func (s *Server) ByIndex(kind, index, value string) []Object {
	return s.ByIndexFunc(kind, index, value, nil)
}

// ByIndexFunc is ByIndex keeping only the objects keep accepts (keep sees
// the stored object and must not modify it; nil keeps all).
func (s *Server) ByIndexFunc(kind, index, value string, keep func(Object) bool) []Object {
	out := s.PeekByIndexFunc(kind, index, value, keep)
	for i, o := range out {
		out[i] = o.DeepCopyObject().(Object)
	}
	return out
}

// PeekByIndexFunc is ByIndexFunc returning the stored objects themselves,
// as Peek does, for a caller that only reads them (a controller listing
// from its informer's cache): they must not be modified.
func (s *Server) PeekByIndexFunc(kind, index, value string, keep func(Object) bool) []Object {
	set := s.index(kind, index)[value]
	keys := make([]string, 0, len(set))
	m := s.objsOf(kind)
	for k := range set {
		if keep == nil || keep(m[k]) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]Object, len(keys))
	for i, k := range keys {
		out[i] = m[k]
		if s.copyAll {
			out[i] = out[i].DeepCopyObject().(Object)
		}
	}
	return out
}

// CountByIndex is the number of objects of kind under value in index.
func (s *Server) CountByIndex(kind, index, value string) int {
	return len(s.index(kind, index)[value])
}

// first returns the stored object under value in index, if any (the
// lowest key, for a deterministic answer).
func (s *Server) first(kind, index, value string) Object {
	set := s.index(kind, index)[value]
	best := ""
	for k := range set {
		if best == "" || k < best {
			best = k
		}
	}
	if best == "" {
		return nil
	}
	return s.objsOf(kind)[best]
}
