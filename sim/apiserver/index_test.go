package apiserver

import (
	"fmt"
	"slices"
	"testing"

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
