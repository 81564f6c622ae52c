package apiserver

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Whatever plainMeta lets through without the full validation, the full
// validation accepts too: names, namespaces and labels drawn from the
// characters and lengths at the rules' edges.
func TestPlainMetaIsValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 12))
	alphabet := "abz09-.A_/Z"
	word := func() string {
		n := rng.IntN(6)
		switch rng.IntN(8) {
		case 0:
			n = 62 + rng.IntN(3)
		case 1:
			n = 250 + rng.IntN(6)
		}
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	// A prefix: mostly from a DNS name's characters, at times with others.
	prefix := func() string {
		w := []byte(strings.ToLower(word()))
		for i := range w {
			if rng.IntN(4) != 0 {
				w[i] = "az09-."[rng.IntN(6)]
			}
		}
		return string(w)
	}
	kinds := []string{"Pod", "Event", "Node", "Service", "Namespace", "EndpointSlice", "ConfigMap"}
	plain, prefixed, annotated, generated, owned := 0, 0, 0, 0, 0
	for range 20000 {
		kk, _ := LookupKind(kinds[rng.IntN(len(kinds))])
		meta := metav1.ObjectMeta{Name: word(), Namespace: word()}
		if rng.IntN(3) == 0 {
			meta.Name = "pod-" + strings.ToLower(word())
		}
		if rng.IntN(3) == 0 {
			meta.Namespace = ""
		}
		if rng.IntN(2) == 0 {
			// A valid name and namespace: only the labels and
			// annotations decide.
			meta.Name, meta.Namespace = "web", "default"
			if !kk.Namespaced {
				meta.Namespace = ""
			}
		}
		if rng.IntN(2) == 0 {
			meta.Labels = map[string]string{word(): word()}
		}
		if rng.IntN(3) == 0 {
			// A prefixed key: the prefix and the name from the edges.
			meta.Labels = map[string]string{prefix() + "/" + word(): word()}
		}
		if rng.IntN(3) == 0 {
			meta.Annotations = map[string]string{word(): word()}
			if rng.IntN(2) == 0 {
				meta.Annotations[prefix()+"/"+word()] = strings.Repeat("x", 256<<10-rng.IntN(3)*200)
			}
		}
		if rng.IntN(20) == 0 {
			meta.Generation = -1
		}
		if rng.IntN(4) == 0 {
			// A generateName from the edges, with a trailing dash
			// mostly (the mask replaces the last two characters).
			meta.GenerateName = []string{prefix(), prefix() + "-", word() + "-", "-", "a-", "a.-", "a--", "-a-", ""}[rng.IntN(9)]
			if rng.IntN(3) == 0 {
				meta.GenerateName = strings.Repeat("a", 250+rng.IntN(6)) + "-"
			}
		}
		if rng.IntN(4) == 0 {
			pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
			yes, no := true, false
			for range 1 + rng.IntN(2) {
				r := metav1.OwnerReference{APIVersion: pick("v1", "apps/v1", "/", "apps/", "/v1", "a/b/c", "", "V1"),
					Kind: pick("Service", "Event", "ReplicaSet", ""), Name: pick("web", ""), UID: types.UID(pick("u1", "")),
					Controller: []*bool{nil, &yes, &no}[rng.IntN(3)]}
				if rng.IntN(2) == 0 { // mostly complete: the apiVersion, kind and controllers decide
					r.Name, r.UID = "web", "u1"
				}
				meta.OwnerReferences = append(meta.OwnerReferences, r)
			}
		}
		obj := &corev1.Pod{ObjectMeta: meta}
		if plainMeta(kk, obj) {
			plain++
			if meta.GenerateName != "" {
				generated++
			}
			if len(meta.OwnerReferences) > 0 {
				owned++
			}
			for k := range meta.Labels {
				if strings.Contains(k, "/") {
					prefixed++
				}
			}
			if len(meta.Annotations) > 0 {
				annotated++
			}
			require.Empty(t, validateMetaFull(kk, obj), "%s %+v", kk.Name, meta)
		}
	}
	require.Greater(t, plain, 50, "the plain path is taken")
	require.Greater(t, prefixed, 5, "with prefixed label keys")
	require.Greater(t, annotated, 5, "with annotations")
	require.Greater(t, generated, 50, "with a generateName")
	require.Greater(t, owned, 20, "with owner references")
	// An EndpointSlice as the controller writes it takes the plain path;
	// a second controller, a v1 Event owner or an unparsable apiVersion
	// do not.
	slice, _ := LookupKind("EndpointSlice")
	yes := true
	es := metav1.ObjectMeta{Name: "web-x7k2p", GenerateName: "web-", Namespace: "default",
		Labels:          map[string]string{"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "u1", Controller: &yes, BlockOwnerDeletion: &yes}}}
	require.True(t, plainMeta(slice, &corev1.Pod{ObjectMeta: es}))
	require.Empty(t, validateMetaFull(slice, &corev1.Pod{ObjectMeta: es}))
	for _, refs := range [][]metav1.OwnerReference{
		{es.OwnerReferences[0], {APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "u2", Controller: &yes}},
		{{APIVersion: "v1", Kind: "Event", Name: "web", UID: "u1"}},
		{{APIVersion: "a/b/c", Kind: "Service", Name: "web", UID: "u1"}},
		{{APIVersion: "apps/", Kind: "Service", Name: "web", UID: "u1"}},
	} {
		m := es
		m.OwnerReferences = refs
		require.False(t, plainMeta(slice, &corev1.Pod{ObjectMeta: m}), "%+v", refs)
		require.NotEmpty(t, validateMetaFull(slice, &corev1.Pod{ObjectMeta: m}), "%+v", refs)
	}
	pod, _ := LookupKind("Pod")
	require.True(t, plainMeta(pod, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-000001", Namespace: "scale",
		Labels: map[string]string{"group": "17", "app.kubernetes.io_x": "A-b.c"}}}))
	for _, m := range []metav1.ObjectMeta{
		{Name: "web", Namespace: "default", Labels: map[string]string{"app.kubernetes.io/name": "web"}},
		{Name: "web", Namespace: "default", Annotations: map[string]string{"a": "b", "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock"}},
	} {
		require.True(t, plainMeta(pod, &corev1.Pod{ObjectMeta: m}), "%+v", m)
		require.Empty(t, validateMetaFull(pod, &corev1.Pod{ObjectMeta: m}))
	}
	// A node's registration (prefixed labels and annotations) takes the
	// plain path.
	node, _ := LookupKind("Node")
	require.True(t, plainMeta(node, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-00001",
		Labels:      map[string]string{"kubernetes.io/hostname": "node-00001", "beta.kubernetes.io/arch": "amd64", "node-role.kubernetes.io/control-plane": ""},
		Annotations: map[string]string{"flannel.alpha.coreos.com/public-ip": "172.20.0.10", "node.alpha.kubernetes.io/ttl": "0"}}}))
	for _, m := range []metav1.ObjectMeta{
		{Name: "Web", Namespace: "default"},
		{Name: "web", Namespace: ""},
		{Name: "web", Namespace: "default", Labels: map[string]string{"Example.com/name": "web"}},
		{Name: "web", Namespace: "default", Labels: map[string]string{"/name": "web"}},
		{Name: "web", Namespace: "default", Labels: map[string]string{"a/b/c": "web"}},
		{Name: "web", Namespace: "default", Labels: map[string]string{"example.com/": "web"}},
		{Name: "web", Namespace: "default", Annotations: map[string]string{"a/b/c": "x"}},
		{Name: "web", Namespace: "default", Annotations: map[string]string{"a": strings.Repeat("x", 256<<10)}},
		{Name: "web", Namespace: "default", Finalizers: []string{"x"}},
		{GenerateName: "web-", Namespace: "default"},
		{Name: "web-x", GenerateName: "-", Namespace: "default"},
		{Name: "web-x", GenerateName: "Web-", Namespace: "default"},
	} {
		require.False(t, plainMeta(pod, &corev1.Pod{ObjectMeta: m}), "%+v goes through the full validation", m)
	}
	// Where the full validation refuses, plainMeta does too.
	require.NotEmpty(t, validateMetaFull(pod, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default",
		Annotations: map[string]string{"a": strings.Repeat("x", 256<<10)}}}))
}

