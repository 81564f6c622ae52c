package play

import (
	"github.com/kubewalk/kubewalk/datapath/ipvs"

	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/netfilter"
	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/dns"
)

// shellCommand is one command run inside a node or a pod: the words that
// name it (a trailing "*" word takes one argument, a device name) and what
// it prints.
type shellCommand[T any] struct {
	forms []string
	run   func(x T, arg string) (string, error)
}

// match finds the command words name and its argument, if it takes one.
func match[T any](table []shellCommand[T], words []string) (*shellCommand[T], string, bool) {
	line := strings.Join(words, " ")
	for i := range table {
		for _, f := range table[i].forms {
			if pre, ok := strings.CutSuffix(f, " *"); ok {
				if arg, ok := strings.CutPrefix(line, pre+" "); ok && !strings.Contains(arg, " ") {
					return &table[i], arg, true
				}
				continue
			}
			if line == f {
				return &table[i], "", true
			}
		}
	}
	return nil, "", false
}

func forms[T any](table []shellCommand[T]) string {
	var names []string
	for _, c := range table {
		names = append(names, c.forms[0])
	}
	return strings.Join(names, ", ")
}

// ipLink is `ip [-d] link [show [DEV]]` over the devices of ns.
func ipLink(ns *datapath.Netns, dev string, detail bool) (string, error) {
	if dev != "" {
		s := ns.IPLink(dev, detail)
		if s == "" {
			//lint:ignore ST1005 iproute2's own message
			return "", fmt.Errorf("Device \"%s\" does not exist.", dev)
		}
		return s, nil
	}
	var b strings.Builder
	for _, d := range ns.Devices() {
		b.WriteString(ns.IPLink(d.Name, detail))
	}
	return b.String(), nil
}

// nodeCommands are what `node NAME: CMD` runs in a node's root namespace,
// printing what iproute2 6.1, iptables-save and conntrack print there.
var nodeCommands = []shellCommand[*sim.Node]{
	{[]string{"ip route", "ip r", "ip ro", "ip route show", "ip route list", "ip -4 route"}, func(n *sim.Node, _ string) (string, error) { return n.Host.IPRoute(), nil }},
	{[]string{"ip neigh", "ip n", "ip neigh show", "ip neighbor", "ip neighbour", "ip -4 neigh"}, func(n *sim.Node, _ string) (string, error) { return n.Host.IPNeigh(""), nil }},
	{[]string{"ip addr", "ip a", "ip addr show", "ip address", "ip -4 addr", "ip -4 a"}, func(n *sim.Node, _ string) (string, error) { return n.Host.IPAddr(), nil }},
	{[]string{"ip -d link", "ip -d link show", "ip -d link show *"}, func(n *sim.Node, dev string) (string, error) { return ipLink(n.Host, dev, true) }},
	{[]string{"ip link", "ip link show", "ip link show *"}, func(n *sim.Node, dev string) (string, error) { return ipLink(n.Host, dev, false) }},
	{[]string{"bridge fdb", "bridge fdb show", "bridge fdb show dev *"}, func(n *sim.Node, dev string) (string, error) { return n.Host.BridgeFDB(dev), nil }},
	{[]string{"iptables-save", "iptables-save -t *"}, func(n *sim.Node, table string) (string, error) {
		if n.Netfilter == nil {
			return "", nil
		}
		o := netfilter.SaveOptions{}
		if table != "" {
			o.Tables = []string{table}
		}
		return n.Netfilter.Save(o), nil
	}},
	{[]string{"nft list ruleset"}, func(n *sim.Node, _ string) (string, error) {
		if n.NFTables == nil {
			return "", nil
		}
		return n.NFTables.ListRuleset(), nil
	}},
	{[]string{"nft list table ip *", "nft list table *"}, func(n *sim.Node, table string) (string, error) {
		if n.NFTables != nil {
			if s, ok := n.NFTables.ListTable("ip", table); ok {
				return s, nil
			}
		}
		return "", fmt.Errorf("Error: No such file or directory\nlist table ip %s\n              %s", table, strings.Repeat("^", len(table)))
	}},
	{[]string{"ipvsadm -Ln", "ipvsadm -L -n"}, func(n *sim.Node, _ string) (string, error) {
		if p, ok := n.Proxier.(*sim.IPVSProxier); ok {
			return p.IPVS.List(), nil
		}
		return new(ipvs.IPVS).List(), nil // no virtual servers: the headers alone
	}},
	{[]string{"ipvsadm -Lnc", "ipvsadm -L -n -c"}, func(n *sim.Node, _ string) (string, error) {
		if p, ok := n.Proxier.(*sim.IPVSProxier); ok {
			return p.IPVS.ListConns(), nil
		}
		return fmt.Sprintf("IPVS connection entries\npro expire %-11s %-18s %-18s %s\n", "state", "source", "virtual", "destination"), nil
	}},
	{[]string{"ipset list"}, func(n *sim.Node, _ string) (string, error) {
		if p, ok := n.Proxier.(*sim.IPVSProxier); ok {
			return p.IPSets.List(), nil
		}
		return "", nil
	}},
	{[]string{"conntrack -L"}, func(n *sim.Node, _ string) (string, error) {
		if n.Conntrack == nil {
			return "", nil
		}
		s := n.Conntrack.Dump()
		count := strings.Count(s, "\n")
		return s + fmt.Sprintf("conntrack v1.4.7 (conntrack-tools): %d flow entries have been shown.\n", count), nil
	}},
}

