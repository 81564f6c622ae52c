package netfilter

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRestoreErrorsNameLineAndChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		line        int
		msg         string
	}{
		{"unknown match", "*filter\n-A INPUT -m bogus --foo 1 -j ACCEPT\nCOMMIT\n", 2, "Couldn't load match `bogus'"},
		{"unknown target", "*filter\n-A INPUT -j CONNMARKX\nCOMMIT\n", 2, "Couldn't load target `CONNMARKX'"},
		{"jump to missing chain", "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j KUBE-SVC-MISSING\nCOMMIT\n", 3, "Couldn't load target `KUBE-SVC-MISSING'"},
		{"unknown option", "*filter\n-A INPUT -p tcp --frobnicate 1 -j ACCEPT\nCOMMIT\n", 2, `unknown option "--frobnicate"`},
		{"option of a match not loaded", "*filter\n-A INPUT --dport 80 -j ACCEPT\nCOMMIT\n", 2, `unknown option "--dport"`},
		{"unknown chain", "*filter\n-A NOPE -j ACCEPT\nCOMMIT\n", 2, "chain `NOPE' does not exist"},
		{"unterminated quote", "*filter\n-A INPUT -m comment --comment \"oops -j ACCEPT\nCOMMIT\n", 2, "unterminated quoted string"},
		{"missing commit", "*filter\n-A INPUT -j ACCEPT\n", 1, "COMMIT expected"},
		{"no table", "-A INPUT -j ACCEPT\n", 1, "no table specified"},
		{"bad table", "*nonsense\nCOMMIT\n", 1, "Table does not exist"},
		{"bad address", "*filter\n-A INPUT -s 10.0.0.300 -j ACCEPT\nCOMMIT\n", 2, "host/network `10.0.0.300' not found"},
		{"bad port range", "*filter\n-A INPUT -p tcp -m tcp --dport 90:80 -j ACCEPT\nCOMMIT\n", 2, "invalid portrange"},
		{"tcp match without -p tcp", "*filter\n-A INPUT -m tcp --dport 80 -j ACCEPT\nCOMMIT\n", 2, "tcp match: only valid for protocol 6"},
		{"DNAT in filter", "*filter\n-A INPUT -p tcp -j DNAT --to-destination 10.0.0.1:80\nCOMMIT\n", 2, "only valid in nat table"},
		{"DNAT from POSTROUTING", "*nat\n:X - [0:0]\n-A POSTROUTING -j X\n-A X -j DNAT --to-destination 10.0.0.1\nCOMMIT\n", 4, "used from hooks POSTROUTING, but only usable from PREROUTING/OUTPUT"},
		{"loop", "*filter\n:A - [0:0]\n:B - [0:0]\n-A INPUT -j A\n-A A -j B\n-A B -j A\nCOMMIT\n", 6, "loop detected"},
		{"delete referenced chain", "*filter\n:A - [0:0]\n-A INPUT -j A\n-X A\nCOMMIT\n", 4, "Too many links"},
		{"probability out of range", "*nat\n-A PREROUTING -m statistic --mode random --probability 1.5 -j ACCEPT\nCOMMIT\n", 2, "between 0 and 1"},
		{"-i in OUTPUT", "*filter\n-A OUTPUT -i eth0 -j ACCEPT\nCOMMIT\n", 2, "Can't use -i with OUTPUT"},
		{"tcp-reset for udp", "*filter\n-A INPUT -p udp -j REJECT --reject-with tcp-reset\nCOMMIT\n", 2, "TCP_RESET invalid"},
		{"policy on user chain", "*filter\n:A ACCEPT [0:0]\nCOMMIT\n", 2, "Can't set policy"},
		{"garbage", "*filter\nhello world\nCOMMIT\n", 2, "unknown command `hello'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nf := newNF(t)
			in, err := os.ReadFile("testdata/kube-proxy.save")
			require.NoError(t, err)
			require.NoError(t, nf.Restore(string(in), RestoreOptions{}))
			before := nf.Save(SaveOptions{Counters: true})
			// a valid table first: it must not be committed either
			err = nf.Restore("*raw\n-A PREROUTING -j ACCEPT\nCOMMIT\n"+tc.input, RestoreOptions{})
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			lines := strings.Split("*raw\n-A PREROUTING -j ACCEPT\nCOMMIT\n"+tc.input, "\n")
			assert.Equal(t, tc.line+3, pe.Line)
			assert.Equal(t, lines[pe.Line-1], pe.Text)
			assert.Contains(t, pe.Msg, tc.msg)
			assert.Contains(t, err.Error(), "line ")
			assert.Equal(t, before, nf.Save(SaveOptions{Counters: true}), "nothing changed")
			assert.Nil(t, nf.Table(Raw).Chain("PREROUTING").Rules())
		})
	}
}

