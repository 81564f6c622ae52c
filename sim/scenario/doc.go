// Package scenario reads scenario files: a YAML stream of one
// kubewalk.io/v1alpha1 Cluster document (the VMs, their NICs and
// underlay networks, and the settings kubeadm, the kubelet, the CNI and
// kube-proxy are given, in the style of kind's cluster configuration)
// followed by ordinary Kubernetes manifests, which decode into the
// k8s.io/api types. Every problem is reported with its file:line:column.
package scenario
