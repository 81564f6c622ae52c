package sim

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// DNSServiceIP is kube-dns's ClusterIP as kubeadm sets it: the tenth
// address of the service range (10.96.0.10 for 10.96.0.0/12).
func (c *Cluster) DNSServiceIP() string {
	a := c.Config.ServiceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a.String()
}

// KubeadmAddons are the objects `kubeadm init` and the flannel manifest
// leave in a cluster: the control plane's static pods on each
// control-plane node (mirror pods, hostNetwork), the kube-proxy ConfigMap
// and DaemonSet, CoreDNS (ConfigMap with kubeadm's Corefile, a Deployment
// of 2 replicas, the kube-dns Service at the tenth service address) and,
// with the flannel overlay, the kube-flannel namespace, ConfigMap and
// DaemonSet (flannel's manifest uses its own namespace since v0.20).
func (c *Cluster) KubeadmAddons(controlPlane []string) []runtime.Object {
	var objs []runtime.Object
	for _, n := range controlPlane {
		objs = append(objs, StaticPods(n)...)
	}
	return append(objs, c.addons()...)
}

// StaticPods are the mirror pods of the control plane's static pods
// (/etc/kubernetes/manifests) on control-plane node n: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, all
// hostNetwork.
func StaticPods(n string) []runtime.Object {
	critical := "system-node-critical"
	var objs []runtime.Object
	{
		for _, comp := range []struct{ name, image string }{
			{"etcd", "registry.k8s.io/etcd:3.5.21-0"},
			{"kube-apiserver", "registry.k8s.io/kube-apiserver:" + KubernetesVersion},
			{"kube-controller-manager", "registry.k8s.io/kube-controller-manager:" + KubernetesVersion},
			{"kube-scheduler", "registry.k8s.io/kube-scheduler:" + KubernetesVersion},
		} {
			objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: comp.name + "-" + n, Namespace: "kube-system",
				Labels:      map[string]string{"component": comp.name, "tier": "control-plane"},
				Annotations: map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.mirror": "static"}},
				Spec: corev1.PodSpec{NodeName: n, HostNetwork: true, PriorityClassName: critical,
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
					Containers:  []corev1.Container{{Name: comp.name, Image: comp.image}}}})
		}
	}
	return objs
}

func (c *Cluster) addons() []runtime.Object {
	var objs []runtime.Object
	mode := string(c.Config.ProxyMode)
	if mode == string(kubeproxy.ModeIPTables) {
		mode = ""
	}
	objs = append(objs,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", Labels: map[string]string{"app": "kube-proxy"}},
			Data: map[string]string{"config.conf": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
clusterCIDR: %s
conntrack:
  maxPerCore: null
  min: null
iptables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
kind: KubeProxyConfiguration
mode: %q
`, c.Config.ClusterCIDR, mode)}},
		daemonSet("kube-system", "kube-proxy", map[string]string{"k8s-app": "kube-proxy"}, "registry.k8s.io/kube-proxy:"+KubernetesVersion, true),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"},
			Data: map[string]string{"Corefile": kubeadmCorefile}},
		coreDNSDeployment(),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system",
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}},
			Spec: corev1.ServiceSpec{ClusterIP: c.DNSServiceIP(), Selector: map[string]string{"k8s-app": "kube-dns"},
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)}}}},
	)
	if c.Flannel != nil {
		ds := daemonSet("kube-flannel", "kube-flannel-ds", map[string]string{"app": "flannel", "k8s-app": "flannel"}, "ghcr.io/flannel-io/flannel:v0.28.9", true)
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		objs = append(objs,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel", Labels: map[string]string{"k8s-app": "flannel", "pod-security.kubernetes.io/enforce": "privileged"}}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: "kube-flannel", Labels: map[string]string{"app": "flannel", "k8s-app": "flannel", "tier": "node"}},
				Data: map[string]string{"net-conf.json": fmt.Sprintf("{\n  \"Network\": \"%s\",\n  \"EnableNFTables\": false,\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n", c.Config.ClusterCIDR)}},
			ds)
	}
	return objs
}

// kubeadmCorefile is the Corefile kubeadm writes (since ~v1.32, with the
// cache block that never caches cluster.local).
const kubeadmCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
`

func daemonSet(ns, name string, labels map[string]string, image string, hostNetwork bool) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{HostNetwork: hostNetwork, PriorityClassName: "system-node-critical",
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:   []corev1.Container{{Name: name, Image: image}}}}}}
}

func coreDNSDeployment() *appsv1.Deployment {
	two := int32(2)
	labels := map[string]string{"k8s-app": "kube-dns"}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{DNSPolicy: corev1.DNSDefault, PriorityClassName: "system-cluster-critical",
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.12.0",
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
							{Name: "liveness-probe", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
							{Name: "readiness-probe", ContainerPort: 8181, Protocol: corev1.ProtocolTCP}}}}}}}}
}

// InstallKubeadmAddons applies KubeadmAddons for the cluster's
// control-plane nodes and settles: what a cluster looks like after
// `kubeadm init`, the flannel manifest and `kubeadm join`.
func (c *Cluster) InstallKubeadmAddons() error {
	var cps []string
	for _, n := range c.nodes {
		if c.isControlPlane(n.Name) {
			cps = append(cps, n.Name)
		}
	}
	if err := c.Apply(c.KubeadmAddons(cps)...); err != nil {
		return err
	}
	if err := c.Settle(); err != nil {
		return err
	}
	return c.proxyError()
}

func (c *Cluster) isControlPlane(name string) bool {
	o, err := c.API.Get("Node", "", name)
	if err != nil {
		return false
	}
	_, ok := o.GetLabels()["node-role.kubernetes.io/control-plane"]
	return ok
}
