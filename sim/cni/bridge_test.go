package cni

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// vethName names as the Sprintf it replaces.
func TestVethNameIsSprintf(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, v := range []uint32{0, 1, 0xf, 0x10, 0xdeadbeef, 1<<32 - 1} {
		require.Equal(t, fmt.Sprintf("veth%08x", v), vethName(v))
	}
	for range 10000 {
		v := rng.Uint32()
		require.Equal(t, fmt.Sprintf("veth%08x", v), vethName(v))
	}
}