// isPortName is IsValidPortName's test: names at its edges (length,
// hyphens, letters) agree.
func TestIsPortName(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := "az09-A_"
	for range 20000 {
		n := rng.IntN(18)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := string(b)
		require.Equal(t, len(validation.IsValidPortName(s)) == 0, isPortName(s), "%q", s)
	}
	for _, s := range []string{"http", "h", "8080", "a-b", "a--b", "-a", "a-", "abcdefghijklmno", "abcdefghijklmnop", "HTTP", ""} {
		require.Equal(t, len(validation.IsValidPortName(s)) == 0, isPortName(s), "%q", s)
	}
}

// FuzzIsPortName: isPortName agrees with IsValidPortName on any input.
func FuzzIsPortName(f *testing.F) {
	for _, s := range []string{"http", "a--b", "-a", "dns-tcp", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ok := len(validation.IsValidPortName(s)) == 0; ok != isPortName(s) {
			t.Fatalf("%q: IsValidPortName accepts %v, isPortName %v", s, ok, isPortName(s))
		}
	})
}

// uidFor formats as the Sprintf it replaces.
func TestUIDFor(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []uint64{0, 1, 2, 0xfff, 0x1000, 1<<32 - 1, 1 << 32, 1<<48 - 1, 1 << 48, 1<<64 - 1} {
		require.Equal(t, fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(n*0x9e3779b1), uint16(n>>32), n%0xfff, (n*7)%0xfff, n), string(uidFor(n)))
	}
	for range 10000 {
		n := rng.Uint64() >> rng.IntN(64)
		require.Equal(t, fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(n*0x9e3779b1), uint16(n>>32), n%0xfff, (n*7)%0xfff, n), string(uidFor(n)))
	}
}

