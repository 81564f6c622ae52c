package kubectl

//lint:file-ignore SA1019 kubectl get endpoints still prints the deprecated Endpoints kind

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
)

// The cells of one table row per kind, as the server's table handlers in
// printers.go compute them (kubernetes 1.36), over the v1 types.

// since is AGE: apimachinery's HumanDuration of now - t, "<unknown>" for
// a zero time.
func since(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func microSince(now time.Time, t metav1.MicroTime) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func itoa[T ~int32 | ~int64 | ~int](v T) string { return strconv.FormatInt(int64(v), 10) }

// podStatus is the READY, STATUS and RESTARTS cells: init containers
// first ("Init:0/1", "Init:CrashLoopBackOff"), then the containers from the
// last, a waiting or terminated reason winning over the phase,
// "Terminating" once deletionTimestamp is set, and the restart count with
// the time of the last restart.
func podStatus(pod *corev1.Pod, now time.Time) (ready, reason, restarts string) {
	restartCount := 0
	restartableInitRestarts := 0
	total := len(pod.Spec.Containers)
	readyContainers := 0
	var lastRestart, lastRestartableInitRestart metav1.Time

	reason = string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}
	isRestartable := func(name string) bool {
		for i := range pod.Spec.InitContainers {
			c := &pod.Spec.InitContainers[i]
			if c.Name == name {
				return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
			}
		}
		return false
	}
	for i := range pod.Spec.InitContainers {
		if isRestartable(pod.Spec.InitContainers[i].Name) {
			total++
		}
	}
	later := func(last *metav1.Time, s corev1.ContainerStatus) {
		if t := s.LastTerminationState.Terminated; t != nil && last.Before(&t.FinishedAt) {
			*last = t.FinishedAt
		}
	}

	initializing := false
	for i, c := range pod.Status.InitContainerStatuses {
		restartCount += int(c.RestartCount)
		later(&lastRestart, c)
		restartable := isRestartable(c.Name)
		if restartable {
			restartableInitRestarts += int(c.RestartCount)
			later(&lastRestartableInitRestart, c)
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case restartable && c.Started != nil && *c.Started:
			if c.Ready {
				readyContainers++
			}
			continue
		case c.State.Terminated != nil:
			switch {
			case c.State.Terminated.Reason != "":
				reason = "Init:" + c.State.Terminated.Reason
			case c.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", c.State.Terminated.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
			}
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}

	if !initializing || podConditionTrue(pod, corev1.PodInitialized) {
		restartCount = restartableInitRestarts
		lastRestart = lastRestartableInitRestart
		hasRunning := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := pod.Status.ContainerStatuses[i]
			restartCount += int(c.RestartCount)
			later(&lastRestart, c)
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil && c.State.Terminated.Reason != "":
				reason = c.State.Terminated.Reason
			case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
			case c.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				readyContainers++
			}
		}
		if reason == "Completed" && hasRunning {
			if podConditionTrue(pod, corev1.PodReady) {
				reason = "Running"
			} else {
				reason = "NotReady"
			}
		}
	}

	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if pod.DeletionTimestamp != nil && pod.Status.Reason == "NodeLost" {
		reason = "Unknown"
	} else if pod.DeletionTimestamp != nil && !terminal {
		reason = "Terminating"
	}

	restarts = strconv.Itoa(restartCount)
	if restartCount != 0 && !lastRestart.IsZero() {
		restarts = fmt.Sprintf("%d (%s ago)", restartCount, since(now, lastRestart))
	}
	return fmt.Sprintf("%d/%d", readyContainers, total), reason, restarts
}

func podConditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podRow(o Object, now time.Time, wide bool) []string {
	pod := o.(*corev1.Pod)
	ready, status, restarts := podStatus(pod, now)
	cells := []string{pod.Name, ready, status, restarts, since(now, pod.CreationTimestamp)}
	if !wide {
		return cells
	}
	ip := ""
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	}
	gates := "<none>"
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		ok := 0
		for _, g := range pod.Spec.ReadinessGates {
			if podConditionTrue(pod, g.ConditionType) {
				ok++
			}
		}
		gates = fmt.Sprintf("%d/%d", ok, n)
	}
	return append(cells, orNone(ip), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), gates)
}

// nodeStatus is the STATUS cell: Ready or NotReady from the Ready
// condition (Unknown without one), then SchedulingDisabled when cordoned.
func nodeStatus(node *corev1.Node) string {
	status := "Unknown"
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				status = "Ready"
			} else {
				status = "NotReady"
			}
		}
	}
	if node.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	return status
}

