package apiserver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// labelScan is what the label index must answer: the pods carrying
// key=value, by a scan of every stored pod, sorted.
func labelScan(s *Server, key, value string) []string {
	var out []string
	for _, o := range s.List("Pod", "") {
		if v, ok := o.GetLabels()[key]; ok && v == value {
			out = append(out, o.GetNamespace()+"/"+o.GetName())
		}
	}
	slices.Sort(out)
	return out
}

func names(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

// An index is built when first looked up, from whatever writes came
// before (creates, relabels, deletes, an aborted transaction), and kept
// up to date after: its answers are a scan's at every point.
func TestIndexBuiltOnFirstLookup(t *testing.T) {
	s := newServer(t)
	_, built := s.indexes["Pod"][IndexLabel]
	require.False(t, built, "nothing has asked for the label index yet")
	pod := func(name, group string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"group": group}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
	}
	for i := range 12 {
		require.NoError(t, s.Submit(pod(fmt.Sprintf("p%02d", i), fmt.Sprint(i%3))))
	}
	o, _ := s.Get("Pod", "default", "p04")
	o.SetLabels(map[string]string{"group": "2"})
	_, err := s.Update(o)
	require.NoError(t, err)
	require.NoError(t, s.DeleteNow("Pod", "default", "p07"))
	s.Begin()
	require.NoError(t, s.Submit(pod("p99", "1")))
	require.NoError(t, s.DeleteNow("Pod", "default", "p01"))
	s.Abort()

	check := func() {
		t.Helper()
		for _, g := range []string{"0", "1", "2", "3"} {
			want := labelScan(s, "group", g)
			require.Equal(t, want, names(s.ByIndex("Pod", IndexLabel, "default/group="+g)), "group %s", g)
			require.Equal(t, len(want), s.CountByIndex("Pod", IndexLabel, "default/group="+g), "group %s", g)
		}
	}
	check()
	_, built = s.indexes["Pod"][IndexLabel]
	require.True(t, built)
	require.Equal(t, []string{"default/p02", "default/p04", "default/p05", "default/p08", "default/p11"}, labelScan(s, "group", "2"), "the relabel counts, the aborted delete does not")

	// Kept up to date once built, transactions included.
	o, _ = s.Get("Pod", "default", "p05")
	o.SetLabels(map[string]string{"group": "3"})
	_, err = s.Update(o)
	require.NoError(t, err)
	require.NoError(t, s.DeleteNow("Pod", "default", "p00"))
	s.Begin()
	require.NoError(t, s.Submit(pod("p98", "0")))
	s.Abort()
	s.Begin()
	require.NoError(t, s.Submit(pod("p97", "0")))
	s.Commit()
	check()

	// An index nobody asked for costs nothing: Events are not indexed by
	// namespace until someone asks.
	s.Record(o, "kubelet", corev1.EventTypeNormal, "Pulled", "pulled")
	_, built = s.indexes["Event"][IndexNamespace]
	require.False(t, built)
	require.Len(t, s.EventsFor("Pod", "default", "p05"), 1)
	require.Len(t, s.ByIndex("Event", IndexNamespace, "default"), 1)
	require.Empty(t, s.ByIndex("Widget", IndexLabel, "x"))
	require.Zero(t, s.CountByIndex("Pod", "no-such-index", "x"))
}

// PeekByIndexFunc answers what ByIndexFunc does, with the stored objects
// where ByIndexFunc copies them.
func TestPeekByIndexFunc(t *testing.T) {
	s := newServer(t)
	for i := range 5 {
		require.NoError(t, s.Submit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", 4-i), Namespace: "default",
			Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}))
	}
	odd := func(o Object) bool { return o.GetName() != "p2" }
	peeked := s.PeekByIndexFunc("Pod", IndexLabel, "default/app=web", odd)
	copied := s.ByIndexFunc("Pod", IndexLabel, "default/app=web", odd)
	require.Equal(t, copied, peeked)
	require.Equal(t, []string{"default/p0", "default/p1", "default/p3", "default/p4"}, names(peeked))
	for i, o := range peeked {
		stored, _ := s.Peek("Pod", "default", o.GetName())
		require.Same(t, stored, o)
		require.NotSame(t, stored, copied[i])
	}
}

// The Pod label index made by addPodLabels, and left as it is by a write
// of the same namespace and labels, is the one podLabelValues gives
// through indexAdd and reindex: over random pods (several labels,
// namespaces, values shared or not) created before and after the index
// is built, relabelled, status-written and deleted, both servers'
// indexes hold the same values and keys at every step, and the own ways
// were taken.
func TestPodLabelIndexIsTheFunctions(t *testing.T) {
	own, generic := newServer(t), newServer(t)
	generic.AddIndex("Pod", IndexLabel, podLabelValues) // the same function, through indexAdd
	require.True(t, own.podLabels)
	require.False(t, generic.podLabels)
	for _, s := range []*Server{own, generic} {
		_, err := s.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
		require.NoError(t, err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	labels := func() map[string]string {
		m := map[string]string{}
		for range rng.IntN(4) {
			m[[]string{"app", "group", "example.com/tier", "a"}[rng.IntN(4)]] = fmt.Sprint(rng.IntN(5))
		}
		return m
	}
	steps := 0
	for i := range 400 {
		ns := []string{"default", "shop"}[rng.IntN(2)]
		name := fmt.Sprint("p", rng.IntN(40))
		lab := labels()
		op := rng.IntN(4)
		for _, s := range []*Server{own, generic} {
			o, ok := s.Peek("Pod", ns, name)
			switch {
			case !ok:
				require.NoError(t, s.Submit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lab},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}))
			case op == 0:
				require.NoError(t, s.DeleteNow("Pod", ns, name))
			case op == 1:
				// A status write: the same labels, the index kept as it is.
				c := o.DeepCopyObject().(*corev1.Pod)
				c.Status.Phase = corev1.PodRunning
				require.NoError(t, s.WriteStatus(c))
			default:
				c := o.DeepCopyObject().(Object)
				c.SetLabels(lab)
				_, err := s.Update(c)
				require.NoError(t, err)
			}
			if i == 100 {
				s.CountByIndex("Pod", IndexLabel, "x") // built from the pods so far
			}
		}
		if i >= 100 {
			require.Equal(t, generic.indexes["Pod"][IndexLabel], own.indexes["Pod"][IndexLabel], "step %d", i)
			steps++
		}
	}
	require.NotEmpty(t, own.indexes["Pod"][IndexLabel])
	require.Equal(t, 300, steps)
	require.Positive(t, own.labelsKept, "status writes left the own index as it was")
	require.Zero(t, generic.labelsKept)
}

// BenchmarkPodLabelIndexBuild builds the Pod label index from 30,000
// stored pods sharing each value three by three, as the first Service's
// slices do in bench/scale (there from 150,000).
func BenchmarkPodLabelIndexBuild(b *testing.B) {
	for _, own := range []bool{false, true} {
		b.Run(fmt.Sprint("own=", own), func(b *testing.B) {
			s, err := New(Config{}, func() time.Time { return Epoch }, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				b.Fatal(err)
			}
			if !own {
				s.AddIndex("Pod", IndexLabel, podLabelValues)
			}
			for i := range 30000 {
				if err := s.Submit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%06d", i), Namespace: "default",
					Labels: map[string]string{"group": fmt.Sprint(i / 3)}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				delete(s.indexes["Pod"], IndexLabel)
				s.CountByIndex("Pod", IndexLabel, "x")
			}
		})
	}
}
