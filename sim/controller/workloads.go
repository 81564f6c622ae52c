package controller

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/sim/apiserver"
)

// controlledBy returns the key of o's controller of kind, or "".
func controlledBy(o apiserver.Object, kind string) string {
	for _, r := range o.GetOwnerReferences() {
		if r.Controller != nil && *r.Controller && r.Kind == kind {
			return Key(o.GetNamespace(), r.Name)
		}
	}
	return ""
}

func isActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// ReplicaSets is the ReplicaSet controller: it creates pods from the
// template (generateName `<replicaset>-`, an ownerReference to the
// ReplicaSet) until spec.replicas are active, and deletes the surplus,
// unscheduled and not-ready pods first, then the newest (the controller's
// ranking, reduced). status.replicas, readyReplicas and availableReplicas
// follow the pods.
type ReplicaSets struct {
	api   *apiserver.Server
	Queue *Queue
}

// NewReplicaSets starts the controller on api.
func NewReplicaSets(api *apiserver.Server, eng *datapath.Engine) *ReplicaSets {
	c := &ReplicaSets{api: api}
	c.Queue = NewQueue(eng, "replicaset-controller", 0, c.reconcile)
	api.WatchReadOnly("ReplicaSet", func(ev watch.Event) {
		c.Queue.Add(Key(ev.Object.(apiserver.Object).GetNamespace(), ev.Object.(apiserver.Object).GetName()))
	})
	api.WatchReadOnly("Pod", func(ev watch.Event) {
		if k := controlledBy(ev.Object.(apiserver.Object), "ReplicaSet"); k != "" {
			c.Queue.Add(k)
		}
	})
	return c
}

func (c *ReplicaSets) reconcile(key string) (Result, error) {
	ns, name := SplitKey(key)
	o, err := c.api.Get("ReplicaSet", ns, name)
	if err != nil {
		return Result{}, c.orphanCleanup(ns, name)
	}
	rs := o.(*appsv1.ReplicaSet)
	pods := ownedPods(c.api, rs, "ReplicaSet")
	var active []*corev1.Pod
	for _, p := range pods {
		if isActive(p) {
			active = append(active, p)
		}
	}
	want := int(*rs.Spec.Replicas)
	for i := len(active); i < want; i++ {
		p := podFromTemplate(&rs.Spec.Template, rs, "ReplicaSet", "apps/v1")
		p.GenerateName = rs.Name + "-"
		created, err := c.api.Create(p)
		if err != nil {
			c.api.Record(rs, "replicaset-controller", corev1.EventTypeWarning, "FailedCreate", "Error creating: "+err.Error())
			return Result{}, err
		}
		c.api.Record(rs, "replicaset-controller", corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+created.GetName())
		active = append(active, created.(*corev1.Pod))
	}
	if len(active) > want {
		slices.SortStableFunc(active, func(a, b *corev1.Pod) int { return deletionRank(a) - deletionRank(b) })
		for _, p := range active[:len(active)-want] {
			if err := c.api.Delete("Pod", p.Namespace, p.Name); err != nil {
				return Result{}, err
			}
			c.api.Record(rs, "replicaset-controller", corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.Name)
		}
		active = active[len(active)-want:]
	}
	st := appsv1.ReplicaSetStatus{Replicas: int32(len(active)), ObservedGeneration: rs.Generation}
	for _, p := range active {
		if IsPodReady(p) {
			st.ReadyReplicas++
			st.AvailableReplicas++
		}
	}
	st.FullyLabeledReplicas = st.Replicas
	if !equalRSStatus(rs.Status, st) {
		rs.Status = st
		if _, err := c.api.UpdateStatus(rs); err != nil {
			return Result{}, err
		}
	}
	return Result{}, nil
}

func equalRSStatus(a, b appsv1.ReplicaSetStatus) bool {
	return a.Replicas == b.Replicas && a.ReadyReplicas == b.ReadyReplicas && a.AvailableReplicas == b.AvailableReplicas &&
		a.ObservedGeneration == b.ObservedGeneration && a.FullyLabeledReplicas == b.FullyLabeledReplicas
}

// orphanCleanup is the garbage collector's part for a deleted owner:
// pods it controlled are deleted (background propagation).
func (c *ReplicaSets) orphanCleanup(ns, name string) error {
	for _, o := range c.api.ByIndex("Pod", apiserver.IndexOwner, ns+"/ReplicaSet/"+name) {
		if err := c.api.Delete("Pod", ns, o.GetName()); err != nil {
			return err
		}
	}
	return nil
}