// nodeRoles are the node-role.kubernetes.io/<role> label suffixes and the
// value of kubernetes.io/role, sorted.
func nodeRoles(node *corev1.Node) []string {
	var roles []string
	for k, v := range node.Labels {
		var role string
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			role = strings.TrimPrefix(k, "node-role.kubernetes.io/")
		case k == "kubernetes.io/role":
			role = v
		}
		if role != "" && !slices.Contains(roles, role) {
			roles = append(roles, role)
		}
	}
	slices.Sort(roles)
	return roles
}

func nodeAddress(node *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range node.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func nodeRow(o Object, now time.Time, wide bool) []string {
	node := o.(*corev1.Node)
	roles := strings.Join(nodeRoles(node), ",")
	cells := []string{node.Name, nodeStatus(node), orNone(roles), since(now, node.CreationTimestamp), node.Status.NodeInfo.KubeletVersion}
	if !wide {
		return cells
	}
	info := node.Status.NodeInfo
	return append(cells, nodeAddress(node, corev1.NodeInternalIP), nodeAddress(node, corev1.NodeExternalIP),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion))
}

// serviceExternalIP is the EXTERNAL-IP cell: spec.externalIPs, the load
// balancer's ingress addresses, or <pending> for a LoadBalancer Service no
// implementation has given an address (kubewalk has none).
func serviceExternalIP(svc *corev1.Service, wide bool) string {
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(svc.Spec.ExternalIPs) > 0 {
			return strings.Join(svc.Spec.ExternalIPs, ",")
		}
		return "<none>"
	case corev1.ServiceTypeLoadBalancer:
		var ingress []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			a := in.IP
			if a == "" {
				a = in.Hostname
			}
			if a != "" && !slices.Contains(ingress, a) {
				ingress = append(ingress, a)
			}
		}
		slices.Sort(ingress)
		lb := strings.Join(ingress, ",")
		if !wide && len(lb) > 16 {
			lb = lb[:13] + "..."
		}
		if len(svc.Spec.ExternalIPs) > 0 {
			var all []string
			if lb != "" {
				all = strings.Split(lb, ",")
			}
			return strings.Join(append(all, svc.Spec.ExternalIPs...), ",")
		}
		if lb != "" {
			return lb
		}
		return "<pending>"
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	}
	return "<unknown>"
}

// servicePorts is the PORT(S) cell: 80/TCP, or 80:31777/TCP with a
// nodePort.
func servicePorts(ports []corev1.ServicePort) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		if p.NodePort > 0 {
			s[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		} else {
			s[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		}
	}
	return orNone(strings.Join(s, ","))
}

func serviceRow(o Object, now time.Time, wide bool) []string {
	svc := o.(*corev1.Service)
	ip := "<none>"
	if len(svc.Spec.ClusterIPs) > 0 {
		ip = svc.Spec.ClusterIPs[0]
	}
	cells := []string{svc.Name, string(svc.Spec.Type), ip, serviceExternalIP(svc, wide), servicePorts(svc.Spec.Ports), since(now, svc.CreationTimestamp)}
	if wide {
		cells = append(cells, labels.FormatLabels(svc.Spec.Selector))
	}
	return cells
}

// moreList joins up to three items and counts the rest: "a,b,c + 2 more...".
func moreList(list []string, count int) string {
	const max = 3
	if count > max {
		return fmt.Sprintf("%s + %d more...", strings.Join(list[:max], ","), count-max)
	}
	return strings.Join(list, ",")
}