// KindOf's shortcut for the kinds written most names every served kind
// as the scheme does.
func TestKindOfIsTheSchemes(t *testing.T) {
	for _, k := range Kinds {
		o, err := Scheme.New(k.GV.WithKind(k.Name))
		require.NoError(t, err, k.Name)
		gvks, _, err := Scheme.ObjectKinds(o)
		require.NoError(t, err, k.Name)
		require.Equal(t, gvks[0].Kind, KindOf(o), k.Name)
		require.Equal(t, k.Name, KindOf(o))
	}
}

// The correlator counts repeats by dedup key whatever the hash its index
// keeps keys by: with every key on one hash (each colliding with the
// others) the events stored are those of the index as it is.
func TestEventIndexCollisions(t *testing.T) {
	record := func(collide bool) string {
		now := time.Duration(0)
		s, err := New(Config{}, func() time.Time { return Epoch.Add(now) }, rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err)
		if collide {
			s.events.hash = func(eventDedup) uint64 { return 7 }
		}
		var pods []Object
		for i := range 3 {
			p, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i), Namespace: "default"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
			require.NoError(t, err)
			pods = append(pods, p)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range 200 {
			now += time.Duration(rng.IntN(3)) * time.Second
			p := pods[rng.IntN(len(pods))]
			reason := []string{"Pulled", "Created", "BackOff"}[rng.IntN(3)]
			s.Record(p, "kubelet", corev1.EventTypeNormal, reason, fmt.Sprint("message ", rng.IntN(2)))
			if i%50 == 49 { // an event deleted: its next repeat is a new one
				evs := s.List("Event", "default")
				require.NoError(t, s.DeleteNow("Event", "default", evs[rng.IntN(len(evs))].GetName()))
			}
		}
		var b strings.Builder
		for _, o := range s.List("Event", "default") {
			ev := o.(*corev1.Event)
			fmt.Fprintf(&b, "%s %s %s %q %d %s\n", ev.Name, ev.InvolvedObject.Name, ev.Reason, ev.Message, ev.Count, ev.LastTimestamp)
		}
		return b.String()
	}
	plain, collided := record(false), record(true)
	require.NotContains(t, plain, "p0 Pulled \"message 0\" 1 ", "repeats are counted")
	require.Greater(t, strings.Count(plain, "\n"), 12, "deleted events are recorded again")
	require.Equal(t, plain, collided)
}

