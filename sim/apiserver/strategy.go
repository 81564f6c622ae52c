package apiserver

import (
	"cmp"
	"slices"

	"fmt"
	"go4.org/netipx"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// strategy is the per-kind registry logic: defaulting (the v1 defaulters),
// validation (pkg/apis/core/validation and friends, the parts that matter
// to networking) and allocation (ClusterIPs, NodePorts).
type strategy struct {
	defaults func(s *Server, obj Object)
	validate func(s *Server, obj, old Object) field.ErrorList
	allocate func(s *Server, obj, old Object) error
	// name validates metadata.name (DNS-1123 subdomain when nil).
	name apimachineryvalidation.ValidateNameFunc
}

var strategies = map[string]strategy{
	"Service": {defaults: defaultService, validate: validateService, allocate: allocateService, name: apimachineryvalidation.NameIsDNS1035Label},
	"Pod":     {defaults: func(_ *Server, o Object) { defaultPod(&o.(*corev1.Pod).Spec) }, validate: validatePod},
	"Namespace": {name: apimachineryvalidation.ValidateNamespaceName, defaults: func(_ *Server, o Object) {
		// The namespace registry: the kubernetes finalizer, phase Active,
		// and the kubernetes.io/metadata.name label (since v1.21).
		ns := o.(*corev1.Namespace)
		if len(ns.Spec.Finalizers) == 0 {
			ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
		}
		if ns.Status.Phase == "" {
			ns.Status.Phase = corev1.NamespaceActive
		}
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}},
	"Deployment":    {defaults: defaultDeployment, validate: validateDeployment},
	"ReplicaSet":    {defaults: defaultReplicaSet, validate: validateReplicaSet},
	"DaemonSet":     {defaults: defaultDaemonSet, validate: validateDaemonSet},
	"EndpointSlice": {validate: validateEndpointSlice},
	"PodDisruptionBudget": {validate: func(_ *Server, o, _ Object) field.ErrorList {
		p := o.(*policyv1.PodDisruptionBudget)
		var errs field.ErrorList
		if p.Spec.MinAvailable != nil && p.Spec.MaxUnavailable != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec"), p.Spec, "minAvailable and maxUnavailable cannot be both set"))
		}
		return errs
	}},
}

func (s *Server) validateMeta(k Kind, obj Object) field.ErrorList {
	if plainMeta(k, obj) {
		return nil
	}
	return validateMetaFull(k, obj)
}

// validateMetaFull is apimachinery's ObjectMeta validation with the kind's
// name rule.
func validateMetaFull(k Kind, obj Object) field.ErrorList {
	nameFn := strategies[k.Name].name
	if nameFn == nil {
		nameFn = apimachineryvalidation.NameIsDNSSubdomain
	}
	if k.Name == "Node" || k.Name == "Event" || k.Name == "Lease" || k.Name == "ConfigMap" {
		nameFn = func(name string, prefix bool) []string {
			return apimachineryvalidation.NameIsDNSSubdomain(name, prefix)
		}
	}
	return apimachineryvalidation.ValidateObjectMetaAccessor(obj, k.Namespaced, nameFn, field.NewPath("metadata"))
}

