package kubectl

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The layouts of kubectl pkg/describe/describe.go (kubectl 1.36): lines
// written through a PrefixWriter (two spaces a level) into a tab writer
// (minwidth 0, tab 8, padding 2), `Key:\tvalue`.

// prefixWriter is describe.go's PrefixWriter.
type prefixWriter struct{ out io.Writer }

func (pw prefixWriter) write(level int, format string, a ...any) {
	fmt.Fprintf(pw.out, strings.Repeat("  ", level)+format, a...)
}

func (pw prefixWriter) line(s string) { fmt.Fprintln(pw.out, s) }

// tabbed is describe.go's tabbedString.
func tabbed(f func(w prefixWriter)) string {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	f(prefixWriter{tw})
	tw.Flush()
	return buf.String()
}

// describers are the kinds `kubewalk describe` knows.
var describers = map[string]func(l Lister, o Object) string{
	"Node":    describeNode,
	"Pod":     describePod,
	"Service": describeService,
}

// Describe runs `kubectl describe RESOURCE [NAME...]` in namespace ns
// ("" = "default"), descriptions on out separated by a blank line. As
// kubectl does, one NAME that matches no object exactly describes every
// object whose name starts with it (each followed by a blank line), and no
// NAME describes them all, or writes "No resources found" on errOut.
func Describe(l Lister, args []string, ns string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usagef("You must specify the type of resource to describe. Use \"kubectl api-resources\" for a complete list of supported resources.")
	}
	r, err := LookupResource(args[0])
	if err != nil {
		return err
	}
	d, ok := describers[r.Kind]
	if !ok {
		return usagef("kubewalk describes nodes, pods and services, not %s", r.Plural)
	}
	if ns == "" {
		ns = "default"
	}
	listNS := ns
	if !r.Namespaced {
		listNS = ""
	}
	var objs []Object
	if len(args) == 1 {
		objs = l.List(r.Kind, listNS)
		if len(objs) == 0 {
			if r.Namespaced {
				fmt.Fprintf(errOut, "No resources found in %s namespace.\n", ns)
			} else {
				fmt.Fprintln(errOut, "No resources found")
			}
			return nil
		}
	}
	for _, name := range args[1:] {
		o, err := l.Get(r.Kind, listNS, name)
		if err == nil {
			objs = append(objs, o)
			continue
		}
		if !apierrors.IsNotFound(err) || len(args) != 2 {
			return err
		}
		// DescribeMatchingResources: every object named name*, each
		// description followed by a newline.
		var b strings.Builder
		for _, o := range l.List(r.Kind, listNS) {
			if strings.HasPrefix(o.GetName(), name) {
				b.WriteString(d(l, o) + "\n")
			}
		}
		if b.Len() == 0 {
			return err
		}
		io.WriteString(out, b.String())
		return nil
	}
	var b strings.Builder
	for i, o := range objs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(d(l, o))
	}
	io.WriteString(out, b.String())
	return nil
}

// eventsFor are the events whose involvedObject is o (kubectl's
// searchEvents: by name, namespace and kind), oldest first by
// lastTimestamp, ties in the order the server lists them.
func eventsFor(l Lister, o Object, kind string) []*corev1.Event {
	var es []*corev1.Event
	for _, x := range l.List("Event", o.GetNamespace()) {
		e, ok := x.(*corev1.Event)
		if !ok {
			continue
		}
		io := e.InvolvedObject
		if io.Name != o.GetName() || io.Namespace != o.GetNamespace() || (io.Kind != "" && io.Kind != kind) {
			continue
		}
		es = append(es, e)
	}
	slices.SortStableFunc(es, func(a, b *corev1.Event) int { return a.LastTimestamp.Time.Compare(b.LastTimestamp.Time) })
	return es
}