func TestSaveNormalisesLikeIPTablesSave(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"-A INPUT -p tcp --dport 80 -s 10.0.0.5 -j ACCEPT", "-A INPUT -s 10.0.0.5/32 -p tcp -m tcp --dport 80 -j ACCEPT"},
		{"-A INPUT -d 10.1.2.3/16 ! -i eth+ -j DROP", "-A INPUT -d 10.1.0.0/16 ! -i eth+ -j DROP"},
		{"-A INPUT -m comment --comment plain -j ACCEPT", "-A INPUT -m comment --comment plain -j ACCEPT"},
		{"-A INPUT -m comment --comment ns/svc:port -j ACCEPT", `-A INPUT -m comment --comment "ns/svc:port" -j ACCEPT`},
		{`-A INPUT -m comment --comment "say \"hi\"" -j ACCEPT`, `-A INPUT -m comment --comment "say \"hi\"" -j ACCEPT`},
		{"-A INPUT -p tcp -j REJECT", "-A INPUT -p tcp -j REJECT --reject-with icmp-port-unreachable"},
		{"-A INPUT -p tcp --syn -j ACCEPT", "-A INPUT -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j ACCEPT"},
		{"-A INPUT -m statistic --mode random --probability 0.3333333333 -j ACCEPT", "-A INPUT -m statistic --mode random --probability 0.33333333349 -j ACCEPT"},
		{"-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT", "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"},
		{"-A INPUT -p udp -m multiport --dports 53,8000:8080 -j ACCEPT", "-A INPUT -p udp -m multiport --dports 53,8000:8080 -j ACCEPT"},
		{"-A INPUT -m mark --mark 0x4000 -j ACCEPT", "-A INPUT -m mark --mark 0x4000 -j ACCEPT"},
		{"-A INPUT -j MARK --set-mark 0x1/0xff", "-A INPUT -j MARK --set-xmark 0x1/0xff"},
		{"-A INPUT -j MARK --and-mark 0xffffbfff", "-A INPUT -j MARK --set-xmark 0x0/0x4000"},
		{"-A INPUT -j LOG --log-prefix \"kube drop: \" --log-level warning", `-A INPUT -j LOG --log-prefix "kube drop: "`},
		{"-A INPUT -p icmp --icmp-type echo-request -j ACCEPT", "-A INPUT -p icmp -m icmp --icmp-type 8 -j ACCEPT"},
		{"-A INPUT -s 10.0.0.0/255.0.255.0 -j ACCEPT", "-A INPUT -s 10.0.0.0/255.0.255.0 -j ACCEPT"},
	} {
		nf := newNF(t)
		require.NoError(t, nf.Restore("*filter\n"+tc.in+"\nCOMMIT\n", RestoreOptions{}), tc.in)
		want := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + tc.out + "\nCOMMIT\n"
		assert.Equal(t, want, nf.Save(SaveOptions{}), tc.in)
	}
}

func TestRestoreAcceptsCommentsAndCounterPrefixes(t *testing.T) {
	nf := newNF(t)
	in := "# Generated by iptables-save v1.8.7 on Sat Nov 29 09:00:00 2025\n*nat\n:PREROUTING ACCEPT [12:720]\n[3:180] -A PREROUTING -j RETURN\nCOMMIT\n# Completed on Sat Nov 29 09:00:00 2025\n"
	require.NoError(t, nf.Restore(in, RestoreOptions{}))
	assert.Equal(t, "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n-A PREROUTING -j RETURN\nCOMMIT\n", nf.Save(SaveOptions{}))
}

