package sim

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// kube-proxy reads its mode from the kube-proxy ConfigMap's config.conf
// (mounted into its pods) when it starts: editing the ConfigMap changes
// nothing until the kube-proxy pods are restarted (kubectl -n kube-system
// delete pod -l k8s-app=kube-proxy, or a rollout restart), as on a kubeadm
// cluster. A restarted pod's kube-proxy cleans up what the other modes
// left on its node and syncs in the new mode (restartProxy).

// watchProxyConfig keeps the mode the ConfigMap asks for.
func (c *Cluster) watchProxyConfig() {
	c.API.Watch("ConfigMap", func(ev watch.Event) {
		cm := ev.Object.(*corev1.ConfigMap)
		if cm.Namespace != "kube-system" || cm.Name != "kube-proxy" {
			return
		}
		if ev.Type == watch.Deleted {
			c.proxyConf = nil
			return
		}
		conf := cm.Data["config.conf"]
		c.proxyConf = &conf
	})
}

// configuredProxyMode is the mode a kube-proxy starting now would run in:
// config.conf's mode ("" is iptables), or the cluster's mode when there
// is no ConfigMap.
func (c *Cluster) configuredProxyMode() (kubeproxy.Mode, error) {
	if c.proxyConf == nil {
		return c.Config.ProxyMode, nil
	}
	var conf struct {
		Mode string `json:"mode"`
	}
	if err := yaml.Unmarshal([]byte(*c.proxyConf), &conf); err != nil {
		return "", err
	}
	return kubeproxy.ParseMode(strings.TrimSpace(conf.Mode))
}

// restartProxy is kube-proxy starting again on n (its pod was recreated):
// in the configured mode, after cleaning up the other modes' leftovers.
func (c *Cluster) restartProxy(n *Node) error {
	mode, err := c.configuredProxyMode()
	if err != nil {
		return err
	}
	if n.Proxier != nil && n.Proxier.Mode() == mode {
		return nil
	}
	px, err := c.newProxierMode(n, mode)
	if err != nil {
		return err
	}
	if err := cleanupLeftovers(n, mode); err != nil {
		return err
	}
	n.Proxier = px
	return c.syncNode(n, c.snapshot())
}
