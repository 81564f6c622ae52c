package netfilter

import (
	"testing"

	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/ipset"
	"github.com/stretchr/testify/require"
)

func TestSetMatchParseSaveAndMatch(t *testing.T) {
	tp := newTopo(t, conntrack.Config{})
	sets := ipset.NewRegistry()
	require.NoError(t, sets.Exec("create", "KUBE-CLUSTER-IP", "hash:ip,port", "family", "inet", "hashsize", "1024", "maxelem", "65536"))
	require.NoError(t, sets.Exec("add", "KUBE-CLUSTER-IP", "10.0.2.2,udp:53"))
	require.NoError(t, sets.Exec("create", "PORTS", "bitmap:port", "range", "0-65535"))
	require.NoError(t, sets.Exec("add", "PORTS", "54"))

	// Without the registry the set does not exist, in iptables' words.
	err := tp.nf.Exec("filter", "-A", "FORWARD", "-m", "set", "--match-set", "KUBE-CLUSTER-IP", "dst,dst", "-j", "ACCEPT")
	require.ErrorContains(t, err, "Set KUBE-CLUSTER-IP doesn't exist.")

	tp.nf.UseIPSets(sets)
	require.ErrorContains(t, tp.nf.Exec("filter", "-A", "FORWARD", "-m", "set", "--match-set", "NOPE", "dst,dst", "-j", "ACCEPT"), "Set NOPE doesn't exist.")
	require.ErrorContains(t, tp.nf.Exec("filter", "-A", "FORWARD", "-m", "set", "--match-set", "PORTS", "dest", "-j", "ACCEPT"),
		"You must specify (the comma separated list of) 'src' or 'dst'.")
	tp.restore(t, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m set --match-set KUBE-CLUSTER-IP dst,dst -j DROP
-A FORWARD -p udp -m set ! --match-set PORTS dst -j REJECT
-A FORWARD -m physdev ! --physdev-is-in -j ACCEPT
COMMIT
`)
	save := tp.nf.Save(SaveOptions{})
	require.Contains(t, save, "-A FORWARD -m set --match-set KUBE-CLUSTER-IP dst,dst -j DROP\n")
	require.Contains(t, save, "-A FORWARD -p udp -m set ! --match-set PORTS dst -j REJECT --reject-with icmp-port-unreachable\n")
	require.Contains(t, save, "-A FORWARD -m physdev ! --physdev-is-in -j ACCEPT\n")
	require.Contains(t, sets.Get("KUBE-CLUSTER-IP").List(), "References: 1\n")
	require.EqualError(t, sets.Destroy("PORTS"), "ipset v7.17: Set cannot be destroyed: it is in use by a kernel component")

	fwd := tp.nf.Table("filter").Chain("FORWARD")
	// 10.0.2.2:53/udp is in KUBE-CLUSTER-IP: dropped by rule 1.
	send(t, tp.client, udpPacket(ipClient, ipServer, 1000, 53, []byte("a")), nil)
	require.NoError(t, tp.e.Run())
	require.Empty(t, tp.atServer.pkts)
	require.Equal(t, uint64(1), pkts(fwd, 0))
	// Port 54 is in PORTS: the negated match fails; physdev: not bridged.
	send(t, tp.client, udpPacket(ipClient, ipServer, 1000, 54, []byte("b")), nil)
	require.NoError(t, tp.e.Run())
	require.Len(t, tp.atServer.pkts, 1)
	// The request and the server's ICMP port unreachable (nothing
	// listens) coming back: an ICMP error's "port" is type<<8|code, in no set.
	require.Equal(t, uint64(2), pkts(fwd, 2))
	// Port 55 is in neither: rejected.
	send(t, tp.client, udpPacket(ipClient, ipServer, 1000, 55, []byte("c")), nil)
	require.NoError(t, tp.e.Run())
	require.Len(t, tp.atServer.pkts, 1)
	require.Equal(t, uint64(1), pkts(fwd, 1))
}
