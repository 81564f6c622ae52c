package kubeproxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMode(t *testing.T) {
	const reason = "must be iptables, ipvs, nftables or blank (blank means the best-available proxy [currently iptables])"
	for _, tc := range []struct {
		in   string
		want Mode
		err  string
	}{
		{in: "", want: ModeIPTables},
		{in: "iptables", want: ModeIPTables},
		{in: "nftables", want: ModeNFTables},
		{in: "ipvs", want: ModeIPVS},
		{in: "kernelspace", err: `KubeProxyConfiguration.ProxyMode: Invalid value: "kernelspace": ` + reason},
		{in: "IPTables", err: `KubeProxyConfiguration.ProxyMode: Invalid value: "IPTables": ` + reason},
		{in: "userspace", err: `KubeProxyConfiguration.ProxyMode: Invalid value: "userspace": ` + reason},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, err := ParseMode(tc.in)
			if tc.err != "" {
				var me *ModeError
				require.ErrorAs(t, err, &me)
				assert.Equal(t, tc.in, me.Value)
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, m)
		})
	}
}
