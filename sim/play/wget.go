package play

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubewalk/kubewalk/sim/dns"
	"github.com/kubewalk/kubewalk/sim/netstack"
)

// wget is busybox's `wget -qO- URL` in a pod, over gVisor's TCP/IP stack
// (sim/netstack). Before each one, every running pod whose image is nginx
// gets a real HTTP server on its container ports answering as nginx does,
// so the request meets a real application at the endpoint kube-proxy
// chooses, and every CoreDNS pod (k8s-app=kube-dns) a DNS server
// answering for cluster.local from the cluster's Services; the pod
// resolves a name through the resolv.conf the kubelet gave it (`cat
// /etc/resolv.conf`), with real queries over UDP to the nameserver it
// names (the kube-dns ClusterIP for a ClusterFirst pod).
func (t execTarget) wget(url string) (string, error) {
	if err := t.runner.startNginx(); err != nil {
		return "", err
	}
	if _, err := netstack.StartCoreDNS(t.runner.Cluster); err != nil {
		return "", fmt.Errorf("starting CoreDNS: %w", err)
	}
	s, err := netstack.AttachPod(t.runner.Cluster.World, t.pod)
	if err != nil {
		return "", err
	}
	rc, _ := dns.PodResolvConf(t.obj, t.runner.kubeletDNS(t.obj.Spec.NodeName))
	s.SetResolvConf(rc)
	stdout, stderr, exit := netstack.Wget(t.runner.Cluster.World, t.pod.Netns, url)
	if exit != 0 {
		return stdout, &exitError{code: exit, stderr: stderr}
	}
	return stdout, nil
}

// exitError is a command that printed stderr and exited with code.
type exitError struct {
	code   int
	stderr string
}

// Error is what a terminal shows: the command's stderr, then kubectl
// exec's note of the exit code.
func (e *exitError) Error() string {
	return strings.TrimSuffix(e.stderr, "\n") + fmt.Sprintf("\ncommand terminated with exit code %d", e.code)
}

func (r *Runner) startNginx() error {
	if r.nginx == nil {
		r.nginx = map[string]bool{}
	}
	for _, p := range r.Cluster.Pods() {
		if p.Object == nil || p.Spec.HostNetwork || r.nginx[p.Name()] {
			continue
		}
		for _, c := range p.Object.Spec.Containers {
			if !strings.HasPrefix(c.Image[strings.LastIndex(c.Image, "/")+1:], "nginx") {
				continue
			}
			s, err := netstack.AttachPod(r.Cluster.World, p)
			if err != nil {
				return fmt.Errorf("starting nginx in %s: %w", p.Name(), err)
			}
			ports := []int32{80}
			if len(c.Ports) > 0 {
				ports = nil
				for _, cp := range c.Ports {
					if cp.Protocol == corev1.ProtocolTCP || cp.Protocol == "" {
						ports = append(ports, cp.ContainerPort)
					}
				}
			}
			for _, port := range ports {
				if _, err := s.ServeHTTP(fmt.Sprintf(":%d", port), netstack.NginxHandler(s)); err != nil {
					return fmt.Errorf("starting nginx in %s: %w", p.Name(), err)
				}
			}
			r.nginx[p.Name()] = true
		}
	}
	return nil
}
