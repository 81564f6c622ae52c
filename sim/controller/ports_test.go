package controller

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// portsEqual answers as apiequality.Semantic.DeepEqual does, and knows
// every field of EndpointPort (a new one in k8s.io/api fails here).
func TestPortsEqual(t *testing.T) {
	var fields []string
	for f := range reflect.TypeFor[discoveryv1.EndpointPort]().Fields() {
		fields = append(fields, f.Name)
	}
	require.Equal(t, []string{"Name", "Protocol", "Port", "AppProtocol"}, fields)
	str := func(s string) *string { return &s }
	num := func(n int32) *int32 { return &n }
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	lists := [][]discoveryv1.EndpointPort{
		nil,
		{},
		{{}},
		{{Name: str("http"), Protocol: &tcp, Port: num(80)}},
		{{Name: str("http"), Protocol: &tcp, Port: num(80)}},
		{{Name: str("http"), Protocol: &udp, Port: num(80)}},
		{{Name: str("http"), Protocol: &tcp, Port: num(8080)}},
		{{Name: str(""), Protocol: &tcp, Port: num(80)}},
		{{Protocol: &tcp, Port: num(80)}},
		{{Name: str("http"), Protocol: &tcp, Port: num(80), AppProtocol: str("h2c")}},
		{{Name: str("http"), Protocol: &tcp, Port: num(80), AppProtocol: str("http")}},
		{{Name: str("http"), Protocol: &tcp, Port: num(80)}, {Name: str("dns"), Protocol: &udp, Port: num(53)}},
	}
	for i, a := range lists {
		for j, b := range lists {
			require.Equal(t, apiequality.Semantic.DeepEqual(a, b), portsEqual(a, b), "%d vs %d", i, j)
		}
	}
}

// endpointsIdentical and labelsIdentical say true only where
// apiequality.Semantic.DeepEqual does, say it for the endpoints the
// controller builds twice alike, and know every field of Endpoint.
func TestEndpointsIdenticalImpliesSemanticEqual(t *testing.T) {
	var fields []string
	for f := range reflect.TypeFor[discoveryv1.Endpoint]().Fields() {
		fields = append(fields, f.Name)
	}
	require.Equal(t, []string{"Addresses", "Conditions", "Hostname", "TargetRef", "DeprecatedTopology", "NodeName", "Zone", "Hints"}, fields)
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vals ...string) *string {
		if i := rng.IntN(len(vals) + 1); i < len(vals) {
			return &vals[i]
		}
		return nil
	}
	flag := func() *bool {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			v := true
			return &v
		}
		v := false
		return &v
	}
	endpoint := func() discoveryv1.Endpoint {
		ep := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: flag(), Serving: flag(), Terminating: flag()},
			Hostname: pick("web-0"), NodeName: pick("n1", "n2"), Zone: pick("a")}
		switch rng.IntN(3) {
		case 1:
			ep.Addresses = []string{}
		case 2:
			ep.Addresses = []string{[]string{"10.244.1.2", "10.244.2.2"}[rng.IntN(2)]}
		}
		if rng.IntN(2) == 0 {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: []string{"a", "b"}[rng.IntN(2)]}
		}
		switch rng.IntN(6) {
		case 0:
			ep.DeprecatedTopology = map[string]string{}
		case 1:
			ep.Hints = &discoveryv1.EndpointHints{}
		}
		return ep
	}
	list := func() []discoveryv1.Endpoint {
		switch rng.IntN(5) {
		case 0:
			return nil
		case 1:
			return []discoveryv1.Endpoint{}
		}
		var out []discoveryv1.Endpoint
		for range rng.IntN(3) + 1 {
			out = append(out, endpoint())
		}
		return out
	}
	identical := 0
	for range 20000 {
		a, b := list(), list()
		if rng.IntN(3) == 0 {
			b = slices.Clone(a) // same values, same pointers
		}
		if endpointsIdentical(a, b) {
			identical++
			require.True(t, apiequality.Semantic.DeepEqual(a, b), "%+v vs %+v", a, b)
		}
	}
	require.Greater(t, identical, 1000)
	// The endpoints the controller builds for the same pod twice.
	svc := &corev1.Service{}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u"}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{PodIP: "10.244.1.2", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	require.True(t, endpointsIdentical([]discoveryv1.Endpoint{endpointFor(svc, p)}, []discoveryv1.Endpoint{endpointFor(svc, p)}))
	for _, m := range []map[string]string{nil, {}, {"a": "b"}, {"a": "c"}, {"a": "b", "c": "d"}} {
		for _, n := range []map[string]string{nil, {}, {"a": "b"}, {"a": "c"}, {"a": "b", "c": "d"}} {
			if labelsIdentical(m, n) {
				require.True(t, apiequality.Semantic.DeepEqual(m, n), "%v vs %v", m, n)
			}
		}
	}
	require.True(t, labelsIdentical(map[string]string{"a": "b"}, map[string]string{"a": "b"}))
}
