package apiserver

import (
	"maps"
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
	s.AddIndex("Pod", IndexLabel, podLabelValues)
	s.podLabels = true
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

// podLabelValues is the Pod label index's function: "<namespace>/<key>=<value>"
// per label. addPodLabels adds what it gives without making the strings
// an index already holds.
func podLabelValues(o Object) []string {
	var out []string
	for k, v := range o.GetLabels() {
		out = append(out, o.GetNamespace()+"/"+k+"="+v)
	}
	return out
}

// addPodLabels is indexAdd of the Pod label index (podLabelValues): each
// value is made in a scratch buffer and looked up there, and made a
// string only when the index does not hold it yet: a string and a slice
// fewer for each pod that shares a value with one before it (150,000
// pods share a few hundred). The EndpointSlice controller builds the
// index at its start (BuildIndex), so each pod is added as it is
// written.
func (s *Server) addPodLabels(idx map[string]map[string]struct{}, k string, o Object) {
	ns := o.GetNamespace()
	for lk, lv := range o.GetLabels() {
		b := append(append(append(append(append(s.idxBuf[:0], ns...), '/'), lk...), '='), lv...)
		s.idxBuf = b
		set := idx[string(b)]
		if set == nil {
			set = map[string]struct{}{}
			idx[string(b)] = set
		}
		set[k] = struct{}{}
	}
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
	if kind == "Pod" && name == IndexLabel {
		s.podLabels = false // another function: initIndexes sets it back for its own
	}
}

// add is indexAdd of the named index of kind.
func (s *Server) add(kind, name string, idx map[string]map[string]struct{}, f IndexFunc, k string, o Object) {
	if s.podLabels && name == IndexLabel && kind == "Pod" {
		s.addPodLabels(idx, k, o)
		return
	}
	s.indexAdd(idx, f, k, o)
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
		s.add(kind, name, idx, f, k, o)
	}
	return idx
}

func (s *Server) indexAdd(idx map[string]map[string]struct{}, f IndexFunc, k string, o Object) {
	indexValues(idx, f(o), k)
}

// indexValues adds k under each of values.
func indexValues(idx map[string]map[string]struct{}, values []string, k string) {
	for _, v := range values {
		set := idx[v]
		if set == nil {
			set = map[string]struct{}{}
			idx[v] = set
		}
		set[k] = struct{}{}
	}
}

// reindex moves k from old's index entries to obj's (either may be nil),
// in the indexes built so far. An index under whose values old and obj
// both are (a pod's namespace and node at its kubelet's status write) is
// left as it is: k is in those sets already.
func (s *Server) reindex(kind, k string, old, obj Object) {
	for name, idx := range s.indexes[kind] {
		labels := s.podLabels && name == IndexLabel && kind == "Pod"
		if labels && old != nil && obj != nil &&
			old.GetNamespace() == obj.GetNamespace() && maps.Equal(old.GetLabels(), obj.GetLabels()) {
			// The same values (a status write): nothing moves.
			s.labelsKept++
			continue
		}
		f := s.indexers[kind][name]
		var was []string
		if old != nil {
			was = f(old)
		}
		var now []string
		if obj != nil && !labels {
			now = f(obj)
			if old != nil && slices.Equal(was, now) && !s.moveAll {
				s.valuesKept++
				continue
			}
		}
		for _, v := range was {
			if set := idx[v]; set != nil {
				delete(set, k)
				if len(set) == 0 {
					delete(idx, v)
				}
			}
		}
		switch {
		case obj == nil:
		case labels:
			s.addPodLabels(idx, k, obj)
		default:
			indexValues(idx, now, k)
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

// BuildIndex builds the named index of kind now, if it is not built yet,
// so that it is kept up to date write by write from here on instead of
// being built from every stored object when first looked up: for an
// index that will be asked for once many objects are stored (the Pod
// label index, at the first Service's slices after 150,000 pods), each
// object is indexed while the write has it in cache.
func (s *Server) BuildIndex(kind, name string) { s.index(kind, name) }

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