// deletionRank orders pods for scale-down: unscheduled, then pending, then
// not ready, then ready; among equals the newest (highest rank) last is
// kept... the controller deletes the lowest ranks first.
func deletionRank(p *corev1.Pod) int {
	switch {
	case p.Spec.NodeName == "":
		return 0
	case p.Status.Phase == corev1.PodPending:
		return 1
	case !IsPodReady(p):
		return 2
	}
	return 3
}

func ownedPods(api *apiserver.Server, owner apiserver.Object, kind string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range api.ByIndex("Pod", apiserver.IndexOwner, owner.GetNamespace()+"/"+kind+"/"+owner.GetName()) {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

func podFromTemplate(t *corev1.PodTemplateSpec, owner apiserver.Object, kind, apiVersion string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
	p.Namespace = owner.GetNamespace()
	p.Name = ""
	p.OwnerReferences = []metav1.OwnerReference{ownerRef(owner, apiVersion, kind)}
	return p
}

// Deployments is the Deployment controller: one ReplicaSet per pod
// template, named `<deployment>-<pod-template-hash>`, scaled to
// spec.replicas, and older ReplicaSets scaled to zero. The hash is the
// FNV-32a of the template (kube-controller-manager hashes a spew dump of
// it, so the value differs; its alphabet and role are the same). Rollouts
// are not paced by maxSurge/maxUnavailable: the new ReplicaSet is scaled
// up and the old ones down in one step.
type Deployments struct {
	api   *apiserver.Server
	Queue *Queue
}

// NewDeployments starts the controller on api.
func NewDeployments(api *apiserver.Server, eng *datapath.Engine) *Deployments {
	c := &Deployments{api: api}
	c.Queue = NewQueue(eng, "deployment-controller", 0, c.reconcile)
	api.WatchReadOnly("Deployment", func(ev watch.Event) {
		c.Queue.Add(Key(ev.Object.(apiserver.Object).GetNamespace(), ev.Object.(apiserver.Object).GetName()))
	})
	api.WatchReadOnly("ReplicaSet", func(ev watch.Event) {
		if k := controlledBy(ev.Object.(apiserver.Object), "Deployment"); k != "" {
			c.Queue.Add(k)
		}
	})
	return c
}

// PodTemplateHash is the pod-template-hash label value for t.
func PodTemplateHash(t *corev1.PodTemplateSpec) string {
	b, _ := json.Marshal(t)
	h := fnv.New32a()
	h.Write(b)
	return safeEncode(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// safeEncode is apimachinery's rand.SafeEncodeString: each byte mapped
// into the vowel-free alphabet.
func safeEncode(s string) string {
	const alphanums = "bcdfghjklmnpqrstvwxz2456789"
	r := make([]byte, len(s))
	for i, b := range []byte(s) {
		r[i] = alphanums[int(b)%len(alphanums)]
	}
	return string(r)
}

func (c *Deployments) reconcile(key string) (Result, error) {
	ns, name := SplitKey(key)
	o, err := c.api.Get("Deployment", ns, name)
	if err != nil {
		for _, rs := range c.api.ByIndex("ReplicaSet", apiserver.IndexOwner, ns+"/Deployment/"+name) {
			if err := c.api.Delete("ReplicaSet", ns, rs.GetName()); err != nil {
				return Result{}, err
			}
		}
		return Result{}, nil
	}
	d := o.(*appsv1.Deployment)
	hash := PodTemplateHash(&d.Spec.Template)
	rsName := d.Name + "-" + hash
	var owned []*appsv1.ReplicaSet
	for _, o := range c.api.ByIndex("ReplicaSet", apiserver.IndexOwner, ns+"/Deployment/"+name) {
		owned = append(owned, o.(*appsv1.ReplicaSet))
	}
	var cur *appsv1.ReplicaSet
	for _, rs := range owned {
		if rs.Name == rsName {
			cur = rs
		}
	}
	if cur == nil {
		t := d.Spec.Template.DeepCopy()
		if t.Labels == nil {
			t.Labels = map[string]string{}
		}
		t.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
		sel := d.Spec.Selector.DeepCopy()
		if sel.MatchLabels == nil {
			sel.MatchLabels = map[string]string{}
		}
		sel.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
		lbls := map[string]string{}
		for k, v := range t.Labels {
			lbls[k] = v
		}
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: rsName, Namespace: ns, Labels: lbls,
				Annotations: map[string]string{"deployment.kubernetes.io/desired-replicas": strconv.Itoa(int(*d.Spec.Replicas)),
					"deployment.kubernetes.io/max-replicas": strconv.Itoa(int(*d.Spec.Replicas)),
					"deployment.kubernetes.io/revision":     strconv.Itoa(len(owned) + 1)},
				OwnerReferences: []metav1.OwnerReference{ownerRef(d, "apps/v1", "Deployment")}},
			Spec: appsv1.ReplicaSetSpec{Replicas: d.Spec.Replicas, Selector: sel, Template: *t},
		}
		if _, err := c.api.Create(rs); err != nil {
			return Result{}, err
		}
		c.api.Record(d, "deployment-controller", corev1.EventTypeNormal, "ScalingReplicaSet",
			fmt.Sprintf("Scaled up replica set %s from 0 to %d", rsName, *d.Spec.Replicas))
	} else if *cur.Spec.Replicas != *d.Spec.Replicas {
		from := *cur.Spec.Replicas
		cur.Spec.Replicas = d.Spec.Replicas
		cur.Annotations["deployment.kubernetes.io/desired-replicas"] = strconv.Itoa(int(*d.Spec.Replicas))
		if _, err := c.api.Update(cur); err != nil {
			return Result{}, err
		}
		verb := "up"
		if from > *d.Spec.Replicas {
			verb = "down"
		}
		c.api.Record(d, "deployment-controller", corev1.EventTypeNormal, "ScalingReplicaSet",
			fmt.Sprintf("Scaled %s replica set %s from %d to %d", verb, rsName, from, *d.Spec.Replicas))
	}
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation}
	for _, rs := range owned {
		if rs.Name != rsName && *rs.Spec.Replicas != 0 {
			from := *rs.Spec.Replicas
			zero := int32(0)
			rs.Spec.Replicas = &zero
			if _, err := c.api.Update(rs); err != nil {
				return Result{}, err
			}
			c.api.Record(d, "deployment-controller", corev1.EventTypeNormal, "ScalingReplicaSet",
				fmt.Sprintf("Scaled down replica set %s from %d to 0", rs.Name, from))
		}
		st.Replicas += rs.Status.Replicas
		st.ReadyReplicas += rs.Status.ReadyReplicas
		st.AvailableReplicas += rs.Status.AvailableReplicas
		if rs.Name == rsName {
			st.UpdatedReplicas = rs.Status.Replicas
		}
	}
	st.UnavailableReplicas = max(0, *d.Spec.Replicas-st.AvailableReplicas)
	avail := corev1.ConditionFalse
	reason, msg := "MinimumReplicasUnavailable", "Deployment does not have minimum availability."
	if st.UnavailableReplicas == 0 {
		avail, reason, msg = corev1.ConditionTrue, "MinimumReplicasAvailable", "Deployment has minimum availability."
	}
	now := metav1.NewTime(c.api.Now())
	st.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: avail, Reason: reason, Message: msg,
		LastUpdateTime: now, LastTransitionTime: now}}
	for _, old := range d.Status.Conditions {
		if old.Type == appsv1.DeploymentAvailable && old.Status == avail {
			st.Conditions[0].LastTransitionTime, st.Conditions[0].LastUpdateTime = old.LastTransitionTime, old.LastUpdateTime
		}
	}
	if !equalDeployStatus(d.Status, st) {
		d.Status = st
		if _, err := c.api.UpdateStatus(d); err != nil {
			return Result{}, err
		}
	}
	return Result{}, nil
}