// plainMeta reports whether obj's metadata is of the plain kind the
// validation above accepts for certain, checked without building a field
// path or running a regular expression: a DNS-1123 subdomain name (for the
// kinds named so), a DNS-1123 label namespace where one is required, label
// and annotation keys that are qualified names (an optional DNS-1123
// subdomain prefix and '/', then a name), label values of the label
// rule, annotations within the total size limit, a generateName that is
// a DNS-1123 subdomain once its trailing dash is masked (plainGenerateName),
// owner references that name an apiVersion of at most one '/' with a
// version, a kind, a name and a UID, none a v1 Event and at most one the
// controller (as ValidateOwnerReferences asks), and no finalizers or
// managed fields. Anything else goes through the full validation, which
// also words the errors.
func plainMeta(k Kind, obj Object) bool {
	if strategies[k.Name].name != nil || obj.GetGeneration() < 0 ||
		len(obj.GetFinalizers()) > 0 || len(obj.GetManagedFields()) > 0 {
		return false
	}
	if g := obj.GetGenerateName(); g != "" && !plainGenerateName(g) {
		return false
	}
	if refs := obj.GetOwnerReferences(); len(refs) > 0 && !plainOwners(refs) {
		return false
	}
	if !isDNSSubdomain(obj.GetName()) {
		return false
	}
	if ns := obj.GetNamespace(); k.Namespaced != (ns != "") || (ns != "" && !isDNSLabel(ns)) {
		return false
	}
	for key, v := range obj.GetLabels() {
		if !isQualifiedName(key) || (v != "" && !isLabelValue(v)) {
			return false
		}
	}
	size := 0
	for key, v := range obj.GetAnnotations() {
		// ValidateAnnotations lower-cases a key before its test, which
		// only widens what the test here accepts.
		if !isQualifiedName(key) {
			return false
		}
		size += len(key) + len(v)
	}
	return size <= apimachineryvalidation.TotalAnnotationSizeLimitB
}

// plainGenerateName is NameIsDNSSubdomain's test of a generateName (a
// prefix): with a trailing dash and more before it, the last two
// characters are replaced by "a" (maskTrailingDash), and the result must
// be a DNS-1123 subdomain.
func plainGenerateName(g string) bool {
	if len(g) > 1 && g[len(g)-1] == '-' {
		if len(g)-1 > 253 {
			return false
		}
		var buf [253]byte
		b := append(append(buf[:0], g[:len(g)-2]...), 'a')
		return isDNSSubdomain(unsafe.String(&b[0], len(b)))
	}
	return isDNSSubdomain(g)
}

// plainOwners reports whether ValidateOwnerReferences accepts refs for
// certain: each has an apiVersion that parses as a group version with a
// version (at most one '/'), a kind, a name and a UID, is not a v1 Event
// (BannedOwners), and at most one is the controller.
func plainOwners(refs []metav1.OwnerReference) bool {
	controllers := 0
	for _, r := range refs {
		if r.APIVersion == "" || r.Kind == "" || r.Name == "" || r.UID == "" {
			return false
		}
		group, version := "", r.APIVersion
		if i := strings.IndexByte(version, '/'); i >= 0 {
			group, version = version[:i], version[i+1:]
		}
		if version == "" || strings.IndexByte(version, '/') >= 0 || (group == "" && version == "v1" && r.Kind == "Event") {
			return false
		}
		if r.Controller != nil && *r.Controller {
			controllers++
		}
	}
	return controllers <= 1
}

// isQualifiedName is IsQualifiedName's test (a label key): a name of the
// label value rule, optionally after a DNS-1123 subdomain prefix and '/'.
func isQualifiedName(s string) bool {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		if !isDNSSubdomain(s[:i]) {
			return false
		}
		s = s[i+1:]
	}
	return isLabelValue(s)
}

// isDNSLabel is IsDNS1123Label's test: 1 to 63 of [a-z0-9-], alphanumeric
// at both ends.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isDNSSubdomain is IsDNS1123Subdomain's test: at most 253 characters,
// DNS-1123 labels joined by dots.
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			return isDNSLabel(s)
		}
		if !isDNSLabel(s[:i]) {
			return false
		}
		s = s[i+1:]
	}
}

