package kubewalk_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubewalk/kubewalk/sim/scenario"
)

// A cluster from a scenario file: two VMs, kubeadm's add-ons, and a
// Deployment behind a Service. The scheduler keeps the pods off the
// tainted control plane; the kubelet's sandboxes get their addresses from
// the node's podCIDR through the CNI chain.
func Example_controlPlane() {
	f, err := scenario.Parse("lab.yaml", []byte(`
apiVersion: kubewalk.io/v1alpha1
kind: Cluster
networks: [{name: lan}]
nodes:
- {name: cp1, role: control-plane, nics: [{network: lan, address: 192.168.1.10/24, gateway: 192.168.1.1}]}
- {name: w1, nics: [{network: lan, address: 192.168.1.11/24, gateway: 192.168.1.1}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: nginx, image: "nginx:1.27", ports: [{containerPort: 80}]}]}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := scenario.Build(f, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range c.API.List("Pod", "default") {
		p := o.(*corev1.Pod)
		fmt.Println(p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	}
	// Output:
	// w1 Running 10.244.1.3
	// w1 Running 10.244.1.2
}
