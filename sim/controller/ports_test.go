package controller

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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
