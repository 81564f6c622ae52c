package datapath_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
)

// TestLinkDumpNetnsid: iproute2 6.1 prints link-netnsid once, on the
// link/ether line of `ip link` and at the end of the first line of
// `ip -4 addr` (which has no link/ether line); the kernel numbers a
// namespace's peer namespaces from 0 in the order their veths came.
func TestLinkDumpNetnsid(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	h := r.W1.Host
	var veths []string
	for _, d := range h.Devices() {
		if strings.HasPrefix(d.Name, "veth") {
			veths = append(veths, d.Name)
		}
	}
	require.Len(t, veths, 2, "client and web-1 on cka-w1")
	for i, name := range veths {
		d := h.Device(name)
		got := h.IPLink(name, false)
		want := fmt.Sprintf("%d: %s@if%d: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 qdisc noqueue master cni0 state UP mode DEFAULT group default qlen 1000\n"+
			"    link/ether %s brd ff:ff:ff:ff:ff:ff link-netnsid %d\n", d.Index, name, d.Peer().Index, d.MAC(), i)
		require.Equal(t, want, got)
		detail := h.IPLink(name, true)
		require.Equal(t, 1, strings.Count(detail, "link-netnsid"), detail)
		require.Contains(t, detail, fmt.Sprintf("link-netnsid %d promiscuity 1  allmulti 1 minmtu 68", i), "a bridge port is promiscuous")
	}
	pod := r.Client.Netns
	require.Equal(t, 1, strings.Count(pod.IPLink("eth0", false), "link-netnsid"))
	require.Contains(t, pod.IPLink("eth0", false), "brd ff:ff:ff:ff:ff:ff link-netnsid 0\n", "the node is the pod's peer 0")
	require.Contains(t, pod.IPLink("eth0", true), "link-netnsid 0 promiscuity 0  allmulti 0 minmtu 68")
	addr := pod.IPAddr()
	require.Equal(t, 1, strings.Count(addr, "link-netnsid"), addr)
	require.Contains(t, addr, "state UP group default qlen 1000 link-netnsid 0\n    inet 10.244.1.2/24 brd 10.244.1.255 scope global eth0\n")
	require.Contains(t, h.IPLink("cni0", true), " stp_state 0 priority 32768 ", "the bridge's default priority is 0x8000")
}
