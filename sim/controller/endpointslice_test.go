package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// The Services the pod handler wakes, found through the selector index,
// are those a scan of the namespace's Services finds: random selectors
// of one to three labels (and none), Services updated to other selectors
// and deleted, pods in two namespaces.
func TestSelectingIsTheScan(t *testing.T) {
	api, err := apiserver.New(apiserver.Config{}, func() time.Time { return apiserver.Epoch }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	api.AddIndex("Service", indexSelector, selectorIndex)
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"app", "tier", "zone"}
	randLabels := func(n int) map[string]string {
		m := map[string]string{}
		for range n {
			m[keys[rng.IntN(len(keys))]] = fmt.Sprint(rng.IntN(3))
		}
		return m
	}
	for _, ns := range []string{"a", "b"} {
		_, err := api.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		require.NoError(t, err)
	}
	scan := func(p *corev1.Pod) []string {
		var out []string
		for _, o := range api.PeekByIndexFunc("Service", apiserver.IndexNamespace, p.Namespace, func(o apiserver.Object) bool {
			s := o.(*corev1.Service)
			return len(s.Spec.Selector) > 0 && labels.SelectorFromValidatedSet(s.Spec.Selector).Matches(labels.Set(p.Labels))
		}) {
			out = append(out, Key(o.GetNamespace(), o.GetName()))
		}
		return out
	}
	matched := 0
	for i := range 300 {
		ns := []string{"a", "b"}[rng.IntN(2)]
		name := fmt.Sprintf("svc-%d", rng.IntN(60))
		switch o, ok := api.Peek("Service", ns, name); {
		case ok && rng.IntN(4) == 0:
			require.NoError(t, api.Delete("Service", ns, name))
		case ok:
			s := o.DeepCopyObject().(*corev1.Service)
			s.Spec.Selector = randLabels(rng.IntN(4))
			_, err := api.Update(s)
			require.NoError(t, err)
		default:
			_, err := api.Create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: corev1.ServiceSpec{Selector: randLabels(rng.IntN(4)), Ports: []corev1.ServicePort{{Port: 80}}}})
			require.NoError(t, err)
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: []string{"a", "b"}[rng.IntN(2)], Name: fmt.Sprint("pod-", i), Labels: randLabels(1 + rng.IntN(3))}}
		got, want := selecting(api, p), scan(p)
		assert.Equal(t, want, got, "step %d: pod %v", i, p.Labels)
		if len(want) > 0 {
			matched++
		}
		assert.True(t, slices.IsSorted(got))
	}
	assert.Greater(t, matched, 50, "pods that matched some Service")
}
