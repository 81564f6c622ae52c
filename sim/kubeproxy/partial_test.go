package kubeproxy

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var perServiceChain = regexp.MustCompile(`(?m)^(:|-A )KUBE-(SVC|SVL|EXT|FW|SEP)-`)

// TestGeneratePartial: a partial sync with every Service changed writes
// what a full sync writes; with none changed, the top-level chains in full
// and no chain of a Service (kube-proxy's partial sync); with one changed,
// that Service's chains only.
func TestGeneratePartial(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			full, err := Generate(sc.cfg, sc.snap)
			require.NoError(t, err)
			all, err := GeneratePartial(sc.cfg, sc.snap, func(string, string) bool { return true })
			require.NoError(t, err)
			assert.Equal(t, full.RestoreInput(), all.RestoreInput())
			assert.True(t, all.Partial)

			none, err := GeneratePartial(sc.cfg, sc.snap, func(string, string) bool { return false })
			require.NoError(t, err)
			assert.Equal(t, full.RestoreInputTable("filter"), none.RestoreInputTable("filter"), "the filter chains are all top-level")
			nat := none.RestoreInputTable("nat")
			assert.Empty(t, perServiceChain.FindAllString(nat, -1))
			for _, line := range strings.Split(full.RestoreInputTable("nat"), "\n") {
				if !perServiceChain.MatchString(line) {
					assert.Contains(t, nat, line+"\n", "a top-level line stays")
				}
			}

			if len(sc.snap.Services) == 0 {
				return
			}
			one := sc.snap.Services[0]
			part, err := GeneratePartial(sc.cfg, sc.snap, func(ns, name string) bool { return ns == one.Namespace && name == one.Name })
			require.NoError(t, err)
			for _, s := range full.Services {
				if s.Namespace == one.Namespace && s.Name == one.Name {
					for _, c := range []string{s.ClusterChain, s.LocalChain, s.ExternalChain, s.FirewallChain} {
						if c != "" {
							assert.Contains(t, part.RestoreInputTable("nat"), ":"+c+" - [0:0]\n")
						}
					}
					continue
				}
				for _, c := range []string{s.ClusterChain, s.LocalChain, s.ExternalChain, s.FirewallChain} {
					if c != "" {
						assert.NotContains(t, part.RestoreInputTable("nat"), ":"+c+" ")
					}
				}
			}
		})
	}
}