func equalDeployStatus(a, b appsv1.DeploymentStatus) bool {
	if a.Replicas != b.Replicas || a.ReadyReplicas != b.ReadyReplicas || a.AvailableReplicas != b.AvailableReplicas ||
		a.UpdatedReplicas != b.UpdatedReplicas || a.UnavailableReplicas != b.UnavailableReplicas || a.ObservedGeneration != b.ObservedGeneration ||
		len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i].Status != b.Conditions[i].Status || a.Conditions[i].Type != b.Conditions[i].Type {
			return false
		}
	}
	return true
}

// DaemonSets is the DaemonSet controller: one pod per node that the
// template's nodeSelector, node affinity and tolerations admit (with the
// tolerations the controller adds to every daemon pod: not-ready and
// unreachable NoExecute, disk-pressure, memory-pressure, pid-pressure and
// unschedulable NoSchedule, and network-unavailable NoSchedule for
// hostNetwork pods). Each pod gets a required node affinity on
// metadata.name and is placed by the default scheduler, as since v1.12.
type DaemonSets struct {
	api   *apiserver.Server
	Queue *Queue
}

// NewDaemonSets starts the controller on api.
func NewDaemonSets(api *apiserver.Server, eng *datapath.Engine) *DaemonSets {
	c := &DaemonSets{api: api}
	c.Queue = NewQueue(eng, "daemonset-controller", 0, c.reconcile)
	api.WatchReadOnly("DaemonSet", func(ev watch.Event) {
		c.Queue.Add(Key(ev.Object.(apiserver.Object).GetNamespace(), ev.Object.(apiserver.Object).GetName()))
	})
	api.WatchReadOnly("Pod", func(ev watch.Event) {
		if k := controlledBy(ev.Object.(apiserver.Object), "DaemonSet"); k != "" {
			c.Queue.Add(k)
		}
	})
	api.WatchReadOnly("Node", func(watch.Event) {
		for _, o := range api.List("DaemonSet", "") {
			c.Queue.Add(Key(o.GetNamespace(), o.GetName()))
		}
	})
	return c
}