// The pod defaults every stored pod points to are the defaults, and a
// copy handed out is the caller's own: changing it (and writing it back)
// changes no other pod.
func TestPodDefaultsShared(t *testing.T) {
	s, err := New(Config{}, func() time.Time { return Epoch }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	for _, name := range []string{"a", "b"} {
		_, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c:1"}}}})
		require.NoError(t, err)
	}
	o, err := s.Get("Pod", "default", "a")
	require.NoError(t, err)
	a := o.(*corev1.Pod)
	require.Equal(t, int64(30), *a.Spec.TerminationGracePeriodSeconds)
	require.True(t, *a.Spec.EnableServiceLinks)
	require.Equal(t, &corev1.PodSecurityContext{}, a.Spec.SecurityContext)
	require.Len(t, a.Spec.Tolerations, 2)
	for i, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		require.Equal(t, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
			TolerationSeconds: a.Spec.Tolerations[i].TolerationSeconds}, a.Spec.Tolerations[i])
		require.Equal(t, int64(300), *a.Spec.Tolerations[i].TolerationSeconds)
	}
	*a.Spec.TerminationGracePeriodSeconds = 5
	*a.Spec.Tolerations[0].TolerationSeconds = 7
	a.Spec.SecurityContext.RunAsUser = a.Spec.TerminationGracePeriodSeconds
	_, err = s.Update(a)
	require.NoError(t, err)
	for name, grace := range map[string]int64{"a": 5, "b": 30} {
		o, _ := s.Peek("Pod", "default", name)
		p := o.(*corev1.Pod)
		require.Equal(t, grace, *p.Spec.TerminationGracePeriodSeconds, name)
	}
	o, _ = s.Peek("Pod", "default", "b")
	b := o.(*corev1.Pod)
	require.Equal(t, int64(300), *b.Spec.Tolerations[0].TolerationSeconds)
	require.Nil(t, b.Spec.SecurityContext.RunAsUser)
	require.Equal(t, int64(30), podDefaults.grace, "the shared defaults are left alone")
	// The two default tolerations are one slice every such pod shares,
	// full, so that an append copies it.
	require.Same(t, &podDefaults.tolerations[0], &b.Spec.Tolerations[0], "shared")
	require.Equal(t, len(b.Spec.Tolerations), cap(b.Spec.Tolerations))
	require.Len(t, podDefaults.tolerations, 2)
	require.Equal(t, int64(300), *podDefaults.tolerations[0].TolerationSeconds)
	// A pod with a toleration of its own gets the defaults after it, in
	// its own slice.
	_, err = s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c:1"}}, Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}}})
	require.NoError(t, err)
	o, _ = s.Peek("Pod", "default", "c")
	tol := o.(*corev1.Pod).Spec.Tolerations
	require.Len(t, tol, 3)
	require.Equal(t, "k", tol[0].Key)
	require.Equal(t, corev1.TaintNodeUnreachable, tol[2].Key)
	require.Len(t, podDefaults.tolerations, 2)
}

