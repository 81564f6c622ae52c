package ipset

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// kubeProxySets are the commands kube-proxy's IPVS proxier runs for a
// small cluster (ipset create ... -exist, ipset add ... -exist).
var kubeProxySets = [][]string{
	{"create", "KUBE-CLUSTER-IP", "hash:ip,port", "family", "inet", "hashsize", "1024", "maxelem", "65536", "-exist"},
	{"add", "KUBE-CLUSTER-IP", "10.96.0.1,tcp:443", "-exist"},
	{"add", "KUBE-CLUSTER-IP", "10.96.0.10,udp:53", "-exist"},
	{"add", "KUBE-CLUSTER-IP", "10.96.0.10,tcp:53", "-exist"},
	{"create", "KUBE-LOOP-BACK", "hash:ip,port,ip", "family", "inet", "hashsize", "1024", "maxelem", "65536", "-exist"},
	{"add", "KUBE-LOOP-BACK", "10.244.1.3,tcp:80,10.244.1.3", "-exist"},
	{"create", "KUBE-NODE-PORT-TCP", "bitmap:port", "range", "0-65535", "-exist"},
	{"add", "KUBE-NODE-PORT-TCP", "30080", "-exist"},
	{"create", "KUBE-LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net", "family", "inet", "hashsize", "1024", "maxelem", "65536", "-exist"},
	{"add", "KUBE-LOAD-BALANCER-SOURCE-CIDR", "192.168.122.200,tcp:80,192.168.122.100/32", "-exist"},
	{"create", "KUBE-IPVS-IPS", "hash:ip", "family", "inet", "hashsize", "1024", "maxelem", "65536", "-exist"},
	{"add", "KUBE-IPVS-IPS", "10.96.0.1", "-exist"},
	{"create", "NETS", "hash:net", "family", "inet", "hashsize", "1024", "maxelem", "65536", "comment"},
	{"add", "NETS", "10.0.0.0/8", "comment", "ten"},
	{"add", "NETS", "10.1.0.0/16"},
}

func build(t *testing.T) *Registry {
	r := NewRegistry()
	for _, c := range kubeProxySets {
		require.NoError(t, r.Exec(c...), "%v", c)
	}
	return r
}

func TestListLayout(t *testing.T) {
	r := build(t)
	require.Equal(t, `Name: KUBE-CLUSTER-IP
Type: hash:ip,port
Revision: 7
Header: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval `+hex(r.Get("KUBE-CLUSTER-IP").initval)+`
Size in memory: 360
References: 0
Number of entries: 3
Members:
10.96.0.1,tcp:443
10.96.0.10,tcp:53
10.96.0.10,udp:53
`, r.Get("KUBE-CLUSTER-IP").List())
	require.Equal(t, "Name: KUBE-NODE-PORT-TCP\nType: bitmap:port\nRevision: 3\nHeader: range 0-65535\nSize in memory: 8264\nReferences: 0\nNumber of entries: 1\nMembers:\n30080\n",
		r.Get("KUBE-NODE-PORT-TCP").List())
	require.Contains(t, r.Save(), "add NETS 10.0.0.0/8 comment \"ten\"\nadd NETS 10.1.0.0/16\n")
}

func hex(v uint32) string {
	const d = "0123456789abcdef"
	b := []byte{}
	for v > 0 {
		b = append([]byte{d[v&15]}, b...)
		v >>= 4
	}
	return "0x" + string(b)
}

