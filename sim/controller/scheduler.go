package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// Scheduler is kube-scheduler's default profile, reduced to the filter
// plugins that decide where a pod's network lives (v1.33 wording):
// NodeUnschedulable, NodeName, TaintToleration (NoSchedule and NoExecute),
// NodeAffinity (nodeSelector and required node affinity), NodePorts
// (hostPort conflicts) and NodeResourcesFit's pod count (kubelet maxPods).
// Among feasible nodes it prefers the one running the fewest pods (what
// LeastAllocated does when pods request nothing, as the default non-zero
// requests make every pod weigh the same), ties broken at random from the
// world's source, as the scheduler's reservoir sampling does. A pod that
// fits nowhere stays Pending with PodScheduled=False and a FailedScheduling
// event carrying the scheduler's message; it is retried whenever a node
// or a pod changes.
type Scheduler struct {
	api   *apiserver.Server
	eng   *datapath.Engine
	Queue *Queue
	// unschedulable holds the pods that fit nowhere at their last
	// attempt: the scheduler's unschedulable queue, retried on a change.
	unschedulable map[string]bool
}

// NewScheduler starts the scheduler on api.
func NewScheduler(api *apiserver.Server, eng *datapath.Engine) *Scheduler {
	s := &Scheduler{api: api, eng: eng, unschedulable: map[string]bool{}}
	s.Queue = NewQueue(eng, "scheduler", 0, s.reconcile)
	api.WatchReadOnly("Pod", func(ev watch.Event) {
		p := ev.Object.(*corev1.Pod)
		if ev.Type == watch.Deleted {
			s.retryUnschedulable()
			return
		}
		if p.Spec.NodeName == "" && p.Spec.SchedulerName == corev1.DefaultSchedulerName {
			s.Queue.Add(Key(p.Namespace, p.Name))
		}
	})
	api.WatchReadOnly("Node", func(watch.Event) { s.retryUnschedulable() })
	return s
}

func (s *Scheduler) retryUnschedulable() {
	keys := make([]string, 0, len(s.unschedulable))
	for k := range s.unschedulable {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.Queue.Add(k)
	}
}

func (s *Scheduler) reconcile(key string) (Result, error) {
	ns, name := SplitKey(key)
	o, err := s.api.Get("Pod", ns, name)
	if err != nil {
		delete(s.unschedulable, key)
		return Result{}, nil // deleted
	}
	pod := o.(*corev1.Pod)
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		delete(s.unschedulable, key)
		return Result{}, nil
	}
	nodes := s.api.List("Node", "")
	var feasible []*corev1.Node
	reasons := map[string]int{}
	for _, no := range nodes {
		n := no.(*corev1.Node)
		if r := s.filter(pod, n); r != "" {
			reasons[r]++
			continue
		}
		feasible = append(feasible, n)
	}
	if len(feasible) == 0 {
		msg := FitError(len(nodes), reasons)
		s.unschedulable[key] = true
		s.markUnschedulable(pod, msg)
		return Result{}, nil
	}
	delete(s.unschedulable, key)
	best := s.pick(feasible)
	pod.Spec.NodeName = best.Name
	// The binding subresource: spec.nodeName and PodScheduled=True.
	bound, err := s.api.UpdateBinding(pod)
	if err != nil {
		return Result{}, err
	}
	s.api.Record(bound, "default-scheduler", corev1.EventTypeNormal, "Scheduled",
		fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, best.Name))
	return Result{}, nil
}

// FitError is the scheduler's message for a pod that fits on no node:
// the reasons counted and sorted, then the preemption verdict.
func FitError(numNodes int, reasons map[string]int) string {
	var parts []string
	for r, n := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	slices.Sort(parts)
	if numNodes == 0 {
		return "no nodes available to schedule pods"
	}
	msg := fmt.Sprintf("0/%d nodes are available: %s.", numNodes, strings.Join(parts, ", "))
	// Preemption: a node rejected for a reason evicting lower-priority
	// pods could fix (pod count, host ports) has no victims, as every pod
	// has priority 0; the others are unresolvable.
	resolvable := reasons["Too many pods"] + reasons["node(s) didn't have free ports for the requested pod ports"]
	var pre []string
	if resolvable > 0 {
		pre = append(pre, fmt.Sprintf("%d No preemption victims found for incoming pod", resolvable))
	}
	if n := numNodes - resolvable; n > 0 {
		pre = append(pre, fmt.Sprintf("%d Preemption is not helpful for scheduling", n))
	}
	return msg + fmt.Sprintf(" preemption: 0/%d nodes are available: %s.", numNodes, strings.Join(pre, ", "))
}

func (s *Scheduler) markUnschedulable(pod *corev1.Pod, msg string) {
	cond := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: msg, LastTransitionTime: metav1.NewTime(s.api.Now())}
	if old := podCondition(pod, corev1.PodScheduled); old != nil && old.Message == msg && old.Status == corev1.ConditionFalse {
		return // already said
	}
	setPodCondition(pod, cond)
	pod.Status.Phase = corev1.PodPending
	if up, err := s.api.UpdateStatus(pod); err == nil {
		s.api.Record(up, "default-scheduler", corev1.EventTypeWarning, "FailedScheduling", msg)
	}
}

