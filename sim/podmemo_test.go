package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

// podObject and podSpecOf with a memo make, pod after pod, what they make
// without one (a fresh memo each time), whatever the caller changes
// between two pods, and share the objects of pods alike.
func TestPodMemoMakesWhatIsMadeAfresh(t *testing.T) {
	web := []Container{{Name: "web", Ports: []ContainerPort{{Name: "http", ContainerPort: 80}}}}
	steps := []struct {
		name   string
		spec   func() PodSpec
		shared bool // the containers are the last pod's
	}{
		{"first", func() PodSpec { return PodSpec{Name: "a", Labels: map[string]string{"app": "web"}, Containers: web} }, false},
		{"same", func() PodSpec { return PodSpec{Name: "b", Labels: map[string]string{"app": "web"}, Containers: web} }, true},
		{"port changed in place", func() PodSpec {
			web[0].Ports[0].ContainerPort = 8080
			return PodSpec{Name: "c", Labels: map[string]string{"app": "web"}, Containers: web}
		}, false},
		{"protocol", func() PodSpec {
			web[0].Ports[0].Protocol = "UDP"
			return PodSpec{Name: "d", Containers: web}
		}, false},
		{"echo", func() PodSpec {
			web[0].Ports[0].Echo = true
			return PodSpec{Name: "e", Labels: map[string]string{"app": "db"}, Containers: web}
		}, false},
		{"echo again", func() PodSpec { return PodSpec{Name: "f", Labels: map[string]string{"app": "db"}, Containers: web} }, true},
		{"host port", func() PodSpec {
			web[0].Ports[0].HostPort = 30080
			return PodSpec{Name: "g", Labels: map[string]string{}, Containers: web}
		}, false},
		{"renamed", func() PodSpec {
			web[0].Name = "api"
			return PodSpec{Name: "h", Containers: web}
		}, false},
		{"port name", func() PodSpec {
			web[0].Ports[0].Name = "alt"
			return PodSpec{Name: "i", Containers: web}
		}, false},
		{"two containers", func() PodSpec {
			return PodSpec{Name: "j", Labels: map[string]string{"app": "db"}, Containers: append(web[:1:1], Container{Name: "side", Ports: []ContainerPort{{ContainerPort: 53, Protocol: "UDP", Echo: true}}})}
		}, false},
		{"no containers", func() PodSpec { return PodSpec{Name: "k"} }, false},
		{"none again", func() PodSpec { return PodSpec{Name: "l"} }, true},
		{"no ports", func() PodSpec { return PodSpec{Name: "m", Containers: []Container{{Name: "api"}}} }, false},
	}
	var memo podMemo
	var last *corev1.Pod
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got := podObject(st.spec(), &memo)
			want := podObject(st.spec(), &podMemo{})
			assert.Equal(t, want, got)
			if last != nil {
				assert.Equal(t, st.shared, &got.Spec.Containers[0] == &last.Spec.Containers[0], "containers shared with the last pod")
			}
			last = got
			// What the runtime reads of it, and of variants of it the
			// memo must not take for the last pod.
			objs := []*corev1.Pod{got, got}
			v := got.DeepCopy()
			v.Annotations = map[string]string{EchoPortsAnnotation: "7/UDP"}
			objs = append(objs, v, v)
			for i := range got.Spec.Containers {
				for j := range got.Spec.Containers[i].Ports {
					v := got.DeepCopy()
					v.Spec.Containers[i].Ports[j].Protocol = "SCTP"
					w := got.DeepCopy()
					w.Spec.Containers[i].Ports[j].HostPort++
					x := got.DeepCopy()
					x.Spec.Containers[i].Ports[j].Name += "x"
					y := got.DeepCopy()
					y.Spec.Containers[i].Ports[j].ContainerPort++
					objs = append(objs, v, w, x, y)
				}
				v := got.DeepCopy()
				v.Spec.Containers[i].Name += "x"
				objs = append(objs, v)
			}
			for _, o := range objs { // each after got: one difference from the last
				for _, o := range []*corev1.Pod{got, o, o} {
					assert.Equal(t, podSpecOf(o, &podMemo{}), podSpecOf(o, &memo))
				}
			}
		})
	}
	a := podSpecOf(last, &memo)
	b := podSpecOf(last, &memo)
	assert.Same(t, &a.Containers[0], &b.Containers[0], "the runtime's containers are shared by pods alike")
}