func TestMatch(t *testing.T) {
	r := build(t)
	ip := func(a, b, c, d byte) [4]byte { return [4]byte{a, b, c, d} }
	for _, tc := range []struct {
		set   string
		ip    [4]byte
		proto uint8
		port  uint16
		ip2   [4]byte
		want  bool
	}{
		{"KUBE-CLUSTER-IP", ip(10, 96, 0, 1), 6, 443, [4]byte{}, true},
		{"KUBE-CLUSTER-IP", ip(10, 96, 0, 1), 17, 443, [4]byte{}, false},
		{"KUBE-CLUSTER-IP", ip(10, 96, 0, 1), 6, 444, [4]byte{}, false},
		{"KUBE-LOOP-BACK", ip(10, 244, 1, 3), 6, 80, ip(10, 244, 1, 3), true},
		{"KUBE-LOOP-BACK", ip(10, 244, 1, 3), 6, 80, ip(10, 244, 1, 4), false},
		{"KUBE-NODE-PORT-TCP", [4]byte{}, 6, 30080, [4]byte{}, true},
		{"KUBE-NODE-PORT-TCP", [4]byte{}, 6, 30081, [4]byte{}, false},
		{"KUBE-LOAD-BALANCER-SOURCE-CIDR", ip(192, 168, 122, 200), 6, 80, ip(192, 168, 122, 100), true},
		{"KUBE-LOAD-BALANCER-SOURCE-CIDR", ip(192, 168, 122, 200), 6, 80, ip(192, 168, 122, 101), false},
		{"NETS", ip(10, 9, 9, 9), 0, 0, [4]byte{}, true},
		{"NETS", ip(11, 0, 0, 1), 0, 0, [4]byte{}, false},
		{"KUBE-IPVS-IPS", ip(10, 96, 0, 1), 0, 0, [4]byte{}, true},
	} {
		require.Equal(t, tc.want, r.Get(tc.set).Match(tc.ip, tc.proto, tc.port, tc.ip2), "%+v", tc)
	}
	s := r.Get("KUBE-CLUSTER-IP")
	require.Zero(t, testing.AllocsPerRun(100, func() { s.Match(ip(10, 96, 0, 1), 6, 443, [4]byte{}) }))
}

func TestErrors(t *testing.T) {
	r := build(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "X", "hash:ip,port", "bogus"}, "ipset v7.17: Unknown argument: `bogus'"},
		{[]string{"add", "KUBE-CLUSTER-IP", "10.96.0.1,foo:1"}, "ipset v7.17: Syntax error: cannot parse 'foo' as a protocol"},
		{[]string{"add", "NOPE", "1.2.3.4"}, "ipset v7.17: The set with the given name does not exist"},
		{[]string{"add", "KUBE-CLUSTER-IP", "10.96.0.1,tcp:443"}, "ipset v7.17: Element cannot be added to the set: it's already added"},
		{[]string{"del", "KUBE-CLUSTER-IP", "10.96.0.2,tcp:443"}, "ipset v7.17: Element cannot be deleted from the set: it's not added"},
		{[]string{"create", "KUBE-CLUSTER-IP", "hash:ip"}, "ipset v7.17: Set cannot be created: set with the same name already exists"},
		{[]string{"create", "Y", "hash:foo"}, "ipset v7.17: Syntax error: typename 'hash:foo' is unknown"},
		{[]string{"create", "B", "bitmap:port"}, "ipset v7.17: Syntax error: Missing mandatory option \"range\""},
	} {
		err := r.Exec(tc.args...)
		require.EqualError(t, err, tc.want, "%v", tc.args)
	}
	r.References = func(name string) int { return 1 }
	require.EqualError(t, r.Destroy("KUBE-CLUSTER-IP"), "ipset v7.17: Set cannot be destroyed: it is in use by a kernel component")
	r.References = nil
	require.NoError(t, r.Destroy("KUBE-CLUSTER-IP"))
	require.Nil(t, r.Get("KUBE-CLUSTER-IP"))
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"10.96.0.1,tcp:443", "1.2.3.4,udp:1,5.6.7.8/9", "30080", "10.0.0.0/8", ",,", "1.2.3.4,:", "1.2.3.4,sctp:99999"} {
		f.Add(s)
	}
	r := NewRegistry()
	for _, c := range kubeProxySets {
		if c[0] == "create" {
			_ = r.Exec(c...)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, set := range r.Sets() {
			if e, err := set.ParseEntry(s); err == nil {
				_ = set.format(e)
			}
		}
	})
}
