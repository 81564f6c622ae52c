// Package kubewalk simulates the Kubernetes node datapath in memory and
// walks packets through it: pods in network namespaces, veth pairs, the
// cni0 bridge, routing and ARP, flannel's VXLAN overlay, kube-proxy's
// iptables rules with conntrack and masquerade. See datapath (the Linux
// building blocks), sim (the Kubernetes layer) and scenarios (ready-made
// clusters).
package kubewalk