// filter returns why pod cannot run on n ("" if it can), in the wording
// of the plugin that rejects it.
func (s *Scheduler) filter(pod *corev1.Pod, n *corev1.Node) string {
	if n.Spec.Unschedulable && !tolerates(pod.Spec.Tolerations, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return "node(s) were unschedulable"
	}
	// The default profile's filter order: NodeUnschedulable, NodeName,
	// TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit.
	for _, t := range n.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerates(pod.Spec.Tolerations, t) {
			return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
		}
	}
	if !MatchesNodeAffinity(pod, n) {
		return "node(s) didn't match Pod's node affinity/selector"
	}
	if wantsHostPort(pod) {
		pods := s.api.ByIndex("Pod", apiserver.IndexNode, n.Name)
		for _, c := range pod.Spec.Containers {
			for _, want := range c.Ports {
				if want.HostPort == 0 {
					continue
				}
				for _, o := range pods {
					for _, oc := range o.(*corev1.Pod).Spec.Containers {
						for _, have := range oc.Ports {
							if have.HostPort == want.HostPort && have.Protocol == want.Protocol &&
								(have.HostIP == want.HostIP || have.HostIP == "" || have.HostIP == "0.0.0.0" || want.HostIP == "" || want.HostIP == "0.0.0.0") {
								return "node(s) didn't have free ports for the requested pod ports"
							}
						}
					}
				}
			}
		}
	}
	// Pods that ran to completion would not count; kubewalk has none.
	if q, ok := n.Status.Allocatable[corev1.ResourcePods]; ok && int64(s.api.CountByIndex("Pod", apiserver.IndexNode, n.Name)) >= q.Value() {
		return "Too many pods"
	}
	return ""
}

func (s *Scheduler) pick(nodes []*corev1.Node) *corev1.Node {
	count := func(n *corev1.Node) int { return s.api.CountByIndex("Pod", apiserver.IndexNode, n.Name) }
	best, bestN, ties := nodes[0], count(nodes[0]), 1
	for _, n := range nodes[1:] {
		c := count(n)
		switch {
		case c < bestN:
			best, bestN, ties = n, c, 1
		case c == bestN:
			ties++
			if s.eng.Rand().IntN(ties) == 0 {
				best = n
			}
		}
	}
	return best
}

// MatchesNodeAffinity is the NodeAffinity filter: spec.nodeSelector and
// requiredDuringSchedulingIgnoredDuringExecution (terms ORed, expressions
// and fields ANDed).
func MatchesNodeAffinity(pod *corev1.Pod, n *corev1.Node) bool {
	if len(pod.Spec.NodeSelector) > 0 && !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
		return false
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, n) {
			return true
		}
	}
	return false
}

func termMatches(t corev1.NodeSelectorTerm, n *corev1.Node) bool {
	if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
		return false
	}
	for _, r := range t.MatchExpressions {
		if !requirementMatches(r, n.Labels[r.Key], hasKey(n.Labels, r.Key)) {
			return false
		}
	}
	for _, r := range t.MatchFields {
		if r.Key != "metadata.name" || !requirementMatches(r, n.Name, true) {
			return false
		}
	}
	return true
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func requirementMatches(r corev1.NodeSelectorRequirement, v string, present bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return present && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !present || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return present
	case corev1.NodeSelectorOpDoesNotExist:
		return !present
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !present || len(r.Values) != 1 {
			return false
		}
		var a, b int64
		if _, err := fmt.Sscan(v, &a); err != nil {
			return false
		}
		if _, err := fmt.Sscan(r.Values[0], &b); err != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return a > b
		}
		return a < b
	}
	return false
}

func tolerates(ts []corev1.Toleration, taint corev1.Taint) bool {
	for _, t := range ts {
		if toleratesOne(t, taint) {
			return true
		}
	}
	return false
}

// toleratesOne is v1.Toleration.ToleratesTaint without the logger: the
// effect matches (or is empty), the key matches (or is empty with
// Exists), and Exists, or Equal with the same value.
func toleratesOne(t corev1.Toleration, taint corev1.Taint) bool {
	if t.Effect != "" && t.Effect != taint.Effect {
		return false
	}
	if t.Key != "" && t.Key != taint.Key {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return t.Key != "" && t.Value == taint.Value
	}
	return false
}

// Tolerates reports whether tolerations ts tolerate taint.
func Tolerates(ts []corev1.Toleration, taint corev1.Taint) bool { return tolerates(ts, taint) }

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func setPodCondition(p *corev1.Pod, c corev1.PodCondition) {
	if old := podCondition(p, c.Type); old != nil {
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return
	}
	p.Status.Conditions = append(p.Status.Conditions, c)
}

// SetPodCondition sets (or replaces) the pod's condition of c's type,
// keeping lastTransitionTime when the status does not change.
func SetPodCondition(p *corev1.Pod, c corev1.PodCondition) { setPodCondition(p, c) }

func wantsHostPort(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.HostPort != 0 {
				return true
			}
		}
	}
	return false
}