// describeEvents is DescribeEvents: Type, Reason, Age ("5m (x3 over
// 10m)"), From and Message, or "Events: <none>".
func describeEvents(w prefixWriter, es []*corev1.Event, now time.Time) {
	if len(es) == 0 {
		w.write(0, "Events:\t<none>\n")
		return
	}
	w.write(0, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n")
	w.write(1, "----\t------\t----\t----\t-------\n")
	for _, e := range es {
		first := microSince(now, e.EventTime)
		if e.EventTime.IsZero() {
			first = since(now, e.FirstTimestamp)
		}
		interval := first
		switch {
		case e.Series != nil:
			interval = fmt.Sprintf("%s (x%d over %s)", microSince(now, e.Series.LastObservedTime), e.Series.Count, first)
		case e.Count > 1:
			interval = fmt.Sprintf("%s (x%d over %s)", since(now, e.LastTimestamp), e.Count, first)
		}
		source := e.Source.Component
		if source == "" {
			source = e.ReportingController
		}
		msg := strings.TrimSpace(e.Message)
		if e.InvolvedObject.FieldPath != "" {
			msg = e.InvolvedObject.FieldPath + ": " + msg
		}
		w.write(1, "%v\t%v\t%s\t%v\t%v\n", e.Type, e.Reason, interval, source, msg)
	}
}

// printLabels is printLabelsMultiline: sorted key=value lines aligned
// after the title, "<none>" when empty.
func printLabels(w prefixWriter, title string, m map[string]string) {
	w.write(0, "%s:\t", title)
	if len(m) == 0 {
		w.line("<none>")
		return
	}
	keys := sortedKeys(m)
	for i, k := range keys {
		if i > 0 {
			w.write(0, "\t")
		}
		w.write(0, "%s=%s\n", k, m[k])
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// printAnnotations is printAnnotationsMultiline: "key: value", the
// last-applied-configuration annotation skipped, a value longer than 140
// characters or spanning lines printed below its key.
func printAnnotations(w prefixWriter, m map[string]string) {
	const maxLen = 140
	w.write(0, "Annotations:\t")
	var keys []string
	for _, k := range sortedKeys(m) {
		if k != corev1.LastAppliedConfigAnnotation {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		w.line("<none>")
		return
	}
	for i, k := range keys {
		if i > 0 {
			w.write(0, "\t")
		}
		v := strings.TrimSuffix(m[k], "\n")
		if len(v)+len(k)+2 > maxLen || strings.Contains(v, "\n") {
			w.write(0, "%s:\n", k)
			for _, s := range strings.Split(v, "\n") {
				if len(s) > maxLen-2 {
					s = s[:maxLen-2] + "..."
				}
				w.write(0, "\t  %s\n", s)
			}
			continue
		}
		w.write(0, "%s: %s\n", k, v)
	}
}

func rfc1123(t metav1.Time) string { return t.Time.Format(time.RFC1123Z) }

func describeNode(l Lister, o Object) string {
	node := o.(*corev1.Node)
	now := l.Now()
	return tabbed(func(w prefixWriter) {
		w.write(0, "Name:\t%s\n", node.Name)
		w.write(0, "Roles:\t%s\n", orNone(strings.Join(nodeRoles(node), ",")))
		printLabels(w, "Labels", node.Labels)
		printAnnotations(w, node.Annotations)
		w.write(0, "CreationTimestamp:\t%s\n", rfc1123(node.CreationTimestamp))
		w.write(0, "Taints:\t")
		if len(node.Spec.Taints) == 0 {
			w.line("<none>")
		} else {
			taints := slices.Clone(node.Spec.Taints)
			sort.SliceStable(taints, func(i, j int) bool {
				return string(taints[i].Effect)+","+taints[i].Key < string(taints[j].Effect)+","+taints[j].Key
			})
			for i, t := range taints {
				if i > 0 {
					w.write(0, "\t")
				}
				w.write(0, "%s\n", t.ToString())
			}
		}
		w.write(0, "Unschedulable:\t%v\n", node.Spec.Unschedulable)
		describeLease(w, l, node.Name)
		if len(node.Status.Conditions) > 0 {
			w.write(0, "Conditions:\n  Type\tStatus\tLastHeartbeatTime\tLastTransitionTime\tReason\tMessage\n")
			w.write(1, "----\t------\t-----------------\t------------------\t------\t-------\n")
			for _, c := range node.Status.Conditions {
				w.write(1, "%v \t%v \t%s \t%s \t%v \t%v\n", c.Type, c.Status,
					rfc1123(c.LastHeartbeatTime), rfc1123(c.LastTransitionTime), c.Reason, c.Message)
			}
		}
		w.write(0, "Addresses:\n")
		for _, a := range node.Status.Addresses {
			w.write(1, "%s:\t%s\n", a.Type, a.Address)
		}
		printResources := func(title string, rl corev1.ResourceList) {
			if len(rl) == 0 {
				return
			}
			w.write(0, "%s:\n", title)
			names := make([]string, 0, len(rl))
			for n := range rl {
				names = append(names, string(n))
			}
			slices.Sort(names)
			for _, n := range names {
				q := rl[corev1.ResourceName(n)]
				w.write(0, "  %s:\t%s\n", n, q.String())
			}
		}
		printResources("Capacity", node.Status.Capacity)
		printResources("Allocatable", node.Status.Allocatable)
		info := node.Status.NodeInfo
		w.write(0, "System Info:\n")
		w.write(0, "  Machine ID:\t%s\n", info.MachineID)
		w.write(0, "  System UUID:\t%s\n", info.SystemUUID)
		w.write(0, "  Boot ID:\t%s\n", info.BootID)
		w.write(0, "  Kernel Version:\t%s\n", info.KernelVersion)
		w.write(0, "  OS Image:\t%s\n", info.OSImage)
		w.write(0, "  Operating System:\t%s\n", info.OperatingSystem)
		w.write(0, "  Architecture:\t%s\n", info.Architecture)
		w.write(0, "  Container Runtime Version:\t%s\n", info.ContainerRuntimeVersion)
		w.write(0, "  Kubelet Version:\t%s\n", info.KubeletVersion)
		if node.Spec.PodCIDR != "" {
			w.write(0, "PodCIDR:\t%s\n", node.Spec.PodCIDR)
		}
		if len(node.Spec.PodCIDRs) > 0 {
			w.write(0, "PodCIDRs:\t%s\n", strings.Join(node.Spec.PodCIDRs, ","))
		}
		if node.Spec.ProviderID != "" {
			w.write(0, "ProviderID:\t%s\n", node.Spec.ProviderID)
		}
		var pods []*corev1.Pod
		for _, x := range l.List("Pod", "") {
			p := x.(*corev1.Pod)
			if p.Spec.NodeName == node.Name && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				pods = append(pods, p)
			}
		}
		describeNodeResource(w, node, pods, now)
		describeEvents(w, eventsFor(l, node, "Node"), now)
	})
}

// describeLease is the Lease section: the kubelet's heartbeat Lease in
// kube-node-lease.
func describeLease(w prefixWriter, l Lister, node string) {
	o, err := l.Get("Lease", corev1.NamespaceNodeLease, node)
	if err != nil {
		w.write(0, "Lease:\tFailed to get lease: %s\n", err)
		return
	}
	holder, acquire, renew := leaseTimes(o)
	w.write(0, "Lease:\n")
	w.write(1, "HolderIdentity:\t%s\n", holder)
	w.write(1, "AcquireTime:\t%s\n", acquire)
	w.write(1, "RenewTime:\t%s\n", renew)
}

func leaseTimes(o Object) (holder, acquire, renew string) {
	holder, acquire, renew = "<unset>", "<unset>", "<unset>"
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.AcquireTime != nil {
		acquire = l.Spec.AcquireTime.Time.Format(time.RFC1123Z)
	}
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time.Format(time.RFC1123Z)
	}
	return
}

// podTotals are a pod's requests or limits: its containers' summed, or
// its largest init container's when larger (resourcehelper.PodRequests
// without pod-level resources or sidecars).
func podTotals(p *corev1.Pod, limits bool) corev1.ResourceList {
	pick := func(c *corev1.Container) corev1.ResourceList {
		if limits {
			return c.Resources.Limits
		}
		return c.Resources.Requests
	}
	sum := corev1.ResourceList{}
	for i := range p.Spec.Containers {
		for n, q := range pick(&p.Spec.Containers[i]) {
			v := sum[n]
			v.Add(q)
			sum[n] = v
		}
	}
	for i := range p.Spec.InitContainers {
		for n, q := range pick(&p.Spec.InitContainers[i]) {
			if v := sum[n]; q.Cmp(v) > 0 {
				sum[n] = q.DeepCopy()
			}
		}
	}
	return sum
}

func percent(q resource.Quantity, of resource.Quantity, milli bool) int64 {
	if milli {
		if of.MilliValue() == 0 {
			return 0
		}
		return int64(float64(q.MilliValue()) / float64(of.MilliValue()) * 100)
	}
	if of.Value() == 0 {
		return 0
	}
	return int64(float64(q.Value()) / float64(of.Value()) * 100)
}

// describeNodeResource is the Non-terminated Pods table and the Allocated
// resources summary, as fractions of the node's allocatable.
func describeNodeResource(w prefixWriter, node *corev1.Node, pods []*corev1.Pod, now time.Time) {
	w.write(0, "Non-terminated Pods:\t(%d in total)\n", len(pods))
	w.write(1, "Namespace\tName\t\tCPU Requests\tCPU Limits\tMemory Requests\tMemory Limits\tAge\n")
	w.write(1, "---------\t----\t\t------------\t----------\t---------------\t-------------\t---\n")
	alloc := node.Status.Capacity
	if len(node.Status.Allocatable) > 0 {
		alloc = node.Status.Allocatable
	}
	acpu, amem, aeph := alloc[corev1.ResourceCPU], alloc[corev1.ResourceMemory], alloc[corev1.ResourceEphemeralStorage]
	reqs, lims := corev1.ResourceList{}, corev1.ResourceList{}
	for _, p := range pods {
		req, lim := podTotals(p, false), podTotals(p, true)
		cr, cl, mr, ml := req[corev1.ResourceCPU], lim[corev1.ResourceCPU], req[corev1.ResourceMemory], lim[corev1.ResourceMemory]
		w.write(1, "%s\t%s\t\t%s (%d%%)\t%s (%d%%)\t%s (%d%%)\t%s (%d%%)\t%s\n", p.Namespace, p.Name,
			cr.String(), percent(cr, acpu, true), cl.String(), percent(cl, acpu, true),
			mr.String(), percent(mr, amem, false), ml.String(), percent(ml, amem, false), since(now, p.CreationTimestamp))
		for n, q := range req {
			v := reqs[n]
			v.Add(q)
			reqs[n] = v
		}
		for n, q := range lim {
			v := lims[n]
			v.Add(q)
			lims[n] = v
		}
	}
	w.write(0, "Allocated resources:\n  (Total limits may be over 100 percent, i.e., overcommitted.)\n")
	w.write(1, "Resource\tRequests\tLimits\n")
	w.write(1, "--------\t--------\t------\n")
	for _, r := range []struct {
		name  corev1.ResourceName
		of    resource.Quantity
		milli bool
	}{{corev1.ResourceCPU, acpu, true}, {corev1.ResourceMemory, amem, false}, {corev1.ResourceEphemeralStorage, aeph, false}} {
		rq, lq := reqs[r.name], lims[r.name]
		w.write(1, "%s\t%s (%d%%)\t%s (%d%%)\n", r.name, rq.String(), percent(rq, r.of, r.milli), lq.String(), percent(lq, r.of, r.milli))
	}
}

// qosClass is status.qosClass, or computed as the kubelet does when unset:
// Guaranteed when every container limits CPU and memory at its requests,
// BestEffort with no requests or limits at all, else Burstable.
func qosClass(p *corev1.Pod) corev1.PodQOSClass {
	if p.Status.QOSClass != "" {
		return p.Status.QOSClass
	}
	any, guaranteed := false, true
	all := append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
	for _, c := range all {
		if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 {
			any = true
		}
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			l, ok := c.Resources.Limits[n]
			if !ok {
				guaranteed = false
				continue
			}
			if r, ok := c.Resources.Requests[n]; ok && r.Cmp(l) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case !any:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func describePod(l Lister, o Object) string {
	pod := o.(*corev1.Pod)
	now := l.Now()
	return tabbed(func(w prefixWriter) {
		w.write(0, "Name:\t%s\n", pod.Name)
		w.write(0, "Namespace:\t%s\n", pod.Namespace)
		if pod.Spec.Priority != nil {
			w.write(0, "Priority:\t%d\n", *pod.Spec.Priority)
		}
		if pod.Spec.PriorityClassName != "" {
			w.write(0, "Priority Class Name:\t%s\n", pod.Spec.PriorityClassName)
		}
		if pod.Spec.ServiceAccountName != "" {
			w.write(0, "Service Account:\t%s\n", pod.Spec.ServiceAccountName)
		}
		if pod.Spec.NodeName == "" {
			w.write(0, "Node:\t<none>\n")
		} else {
			w.write(0, "Node:\t%s\n", pod.Spec.NodeName+"/"+pod.Status.HostIP)
		}
		if pod.Status.StartTime != nil {
			w.write(0, "Start Time:\t%s\n", rfc1123(*pod.Status.StartTime))
		}
		printLabels(w, "Labels", pod.Labels)
		printAnnotations(w, pod.Annotations)
		if pod.DeletionTimestamp != nil && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded {
			w.write(0, "Status:\tTerminating (lasts %s)\n", since(now, *pod.DeletionTimestamp))
			if pod.DeletionGracePeriodSeconds != nil {
				w.write(0, "Termination Grace Period:\t%ds\n", *pod.DeletionGracePeriodSeconds)
			}
		} else {
			w.write(0, "Status:\t%s\n", pod.Status.Phase)
		}
		if pod.Status.Reason != "" {
			w.write(0, "Reason:\t%s\n", pod.Status.Reason)
		}
		if pod.Status.Message != "" {
			w.write(0, "Message:\t%s\n", pod.Status.Message)
		}
		w.write(0, "IP:\t%s\n", pod.Status.PodIP)
		if len(pod.Status.PodIPs) == 0 {
			w.write(0, "IPs:\t<none>\n")
		} else {
			w.write(0, "IPs:\n")
			for _, ip := range pod.Status.PodIPs {
				w.write(1, "IP:\t%s\n", ip.IP)
			}
		}
		if ref := metav1.GetControllerOf(pod); ref != nil {
			w.write(0, "Controlled By:\t%s/%s\n", ref.Kind, ref.Name)
		}
		if pod.Status.NominatedNodeName != "" {
			w.write(0, "NominatedNodeName:\t%s\n", pod.Status.NominatedNodeName)
		}
		if len(pod.Spec.InitContainers) > 0 {
			describeContainers(w, pod, "Init Containers", pod.Spec.InitContainers, pod.Status.InitContainerStatuses)
		}
		describeContainers(w, pod, "Containers", pod.Spec.Containers, pod.Status.ContainerStatuses)
		if len(pod.Status.Conditions) > 0 {
			w.write(0, "Conditions:\n  Type\tStatus\n")
			for _, c := range pod.Status.Conditions {
				w.write(1, "%v \t%v \n", c.Type, c.Status)
			}
		}
		describeVolumes(w, pod.Spec.Volumes)
		w.write(0, "QoS Class:\t%s\n", qosClass(pod))
		printLabels(w, "Node-Selectors", pod.Spec.NodeSelector)
		describeTolerations(w, pod.Spec.Tolerations)
		describeEvents(w, eventsFor(l, pod, "Pod"), now)
	})
}

func containerPorts(ps []corev1.ContainerPort, host bool) string {
	s := make([]string, 0, len(ps))
	for _, p := range ps {
		n := p.ContainerPort
		if host {
			n = p.HostPort
		}
		v := fmt.Sprintf("%d/%s", n, p.Protocol)
		if p.Name != "" {
			v += " (" + p.Name + ")"
		}
		s = append(s, v)
	}
	return strings.Join(s, ", ")
}

// fieldRefValue is what kubectl shows for a downward-API variable: its
// fieldpath helper knows the object's metadata only, so spec.nodeName or
// status.podIP show empty, "MY_NODE:   (v1:spec.nodeName)", as they do
// with the real kubectl.
func fieldRefValue(pod *corev1.Pod, path string) string {
	switch path {
	case "metadata.name":
		return pod.Name
	case "metadata.namespace":
		return pod.Namespace
	case "metadata.uid":
		return string(pod.UID)
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")]
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")]
	}
	return ""
}

func describeContainers(w prefixWriter, pod *corev1.Pod, label string, cs []corev1.Container, statuses []corev1.ContainerStatus) {
	if len(cs) == 0 {
		w.write(0, "%s: <none>\n", label)
	} else {
		w.write(0, "%s:\n", label)
	}
	for _, c := range cs {
		var st corev1.ContainerStatus
		ok := false
		for _, s := range statuses {
			if s.Name == c.Name {
				st, ok = s, true
			}
		}
		w.write(1, "%v:\n", c.Name)
		if ok {
			w.write(2, "Container ID:\t%s\n", st.ContainerID)
		}
		w.write(2, "Image:\t%s\n", c.Image)
		if ok {
			w.write(2, "Image ID:\t%s\n", st.ImageID)
		}
		if p := containerPorts(c.Ports, false); strings.Contains(p, ",") {
			w.write(2, "Ports:\t%s\n", p)
		} else {
			w.write(2, "Port:\t%s\n", orNone(p))
		}
		if p := containerPorts(c.Ports, true); strings.Contains(p, ",") {
			w.write(2, "Host Ports:\t%s\n", p)
		} else {
			w.write(2, "Host Port:\t%s\n", orNone(p))
		}
		for _, cmd := range []struct {
			title string
			args  []string
		}{{"Command", c.Command}, {"Args", c.Args}} {
			if len(cmd.args) == 0 {
				continue
			}
			w.write(2, "%s:\n", cmd.title)
			for _, a := range cmd.args {
				for _, s := range strings.Split(a, "\n") {
					w.write(3, "%s\n", s)
				}
			}
		}
		if ok {
			describeState(w, "State", st.State)
			if st.LastTerminationState.Terminated != nil {
				describeState(w, "Last State", st.LastTerminationState)
			}
			w.write(2, "Ready:\t%s\n", map[bool]string{true: "True", false: "False"}[st.Ready])
			w.write(2, "Restart Count:\t%d\n", st.RestartCount)
		}
		for _, rl := range []struct {
			title string
			list  corev1.ResourceList
		}{{"Limits", c.Resources.Limits}, {"Requests", c.Resources.Requests}} {
			if len(rl.list) == 0 {
				continue
			}
			w.write(2, "%s:\n", rl.title)
			names := make([]string, 0, len(rl.list))
			for n := range rl.list {
				names = append(names, string(n))
			}
			slices.Sort(names)
			for _, n := range names {
				q := rl.list[corev1.ResourceName(n)]
				w.write(3, "%s:\t%s\n", n, q.String())
			}
		}
		for _, p := range []struct {
			title string
			probe *corev1.Probe
		}{{"Liveness", c.LivenessProbe}, {"Readiness", c.ReadinessProbe}, {"Startup", c.StartupProbe}} {
			if p.probe != nil {
				w.write(2, "%s:\t%s\n", p.title, describeProbe(p.probe))
			}
		}
		if len(c.Env) == 0 {
			w.write(2, "Environment:\t<none>\n")
		} else {
			w.write(2, "Environment:\n")
		}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				for i, s := range strings.Split(e.Value, "\n") {
					if i == 0 {
						w.write(3, "%s:\t%s\n", e.Name, s)
					} else {
						w.write(3, "\t%s\n", s)
					}
				}
			case e.ValueFrom.FieldRef != nil:
				f := e.ValueFrom.FieldRef
				w.write(3, "%s:\t%s (%s:%s)\n", e.Name, fieldRefValue(pod, f.FieldPath), f.APIVersion, f.FieldPath)
			case e.ValueFrom.ConfigMapKeyRef != nil:
				r := e.ValueFrom.ConfigMapKeyRef
				w.write(3, "%s:\t<set to the key '%s' of config map '%s'>\tOptional: %t\n", e.Name, r.Key, r.Name, r.Optional != nil && *r.Optional)
			case e.ValueFrom.SecretKeyRef != nil:
				r := e.ValueFrom.SecretKeyRef
				w.write(3, "%s:\t<set to the key '%s' in secret '%s'>\tOptional: %t\n", e.Name, r.Key, r.Name, r.Optional != nil && *r.Optional)
			}
		}
		mounts := slices.Clone(c.VolumeMounts)
		slices.SortStableFunc(mounts, func(a, b corev1.VolumeMount) int { return strings.Compare(a.MountPath, b.MountPath) })
		if len(mounts) == 0 {
			w.write(2, "Mounts:\t<none>\n")
		} else {
			w.write(2, "Mounts:\n")
		}
		for _, m := range mounts {
			flags := []string{"rw"}
			if m.ReadOnly {
				flags[0] = "ro"
			}
			if m.SubPath != "" {
				flags = append(flags, fmt.Sprintf("path=%q", m.SubPath))
			}
			w.write(3, "%s from %s (%s)\n", m.MountPath, m.Name, strings.Join(flags, ","))
		}
	}
}

func describeState(w prefixWriter, name string, s corev1.ContainerState) {
	switch {
	case s.Running != nil:
		w.write(2, "%s:\tRunning\n", name)
		w.write(3, "Started:\t%v\n", rfc1123(s.Running.StartedAt))
	case s.Waiting != nil:
		w.write(2, "%s:\tWaiting\n", name)
		if s.Waiting.Reason != "" {
			w.write(3, "Reason:\t%s\n", s.Waiting.Reason)
		}
	case s.Terminated != nil:
		t := s.Terminated
		w.write(2, "%s:\tTerminated\n", name)
		if t.Reason != "" {
			w.write(3, "Reason:\t%s\n", t.Reason)
		}
		if t.Message != "" {
			w.write(3, "Message:\t%s\n", t.Message)
		}
		w.write(3, "Exit Code:\t%d\n", t.ExitCode)
		if t.Signal > 0 {
			w.write(3, "Signal:\t%d\n", t.Signal)
		}
		w.write(3, "Started:\t%s\n", rfc1123(t.StartedAt))
		w.write(3, "Finished:\t%s\n", rfc1123(t.FinishedAt))
	default:
		w.write(2, "%s:\tWaiting\n", name)
	}
}

func describeProbe(p *corev1.Probe) string {
	attrs := fmt.Sprintf("delay=%ds timeout=%ds period=%ds successThreshold=%d failureThreshold=%d",
		p.InitialDelaySeconds, p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold)
	switch {
	case p.Exec != nil:
		return fmt.Sprintf("exec %v %s", p.Exec.Command, attrs)
	case p.HTTPGet != nil:
		host := p.HTTPGet.Host
		if port := p.HTTPGet.Port.String(); port != "" {
			host = net.JoinHostPort(host, port)
		}
		return fmt.Sprintf("http-get %s://%s%s %s", strings.ToLower(string(p.HTTPGet.Scheme)), host, p.HTTPGet.Path, attrs)
	case p.TCPSocket != nil:
		return fmt.Sprintf("tcp-socket %s:%s %s", p.TCPSocket.Host, p.TCPSocket.Port.String(), attrs)
	}
	return "unknown " + attrs
}

func describeVolumes(w prefixWriter, vs []corev1.Volume) {
	if len(vs) == 0 {
		w.write(0, "Volumes:\t<none>\n")
		return
	}
	w.write(0, "Volumes:\n")
	for _, v := range vs {
		w.write(1, "%v:\n", v.Name)
		switch s := v.VolumeSource; {
		case s.HostPath != nil:
			t := "<none>"
			if s.HostPath.Type != nil {
				t = string(*s.HostPath.Type)
			}
			w.write(2, "Type:\tHostPath (bare host directory volume)\n    Path:\t%v\n    HostPathType:\t%v\n", s.HostPath.Path, t)
		case s.EmptyDir != nil:
			limit := "<unset>"
			if s.EmptyDir.SizeLimit != nil && s.EmptyDir.SizeLimit.Sign() > 0 {
				limit = s.EmptyDir.SizeLimit.String()
			}
			w.write(2, "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n    Medium:\t%v\n    SizeLimit:\t%v\n", s.EmptyDir.Medium, limit)
		case s.ConfigMap != nil:
			w.write(2, "Type:\tConfigMap (a volume populated by a ConfigMap)\n    Name:\t%v\n    Optional:\t%v\n",
				s.ConfigMap.Name, s.ConfigMap.Optional != nil && *s.ConfigMap.Optional)
		case s.Secret != nil:
			w.write(2, "Type:\tSecret (a volume populated by a Secret)\n    SecretName:\t%v\n    Optional:\t%v\n",
				s.Secret.SecretName, s.Secret.Optional != nil && *s.Secret.Optional)
		case s.Projected != nil:
			w.write(2, "Type:\tProjected (a volume that contains injected data from multiple sources)\n")
			for _, src := range s.Projected.Sources {
				switch {
				case src.Secret != nil:
					w.write(2, "SecretName:\t%v\n    Optional:\t%v\n", src.Secret.Name, src.Secret.Optional != nil && *src.Secret.Optional)
				case src.DownwardAPI != nil:
					w.write(2, "DownwardAPI:\ttrue\n")
				case src.ConfigMap != nil:
					w.write(2, "ConfigMapName:\t%v\n    Optional:\t%v\n", src.ConfigMap.Name, src.ConfigMap.Optional != nil && *src.ConfigMap.Optional)
				case src.ServiceAccountToken != nil && src.ServiceAccountToken.ExpirationSeconds != nil:
					w.write(2, "TokenExpirationSeconds:\t%d\n", *src.ServiceAccountToken.ExpirationSeconds)
				}
			}
		default:
			w.write(1, "<unknown>\n")
		}
	}
}

// describeTolerations is printTolerationsMultiline: sorted by key,
// "key=value:Effect op=Exists for 300s".
func describeTolerations(w prefixWriter, ts []corev1.Toleration) {
	w.write(0, "Tolerations:\t")
	if len(ts) == 0 {
		w.line("<none>")
		return
	}
	ts = slices.Clone(ts)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Key < ts[j].Key })
	for i, t := range ts {
		if i > 0 {
			w.write(0, "\t")
		}
		w.write(0, "%s", t.Key)
		if t.Value != "" {
			w.write(0, "=%s", t.Value)
		}
		if t.Effect != "" {
			w.write(0, ":%s", t.Effect)
		}
		if t.Operator == corev1.TolerationOpExists && t.Value == "" {
			if t.Key != "" || t.Effect != "" {
				w.write(0, " op=Exists")
			} else {
				w.write(0, "op=Exists")
			}
		}
		if t.TolerationSeconds != nil {
			w.write(0, " for %ds", *t.TolerationSeconds)
		}
		w.write(0, "\n")
	}
}

