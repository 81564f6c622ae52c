// Package dns holds what the cluster's DNS is made of; for now the
// resolv.conf the kubelet gives each pod (kubelet pkg/kubelet/network/dns,
// Kubernetes 1.36) and the file format itself.
package dns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ResolvConf is the content of a resolv.conf.
type ResolvConf struct {
	Nameservers []string
	Searches    []string
	Options     []string
}

// ParseResolvConf reads nameserver, search (and domain, as glibc does:
// the last of the two wins), and options lines; comments (# or ;) and
// unknown keywords are ignored, as the kubelet ignores them.
func ParseResolvConf(s string) ResolvConf {
	var r ResolvConf
	for _, line := range strings.Split(s, "\n") {
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				r.Nameservers = append(r.Nameservers, f[1])
			}
		case "search", "domain":
			r.Searches = slices.Clone(f[1:])
		case "options":
			r.Options = append(r.Options, f[1:]...)
		}
	}
	return r
}

// String is the file as containerd writes a sandbox's resolv.conf: the
// search line, then one nameserver line each, then the options line.
func (r ResolvConf) String() string {
	var b strings.Builder
	if len(r.Searches) > 0 {
		b.WriteString("search " + strings.Join(r.Searches, " ") + "\n")
	}
	for _, n := range r.Nameservers {
		b.WriteString("nameserver " + n + "\n")
	}
	if len(r.Options) > 0 {
		b.WriteString("options " + strings.Join(r.Options, " ") + "\n")
	}
	return b.String()
}

// KubeletDNS is the kubelet's DNS configuration.
type KubeletDNS struct {
	// ClusterDNS is --cluster-dns / clusterDNS (kubeadm: the tenth
	// address of the service subnet, 10.96.0.10).
	ClusterDNS []netip.Addr
	// ClusterDomain is --cluster-domain (cluster.local).
	ClusterDomain string
	// Host is the node's resolv.conf (the kubelet's --resolv-conf,
	// /etc/resolv.conf or systemd-resolved's file).
	Host ResolvConf
}

// Limits of a pod's resolv.conf (pkg/apis/core/validation, since
// ExpandedDNSConfig): three nameservers, 32 search domains of 2048
// characters in all.
const (
	MaxNameservers   = 3
	MaxSearches      = 32
	MaxSearchLineLen = 2048
)

// Event is an event the kubelet records on the pod while forming its DNS
// configuration (type Warning).
type Event struct{ Reason, Message string }

// PodResolvConf is the resolv.conf the kubelet has the runtime write into
// pod's sandbox, with the events it records on the way:
//
//   - ClusterFirst (the default) for a pod network pod, and
//     ClusterFirstWithHostNet: the clusterDNS nameservers, search
//     <ns>.svc.<domain> svc.<domain> <domain> then the host's search
//     domains, options ndots:5 (the host's options are dropped);
//   - ClusterFirst for a hostNetwork pod, Default, or a cluster policy
//     without clusterDNS (event MissingClusterDNS): the host's file;
//   - None: empty;
//
// then spec.dnsConfig merged in (nameservers and searches appended without
// duplicates, options by name with the pod's value winning), then cut to
// the limits (event DNSConfigForming). The kubelet merges options through
// a Go map, in random order; kubewalk keeps the existing order and appends
// the pod's new options in theirs.
func PodResolvConf(pod *corev1.Pod, k KubeletDNS) (ResolvConf, []Event) {
	var events []Event
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	cluster := policy == corev1.DNSClusterFirstWithHostNet || (policy == corev1.DNSClusterFirst && !pod.Spec.HostNetwork)
	if cluster && len(k.ClusterDNS) == 0 {
		events = append(events, Event{"MissingClusterDNS",
			fmt.Sprintf("pod: %q. kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.",
				pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")", policy, corev1.DNSDefault)})
		cluster = false
	}
	var r ResolvConf
	switch {
	case policy == corev1.DNSNone:
	case cluster:
		for _, a := range k.ClusterDNS {
			r.Nameservers = append(r.Nameservers, a.String())
		}
		domain := k.ClusterDomain
		if domain == "" {
			domain = "cluster.local"
		}
		r.Searches = appendNew([]string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}, k.Host.Searches...)
		r.Options = []string{"ndots:5"}
	default:
		r = ResolvConf{slices.Clone(k.Host.Nameservers), slices.Clone(k.Host.Searches), slices.Clone(k.Host.Options)}
	}
	if c := pod.Spec.DNSConfig; c != nil {
		r.Nameservers = appendNew(r.Nameservers, c.Nameservers...)
		r.Searches = appendNew(r.Searches, c.Searches...)
		for _, o := range c.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			if i := slices.IndexFunc(r.Options, func(s string) bool { return optionName(s) == o.Name }); i >= 0 {
				r.Options[i] = opt
			} else {
				r.Options = append(r.Options, opt)
			}
		}
	}
	if len(r.Nameservers) > MaxNameservers {
		r.Nameservers = r.Nameservers[:MaxNameservers]
		events = append(events, Event{"DNSConfigForming",
			"Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + strings.Join(r.Nameservers, " ")})
	}
	if cut := limitSearches(r.Searches); len(cut) < len(r.Searches) {
		r.Searches = cut
		events = append(events, Event{"DNSConfigForming",
			"Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(cut, " ")})
	}
	return r, events
}

func optionName(o string) string {
	name, _, _ := strings.Cut(o, ":")
	return name
}

func appendNew(list []string, more ...string) []string {
	for _, s := range more {
		if s != "" && !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

// limitSearches keeps the leading search domains within MaxSearches
// domains and MaxSearchLineLen characters (joined by spaces).
func limitSearches(s []string) []string {
	n := 0
	for i, d := range s {
		if i >= MaxSearches {
			return s[:i]
		}
		n += len(d)
		if i > 0 {
			n++
		}
		if n > MaxSearchLineLen {
			return s[:i]
		}
	}
	return s
}
