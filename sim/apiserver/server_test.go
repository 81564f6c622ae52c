package apiserver

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func newServer(t *testing.T) *Server {
	t.Helper()
	var now time.Duration
	s, err := New(Config{ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12"), AdvertiseAddress: netip.MustParseAddr("192.168.122.11")},
		func() time.Time { now += time.Second; return Epoch.Add(now) }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	return s
}

func svc(name string, typ corev1.ServiceType, port, nodePort int32) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: port, NodePort: nodePort}}}}
}

func TestKubeadmDefaults(t *testing.T) {
	s := newServer(t)
	var names []string
	for _, o := range s.List("Namespace", "") {
		names = append(names, o.GetName())
	}
	require.Equal(t, []string{"default", "kube-node-lease", "kube-public", "kube-system"}, names)
	o, err := s.Get("Service", "default", "kubernetes")
	require.NoError(t, err)
	k := o.(*corev1.Service)
	require.Equal(t, "10.96.0.1", k.Spec.ClusterIP)
	require.Equal(t, int32(443), k.Spec.Ports[0].Port)
	require.Equal(t, "6443", k.Spec.Ports[0].TargetPort.String())
	ep, err := s.Get("EndpointSlice", "default", "kubernetes")
	require.NoError(t, err)
	require.Contains(t, ep.(interface{ String() string }).String(), "192.168.122.11")
}

func TestServiceErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  *corev1.Service
		want string
	}{
		{"nodePort out of range", svc("web", corev1.ServiceTypeNodePort, 80, 80),
			`Service "web" is invalid: spec.ports[0].nodePort: Invalid value: 80: provided port is not in the valid range. The range of valid ports is 30000-32767`},
		{"nodePort on ClusterIP", svc("web", corev1.ServiceTypeClusterIP, 80, 30080),
			"Service \"web\" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"},
		{"port zero", svc("web", corev1.ServiceTypeClusterIP, 0, 0),
			`Service "web" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive]`},
		{"bad name", svc("Web", corev1.ServiceTypeClusterIP, 80, 0),
			`Service "Web" is invalid: metadata.name: Invalid value: "Web": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`},
		{"missing namespace", func() *corev1.Service { s := svc("web", "", 80, 0); s.Namespace = "nope"; return s }(),
			`namespaces "nope" not found`},
		{"clusterIP outside the range", func() *corev1.Service { s := svc("web", "", 80, 0); s.Spec.ClusterIP = "10.0.0.5"; return s }(),
			`Service "web" is invalid: spec.clusterIPs: Invalid value: ["10.0.0.5"]: failed to allocate IP 10.0.0.5: the provided IP (10.0.0.5) is not in the valid range. The range of valid IPs is 10.96.0.0/12`},
		{"clusterIP taken", func() *corev1.Service { s := svc("web", "", 80, 0); s.Spec.ClusterIP = "10.96.0.1"; return s }(),
			`Service "web" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.1"]: failed to allocate IP 10.96.0.1: provided IP is already allocated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			_, err := s.Create(tc.obj)
			require.EqualError(t, err, tc.want)
			require.Equal(t, 1, s.Count("Service"), "nothing stored")
		})
	}
}

func TestServiceAllocationAndUpdate(t *testing.T) {
	s := newServer(t)
	o, err := s.Create(svc("web", corev1.ServiceTypeNodePort, 80, 0))
	require.NoError(t, err)
	got := o.(*corev1.Service)
	ip := netip.MustParseAddr(got.Spec.ClusterIP)
	require.True(t, netip.MustParsePrefix("10.96.0.0/12").Contains(ip))
	np := got.Spec.Ports[0].NodePort
	require.True(t, np >= 30086 && np <= 32767, "upper band first: %d", np)
	require.Equal(t, "80", got.Spec.Ports[0].TargetPort.String(), "targetPort defaults to port")
	require.Equal(t, corev1.ServiceExternalTrafficPolicyCluster, got.Spec.ExternalTrafficPolicy)
	// kubectl apply without clusterIP/nodePort keeps them.
	again := svc("web", corev1.ServiceTypeNodePort, 80, 0)
	again.Labels = map[string]string{"x": "y"}
	o, err = s.Update(again)
	require.NoError(t, err)
	require.Equal(t, got.Spec.ClusterIP, o.(*corev1.Service).Spec.ClusterIP)
	require.Equal(t, np, o.(*corev1.Service).Spec.Ports[0].NodePort)
	// A second Service cannot take the NodePort.
	_, err = s.Create(svc("other", corev1.ServiceTypeNodePort, 80, np))
	require.ErrorContains(t, err, "provided port is already allocated")
	_, err = s.Create(svc("web", corev1.ServiceTypeNodePort, 80, 0))
	require.True(t, apierrors.IsAlreadyExists(err))
	require.EqualError(t, err, `services "web" already exists`)
}

func TestWatchOrderAndTransactions(t *testing.T) {
	s := newServer(t)
	var seen []string
	s.Watch("Service", func(ev watch.Event) {
		seen = append(seen, string(ev.Type)+" "+ev.Object.(Object).GetName()+" "+ev.Object.(Object).GetResourceVersion())
	})
	s.Begin()
	_, err := s.Create(svc("a", "", 80, 0))
	require.NoError(t, err)
	require.Empty(t, seen, "held back until commit")
	s.Abort()
	require.Empty(t, seen)
	_, err = s.Get("Service", "default", "a")
	require.True(t, apierrors.IsNotFound(err), "aborted")

	s.Begin()
	_, err = s.Create(svc("a", "", 80, 0))
	require.NoError(t, err)
	_, err = s.Create(svc("b", "", 80, 0))
	require.NoError(t, err)
	s.Commit()
	require.NoError(t, s.Delete("Service", "default", "a"))
	require.Len(t, seen, 3)
	require.Regexp(t, `^ADDED a \d+$`, seen[0])
	require.Regexp(t, `^ADDED b \d+$`, seen[1])
	require.Regexp(t, `^DELETED a \d+$`, seen[2])
}

func TestConflict(t *testing.T) {
	s := newServer(t)
	o, err := s.Create(svc("a", "", 80, 0))
	require.NoError(t, err)
	stale := o.DeepCopyObject().(*corev1.Service)
	o.SetLabels(map[string]string{"v": "1"})
	_, err = s.Update(o)
	require.NoError(t, err)
	stale.Labels = map[string]string{"v": "2"}
	_, err = s.Update(stale)
	require.True(t, apierrors.IsConflict(err))
	require.EqualError(t, err, `Operation cannot be fulfilled on services "a": the object has been modified; please apply your changes to the latest version and try again`)
}

func TestPodValidationAndDefaults(t *testing.T) {
	s := newServer(t)
	_, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}})
	require.EqualError(t, err, `Pod "p" is invalid: spec.containers: Required value`)
	o, err := s.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}}})
	require.NoError(t, err)
	p := o.(*corev1.Pod)
	require.Equal(t, corev1.DNSClusterFirst, p.Spec.DNSPolicy)
	require.Equal(t, corev1.PullAlways, p.Spec.Containers[0].ImagePullPolicy, "no tag means latest")
	require.Equal(t, corev1.ProtocolTCP, p.Spec.Containers[0].Ports[0].Protocol)
	require.Len(t, p.Spec.Tolerations, 2, "DefaultTolerationSeconds")
	require.Equal(t, "Pod", p.Kind)
	require.Equal(t, "v1", p.APIVersion)
}

func TestApply(t *testing.T) {
	s := newServer(t)
	_, r, err := s.Apply(svc("web", "", 80, 0))
	require.NoError(t, err)
	require.Equal(t, Created, r)
	_, r, err = s.Apply(svc("web", "", 80, 0))
	require.NoError(t, err)
	require.Equal(t, Unchanged, r)
	_, r, err = s.Apply(svc("web", "", 8080, 0))
	require.NoError(t, err)
	require.Equal(t, Configured, r)
	o, _ := s.Get("Service", "default", "web")
	require.Equal(t, int64(2), o.GetGeneration())
}

// The copies a caller may skip (Peek, WatchReadOnly, Submit, WriteStatus)
// change nothing a caller of Get, Watch, Create and UpdateStatus sees: a
// Watch callback still gets its own copy, the stored object is never one
// a caller can modify through Get, and a status write that changes
// nothing is still a no-op.
func TestReadOnlyAndOwnedPaths(t *testing.T) {
	s := newServer(t)
	var seen, seenRO []*corev1.Pod
	s.Watch("Pod", func(ev watch.Event) {
		p := ev.Object.(*corev1.Pod)
		p.Labels["mutated"] = "by-watcher" // its own copy: harmless
		seen = append(seen, p)
	})
	s.WatchReadOnly("Pod", func(ev watch.Event) { seenRO = append(seenRO, ev.Object.(*corev1.Pod)) })

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
	require.NoError(t, s.Submit(pod))
	stored, ok := s.Peek("Pod", "default", "web")
	require.True(t, ok)
	require.Same(t, stored, seenRO[0], "a read-only watcher is handed the stored object")
	require.NotSame(t, stored, seen[0], "a watcher is handed a copy")
	require.Equal(t, map[string]string{"app": "web"}, stored.GetLabels(), "the watcher's edit did not reach the store")
	got, err := s.Get("Pod", "default", "web")
	require.NoError(t, err)
	require.NotSame(t, stored, got, "Get copies")
	_, ok = s.Peek("Pod", "default", "nope")
	require.False(t, ok)
	_, ok = s.Peek("Widget", "default", "web")
	require.False(t, ok)

	// A status write: stored as a new object, the old one untouched.
	rv := stored.GetResourceVersion()
	up := stored.(*corev1.Pod).DeepCopy()
	up.Status.Phase = corev1.PodRunning
	require.NoError(t, s.WriteStatus(up))
	now, _ := s.Peek("Pod", "default", "web")
	require.NotEqual(t, rv, now.GetResourceVersion())
	require.Equal(t, corev1.PodRunning, now.(*corev1.Pod).Status.Phase)
	require.Equal(t, corev1.PodPhase(""), stored.(*corev1.Pod).Status.Phase, "what Peek returned stays the state it was")
	require.Len(t, seen, 2)
	require.Len(t, seenRO, 2)

	// The same status again, through either path: no revision, no event.
	again := now.(*corev1.Pod).DeepCopy()
	require.NoError(t, s.WriteStatus(again))
	res, err := s.UpdateStatus(now.(*corev1.Pod).DeepCopy())
	require.NoError(t, err)
	cur, _ := s.Peek("Pod", "default", "web")
	require.Equal(t, now.GetResourceVersion(), cur.GetResourceVersion())
	require.Equal(t, now.GetResourceVersion(), res.GetResourceVersion())
	require.Len(t, seen, 2)

	// A status write that changes only a condition is a write.
	again = cur.(*corev1.Pod).DeepCopy()
	again.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	require.NoError(t, s.WriteStatus(again))
	require.Len(t, seen, 3)

	// Inside a transaction the events wait for Commit, copies included.
	s.Begin()
	require.NoError(t, s.Submit(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres"}}}}))
	require.Len(t, seen, 3)
	s.Commit()
	require.Len(t, seen, 4)
	db, _ := s.Peek("Pod", "default", "db")
	require.Same(t, db, seenRO[3])
	require.NotSame(t, db, seen[3])
}

// A pod's and a template's spec errors name their field paths as the API
// server does: the paths are made only for the errors, and these pin them
// (the second container, the second port, the template's spec).
func TestPodSpecErrors(t *testing.T) {
	pod := func(cts ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: corev1.PodSpec{Containers: cts}}
	}
	ok := corev1.Container{Name: "ok", Image: "nginx", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}
	for _, tc := range []struct {
		name string
		obj  Object
		want string
	}{
		{"no containers", pod(), `Pod "web" is invalid: spec.containers: Required value`},
		{"bad container name", pod(ok, corev1.Container{Name: "Web", Image: "nginx"}), `Pod "web" is invalid: spec.containers[1].name: Invalid value: "Web": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
		{"duplicate container", pod(ok, ok), `Pod "web" is invalid: spec.containers[1].name: Duplicate value: "ok"`},
		{"no image", pod(ok, corev1.Container{Name: "b"}), `Pod "web" is invalid: spec.containers[1].image: Required value`},
		{"bad port name", pod(ok, corev1.Container{Name: "b", Image: "nginx", Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53}, {Name: "a--b", ContainerPort: 54}}}),
			`Pod "web" is invalid: spec.containers[1].ports[1].name: Invalid value: "a--b": must not contain consecutive hyphens`},
		{"duplicate port name", pod(corev1.Container{Name: "b", Image: "nginx", Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53}, {Name: "dns", ContainerPort: 54}}}),
			`Pod "web" is invalid: spec.containers[0].ports[1].name: Duplicate value: "dns"`},
		{"no port", pod(corev1.Container{Name: "b", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 53}, {Name: "x"}}}),
			`Pod "web" is invalid: spec.containers[0].ports[1].containerPort: Required value`},
		{"host port twice", pod(corev1.Container{Name: "b", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 53}}}, corev1.Container{Name: "c", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 54, HostPort: 53}}}),
			`Pod "web" is invalid: spec.containers[1].ports[0].hostPort: Duplicate value: "53/TCP"`},
		{"node selector", func() *corev1.Pod { p := pod(ok); p.Spec.NodeSelector = map[string]string{"a/b/c": "x"}; return p }(),
			`Pod "web" is invalid: spec.nodeSelector: Invalid value: "a/b/c": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`},
		{"template", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{ok, {Name: "b"}}}}}},
			`Deployment.apps "web" is invalid: spec.template.spec.containers[1].image: Required value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			_, err := s.Create(tc.obj)
			require.EqualError(t, err, tc.want)
		})
	}
}
