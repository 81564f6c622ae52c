package kubeproxy

import (
	"fmt"
	"regexp"
	"slices"
)

// ValidationError reports input the API server (or kube-proxy's
// configuration parser) would reject. It names the object and the field.
type ValidationError struct {
	// Kind is "Service", "EndpointSlice" or "Config".
	Kind string
	// Object is "namespace/name" (empty for Config).
	Object string
	// Field is the field path, e.g. "spec.ports[1].nodePort".
	Field string
	// Value is the offending value as text, if any.
	Value string
	// Reason says what is wrong.
	Reason string
}

// Error implements error, in the style of apimachinery field errors.
func (e *ValidationError) Error() string {
	obj := e.Kind
	if e.Object != "" {
		obj = fmt.Sprintf("%s %q", e.Kind, e.Object)
	}
	if e.Value != "" {
		return fmt.Sprintf("%s: %s: Invalid value: %q: %s", obj, e.Field, e.Value, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", obj, e.Field, e.Reason)
}

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	ianaSvcName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

func validProto(p Protocol) bool {
	switch p {
	case "", ProtocolTCP, ProtocolUDP, ProtocolSCTP:
		return true
	}
	return false
}

func validateConfig(c *Config) error {
	bad := func(field, value, reason string) error {
		return &ValidationError{Kind: "Config", Field: field, Value: value, Reason: reason}
	}
	if b := c.masqueradeBit(); b < 0 || b > 31 {
		return bad("masqueradeBit", fmt.Sprint(c.MasqueradeBit), "must be in the range 0-31")
	}
	if c.ClusterCIDR.IsValid() && !c.ClusterCIDR.Addr().Is4() {
		return bad("clusterCIDR", c.ClusterCIDR.String(), "must be an IPv4 CIDR (IPv6 is not modelled)")
	}
	for i, ip := range c.NodeIPs {
		if !ip.Is4() {
			return bad(fmt.Sprintf("nodeIPs[%d]", i), ip.String(), "must be an IPv4 address")
		}
	}
	for i, p := range c.NodePortAddresses {
		if !p.IsValid() || !p.Addr().Is4() {
			return bad(fmt.Sprintf("nodePortAddresses[%d]", i), p.String(), "must be an IPv4 CIDR")
		}
	}
	lo, hi := c.nodePortRange()
	if lo < 1 || hi > 65535 || lo > hi {
		return bad("nodePortRange", fmt.Sprintf("%d-%d", lo, hi), "must be a port range within 1-65535")
	}
	return nil
}

func validateService(c *Config, s *Service) error {
	obj := s.Namespace + "/" + s.Name
	bad := func(field, value, reason string) error {
		return &ValidationError{Kind: "Service", Object: obj, Field: field, Value: value, Reason: reason}
	}
	if s.Namespace == "" {
		return bad("metadata.namespace", "", "Required value")
	}
	if s.Name == "" {
		return bad("metadata.name", "", "Required value")
	}
	if !dns1123Label.MatchString(s.Namespace) || len(s.Namespace) > 63 {
		return bad("metadata.namespace", s.Namespace, "must be a DNS-1123 label")
	}
	if !dns1123Label.MatchString(s.Name) || len(s.Name) > 63 {
		return bad("metadata.name", s.Name, "must be a DNS-1123 label")
	}
	switch s.Type {
	case "", ServiceTypeClusterIP, ServiceTypeNodePort, ServiceTypeLoadBalancer:
	default:
		return bad("spec.type", string(s.Type), "supported values: ClusterIP, NodePort, LoadBalancer")
	}
	typ := s.Type
	if typ == "" {
		typ = ServiceTypeClusterIP
	}
	if s.Headless {
		if s.ClusterIP.IsValid() {
			return bad("spec.clusterIP", s.ClusterIP.String(), "must be None (Headless) or an address, not both")
		}
		if typ != ServiceTypeClusterIP {
			return bad("spec.clusterIP", "None", "may not be None for type "+string(typ))
		}
	} else {
		if !s.ClusterIP.IsValid() {
			return bad("spec.clusterIP", "", "Required value: a cluster IP is needed for type "+string(typ)+" (set Headless for clusterIP: None)")
		}
		if !s.ClusterIP.Is4() {
			return bad("spec.clusterIP", s.ClusterIP.String(), "must be an IPv4 address (IPv6 is not modelled)")
		}
		if s.ClusterIP.IsUnspecified() || s.ClusterIP.IsLoopback() {
			return bad("spec.clusterIP", s.ClusterIP.String(), "must be a valid unicast address")
		}
	}
	if len(s.ClusterIPs) > 0 && s.ClusterIPs[0] != s.ClusterIP {
		return bad("spec.clusterIPs[0]", s.ClusterIPs[0].String(), "must match spec.clusterIP")
	}
	if len(s.ClusterIPs) > 2 {
		return bad("spec.clusterIPs", fmt.Sprint(len(s.ClusterIPs)), "may hold at most 2 addresses")
	}
	if len(s.Ports) == 0 && !s.Headless {
		return bad("spec.ports", "", "Required value")
	}
	lo, hi := c.nodePortRange()
	names := map[string]bool{}
	type pp struct {
		port  int
		proto Protocol
	}
	seen := map[pp]bool{}
	for i, p := range s.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		if len(s.Ports) > 1 && p.Name == "" {
			return bad(f+".name", "", "Required value: every port must be named when a Service has more than one")
		}
		if p.Name != "" && (!dns1123Label.MatchString(p.Name) || len(p.Name) > 63) {
			return bad(f+".name", p.Name, "must be a DNS-1123 label")
		}
		if names[p.Name] {
			return bad(f+".name", p.Name, "Duplicate value")
		}
		names[p.Name] = true
		if !validProto(p.Protocol) {
			return bad(f+".protocol", string(p.Protocol), "supported values: TCP, UDP, SCTP")
		}
		if p.Port < 1 || p.Port > 65535 {
			return bad(f+".port", fmt.Sprint(p.Port), "must be between 1 and 65535, inclusive")
		}
		k := pp{p.Port, normProto(p.Protocol)}
		if seen[k] {
			return bad(f, fmt.Sprintf("%d/%s", p.Port, k.proto), "Duplicate value: port and protocol")
		}
		seen[k] = true
		if p.TargetPort.StrVal != "" {
			if p.TargetPort.IntVal != 0 {
				return bad(f+".targetPort", p.TargetPort.String(), "must be a number or a name, not both")
			}
			if len(p.TargetPort.StrVal) > 15 || !ianaSvcName.MatchString(p.TargetPort.StrVal) {
				return bad(f+".targetPort", p.TargetPort.StrVal, "must be an IANA_SVC_NAME (at most 15 characters, a-z0-9 and '-')")
			}
		} else if p.TargetPort.IntVal < 0 || p.TargetPort.IntVal > 65535 {
			return bad(f+".targetPort", p.TargetPort.String(), "must be between 1 and 65535, inclusive")
		}
		switch {
		case typ == ServiceTypeClusterIP && p.NodePort != 0:
			return bad(f+".nodePort", fmt.Sprint(p.NodePort), "may not be used when `type` is 'ClusterIP'")
		case typ == ServiceTypeNodePort && p.NodePort == 0:
			return bad(f+".nodePort", "", "Required value: kubewalk does not allocate NodePorts; set one in the node port range")
		case p.NodePort != 0 && (p.NodePort < lo || p.NodePort > hi):
			return bad(f+".nodePort", fmt.Sprint(p.NodePort), fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", lo, hi))
		}
	}
	// NodePorts must be unique per protocol within the Service.
	np := map[pp]bool{}
	for i, p := range s.Ports {
		if p.NodePort == 0 {
			continue
		}
		k := pp{p.NodePort, normProto(p.Protocol)}
		if np[k] {
			return bad(fmt.Sprintf("spec.ports[%d].nodePort", i), fmt.Sprint(p.NodePort), "Duplicate value")
		}
		np[k] = true
	}
	for i, ip := range s.ExternalIPs {
		if !ip.Is4() || ip.IsUnspecified() || ip.IsLoopback() {
			return bad(fmt.Sprintf("spec.externalIPs[%d]", i), ip.String(), "must be a valid IPv4 unicast address")
		}
	}
	for i, ip := range s.LoadBalancerIngress {
		if typ != ServiceTypeLoadBalancer {
			return bad(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ip.String(), "only LoadBalancer Services have ingress points")
		}
		if !ip.Is4() || ip.IsUnspecified() {
			return bad(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ip.String(), "must be a valid IPv4 address")
		}
	}
	for i, p := range s.LoadBalancerSourceRanges {
		if typ != ServiceTypeLoadBalancer {
			return bad(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), p.String(), "may only be used when `type` is 'LoadBalancer'")
		}
		if !p.IsValid() || !p.Addr().Is4() {
			return bad(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), p.String(), "must be an IPv4 CIDR")
		}
	}
	switch s.ExternalTrafficPolicy {
	case "", TrafficPolicyCluster:
	case TrafficPolicyLocal:
		if typ == ServiceTypeClusterIP && len(s.ExternalIPs) == 0 {
			return bad("spec.externalTrafficPolicy", "Local", "may only be set for externally-accessible services")
		}
	default:
		return bad("spec.externalTrafficPolicy", string(s.ExternalTrafficPolicy), "supported values: Cluster, Local")
	}
	switch s.InternalTrafficPolicy {
	case "", TrafficPolicyCluster, TrafficPolicyLocal:
	default:
		return bad("spec.internalTrafficPolicy", string(s.InternalTrafficPolicy), "supported values: Cluster, Local")
	}
	switch s.SessionAffinity {
	case "", SessionAffinityNone:
		if s.ClientIPTimeoutSeconds != 0 {
			return bad("spec.sessionAffinityConfig", fmt.Sprint(s.ClientIPTimeoutSeconds), "must not be set when sessionAffinity is None")
		}
	case SessionAffinityClientIP:
		if s.ClientIPTimeoutSeconds < 0 || s.ClientIPTimeoutSeconds > 86400 {
			return bad("spec.sessionAffinityConfig.clientIP.timeoutSeconds", fmt.Sprint(s.ClientIPTimeoutSeconds), "must be greater than 0 and less than 86400")
		}
	default:
		return bad("spec.sessionAffinity", string(s.SessionAffinity), "supported values: ClientIP, None")
	}
	if s.HealthCheckNodePort != 0 {
		if typ != ServiceTypeLoadBalancer || s.ExternalTrafficPolicy != TrafficPolicyLocal {
			return bad("spec.healthCheckNodePort", fmt.Sprint(s.HealthCheckNodePort), "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'")
		}
		if s.HealthCheckNodePort < lo || s.HealthCheckNodePort > hi {
			return bad("spec.healthCheckNodePort", fmt.Sprint(s.HealthCheckNodePort), fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", lo, hi))
		}
	}
	return nil
}

func validateSlice(s *EndpointSlice, idx int) error {
	// The names and fields of an error are made only for one (a sync
	// checks every slice of ten thousand Services).
	bad := func(field, value, reason string) error {
		obj := s.Namespace + "/" + s.Name
		if s.Name == "" {
			obj = fmt.Sprintf("%s/<slice %d of %s>", s.Namespace, idx, s.ServiceName)
		}
		return &ValidationError{Kind: "EndpointSlice", Object: obj, Field: field, Value: value, Reason: reason}
	}
	if s.Namespace == "" {
		return bad("metadata.namespace", "", "Required value")
	}
	if s.ServiceName == "" {
		return bad("metadata.labels[kubernetes.io/service-name]", "", "Required value")
	}
	for i, p := range s.Ports {
		if slices.ContainsFunc(s.Ports[:i], func(q EndpointPort) bool { return q.Name == p.Name }) {
			return bad(fmt.Sprintf("ports[%d].name", i), p.Name, "Duplicate value")
		}
		if !validProto(p.Protocol) {
			return bad(fmt.Sprintf("ports[%d].protocol", i), string(p.Protocol), "supported values: TCP, UDP, SCTP")
		}
		if p.Port < 0 || p.Port > 65535 {
			return bad(fmt.Sprintf("ports[%d].port", i), fmt.Sprint(p.Port), "must be between 1 and 65535, inclusive")
		}
	}
	for i, ep := range s.Endpoints {
		if len(ep.Addresses) == 0 || len(ep.Addresses) > 100 {
			return bad(fmt.Sprintf("endpoints[%d].addresses", i), fmt.Sprint(len(ep.Addresses)), "must have between 1 and 100 addresses")
		}
		for j, a := range ep.Addresses {
			if !a.Is4() {
				return bad(fmt.Sprintf("endpoints[%d].addresses[%d]", i, j), a.String(), "must be a valid IPv4 address (addressType IPv4)")
			}
			if a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() {
				return bad(fmt.Sprintf("endpoints[%d].addresses[%d]", i, j), a.String(), "may not be unspecified, loopback, link-local or multicast")
			}
		}
	}
	return nil
}
