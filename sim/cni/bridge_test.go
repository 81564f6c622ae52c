package cni

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// vethName names as the Sprintf it replaces, made by string or by the
// caller's text.
func TestVethNameIsSprintf(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	wrap := func(b []byte) string { return "<" + string(b) + ">" }
	check := func(v uint32) {
		want := fmt.Sprintf("veth%08x", v)
		require.Equal(t, want, vethName(v, nil))
		require.Equal(t, "<"+want+">", vethName(v, wrap))
	}
	for _, v := range []uint32{0, 1, 0xf, 0x10, 0xdeadbeef, 1<<32 - 1} {
		check(v)
	}
	for range 10000 {
		check(rng.Uint32())
	}
}