// isLabelValue is the test of a label value, and of a label key without
// a prefix: 1 to 63 of [A-Za-z0-9-_.], alphanumeric at both ends.
func isLabelValue(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// --- Service ---------------------------------------------------------------

func defaultService(_ *Server, o Object) {
	svc := o.(*corev1.Service)
	sp := &svc.Spec
	sp.Type = cmp.Or(sp.Type, corev1.ServiceTypeClusterIP)
	sp.SessionAffinity = cmp.Or(sp.SessionAffinity, corev1.ServiceAffinityNone)
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP && sp.SessionAffinityConfig == nil {
		t := int32(10800)
		sp.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
	}
	for i := range sp.Ports {
		p := &sp.Ports[i]
		p.Protocol = cmp.Or(p.Protocol, corev1.ProtocolTCP)
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer {
		sp.ExternalTrafficPolicy = cmp.Or(sp.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyCluster)
	}
	if sp.Type == corev1.ServiceTypeLoadBalancer && sp.AllocateLoadBalancerNodePorts == nil {
		t := true
		sp.AllocateLoadBalancerNodePorts = &t
	}
	if sp.Type != corev1.ServiceTypeExternalName {
		if sp.InternalTrafficPolicy == nil {
			p := corev1.ServiceInternalTrafficPolicyCluster
			sp.InternalTrafficPolicy = &p
		}
		if sp.ClusterIP != "" && len(sp.ClusterIPs) == 0 {
			sp.ClusterIPs = []string{sp.ClusterIP}
		}
		if len(sp.IPFamilies) == 0 && sp.ClusterIP != corev1.ClusterIPNone {
			sp.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
		if sp.IPFamilyPolicy == nil {
			p := corev1.IPFamilyPolicySingleStack
			sp.IPFamilyPolicy = &p
		}
	}
}

var supportedProtocols = []string{"SCTP", "TCP", "UDP"}

func validateService(s *Server, o, old Object) field.ErrorList {
	svc := o.(*corev1.Service)
	sp := &svc.Spec
	spec := field.NewPath("spec")
	var errs field.ErrorList
	switch sp.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName:
	default:
		errs = append(errs, field.NotSupported(spec.Child("type"), sp.Type, []string{"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"}))
	}
	headless := sp.ClusterIP == corev1.ClusterIPNone
	if len(sp.Ports) == 0 && !headless && sp.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Required(spec.Child("ports"), ""))
	}
	if headless && (sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer) {
		errs = append(errs, field.Invalid(spec.Child("clusterIPs").Index(0), sp.ClusterIP, "may not be set to 'None' for "+string(sp.Type)+" services"))
	}
	names := map[string]bool{}
	type pp struct {
		port  int32
		proto corev1.Protocol
	}
	seen := map[pp]bool{}
	for i, p := range sp.Ports {
		ip := spec.Child("ports").Index(i)
		if len(sp.Ports) > 1 && p.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else if p.Name != "" {
			for _, msg := range validation.IsDNS1123Label(p.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), p.Name, msg))
			}
			if names[p.Name] {
				errs = append(errs, field.Duplicate(ip.Child("name"), p.Name))
			}
			names[p.Name] = true
		}
		for _, msg := range validation.IsValidPortNum(int(p.Port)) {
			errs = append(errs, field.Invalid(ip.Child("port"), p.Port, msg))
		}
		switch p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(ip.Child("protocol"), p.Protocol, supportedProtocols))
		}
		if k := (pp{p.Port, p.Protocol}); seen[k] {
			errs = append(errs, field.Duplicate(ip, p))
		} else {
			seen[k] = true
		}
		if p.TargetPort.Type == intstr.Int {
			for _, msg := range validation.IsValidPortNum(p.TargetPort.IntValue()) {
				errs = append(errs, field.Invalid(ip.Child("targetPort"), p.TargetPort.IntValue(), msg))
			}
		} else {
			for _, msg := range validation.IsValidPortName(p.TargetPort.StrVal) {
				errs = append(errs, field.Invalid(ip.Child("targetPort"), p.TargetPort.StrVal, msg))
			}
		}
		if p.NodePort != 0 && sp.Type == corev1.ServiceTypeClusterIP {
			errs = append(errs, field.Forbidden(ip.Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
		}
	}
	if sp.Selector != nil {
		errs = append(errs, validateLabels(sp.Selector, spec.Child("selector"))...)
	}
	if sp.ExternalTrafficPolicy != "" {
		if sp.Type != corev1.ServiceTypeNodePort && sp.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Invalid(spec.Child("externalTrafficPolicy"), sp.ExternalTrafficPolicy,
				"may only be set for externally-accessible services"))
		} else if sp.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster && sp.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			errs = append(errs, field.NotSupported(spec.Child("externalTrafficPolicy"), sp.ExternalTrafficPolicy, []string{"Cluster", "Local"}))
		}
	}
	for i, ip := range sp.ExternalIPs {
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is4() {
			errs = append(errs, field.Invalid(spec.Child("externalIPs").Index(i), ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
		}
	}
	for i, r := range sp.LoadBalancerSourceRanges {
		if _, err := netip.ParsePrefix(strings.TrimSpace(r)); err != nil {
			errs = append(errs, field.Invalid(spec.Child("loadBalancerSourceRanges").Index(i), r,
				"must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 "))
		}
	}
	if sp.ClusterIP != "" && !headless {
		if a, err := netip.ParseAddr(sp.ClusterIP); err != nil || !a.Is4() {
			errs = append(errs, field.Invalid(spec.Child("clusterIPs").Index(0), sp.ClusterIP, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
		}
	}
	if old != nil {
		o := old.(*corev1.Service)
		if o.Spec.ClusterIP != "" && sp.ClusterIP != "" && sp.ClusterIP != o.Spec.ClusterIP && sp.Type != corev1.ServiceTypeExternalName {
			errs = append(errs, field.Invalid(spec.Child("clusterIPs").Index(0), sp.ClusterIPs, "may not change once set"))
		}
	}
	return errs
}

func validateLabels(m map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range sortedKeys(m) {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p, k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(m[k]) {
			errs = append(errs, field.Invalid(p, m[k], msg))
		}
	}
	return errs
}

// allocateService gives a Service its ClusterIP and NodePorts, keeping
// those an update leaves unset (kubectl apply does not send them).
func allocateService(s *Server, o, old Object) error {
	svc := o.(*corev1.Service)
	sp := &svc.Spec
	k, _ := LookupKind("Service")
	var prev *corev1.Service
	if old != nil {
		prev = old.(*corev1.Service)
	}
	if sp.Type != corev1.ServiceTypeExternalName && sp.ClusterIP != corev1.ClusterIPNone {
		switch {
		case sp.ClusterIP == "" && prev != nil && prev.Spec.ClusterIP != "":
			sp.ClusterIP, sp.ClusterIPs = prev.Spec.ClusterIP, prev.Spec.ClusterIPs
		case sp.ClusterIP == "":
			ip, err := s.allocateClusterIP()
			if err != nil {
				return err
			}
			sp.ClusterIP = ip.String()
			sp.ClusterIPs = []string{sp.ClusterIP}
		case prev == nil || prev.Spec.ClusterIP != sp.ClusterIP:
			a, _ := netip.ParseAddr(sp.ClusterIP)
			var msg string
			if !s.cfg.ServiceCIDR.Contains(a) {
				msg = fmt.Sprintf("the provided IP (%s) is not in the valid range. The range of valid IPs is %s", a, s.cfg.ServiceCIDR)
			} else if a == s.cfg.ServiceCIDR.Addr() || a == netipx.PrefixLastIP(s.cfg.ServiceCIDR) {
				msg = fmt.Sprintf("the provided IP (%s) is not in the valid range. The range of valid IPs is %s", a, s.cfg.ServiceCIDR)
			} else if other := s.serviceByIP(sp.ClusterIP); other != nil && !(svc.Namespace == other.Namespace && svc.Name == other.Name) {
				msg = "provided IP is already allocated"
			}
			if msg != "" {
				return newInvalid(k, svc.Name, field.Invalid(field.NewPath("spec", "clusterIPs"), sp.ClusterIPs,
					fmt.Sprintf("failed to allocate IP %s: %s", a, msg)))
			}
			sp.ClusterIPs = []string{sp.ClusterIP}
		}
	}
	if sp.ClusterIP == corev1.ClusterIPNone {
		sp.ClusterIPs = []string{corev1.ClusterIPNone}
	}
	needNP := sp.Type == corev1.ServiceTypeNodePort ||
		(sp.Type == corev1.ServiceTypeLoadBalancer && (sp.AllocateLoadBalancerNodePorts == nil || *sp.AllocateLoadBalancerNodePorts))
	for i := range sp.Ports {
		p := &sp.Ports[i]
		if !needNP {
			if sp.Type == corev1.ServiceTypeClusterIP {
				p.NodePort = 0
			}
			continue
		}
		path := field.NewPath("spec", "ports").Index(i).Child("nodePort")
		if p.NodePort == 0 && prev != nil {
			for _, q := range prev.Spec.Ports {
				if q.Port == p.Port && q.Protocol == p.Protocol && q.NodePort != 0 {
					p.NodePort = q.NodePort
				}
			}
		}
		if p.NodePort == 0 {
			np, err := s.allocateNodePort(svc)
			if err != nil {
				return newInvalid(k, svc.Name, field.Invalid(path, p.NodePort, err.Error()))
			}
			p.NodePort = np
			continue
		}
		if int(p.NodePort) < s.cfg.NodePortLo || int(p.NodePort) > s.cfg.NodePortHi {
			return newInvalid(k, svc.Name, field.Invalid(path, p.NodePort,
				fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", s.cfg.NodePortLo, s.cfg.NodePortHi)))
		}
		if owner := s.nodePortOwner(p.NodePort, p.Protocol); owner != nil && !(owner.Namespace == svc.Namespace && owner.Name == svc.Name) {
			return newInvalid(k, svc.Name, field.Invalid(path, p.NodePort, "provided port is already allocated"))
		}
		for j := range i {
			if sp.Ports[j].NodePort == p.NodePort && sp.Ports[j].Protocol == p.Protocol {
				return newInvalid(k, svc.Name, field.Duplicate(path, p.NodePort))
			}
		}
	}
	return nil
}

func (s *Server) serviceByIP(ip string) *corev1.Service {
	if o := s.first("Service", IndexClusterIP, ip); o != nil {
		return o.(*corev1.Service)
	}
	return nil
}

func (s *Server) nodePortOwner(np int32, proto corev1.Protocol) *corev1.Service {
	if o := s.first("Service", IndexNodePort, string(proto)+"/"+strconv.Itoa(int(np))); o != nil {
		return o.(*corev1.Service)
	}
	return nil
}

// allocateClusterIP picks a free address the way the allocator does since
// ServiceIPStaticSubrange (GA v1.26): at random, from the upper band first;
// the lower band (min(max(16, size/16), 256) addresses) is kept for
// addresses chosen by hand, such as kube-dns's .10. The network address
// and the broadcast address are never handed out.
func (s *Server) allocateClusterIP() (netip.Addr, error) {
	r := s.cfg.ServiceCIDR
	size := uint64(1) << (32 - r.Bits())
	if size < 8 {
		return netip.Addr{}, fmt.Errorf("service range %s is too small", r)
	}
	static := min(max(16, size/16), 256)
	base := r.Addr().As4()
	b := uint64(base[0])<<24 | uint64(base[1])<<16 | uint64(base[2])<<8 | uint64(base[3])
	try := func(lo, hi uint64) (netip.Addr, bool) {
		if hi <= lo {
			return netip.Addr{}, false
		}
		start := lo + s.rng.Uint64N(hi-lo)
		for k := uint64(0); k < hi-lo; k++ {
			v := b + lo + (start-lo+k)%(hi-lo)
			a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
			if s.CountByIndex("Service", IndexClusterIP, a.String()) == 0 {
				return a, true
			}
		}
		return netip.Addr{}, false
	}
	if a, ok := try(static, size-1); ok {
		return a, nil
	}
	if a, ok := try(1, static); ok {
		return a, nil
	}
	//lint:ignore ST1005 the API server's own message
	return netip.Addr{}, fmt.Errorf("Internal error occurred: failed to allocate a serviceIP: range is full")
}

// allocateNodePort picks a random free port, upper band first, as the port
// allocator does since ServiceNodePortStaticSubrange (GA v1.29): the
// lower band is min(max(16, size/32), 128) ports.
func (s *Server) allocateNodePort(svc *corev1.Service) (int32, error) {
	lo, hi := s.cfg.NodePortLo, s.cfg.NodePortHi+1
	static := min(max(16, (hi-lo)/32), 128)
	taken := func(p int32) bool {
		for _, proto := range []string{"TCP", "UDP", "SCTP"} {
			for k := range s.index("Service", IndexNodePort)[proto+"/"+strconv.Itoa(int(p))] {
				if k != key(svc.Namespace, svc.Name) {
					return true
				}
			}
		}
		for _, q := range svc.Spec.Ports {
			if q.NodePort == p {
				return true
			}
		}
		return false
	}
	for _, band := range [][2]int{{lo + static, hi}, {lo, lo + static}} {
		n := band[1] - band[0]
		start := s.rng.IntN(n)
		for k := range n {
			p := int32(band[0] + (start+k)%n)
			if !taken(p) {
				return p, nil
			}
		}
	}
	return 0, fmt.Errorf("range is full")
}

// --- Pod --------------------------------------------------------------------

// podDefaults are the values the pod defaults point to. Every defaulted
// pod the server stores points to these same ones (150,000 pods hold one
// copy, not one each): a stored object is never modified, and every copy
// handed out (Get, List, a watcher's) is deep, with pointers of its own.
var podDefaults = struct {
	grace, tolerationSeconds int64
	serviceLinks             bool
	securityContext          corev1.PodSecurityContext
	// tolerations are the two the admission plugin adds to a pod that
	// has none: the slice itself is shared (full, so that an append
	// anywhere copies it).
	tolerations []corev1.Toleration
}{grace: 30, tolerationSeconds: 300, serviceLinks: true}

func init() {
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		podDefaults.tolerations = append(podDefaults.tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &podDefaults.tolerationSeconds})
	}
	podDefaults.tolerations = slices.Clip(podDefaults.tolerations)
}

func defaultPod(sp *corev1.PodSpec) {
	sp.RestartPolicy = cmp.Or(sp.RestartPolicy, corev1.RestartPolicyAlways)
	sp.DNSPolicy = cmp.Or(sp.DNSPolicy, corev1.DNSClusterFirst)
	sp.SchedulerName = cmp.Or(sp.SchedulerName, corev1.DefaultSchedulerName)
	if sp.TerminationGracePeriodSeconds == nil {
		sp.TerminationGracePeriodSeconds = &podDefaults.grace
	}
	if sp.SecurityContext == nil {
		sp.SecurityContext = &podDefaults.securityContext
	}
	if sp.EnableServiceLinks == nil {
		sp.EnableServiceLinks = &podDefaults.serviceLinks
	}
	for _, cs := range [][]corev1.Container{sp.InitContainers, sp.Containers} {
		for i := range cs {
			c := &cs[i]
			c.TerminationMessagePath = cmp.Or(c.TerminationMessagePath, corev1.TerminationMessagePathDefault)
			c.TerminationMessagePolicy = cmp.Or(c.TerminationMessagePolicy, corev1.TerminationMessageReadFile)
			if c.ImagePullPolicy == "" {
				c.ImagePullPolicy = corev1.PullIfNotPresent
				if img := c.Image; !strings.Contains(img[strings.LastIndex(img, "/")+1:], ":") || strings.HasSuffix(img, ":latest") {
					c.ImagePullPolicy = corev1.PullAlways
				}
			}
			for j := range c.Ports {
				c.Ports[j].Protocol = cmp.Or(c.Ports[j].Protocol, corev1.ProtocolTCP)
			}
		}
	}
	// DefaultTolerationSeconds admission plugin: 300 s for not-ready and
	// unreachable unless the pod tolerates them already.
	if len(sp.Tolerations) == 0 {
		sp.Tolerations = podDefaults.tolerations
		return
	}
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		found := false
		for _, t := range sp.Tolerations {
			if (t.Key == key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)) &&
				(t.Effect == corev1.TaintEffectNoExecute || t.Effect == "") {
				found = true
			}
		}
		if !found {
			if len(sp.Tolerations) == cap(sp.Tolerations) {
				sp.Tolerations = slices.Grow(sp.Tolerations, 2) // room for both, in one allocation
			}
			sp.Tolerations = append(sp.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &podDefaults.tolerationSeconds})
		}
	}
}