// runNode is `node NAME: CMD`: a shell on the node.
func runNode(r *Runner, args []string, _ string, out io.Writer) error {
	if len(args) < 3 || !strings.HasSuffix(args[1], ":") {
		return fmt.Errorf("node: want node NAME: COMMAND, as in: node cka-w1: ip route")
	}
	name := strings.TrimSuffix(args[1], ":")
	n := r.Cluster.Node(name)
	if n == nil {
		var names []string
		for _, x := range r.Cluster.Nodes() {
			names = append(names, x.Name)
		}
		return fmt.Errorf("node %s: no such node (nodes: %s)", name, strings.Join(names, ", "))
	}
	c, arg, ok := match(nodeCommands, args[2:])
	if !ok {
		return fmt.Errorf("node %s: %s: not a command kubewalk runs on nodes (it runs: %s)", name, strings.Join(args[2:], " "), forms(nodeCommands))
	}
	s, err := c.run(n, arg)
	if err != nil {
		return err
	}
	io.WriteString(out, s)
	return nil
}

// execTarget is a running pod's sandbox and its API object.
type execTarget struct {
	pod    *sim.Pod
	obj    *corev1.Pod
	runner *Runner
}

// podCommands are what `kubectl exec POD -- CMD` runs in a pod's network
// namespace (a busybox-like image).
var podCommands = []shellCommand[execTarget]{
	{[]string{"cat /etc/resolv.conf"}, func(t execTarget, _ string) (string, error) {
		rc, _ := dns.PodResolvConf(t.obj, t.runner.kubeletDNS(t.obj.Spec.NodeName))
		return rc.String(), nil
	}},
	{[]string{"ip addr", "ip a", "ip addr show", "ip -4 addr"}, func(t execTarget, _ string) (string, error) { return t.pod.Netns.IPAddr(), nil }},
	{[]string{"ip route", "ip r", "ip route show"}, func(t execTarget, _ string) (string, error) { return t.pod.Netns.IPRoute(), nil }},
	{[]string{"ip link", "ip link show", "ip link show *"}, func(t execTarget, dev string) (string, error) { return ipLink(t.pod.Netns, dev, false) }},
	{[]string{"ip neigh", "ip n"}, func(t execTarget, _ string) (string, error) { return t.pod.Netns.IPNeigh(""), nil }},
	{[]string{"wget -qO- *", "wget -q -O- *", "wget -O- -q *", "wget -q -O - *"}, func(t execTarget, url string) (string, error) { return t.wget(url) }},
}

// kubeletDNS is the kubelet's DNS configuration on node: kubeadm's
// clusterDNS (the tenth address of the service range), cluster.local, and
// a host resolv.conf naming the node's default gateway as its nameserver
// (as libvirt's and most VM networks' DHCP hands out). The DNS work
// replaces this with the node's configured kubelet and files.
func (r *Runner) kubeletDNS(node string) dns.KubeletDNS {
	if r.KubeletDNS != nil {
		return r.KubeletDNS(node)
	}
	k := dns.KubeletDNS{ClusterDomain: "cluster.local"}
	k.ClusterDNS = []netip.Addr{netip.MustParseAddr(r.Cluster.DNSServiceIP())}
	if n := r.Cluster.Node(node); n != nil {
		if rt, err := n.Host.RouteGet(netip.MustParseAddr("1.1.1.1")); err == nil && rt.Gw.IsValid() {
			k.Host.Nameservers = []string{rt.Gw.String()}
		}
	}
	return k
}

// kubectlExec is `kubectl exec POD [-c CONTAINER] -- CMD`.
func kubectlExec(r *Runner, a kubectlArgs, _ string, out io.Writer) error {
	if len(a.pos) == 0 {
		return kerrorf("pod, type/name or --filename must be specified")
	}
	name := strings.TrimPrefix(strings.TrimPrefix(a.pos[0], "pod/"), "pods/")
	if len(a.command) == 0 {
		return kerrorf("you must specify at least one command for the container")
	}
	o, err := r.API.Get("Pod", a.ns(), name)
	if err != nil {
		return &kubectlError{err}
	}
	pod := o.(*corev1.Pod)
	container := a.container
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	if !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == container }) {
		return &kubectlError{apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", container, name))}
	}
	sp := r.Cluster.Pod(a.ns(), name)
	if sp == nil || pod.Status.Phase != corev1.PodRunning {
		return kerrorf("unable to upgrade connection: container not found (%q)", container)
	}
	c, arg, ok := match(podCommands, a.command)
	if !ok {
		return fmt.Errorf("kubectl exec %s: %s: not a command kubewalk runs in pods (it runs: %s)", name, strings.Join(a.command, " "), forms(podCommands))
	}
	s, err := c.run(execTarget{pod: sp, obj: pod, runner: r}, arg)
	if err != nil {
		return err
	}
	io.WriteString(out, s)
	return nil
}
