package dns

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodResolvConf(t *testing.T) {
	host := ParseResolvConf("# written by systemd\nnameserver 192.168.122.1\nnameserver 1.1.1.1 ; second\nsearch lab.example\noptions edns0 trust-ad\n")
	k := KubeletDNS{ClusterDNS: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, ClusterDomain: "cluster.local", Host: host}
	two := "2"
	for _, tc := range []struct {
		name   string
		spec   corev1.PodSpec
		k      KubeletDNS
		want   string
		events []string
	}{
		{"cluster first", corev1.PodSpec{}, k,
			"search net.svc.cluster.local svc.cluster.local cluster.local lab.example\nnameserver 10.96.0.10\noptions ndots:5\n", nil},
		{"cluster first, host network falls back to the host file", corev1.PodSpec{HostNetwork: true}, k,
			"search lab.example\nnameserver 192.168.122.1\nnameserver 1.1.1.1\noptions edns0 trust-ad\n", nil},
		{"cluster first with host net", corev1.PodSpec{HostNetwork: true, DNSPolicy: corev1.DNSClusterFirstWithHostNet}, k,
			"search net.svc.cluster.local svc.cluster.local cluster.local lab.example\nnameserver 10.96.0.10\noptions ndots:5\n", nil},
		{"default", corev1.PodSpec{DNSPolicy: corev1.DNSDefault}, k,
			"search lab.example\nnameserver 192.168.122.1\nnameserver 1.1.1.1\noptions edns0 trust-ad\n", nil},
		{"none with dnsConfig", corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{
			Nameservers: []string{"8.8.8.8"}, Searches: []string{"a.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}}}}, k,
			"search a.example\nnameserver 8.8.8.8\noptions ndots:2\n", nil},
		{"dnsConfig merges, the pod's option wins", corev1.PodSpec{DNSConfig: &corev1.PodDNSConfig{
			Nameservers: []string{"10.96.0.10", "9.9.9.9"}, Searches: []string{"cluster.local", "x.example"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "edns0"}}}}, k,
			"search net.svc.cluster.local svc.cluster.local cluster.local lab.example x.example\nnameserver 10.96.0.10\nnameserver 9.9.9.9\noptions ndots:2 edns0\n", nil},
		{"no clusterDNS", corev1.PodSpec{}, KubeletDNS{Host: host},
			"search lab.example\nnameserver 192.168.122.1\nnameserver 1.1.1.1\noptions edns0 trust-ad\n", []string{"MissingClusterDNS"}},
		{"four nameservers", corev1.PodSpec{DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.0.0.1", "1.0.0.2", "1.0.0.3"}}}, k,
			"search net.svc.cluster.local svc.cluster.local cluster.local lab.example\nnameserver 10.96.0.10\nnameserver 1.0.0.1\nnameserver 1.0.0.2\noptions ndots:5\n",
			[]string{"DNSConfigForming"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "net", Name: "p"}, Spec: tc.spec}
			r, evs := PodResolvConf(pod, tc.k)
			assert.Equal(t, tc.want, r.String())
			var reasons []string
			for _, e := range evs {
				reasons = append(reasons, e.Reason)
			}
			assert.Equal(t, tc.events, reasons)
		})
	}
}

func TestSearchLimits(t *testing.T) {
	var many []string
	for i := range 40 {
		many = append(many, strings.Repeat("d", 3)+string(rune('a'+i%26)))
	}
	assert.Len(t, limitSearches(many), MaxSearches)
	long := []string{strings.Repeat("a", 1500), strings.Repeat("b", 600), "c"}
	assert.Equal(t, long[:1], limitSearches(long))
	assert.Equal(t, long[1:], limitSearches(long[1:]))
}

func FuzzParseResolvConf(f *testing.F) {
	f.Add("nameserver 10.96.0.10\nsearch a b\noptions ndots:5\n")
	f.Add("domain x\n#c\n;c\nnameserver")
	f.Fuzz(func(t *testing.T, s string) {
		r := ParseResolvConf(s)
		// What String writes, ParseResolvConf reads back.
		assert.Equal(t, r.String(), ParseResolvConf(r.String()).String())
	})
}