// DaemonTolerations are the tolerations the DaemonSet controller adds.
func DaemonTolerations(hostNetwork bool) []corev1.Toleration {
	ts := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if hostNetwork {
		ts = append(ts, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return ts
}

func (c *DaemonSets) reconcile(key string) (Result, error) {
	ns, name := SplitKey(key)
	o, err := c.api.Get("DaemonSet", ns, name)
	if err != nil {
		for _, p := range c.api.ByIndex("Pod", apiserver.IndexOwner, ns+"/DaemonSet/"+name) {
			if err := c.api.Delete("Pod", ns, p.GetName()); err != nil {
				return Result{}, err
			}
		}
		return Result{}, nil
	}
	ds := o.(*appsv1.DaemonSet)
	pods := ownedPods(c.api, ds, "DaemonSet")
	byNode := map[string]*corev1.Pod{}
	for _, p := range pods {
		if isActive(p) {
			byNode[daemonNode(p)] = p
		}
	}
	st := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation}
	for _, no := range c.api.List("Node", "") {
		n := no.(*corev1.Node)
		probe := podFromTemplate(&ds.Spec.Template, ds, "DaemonSet", "apps/v1")
		probe.Spec.Tolerations = append(probe.Spec.Tolerations, DaemonTolerations(probe.Spec.HostNetwork)...)
		eligible := MatchesNodeAffinity(probe, n)
		for _, t := range n.Spec.Taints {
			if (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && !tolerates(probe.Spec.Tolerations, t) {
				eligible = false
			}
		}
		have := byNode[n.Name]
		switch {
		case eligible && have == nil:
			probe.GenerateName = ds.Name + "-"
			if probe.Labels == nil {
				probe.Labels = map[string]string{}
			}
			probe.Labels["controller-revision-hash"] = PodTemplateHash(&ds.Spec.Template)
			probe.Labels["pod-template-generation"] = strconv.FormatInt(ds.Generation, 10)
			probe.Spec.Affinity = withNodeName(probe.Spec.Affinity, n.Name)
			created, err := c.api.Create(probe)
			if err != nil {
				return Result{}, err
			}
			c.api.Record(ds, "daemonset-controller", corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+created.GetName())
			st.CurrentNumberScheduled++
		case !eligible && have != nil:
			if err := c.api.Delete("Pod", have.Namespace, have.Name); err != nil {
				return Result{}, err
			}
			c.api.Record(ds, "daemonset-controller", corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+have.Name)
		case eligible:
			st.CurrentNumberScheduled++
			if IsPodReady(have) {
				st.NumberReady++
				st.NumberAvailable++
			}
			st.UpdatedNumberScheduled++
		}
		if eligible {
			st.DesiredNumberScheduled++
		}
	}
	st.NumberUnavailable = st.DesiredNumberScheduled - st.NumberAvailable
	if !apiequality.Semantic.DeepEqual(st, ds.Status) {
		ds.Status = st
		if _, err := c.api.UpdateStatus(ds); err != nil {
			return Result{}, err
		}
	}
	return Result{}, nil
}

func daemonNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

func withNodeName(a *corev1.Affinity, node string) *corev1.Affinity {
	if a == nil {
		a = &corev1.Affinity{}
	}
	a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	return a
}