func validatePod(_ *Server, o, old Object) field.ErrorList {
	pod := o.(*corev1.Pod)
	errs := validatePodSpec(&pod.Spec, specPath)
	if old != nil {
		prev := old.(*corev1.Pod)
		if prev.Spec.NodeName != "" && pod.Spec.NodeName != prev.Spec.NodeName {
			errs = append(errs, field.Forbidden(field.NewPath("spec"), "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"))
		}
	}
	return errs
}

// specPath is the field path of a Pod's spec, made when an error needs
// it.
func specPath() *field.Path { return field.NewPath("spec") }

// validatePodSpec validates a pod spec found at path (a function: the
// field paths are made only for the errors, not for every valid pod).
func validatePodSpec(sp *corev1.PodSpec, path func() *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(sp.Containers) == 0 {
		errs = append(errs, field.Required(path().Child("containers"), ""))
	}
	names := map[string]bool{}
	type hp struct {
		port  int32
		proto corev1.Protocol
		ip    string
	}
	hostPorts := map[hp]bool{}
	for i, c := range sp.Containers {
		cp := func() *field.Path { return path().Child("containers").Index(i) }
		if c.Name == "" {
			errs = append(errs, field.Required(cp().Child("name"), ""))
		} else {
			if !isDNSLabel(c.Name) { // the regular expression only for the error
				for _, msg := range validation.IsDNS1123Label(c.Name) {
					errs = append(errs, field.Invalid(cp().Child("name"), c.Name, msg))
				}
			}
			if names[c.Name] {
				errs = append(errs, field.Duplicate(cp().Child("name"), c.Name))
			}
			names[c.Name] = true
		}
		if c.Image == "" {
			errs = append(errs, field.Required(cp().Child("image"), ""))
		}
		portNames := map[string]bool{}
		for j, p := range c.Ports {
			pp := func() *field.Path { return cp().Child("ports").Index(j) }
			if p.Name != "" {
				if !isPortName(p.Name) {
					for _, msg := range validation.IsValidPortName(p.Name) {
						errs = append(errs, field.Invalid(pp().Child("name"), p.Name, msg))
					}
				}
				if portNames[p.Name] {
					errs = append(errs, field.Duplicate(pp().Child("name"), p.Name))
				}
				portNames[p.Name] = true
			}
			if p.ContainerPort == 0 {
				errs = append(errs, field.Required(pp().Child("containerPort"), ""))
			} else {
				for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
					errs = append(errs, field.Invalid(pp().Child("containerPort"), p.ContainerPort, msg))
				}
			}
			if p.HostPort != 0 {
				for _, msg := range validation.IsValidPortNum(int(p.HostPort)) {
					errs = append(errs, field.Invalid(pp().Child("hostPort"), p.HostPort, msg))
				}
				k := hp{p.HostPort, p.Protocol, p.HostIP}
				if hostPorts[k] {
					errs = append(errs, field.Duplicate(pp().Child("hostPort"), fmt.Sprintf("%d/%s", p.HostPort, p.Protocol)))
				}
				hostPorts[k] = true
				if sp.HostNetwork && p.HostPort != p.ContainerPort {
					errs = append(errs, field.Invalid(pp().Child("containerPort"), p.ContainerPort, "must match `hostPort` when `hostNetwork` is true"))
				}
			}
			switch p.Protocol {
			case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			default:
				errs = append(errs, field.NotSupported(pp().Child("protocol"), p.Protocol, supportedProtocols))
			}
		}
	}
	switch sp.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		errs = append(errs, field.NotSupported(path().Child("dnsPolicy"), sp.DNSPolicy, []string{"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}))
	}
	if sp.DNSPolicy == corev1.DNSNone && (sp.DNSConfig == nil || len(sp.DNSConfig.Nameservers) == 0) {
		errs = append(errs, field.Required(path().Child("dnsConfig").Child("nameservers"), "must provide at least one DNS nameserver when `dnsPolicy` is None"))
	}
	switch sp.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(path().Child("restartPolicy"), sp.RestartPolicy, []string{"Always", "Never", "OnFailure"}))
	}
	if len(sp.NodeSelector) > 0 {
		errs = append(errs, validateLabels(sp.NodeSelector, path().Child("nodeSelector"))...)
	}
	return errs
}