// serviceEndpoints is formatEndpointSlices for one port name: the ready
// endpoints' address:port, three at most then "+ N more...", "<none>"
// when the Service has no slices at all.
func serviceEndpoints(slices []*discoveryv1.EndpointSlice, portName string) string {
	if len(slices) == 0 {
		return "<none>"
	}
	var list []string
	count := 0
	add := func(s string) {
		if len(list) < 3 {
			list = append(list, s)
		}
		count++
	}
	for _, es := range slices {
		for _, e := range es.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready || len(e.Addresses) == 0 {
				continue
			}
			if len(es.Ports) == 0 {
				add(e.Addresses[0])
			}
			for _, p := range es.Ports {
				name := ""
				if p.Name != nil {
					name = *p.Name
				}
				if name == portName && p.Port != nil {
					add(net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(*p.Port))))
				}
			}
		}
	}
	return moreList(list, count)
}

func describeService(l Lister, o Object) string {
	svc := o.(*corev1.Service)
	var eps []*discoveryv1.EndpointSlice
	for _, x := range l.List("EndpointSlice", svc.Namespace) {
		if es, ok := x.(*discoveryv1.EndpointSlice); ok && es.Labels[discoveryv1.LabelServiceName] == svc.Name {
			eps = append(eps, es)
		}
	}
	return tabbed(func(w prefixWriter) {
		w.write(0, "Name:\t%s\n", svc.Name)
		w.write(0, "Namespace:\t%s\n", svc.Namespace)
		printLabels(w, "Labels", svc.Labels)
		printAnnotations(w, svc.Annotations)
		w.write(0, "Selector:\t%s\n", labels.FormatLabels(svc.Spec.Selector))
		w.write(0, "Type:\t%s\n", svc.Spec.Type)
		if svc.Spec.IPFamilyPolicy != nil {
			w.write(0, "IP Family Policy:\t%s\n", *svc.Spec.IPFamilyPolicy)
		}
		if len(svc.Spec.IPFamilies) > 0 {
			f := make([]string, len(svc.Spec.IPFamilies))
			for i, x := range svc.Spec.IPFamilies {
				f[i] = string(x)
			}
			w.write(0, "IP Families:\t%s\n", strings.Join(f, ","))
		} else {
			w.write(0, "IP Families:\t<none>\n")
		}
		w.write(0, "IP:\t%s\n", svc.Spec.ClusterIP)
		w.write(0, "IPs:\t%s\n", orNone(strings.Join(svc.Spec.ClusterIPs, ",")))
		if len(svc.Spec.ExternalIPs) > 0 {
			w.write(0, "External IPs:\t%v\n", strings.Join(svc.Spec.ExternalIPs, ","))
		}
		if svc.Spec.LoadBalancerIP != "" {
			w.write(0, "Desired LoadBalancer IP:\t%s\n", svc.Spec.LoadBalancerIP)
		}
		if svc.Spec.ExternalName != "" {
			w.write(0, "External Name:\t%s\n", svc.Spec.ExternalName)
		}
		if in := svc.Status.LoadBalancer.Ingress; len(in) > 0 {
			s := make([]string, len(in))
			for i, x := range in {
				s[i] = x.IP
				if x.IP == "" {
					s[i] = x.Hostname
				} else if x.IPMode != nil {
					s[i] += fmt.Sprintf(" (%s)", *x.IPMode)
				}
			}
			w.write(0, "LoadBalancer Ingress:\t%s\n", strings.Join(s, ", "))
		}
		for _, p := range svc.Spec.Ports {
			name := p.Name
			if name == "" {
				name = "<unset>"
			}
			w.write(0, "Port:\t%s\t%d/%s\n", name, p.Port, p.Protocol)
			if p.TargetPort.Type == intstr.Int {
				w.write(0, "TargetPort:\t%d/%s\n", p.TargetPort.IntVal, p.Protocol)
			} else {
				w.write(0, "TargetPort:\t%s/%s\n", p.TargetPort.StrVal, p.Protocol)
			}
			if p.AppProtocol != nil {
				w.write(0, "AppProtocol:\t%s\n", *p.AppProtocol)
			}
			if p.NodePort != 0 {
				w.write(0, "NodePort:\t%s\t%d/%s\n", name, p.NodePort, p.Protocol)
			}
			w.write(0, "Endpoints:\t%s\n", serviceEndpoints(eps, p.Name))
		}
		w.write(0, "Session Affinity:\t%s\n", svc.Spec.SessionAffinity)
		if svc.Spec.ExternalTrafficPolicy != "" {
			w.write(0, "External Traffic Policy:\t%s\n", svc.Spec.ExternalTrafficPolicy)
		}
		if svc.Spec.InternalTrafficPolicy != nil {
			w.write(0, "Internal Traffic Policy:\t%s\n", *svc.Spec.InternalTrafficPolicy)
		}
		if svc.Spec.HealthCheckNodePort != 0 {
			w.write(0, "HealthCheck NodePort:\t%d\n", svc.Spec.HealthCheckNodePort)
		}
		if len(svc.Spec.LoadBalancerSourceRanges) > 0 {
			w.write(0, "LoadBalancer Source Ranges:\t%v\n", strings.Join(svc.Spec.LoadBalancerSourceRanges, ","))
		}
		if svc.Spec.TrafficDistribution != nil {
			w.write(0, "Traffic Distribution:\t%s\n", *svc.Spec.TrafficDistribution)
		}
		describeEvents(w, eventsFor(l, svc, "Service"), l.Now())
	})
}