// FuzzRestore: no input panics, and accepted input round-trips: what Save
// prints restores to the same Save output.
func FuzzRestore(f *testing.F) {
	in, _ := os.ReadFile("testdata/kube-proxy.save")
	f.Add(string(in))
	for _, s := range []string{
		"*filter\n-A INPUT -s\nCOMMIT\n",
		"*filter\n-A INPUT -m\n",
		"*nat\n:X - [0:\n-A X -j DNAT --to-destination :\nCOMMIT\n",
		"*filter\n-A INPUT ! ! -s 1.2.3.4 -j ACCEPT\nCOMMIT\n",
		"*filter\n-A INPUT -m comment --comment \"\\\nCOMMIT\n",
		"*filter\n[1:2 -A INPUT -j ACCEPT\nCOMMIT\n",
		"*filter\n-I INPUT 5 -j ACCEPT\nCOMMIT\n",
		"*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 1.2.3.4-1.2.3.1:0\nCOMMIT\n",
		"*filter\n-A INPUT -p tcp -m multiport --dports 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -j ACCEPT\nCOMMIT\n",
		"*filter\n-A INPUT -m recent --name x --rcheck --reap -j ACCEPT\nCOMMIT\n",
		"*filter\n-A INPUT -m statistic --mode nth --every 3 --packet 2 -j ACCEPT\nCOMMIT\n",
		"*mangle\n-A PREROUTING -m addrtype --src-type LOCAL,BROADCAST --limit-iface-in -j MARK --set-xmark 0x1/0x1\nCOMMIT\n",
		"*raw\n-A OUTPUT -m conntrack --ctstatus SEEN_REPLY,ASSURED -j ACCEPT\nCOMMIT\n",
		"*filter\n-A OUTPUT -p sctp -m sctp ! --sport 1:2 --dport 3868 -j ACCEPT\nCOMMIT\n",
		"*nat\n-A PREROUTING -p sctp --dport 1 -j DNAT --to-destination 1.2.3.4:5\nCOMMIT\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nf := newNF(t)
		if err := nf.Restore(s, RestoreOptions{Counters: true}); err != nil {
			var pe *ParseError
			if !errorAs(err, &pe) {
				t.Fatalf("error is not a *ParseError: %v", err)
			}
			return
		}
		out := nf.Save(SaveOptions{Counters: true})
		nf2 := newNF(t)
		if err := nf2.Restore(out, RestoreOptions{Counters: true}); err != nil {
			t.Fatalf("saved output does not restore: %v\n%s", err, out)
		}
		if out2 := nf2.Save(SaveOptions{Counters: true}); out2 != out {
			t.Fatalf("round trip differs:\n%s\n---\n%s", out, out2)
		}
	})
}

func errorAs(err error, pe **ParseError) bool {
	p, ok := err.(*ParseError)
	*pe = p
	return ok
}

// A --noflush restore stages the table's own chain map until it creates
// or deletes a chain: a failed one must leave the chains it created or
// deleted as they were, as must a failed command.
func TestNoflushFailureKeepsChains(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		exec        []string
	}{
		{name: "declared chain", input: "*nat\n:KUBE-NEW - [0:0]\n-A KUBE-NEW -j NOSUCH\nCOMMIT\n"},
		{name: "created chain", input: "*nat\n-N KUBE-NEW\n-A KUBE-NEW -j NOSUCH\nCOMMIT\n"},
		{name: "deleted chain", input: "*nat\n-X KUBE-OLD\n-A KUBE-SERVICES -j NOSUCH\nCOMMIT\n"},
		{name: "looping jump", exec: []string{"-A", "KUBE-MARK-MASQ", "-j", "KUBE-SERVICES"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nf := newNF(t)
			in, err := os.ReadFile("testdata/kube-proxy.save")
			require.NoError(t, err)
			require.NoError(t, nf.Restore(string(in), RestoreOptions{}))
			require.NoError(t, nf.Exec(NAT, "-A", "KUBE-SERVICES", "-j", "KUBE-MARK-MASQ"))
			require.NoError(t, nf.Exec(NAT, "-N", "KUBE-OLD"))
			before := nf.Save(SaveOptions{Counters: true})
			if tc.exec != nil {
				err = nf.Exec(NAT, tc.exec...)
			} else {
				err = nf.Restore(tc.input, RestoreOptions{Noflush: true})
			}
			require.Error(t, err)
			assert.Equal(t, before, nf.Save(SaveOptions{Counters: true}), "nothing changed")
			assert.Nil(t, nf.Table(NAT).Chain("KUBE-NEW"))
			assert.NotNil(t, nf.Table(NAT).Chain("KUBE-OLD"))
		})
	}
}

// A restore keeps a built-in chain's policy unless its input sets one.
func TestRestoreKeepsPolicyNotSet(t *testing.T) {
	nf := newNF(t)
	require.NoError(t, nf.Exec(Filter, "-P", "FORWARD", "DROP"))
	require.NoError(t, nf.Restore("*filter\n:INPUT DROP [0:0]\n-A FORWARD -j ACCEPT\nCOMMIT\n", RestoreOptions{}))
	require.NoError(t, nf.Restore("*filter\n-A OUTPUT -j ACCEPT\nCOMMIT\n", RestoreOptions{Noflush: true}))
	out := nf.Save(SaveOptions{})
	assert.Contains(t, out, ":INPUT DROP [0:0]\n")
	assert.Contains(t, out, ":FORWARD DROP [0:0]\n")
	assert.Contains(t, out, ":OUTPUT ACCEPT [0:0]\n")
}