func endpointsRow(o Object, now time.Time, wide bool) []string {
	ep := o.(*corev1.Endpoints)
	cell := "<none>"
	if len(ep.Subsets) > 0 {
		var list []string
		for _, ss := range ep.Subsets {
			if len(ss.Ports) == 0 {
				for _, a := range ss.Addresses {
					list = append(list, a.IP)
				}
				continue
			}
			for _, p := range ss.Ports {
				for _, a := range ss.Addresses {
					list = append(list, net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
				}
			}
		}
		cell = moreList(list, len(list))
	}
	return []string{ep.Name, cell, since(now, ep.CreationTimestamp)}
}

func orUnset(s string) string {
	if s == "" {
		return "<unset>"
	}
	return s
}

func endpointSliceRow(o Object, now time.Time, wide bool) []string {
	es := o.(*discoveryv1.EndpointSlice)
	var ports []string
	for _, p := range es.Ports {
		switch {
		case p.Port != nil:
			ports = append(ports, strconv.Itoa(int(*p.Port)))
		case p.Name != nil:
			ports = append(ports, *p.Name)
		default:
			ports = append(ports, "*")
		}
	}
	var addrs []string
	for _, e := range es.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	return []string{es.Name, string(es.AddressType), orUnset(moreList(ports, len(ports))),
		orUnset(moreList(addrs, len(addrs))), since(now, es.CreationTimestamp)}
}

// containerCells are the CONTAINERS and IMAGES cells of -o wide.
func containerCells(cs []corev1.Container) (names, images string) {
	n := make([]string, len(cs))
	im := make([]string, len(cs))
	for i, c := range cs {
		n[i], im[i] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(im, ",")
}

func replicas(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func deploymentRow(o Object, now time.Time, wide bool) []string {
	d := o.(*appsv1.Deployment)
	cells := []string{d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, replicas(d.Spec.Replicas)),
		itoa(d.Status.UpdatedReplicas), itoa(d.Status.AvailableReplicas), since(now, d.CreationTimestamp)}
	if !wide {
		return cells
	}
	sel := "<invalid>"
	if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
		sel = s.String()
	}
	names, images := containerCells(d.Spec.Template.Spec.Containers)
	return append(cells, names, images, sel)
}

func replicaSetRow(o Object, now time.Time, wide bool) []string {
	rs := o.(*appsv1.ReplicaSet)
	cells := []string{rs.Name, itoa(replicas(rs.Spec.Replicas)), itoa(rs.Status.Replicas), itoa(rs.Status.ReadyReplicas), since(now, rs.CreationTimestamp)}
	if !wide {
		return cells
	}
	names, images := containerCells(rs.Spec.Template.Spec.Containers)
	return append(cells, names, images, metav1.FormatLabelSelector(rs.Spec.Selector))
}

func daemonSetRow(o Object, now time.Time, wide bool) []string {
	ds := o.(*appsv1.DaemonSet)
	st := ds.Status
	cells := []string{ds.Name, itoa(st.DesiredNumberScheduled), itoa(st.CurrentNumberScheduled), itoa(st.NumberReady),
		itoa(st.UpdatedNumberScheduled), itoa(st.NumberAvailable), labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector),
		since(now, ds.CreationTimestamp)}
	if !wide {
		return cells
	}
	names, images := containerCells(ds.Spec.Template.Spec.Containers)
	return append(cells, names, images, metav1.FormatLabelSelector(ds.Spec.Selector))
}

func configMapRow(o Object, now time.Time, wide bool) []string {
	cm := o.(*corev1.ConfigMap)
	return []string{cm.Name, itoa(len(cm.Data) + len(cm.BinaryData)), since(now, cm.CreationTimestamp)}
}

func pdbRow(o Object, now time.Time, wide bool) []string {
	pdb := o.(*policyv1.PodDisruptionBudget)
	minA, maxU := "N/A", "N/A"
	if pdb.Spec.MinAvailable != nil {
		minA = pdb.Spec.MinAvailable.String()
	}
	if pdb.Spec.MaxUnavailable != nil {
		maxU = pdb.Spec.MaxUnavailable.String()
	}
	return []string{pdb.Name, minA, maxU, itoa(pdb.Status.DisruptionsAllowed), since(now, pdb.CreationTimestamp)}
}

func namespaceRow(o Object, now time.Time, wide bool) []string {
	ns := o.(*corev1.Namespace)
	return []string{ns.Name, string(ns.Status.Phase), since(now, ns.CreationTimestamp)}
}

func leaseRow(o Object, now time.Time, wide bool) []string {
	l := o.(*coordinationv1.Lease)
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	return []string{l.Name, holder, since(now, l.CreationTimestamp)}
}

// eventRow is LAST SEEN, TYPE, REASON, OBJECT (kind/name lower-cased),
// MESSAGE; -o wide adds SUBOBJECT, SOURCE ("kubelet, cka-w1"), FIRST SEEN,
// COUNT and NAME.
func eventRow(o Object, now time.Time, wide bool) []string {
	e := o.(*corev1.Event)
	first := since(now, e.FirstTimestamp)
	if e.FirstTimestamp.IsZero() {
		first = microSince(now, e.EventTime)
	}
	last := since(now, e.LastTimestamp)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = microSince(now, e.Series.LastObservedTime)
		count = e.Series.Count
	} else if count == 0 {
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	msg := strings.TrimSpace(e.Message)
	if !wide {
		return []string{last, e.Type, e.Reason, target, msg}
	}
	component := e.Source.Component
	if component == "" {
		component = e.ReportingController
	}
	host := e.Source.Host
	if host == "" {
		host = e.ReportingInstance
	}
	source := component
	if host != "" {
		source += ", " + host
	}
	return []string{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, msg, first, itoa(count), e.Name}
}
