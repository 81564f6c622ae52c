package scenarios

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/sim/scenario"
)

// Every built-in scenario is a file that loads strictly, builds, and
// brings up every pod it pins to a node.
func TestEveryBuiltInFileLoadsAndBuilds(t *testing.T) {
	for _, s := range Registry() {
		t.Run(s.Name, func(t *testing.T) {
			src := s.Source()
			require.NotEmpty(t, src)
			f, err := scenario.Parse(s.Name+".yaml", src)
			require.NoError(t, err)
			require.NotNil(t, f.Cluster)
			require.Equal(t, s.Name, f.Cluster.Name)
			require.Equal(t, uint64(1), f.Cluster.Seed, "the CLI's default seed, so --scenario and -f walk alike")
			c, err := s.New(1)
			require.NoError(t, err)
			require.Len(t, c.Nodes(), len(f.Cluster.Nodes))
			for i, n := range c.Nodes() {
				require.Equal(t, f.Cluster.Nodes[i].Name, n.Name, "nodes join in file order")
			}
			for _, m := range f.Manifests {
				require.Empty(t, m.Ignored, "%s: a built-in file uses only fields kubewalk models", m.Key())
				if m.Object.GetObjectKind().GroupVersionKind().Kind != "Pod" {
					continue
				}
				require.NotNil(t, c.Pod(m.Object.GetNamespace(), m.Object.GetName()), "%s runs", m.Key())
			}
			for _, h := range f.Cluster.ExternalHosts {
				require.NotNil(t, c.ExternalHost(h.Name))
			}
		})
	}
}

// The constructors' typed fields are the objects the files define.
func TestConstructorsLookUpTheFilesObjects(t *testing.T) {
	r, err := NewReference(1)
	require.NoError(t, err)
	require.Equal(t, "cka-w1", r.Client.Node.Name)
	require.Equal(t, "cka-w2", r.Web2.Node.Name)
	require.Equal(t, "10.111.80.136", r.Web.ClusterIP().String())
	p, ok := r.Web.Port("")
	require.True(t, ok)
	require.Equal(t, WebNodePort, p.NodePort)

	b, err := NewBrNetfilterOff(1)
	require.NoError(t, err)
	for _, n := range b.Nodes() {
		require.False(t, n.Host.Sysctl.BridgeNFCallIPTables, n.Name)
	}
	for _, n := range r.Nodes() {
		require.True(t, n.Host.Sysctl.BridgeNFCallIPTables, n.Name)
	}

	d, err := NewDuplicatePodCIDR(1)
	require.NoError(t, err)
	require.Equal(t, d.W1.PodCIDR, d.W2.PodCIDR)
	require.Equal(t, d.Client.IP, d.Web2.IP, "host-local on both nodes hands out the same first address")

	w, err := NewWrongNIC(1, false)
	require.NoError(t, err)
	require.Equal(t, "10.0.2.15", w.W1.InternalIP.String())
	wf, err := NewWrongNIC(1, true)
	require.NoError(t, err)
	require.Equal(t, "192.168.122.21", wf.W1.InternalIP.String())

	fl, err := NewFlows(1)
	require.NoError(t, err)
	lb := fl.Service("net", "web-lb")
	require.NotNil(t, lb)
	require.Equal(t, FlowLBIP, lb.Spec.LoadBalancerIngress[0].String(), "status.loadBalancer from the file")
}
