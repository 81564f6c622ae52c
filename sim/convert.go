package sim

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// EchoPortsAnnotation on a Pod names the container ports whose process is
// an echo server ("5353/UDP,7/UDP"); every other container port is a
// listener that answers nothing on UDP (and completes handshakes on TCP).
const EchoPortsAnnotation = "kubewalk.io/echo-ports"

// podObject is the v1.Pod a PodSpec stands for: pinned to spec.Node when
// it is set (bypassing the scheduler, as spec.nodeName does), one
// container per Container with the container name as its image when the
// spec has none. A pod made from the same containers and labels as the
// last one made with memo shares their objects with it (a stored object
// is never modified, and every copy handed out is deep): the pods of a
// workload hold one containers slice, not one each.
func podObject(spec PodSpec, memo *podMemo) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cmp.Or(spec.Namespace, "default"), Name: spec.Name},
		Spec: corev1.PodSpec{NodeName: spec.Node, HostNetwork: spec.HostNetwork}}
	p.Labels = memo.labelsOf(spec.Labels)
	var echo string
	p.Spec.Containers, echo = memo.containersOf(spec.Containers)
	if echo != "" {
		p.Annotations = map[string]string{EchoPortsAnnotation: echo}
	}
	return p
}

// podContainers is what podObject makes of a PodSpec's containers: the
// containers, and the echo-ports annotation ("" for none).
func podContainers(cs []Container) ([]corev1.Container, string) {
	var out []corev1.Container
	var echo []string
	for _, c := range cs {
		ct := corev1.Container{Name: cmp.Or(c.Name, "app"), Image: cmp.Or(c.Name, "app")}
		for _, port := range c.Ports {
			proto := corev1.Protocol(cmp.Or(port.Protocol, "TCP"))
			ct.Ports = append(ct.Ports, corev1.ContainerPort{Name: port.Name, ContainerPort: int32(port.ContainerPort),
				Protocol: proto, HostPort: int32(port.HostPort)})
			if port.Echo {
				echo = append(echo, fmt.Sprintf("%d/%s", port.ContainerPort, proto))
			}
		}
		out = append(out, ct)
	}
	if len(out) == 0 {
		out = []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}
	}
	return out, strings.Join(echo, ",")
}

// podSpecOf is what the runtime needs of a v1.Pod: its sandbox and the
// ports its containers bind. Its Labels are the object's own map (p is
// the stored object, which no write modifies: a label change stores a new
// map), not a copy; its Containers are those made last with memo when
// the pod's containers and echo-ports annotation read the same.
func podSpecOf(p *corev1.Pod, memo *podMemo) PodSpec {
	spec := PodSpec{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Labels: p.Labels, HostNetwork: p.Spec.HostNetwork}
	spec.Containers = memo.specContainersOf(p)
	return spec
}

// specContainers is podSpecOf's containers of p, made afresh.
func specContainers(p *corev1.Pod) []Container {
	var echo []string // the annotation's ports; none without it
	if a := p.Annotations[EchoPortsAnnotation]; a != "" {
		echo = strings.Split(a, ",")
	}
	var out []Container
	for _, c := range p.Spec.Containers {
		ct := Container{Name: c.Name}
		for _, port := range c.Ports {
			proto := string(cmp.Or(port.Protocol, corev1.ProtocolTCP))
			ct.Ports = append(ct.Ports, ContainerPort{Name: port.Name, ContainerPort: uint16(port.ContainerPort), Protocol: proto,
				HostPort: uint16(port.HostPort), Echo: len(echo) > 0 && slices.Contains(echo, fmt.Sprintf("%d/%s", port.ContainerPort, proto))})
		}
		out = append(out, ct)
	}
	return out
}

// podMemo is what podObject and podSpecOf made last, for the next pod of
// the same containers and labels (the pods of one workload, 150,000 pods
// of one template) to share instead of making each again.
type podMemo struct {
	// in is a copy of the PodSpec containers podObject was last given
	// (the caller may change its own afterwards), out and echo what it
	// made of them.
	in   []Container
	out  []corev1.Container
	echo string
	// labels is the last labels map podObject made (a copy of the
	// caller's).
	labels map[string]string
	// objIn is the containers of the last pod podSpecOf read (a stored
	// object's, never modified), objEcho its echo-ports annotation, and
	// spec what it made of them.
	objIn   []corev1.Container
	objEcho string
	spec    []Container
}