// isPortName is IsValidPortName's test (an IANA service name): 1 to 15
// of [a-z0-9-], at least one letter, no hyphen at either end or twice in
// a row.
func isPortName(s string) bool {
	if len(s) == 0 || len(s) > 15 || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	letter := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z':
			letter = true
		case c >= '0' && c <= '9', c == '-':
		default:
			return false
		}
	}
	return letter
}

// --- workloads --------------------------------------------------------------

func defaultTemplate(t *corev1.PodTemplateSpec) { defaultPod(&t.Spec) }

func defaultDeployment(_ *Server, o Object) {
	d := o.(*appsv1.Deployment)
	if d.Spec.Replicas == nil {
		r := int32(1)
		d.Spec.Replicas = &r
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType && d.Spec.Strategy.RollingUpdate == nil {
		q := intstr.FromString("25%")
		d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: &q, MaxSurge: &q}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		r := int32(10)
		d.Spec.RevisionHistoryLimit = &r
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		p := int32(600)
		d.Spec.ProgressDeadlineSeconds = &p
	}
	defaultTemplate(&d.Spec.Template)
}

func defaultReplicaSet(_ *Server, o Object) {
	rs := o.(*appsv1.ReplicaSet)
	if rs.Spec.Replicas == nil {
		r := int32(1)
		rs.Spec.Replicas = &r
	}
	defaultTemplate(&rs.Spec.Template)
}