// Events recorded about one object at one instant are named
// "<object>.<now in ns, hex>", then with a "0" appended per name taken, as
// before; each is stored under "<namespace>/<name>" and found by it.
func TestEventNamesAtOneInstant(t *testing.T) {
	s, err := New(Config{}, func() time.Time { return Epoch.Add(5 * time.Second) }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	_, err = s.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	require.NoError(t, err)
	p, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
	require.NoError(t, err)
	for _, reason := range []string{"Pulled", "Created", "Started", "Pulled"} {
		s.Record(p, "kubelet", corev1.EventTypeNormal, reason, "m")
	}
	base := "web." + strconv.FormatInt(Epoch.Add(5*time.Second).UnixNano(), 16)
	var names []string
	for _, o := range s.List("Event", "shop") {
		ev := o.(*corev1.Event)
		names = append(names, ev.Name+" "+ev.Reason+" "+strconv.Itoa(int(ev.Count)))
		got, ok := s.Peek("Event", "shop", ev.Name)
		require.True(t, ok, ev.Name)
		require.Equal(t, ev.Name, got.GetName())
	}
	require.Equal(t, []string{base + " Pulled 2", base + "0 Created 1", base + "00 Started 1"}, names)
}

// An event's name at an instant whose names were taken is the first
// free one, also when the last Record's knowledge of the taken names no
// longer holds: an event deleted since, a transaction aborted.
func TestEventNamesAfterDeleteAndAbort(t *testing.T) {
	s, err := New(Config{}, func() time.Time { return Epoch.Add(5 * time.Second) }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	p, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
	require.NoError(t, err)
	base := "web." + strconv.FormatInt(Epoch.Add(5*time.Second).UnixNano(), 16)
	names := func() []string {
		var out []string
		for _, o := range s.List("Event", "default") {
			out = append(out, o.GetName()+" "+o.(*corev1.Event).Reason)
		}
		return out
	}
	s.Record(p, "kubelet", corev1.EventTypeNormal, "Pulled", "m")
	s.Record(p, "kubelet", corev1.EventTypeNormal, "Created", "m")
	require.NoError(t, s.DeleteNow("Event", "default", base))
	s.Record(p, "kubelet", corev1.EventTypeNormal, "Started", "m")
	require.Equal(t, []string{base + " Started", base + "0 Created"}, names(), "the deleted name is free again")

	s.Begin()
	s.Record(p, "kubelet", corev1.EventTypeNormal, "Killing", "m")
	s.Abort()
	_, err = s.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}) // the revision the aborted event had
	require.NoError(t, err)
	s.Record(p, "kubelet", corev1.EventTypeNormal, "Scheduled", "m")
	require.Equal(t, []string{base + " Started", base + "0 Created", base + "00 Scheduled"}, names(), "the aborted event's name is free again")
	s.Record(p, "kubelet", corev1.EventTypeNormal, "Killing", "m")
	require.Equal(t, []string{base + " Started", base + "0 Created", base + "00 Scheduled", base + "000 Killing"}, names())
}

func TestIsKey(t *testing.T) {
	for _, tc := range []struct {
		k, ns, name string
	}{{"a/b", "a", "b"}, {"/b", "", "b"}, {"a/", "a", ""}, {"ab/c", "a", "b/c"}, {"a/bc", "a", "b"}, {"", "", ""}, {"a/b", "a/b", ""}, {"x/b", "a", "b"}, {"a/x", "a", "b"}, {"a.b", "a", "b"}} {
		require.Equal(t, key(tc.ns, tc.name) == tc.k, isKey(tc.k, tc.ns, tc.name), "%q %q %q", tc.k, tc.ns, tc.name)
	}
}

