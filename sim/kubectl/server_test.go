package kubectl

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewalk/kubewalk/internal/golden"
	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// The views over the real in-memory API server: what it allocated and
// created (default/kubernetes and its EndpointSlice, a NodePort, the
// rejection of a bad one) shows as kubectl would show it.
func TestViewsOverAPIServer(t *testing.T) {
	var now time.Duration
	s, err := apiserver.New(apiserver.Config{AdvertiseAddress: netip.MustParseAddr("192.168.122.11")},
		func() time.Time { return apiserver.Epoch.Add(now) }, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	now = 90 * time.Second
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80}}}}
	_, err = s.Create(web)
	require.NoError(t, err)
	bad := web.DeepCopy()
	bad.Name, bad.Spec.Ports[0].NodePort = "bad", 80
	_, err = s.Create(bad)
	now = 5 * time.Minute

	var out, errOut bytes.Buffer
	require.NoError(t, Get(s, []string{"svc"}, GetOptions{AllNamespaces: true}, &out, &errOut))
	require.NoError(t, Get(s, []string{"endpointslices"}, GetOptions{Output: "wide"}, &out, &errOut))
	require.NoError(t, Get(s, []string{"ns"}, GetOptions{}, &out, &errOut))
	require.NoError(t, Describe(s, []string{"svc", "web"}, "", &out, &out))
	out.WriteString(ErrorText(err))
	require.Empty(t, errOut.String())
	golden.Check(t, "apiserver-views.txt", out.String())
}