// labelsOf is a copy of labels: the last one made when that reads the
// same.
func (m *podMemo) labelsOf(labels map[string]string) map[string]string {
	if len(labels) > 0 && len(m.labels) == len(labels) && maps.Equal(m.labels, labels) {
		return m.labels
	}
	c := maps.Clone(labels)
	if len(c) > 0 {
		m.labels = c
	}
	return c
}

// containersOf is podContainers(cs): what it made last when cs reads as
// the containers it was made from.
func (m *podMemo) containersOf(cs []Container) ([]corev1.Container, string) {
	if m.out != nil && slices.EqualFunc(cs, m.in, func(a, b Container) bool { return a.Name == b.Name && slices.Equal(a.Ports, b.Ports) }) {
		return m.out, m.echo
	}
	out, echo := podContainers(cs)
	in := slices.Clone(cs)
	for i := range in {
		in[i].Ports = slices.Clone(in[i].Ports)
	}
	m.in, m.out, m.echo = in, slices.Clip(out), echo
	return m.out, m.echo
}

// specContainersOf is specContainers(p): what it made last when p's
// containers read, in everything it looks at, as the last pod's and its
// echo-ports annotation is the same.
func (m *podMemo) specContainersOf(p *corev1.Pod) []Container {
	echo := p.Annotations[EchoPortsAnnotation]
	if m.spec != nil && echo == m.objEcho && slices.EqualFunc(p.Spec.Containers, m.objIn, sameRuntimeContainer) {
		return m.spec
	}
	out := specContainers(p)
	if out == nil {
		return nil
	}
	m.objIn, m.objEcho, m.spec = p.Spec.Containers, echo, slices.Clip(out)
	return m.spec
}

// sameRuntimeContainer reports whether a and b read the same to
// specContainers: name, and each port's name, number, protocol and host
// port.
func sameRuntimeContainer(a, b corev1.Container) bool {
	return a.Name == b.Name && slices.EqualFunc(a.Ports, b.Ports, func(x, y corev1.ContainerPort) bool {
		return x.Name == y.Name && x.ContainerPort == y.ContainerPort && x.Protocol == y.Protocol && x.HostPort == y.HostPort
	})
}

// serviceObject is the v1.Service a ServiceSpec stands for.
func serviceObject(spec ServiceSpec) *corev1.Service {
	s := spec.Service
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: cmp.Or(s.Namespace, "default"), Name: s.Name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceType(cmp.Or(s.Type, kubeproxy.ServiceTypeClusterIP)), Selector: spec.Selector,
			SessionAffinity: corev1.ServiceAffinity(s.SessionAffinity)}}
	if s.Headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	} else if s.ClusterIP.IsValid() {
		svc.Spec.ClusterIP = s.ClusterIP.String()
	}
	for _, p := range s.Ports {
		sp := corev1.ServicePort{Name: p.Name, Protocol: corev1.Protocol(cmp.Or(p.Protocol, kubeproxy.ProtocolTCP)), Port: int32(p.Port), NodePort: int32(p.NodePort)}
		switch {
		case p.TargetPort.StrVal != "":
			sp.TargetPort = intstr.FromString(p.TargetPort.StrVal)
		case p.TargetPort.IntVal != 0:
			sp.TargetPort = intstr.FromInt32(int32(p.TargetPort.IntVal))
		}
		svc.Spec.Ports = append(svc.Spec.Ports, sp)
	}
	for _, ip := range s.ExternalIPs {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, ip.String())
	}
	for _, r := range s.LoadBalancerSourceRanges {
		svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, r.String())
	}
	for _, ip := range s.LoadBalancerIngress {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	if s.ExternalTrafficPolicy != "" {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(s.ExternalTrafficPolicy)
	}
	if s.InternalTrafficPolicy != "" {
		p := corev1.ServiceInternalTrafficPolicy(s.InternalTrafficPolicy)
		svc.Spec.InternalTrafficPolicy = &p
	}
	if s.ClientIPTimeoutSeconds != 0 {
		t := int32(s.ClientIPTimeoutSeconds)
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
	}
	if s.HealthCheckNodePort != 0 {
		svc.Spec.HealthCheckNodePort = int32(s.HealthCheckNodePort)
	}
	return svc
}