// Every object created gets the next UID and the next revision as its
// resourceVersion, whoever made their text: created, submitted, recorded
// (which guesses them), after an aborted transaction (which takes its
// revisions back), and with a wrong guess.
func TestCreatedIDs(t *testing.T) {
	s, err := New(Config{}, func() time.Time { return Epoch }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	n := uint64(0) // objects created so far
	for _, k := range Kinds {
		n += uint64(s.Count(k.Name))
	}
	check := func(o Object) {
		t.Helper()
		n++
		require.Equal(t, uidFor(n), o.GetUID())
		require.Equal(t, s.ResourceVersion(), o.GetResourceVersion())
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
	}
	peek := func(kind, name string) Object {
		o, ok := s.Peek(kind, "default", name)
		require.True(t, ok, name)
		return o
	}
	a, err := s.Create(pod("a"))
	require.NoError(t, err)
	check(a)
	s.Record(a, "kubelet", corev1.EventTypeNormal, "Pulled", "m")
	check(s.List("Event", "default")[0])
	s.Begin()
	require.NoError(t, s.Submit(pod("gone")))
	s.Record(a, "kubelet", corev1.EventTypeNormal, "Created", "m")
	s.Abort()
	require.NoError(t, s.Submit(pod("b")))
	check(peek("Pod", "b"))
	s.Record(peek("Pod", "b"), "kubelet", corev1.EventTypeNormal, "Pulled", "m")
	for _, o := range s.List("Event", "default") {
		if o.(*corev1.Event).InvolvedObject.Name == "b" {
			check(o)
		}
	}
	// Record's guess is taken as made; the same text offered again at
	// later counters is not.
	s.Record(peek("Pod", "b"), "kubelet", corev1.EventTypeNormal, "Started", "m")
	stale := s.List("Event", "default")
	for _, o := range stale {
		if o.(*corev1.Event).Reason == "Started" {
			check(o)
			name := fmt.Sprint("g", n)
			_, _, err := s.createAt(pod(name), false, "", string(o.GetUID())+o.GetResourceVersion(), false)
			require.NoError(t, err)
			check(peek("Pod", name))
		}
	}
	for _, guess := range []string{"", "x", string(uidFor(n+2)) + "1", string(uidFor(n+1)) + "1"} {
		name := fmt.Sprint("g", n)
		_, _, err := s.createAt(pod(name), false, "", guess, false)
		require.NoError(t, err)
		check(peek("Pod", name))
	}
}

// A status write of a Pod copies its spec and compares its status without
// reflection: what the reflective walk over the fields gives (a Pod's
// fields other than metadata and status are its spec alone, which the
// test checks so that a field added upstream fails it).
func TestPodStatusWriteFastPaths(t *testing.T) {
	var names []string
	for i := range reflect.TypeFor[corev1.Pod]().NumField() {
		names = append(names, reflect.TypeFor[corev1.Pod]().Field(i).Name)
	}
	require.Equal(t, []string{"TypeMeta", "ObjectMeta", "Spec", "Status"}, names)
	mk := func(name, node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"a": name}},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: name, Image: name}}},
			Status: corev1.PodStatus{Phase: phase, PodIP: "10.0.0." + name}}
	}
	fast, slow := mk("1", "n1", corev1.PodRunning), mk("1", "n1", corev1.PodRunning)
	old := mk("2", "n2", corev1.PodPending)
	copySpec(fast, old)
	copyFields(slow, old)
	slow.SetLabels(old.GetLabels())
	slow.SetAnnotations(old.GetAnnotations())
	slow.SetOwnerReferences(old.GetOwnerReferences())
	slow.SetFinalizers(old.GetFinalizers())
	require.Equal(t, slow, fast)
	require.Equal(t, "n2", fast.Spec.NodeName)
	require.Equal(t, corev1.PodRunning, fast.Status.Phase, "the status is the writer's")

	reflective := func(a, b *corev1.Pod) bool { return apiequality.Semantic.DeepEqual(&a.Status, &b.Status) }
	a, b := mk("1", "n1", corev1.PodRunning), mk("1", "n1", corev1.PodRunning)
	for _, tc := range []func(){
		func() {},
		func() { b.Status.Phase = corev1.PodPending },
		func() { b.Status.Phase = corev1.PodRunning; b.Status.PodIP = "x" },
		func() { b.Status.PodIP = a.Status.PodIP; b.Spec.NodeName = "other" },
	} {
		tc()
		require.Equal(t, reflective(a, b), fieldEqual(a, b, "Status"))
	}
	require.False(t, fieldEqual(a, mk("1", "n1", corev1.PodPending), "Status"))
}

// TestPeekKeys: Peek makes its key on the stack up to 96 bytes and on the
// heap past them; both find the object, and a cluster-scoped kind ignores
// the namespace.
func TestPeekKeys(t *testing.T) {
	s, err := New(Config{}, func() time.Time { return Epoch }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	for _, name := range []string{"a", strings.Repeat("b", 90), strings.Repeat("c", 200)} {
		_, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
		require.NoError(t, err)
		o, ok := s.Peek("Pod", "default", name)
		require.True(t, ok, len(name))
		require.Equal(t, name, o.GetName())
		_, ok = s.Peek("Pod", "other", name)
		require.False(t, ok)
	}
	_, ok := s.Peek("Namespace", "ignored", "default")
	require.True(t, ok)
}
