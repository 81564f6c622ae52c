package scenarios

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubewalk/kubewalk/sim/kubeproxy"
)

// TestKubeProxyModeFromTheConfigMap: kube-proxy reads config.conf's mode
// when it starts. Editing the ConfigMap changes nothing until the
// kube-proxy pods are recreated; the new pods then run nftables mode and
// clean up iptables mode's chains. A mode kube-proxy rejects leaves the
// new pod crash-looping with kube-proxy's error, and the node keeps the
// rules it had.
func TestKubeProxyModeFromTheConfigMap(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	setMode := func(mode string) {
		o, err := r.API.Get("ConfigMap", "kube-system", "kube-proxy")
		require.NoError(t, err)
		cm := o.(*corev1.ConfigMap)
		require.Contains(t, cm.Data["config.conf"], `mode: ""`)
		cm.Data["config.conf"] = strings.Replace(cm.Data["config.conf"], `mode: ""`, "mode: "+mode, 1)
		_, err = r.API.Update(cm)
		require.NoError(t, err)
		require.NoError(t, r.Settle())
	}
	restart := func() {
		for _, o := range r.API.List("Pod", "kube-system") {
			if o.GetLabels()["k8s-app"] == "kube-proxy" {
				require.NoError(t, r.Delete("Pod", "kube-system", o.GetName()))
			}
		}
		require.NoError(t, r.Settle())
	}
	setMode("nftables")
	for _, n := range r.Nodes() {
		assert.Equal(t, kubeproxy.ModeIPTables, n.Proxier.Mode(), "%s: the running kube-proxy has not read the change", n.Name)
	}
	restart()
	for _, n := range r.Nodes() {
		assert.Equal(t, kubeproxy.ModeNFTables, n.Proxier.Mode(), n.Name)
		assert.NotNil(t, n.NFTables.Table("ip", "kube-proxy"), n.Name)
		assert.Nil(t, n.Netfilter.Table("nat").Chain("KUBE-SERVICES"), "%s: iptables mode's chains cleaned up", n.Name)
	}
	c, err := r.Client.Netns.DialTCP(r.Client.IP, r.Web.ClusterIP(), 40000, 80, 1, nil)
	require.NoError(t, err)
	require.NoError(t, r.World.Run())
	assert.True(t, c.Established, "ClusterIP works in nftables mode")

	o, _ := r.API.Get("ConfigMap", "kube-system", "kube-proxy")
	cm := o.(*corev1.ConfigMap)
	cm.Data["config.conf"] = strings.Replace(cm.Data["config.conf"], "mode: nftables", "mode: userspace", 1)
	_, err = r.API.Update(cm)
	require.NoError(t, err)
	restart()
	for _, n := range r.Nodes() {
		assert.Equal(t, kubeproxy.ModeNFTables, n.Proxier.Mode(), "%s keeps its kube-proxy's rules", n.Name)
	}
	var waiting []string
	for _, o := range r.API.List("Pod", "kube-system") {
		p := o.(*corev1.Pod)
		if p.Labels["k8s-app"] == "kube-proxy" {
			require.Equal(t, corev1.PodPending, p.Status.Phase, p.Name)
			waiting = append(waiting, p.Status.ContainerStatuses[0].State.Waiting.Reason)
			assert.Contains(t, p.Status.ContainerStatuses[0].State.Waiting.Message, `KubeProxyConfiguration.ProxyMode: Invalid value: "userspace"`)
		}
	}
	assert.Equal(t, []string{"CrashLoopBackOff", "CrashLoopBackOff", "CrashLoopBackOff"}, waiting)
}