// proxyService is kube-proxy's view of a v1.Service (its ServicePort
// fields), with the selector kept for the Go API.
func proxyService(svc *corev1.Service) ServiceSpec {
	sp := &svc.Spec
	s := kubeproxy.Service{Namespace: svc.Namespace, Name: svc.Name, Type: kubeproxy.ServiceType(sp.Type),
		ExternalTrafficPolicy: kubeproxy.TrafficPolicy(sp.ExternalTrafficPolicy),
		SessionAffinity:       kubeproxy.SessionAffinity(sp.SessionAffinity),
		HealthCheckNodePort:   int(sp.HealthCheckNodePort)}
	if sp.ClusterIP == corev1.ClusterIPNone {
		s.Headless = true
	} else if a, err := netip.ParseAddr(sp.ClusterIP); err == nil {
		s.ClusterIP = a
		s.ClusterIPs = []netip.Addr{a}
	}
	if sp.InternalTrafficPolicy != nil {
		s.InternalTrafficPolicy = kubeproxy.TrafficPolicy(*sp.InternalTrafficPolicy)
	}
	if sp.SessionAffinityConfig != nil && sp.SessionAffinityConfig.ClientIP != nil && sp.SessionAffinityConfig.ClientIP.TimeoutSeconds != nil {
		s.ClientIPTimeoutSeconds = int(*sp.SessionAffinityConfig.ClientIP.TimeoutSeconds)
	}
	for _, p := range sp.Ports {
		tp := kubeproxy.FromInt(p.TargetPort.IntValue())
		if p.TargetPort.Type == intstr.String {
			tp = kubeproxy.FromString(p.TargetPort.StrVal)
		}
		s.Ports = append(s.Ports, kubeproxy.ServicePort{Name: p.Name, Protocol: kubeproxy.Protocol(p.Protocol), Port: int(p.Port),
			TargetPort: tp, NodePort: int(p.NodePort)})
	}
	for _, ip := range sp.ExternalIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			s.ExternalIPs = append(s.ExternalIPs, a)
		}
	}
	for _, r := range sp.LoadBalancerSourceRanges {
		if p, err := netip.ParsePrefix(strings.TrimSpace(r)); err == nil {
			s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, p)
		}
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			s.LoadBalancerIngress = append(s.LoadBalancerIngress, a)
		}
	}
	return ServiceSpec{Service: s, Selector: sp.Selector}
}

// proxySlice is kube-proxy's view of a discovery/v1 EndpointSlice.
func proxySlice(es *discoveryv1.EndpointSlice) kubeproxy.EndpointSlice {
	out := kubeproxy.EndpointSlice{Namespace: es.Namespace, Name: es.Name, ServiceName: es.Labels[discoveryv1.LabelServiceName]}
	for _, p := range es.Ports {
		ep := kubeproxy.EndpointPort{}
		if p.Name != nil {
			ep.Name = *p.Name
		}
		if p.Protocol != nil {
			ep.Protocol = kubeproxy.Protocol(*p.Protocol)
		}
		if p.Port != nil {
			ep.Port = int(*p.Port)
		}
		out.Ports = append(out.Ports, ep)
	}
	for _, e := range es.Endpoints {
		ke := kubeproxy.Endpoint{Conditions: kubeproxy.EndpointConditions{Ready: e.Conditions.Ready, Serving: e.Conditions.Serving, Terminating: e.Conditions.Terminating}}
		for _, a := range e.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				ke.Addresses = append(ke.Addresses, ip)
			}
		}
		if e.NodeName != nil {
			ke.NodeName = *e.NodeName
		}
		if e.Zone != nil {
			ke.Zone = *e.Zone
		}
		out.Endpoints = append(out.Endpoints, ke)
	}
	return out
}