func defaultDaemonSet(_ *Server, o Object) {
	ds := o.(*appsv1.DaemonSet)
	if ds.Spec.UpdateStrategy.Type == "" {
		ds.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType && ds.Spec.UpdateStrategy.RollingUpdate == nil {
		one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one, MaxSurge: &zero}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		r := int32(10)
		ds.Spec.RevisionHistoryLimit = &r
	}
	defaultTemplate(&ds.Spec.Template)
}

func validateSelectorTemplate(sel *metav1.LabelSelector, t *corev1.PodTemplateSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sel == nil {
		return append(errs, field.Required(spec.Child("selector"), ""))
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return append(errs, field.Invalid(spec.Child("selector"), sel, err.Error()))
	}
	if s.Empty() {
		errs = append(errs, field.Invalid(spec.Child("selector"), sel, "empty selector is invalid for deployment"))
	} else if !s.Matches(labels.Set(t.Labels)) {
		errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
	}
	errs = append(errs, validatePodSpec(&t.Spec, func() *field.Path { return spec.Child("template", "spec") })...)
	return errs
}

func validateDeployment(_ *Server, o, _ Object) field.ErrorList {
	d := o.(*appsv1.Deployment)
	errs := validateSelectorTemplate(d.Spec.Selector, &d.Spec.Template, field.NewPath("spec"))
	if d.Spec.Replicas != nil && *d.Spec.Replicas < 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "replicas"), *d.Spec.Replicas, "must be greater than or equal to 0"))
	}
	return errs
}

func validateReplicaSet(_ *Server, o, _ Object) field.ErrorList {
	rs := o.(*appsv1.ReplicaSet)
	return validateSelectorTemplate(rs.Spec.Selector, &rs.Spec.Template, field.NewPath("spec"))
}

func validateDaemonSet(_ *Server, o, _ Object) field.ErrorList {
	ds := o.(*appsv1.DaemonSet)
	errs := validateSelectorTemplate(ds.Spec.Selector, &ds.Spec.Template, field.NewPath("spec"))
	if ds.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(field.NewPath("spec", "template", "spec", "restartPolicy"), ds.Spec.Template.Spec.RestartPolicy, []string{"Always"}))
	}
	return errs
}

func validateEndpointSlice(_ *Server, o, _ Object) field.ErrorList {
	es := o.(*discoveryv1.EndpointSlice)
	var errs field.ErrorList
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("addressType"), es.AddressType, []string{"FQDN", "IPv4", "IPv6"}))
	}
	return errs
}
