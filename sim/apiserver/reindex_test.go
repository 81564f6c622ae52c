package apiserver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scanIndex is what the named index of kind must hold: every stored
// object's key under each of its values, by a scan of the store.
func scanIndex(s *Server, kind, name string) map[string][]string {
	out := map[string][]string{}
	f := s.indexers[kind][name]
	for k, o := range s.objs[kind] {
		for _, v := range f(o) {
			out[v] = append(out[v], k)
		}
	}
	for _, keys := range out {
		slices.Sort(keys)
	}
	return out
}

// held is the index's content, keys sorted.
func held(idx map[string]map[string]struct{}) map[string][]string {
	out := map[string][]string{}
	for v, set := range idx {
		for k := range set {
			out[v] = append(out[v], k)
		}
		slices.Sort(out[v])
	}
	return out
}

// The Pod indexes, kept write by write while writes leave some of them
// alone (a status write: the same namespace, node, labels and owner),
// hold at every point what a scan of the store finds, through creates,
// binds, relabels, owner changes, status writes, graceful and immediate
// deletes.
func TestReindexLeavesUnchangedValuesAlone(t *testing.T) {
	s := newServer(t)
	for _, idx := range []string{IndexNamespace, IndexNode, IndexLabel, IndexOwner} {
		s.BuildIndex("Pod", idx)
	}
	for _, ns := range []string{"a", "b"} {
		_, err := s.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		require.NoError(t, err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	yes := true
	name := func() (string, string) {
		return []string{"a", "b"}[rng.IntN(2)], fmt.Sprintf("p%d", rng.IntN(12))
	}
	for step := range 400 {
		ns, n := name()
		o, _ := s.Peek("Pod", ns, n)
		switch op := rng.IntN(6); {
		case o == nil:
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n, Labels: map[string]string{"g": fmt.Sprint(rng.IntN(3))}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
			if rng.IntN(2) == 0 {
				p.Spec.NodeName = fmt.Sprintf("n%d", rng.IntN(3))
			}
			require.NoError(t, s.Submit(p))
		case op == 0: // the kubelet's status write
			p := o.(*corev1.Pod).DeepCopy()
			p.Status.Phase = []corev1.PodPhase{corev1.PodRunning, corev1.PodPending}[rng.IntN(2)]
			p.Status.PodIP = fmt.Sprintf("10.0.0.%d", step)
			require.NoError(t, s.WriteStatus(p))
		case op == 1: // relabel
			p := o.(*corev1.Pod).DeepCopy()
			p.Labels = map[string]string{"g": fmt.Sprint(rng.IntN(3)), "h": "x"}
			_, err := s.Update(p)
			require.NoError(t, err)
		case op == 2: // a controller owns it, or not
			p := o.(*corev1.Pod).DeepCopy()
			p.OwnerReferences = nil
			if rng.IntN(2) == 0 {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprintf("rs%d", rng.IntN(2)), UID: "u", Controller: &yes}}
			}
			_, err := s.Update(p)
			require.NoError(t, err)
		case op == 3: // bind
			if o.(*corev1.Pod).Spec.NodeName == "" {
				p := o.(*corev1.Pod).DeepCopy()
				p.Spec.NodeName = fmt.Sprintf("n%d", rng.IntN(3))
				_, err := s.UpdateBinding(p)
				require.NoError(t, err)
			}
		case op == 4:
			require.NoError(t, s.Delete("Pod", ns, n))
		default:
			require.NoError(t, s.DeleteNow("Pod", ns, n))
		}
		for _, idx := range []string{IndexNamespace, IndexNode, IndexLabel, IndexOwner} {
			require.Equal(t, scanIndex(s, "Pod", idx), held(s.indexes["Pod"][idx]), "step %d, index %s", step, idx)
		}
	}
	assert.Positive(t, s.valuesKept, "some writes left an index alone")
}

// A key handed to SubmitAt and WriteStatusAt is the string the store and
// its indexes keep; one that is not the object's is let go.
func TestSubmitAtKeepsTheCallersKey(t *testing.T) {
	s := newServer(t)
	for _, idx := range []string{IndexNamespace, IndexNode, IndexLabel} {
		s.BuildIndex("Pod", idx)
	}
	same := func(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }
	storedKey := func(k string) string {
		for kk := range s.objs["Pod"] {
			if kk == k {
				return kk
			}
		}
		return ""
	}
	indexedKeys := func(k string) []string {
		var out []string
		for _, idx := range []string{IndexNamespace, IndexNode, IndexLabel} {
			for _, set := range s.indexes["Pod"][idx] {
				for kk := range set {
					if kk == k {
						out = append(out, kk)
					}
				}
			}
		}
		return out
	}
	k := string([]byte("default/web")) // a string of the caller's own
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: k[len("default/"):], Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
	require.NoError(t, s.SubmitAt(p, k))
	check := func(what string) {
		assert.True(t, same(k, storedKey(k)), "%s: the store's key", what)
		keys := indexedKeys(k)
		assert.Len(t, keys, 3, what)
		for _, kk := range keys {
			assert.True(t, same(k, kk), "%s: an index's key", what)
		}
	}
	check("created")
	o, _ := s.Peek("Pod", "default", "web")
	up := o.(*corev1.Pod).DeepCopy()
	up.Status.Phase = corev1.PodRunning
	require.NoError(t, s.WriteStatusAt(up, k))
	check("status written")
	o, _ = s.Peek("Pod", "default", "web")
	assert.Equal(t, corev1.PodRunning, o.(*corev1.Pod).Status.Phase)

	// Another pod's key, or a malformed one, is not taken for this one's.
	require.NoError(t, s.Submit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}))
	for _, wrong := range []string{"default/db", "default/we", "defaultxweb", ""} {
		o, _ = s.Peek("Pod", "default", "web")
		up = o.(*corev1.Pod).DeepCopy()
		up.Status.PodIP = "10.0.0." + fmt.Sprint(len(wrong))
		require.NoError(t, s.WriteStatusAt(up, wrong), wrong)
		o, _ = s.Peek("Pod", "default", "web")
		assert.Equal(t, up.Status.PodIP, o.(*corev1.Pod).Status.PodIP, wrong)
		db, _ := s.Peek("Pod", "default", "db")
		assert.Empty(t, db.(*corev1.Pod).Status.PodIP, wrong)
		assert.Len(t, s.objs["Pod"], 2, wrong)
	}
	require.Error(t, s.SubmitAt(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, "default/zz"), "a wrong key does not hide a name taken")
	require.NoError(t, s.SubmitAt(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, "default/zz"))
	_, ok := s.Peek("Pod", "default", "api")
	assert.True(t, ok, "stored under its own key")
	_, ok = s.objs["Pod"]["default/zz"]
	assert.False(t, ok)
}
