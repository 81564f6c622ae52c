package ipam

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHostLocalSequentialSkipsGateway(t *testing.T) {
	h, err := NewHostLocal(netip.MustParsePrefix("10.244.1.0/24"))
	require.NoError(t, err)
	require.Equal(t, "10.244.1.1", h.Gateway.String())
	require.Equal(t, 253, h.Capacity())
	for i, want := range []string{"10.244.1.2", "10.244.1.3", "10.244.1.4"} {
		a, err := h.Allocate(fmt.Sprint("c", i))
		require.NoError(t, err)
		require.Equal(t, want, a.String())
	}
}

func TestHostLocalReleaseReusedOnlyAfterWrap(t *testing.T) {
	h, err := NewHostLocal(netip.MustParsePrefix("10.244.1.0/29")) // .1 gw, .2-.6 usable
	require.NoError(t, err)
	require.Equal(t, 5, h.Capacity())
	for i := range 3 {
		_, err := h.Allocate(fmt.Sprint("c", i))
		require.NoError(t, err)
	}
	require.True(t, h.Release("c0")) // frees .2
	a, err := h.Allocate("c3")
	require.NoError(t, err)
	require.Equal(t, "10.244.1.5", a.String(), "continues after last_reserved_ip, not at the freed .2")
	a, err = h.Allocate("c4")
	require.NoError(t, err)
	require.Equal(t, "10.244.1.6", a.String())
	a, err = h.Allocate("c5")
	require.NoError(t, err)
	require.Equal(t, "10.244.1.2", a.String(), "wraps around to the released address")
	_, err = h.Allocate("c6")
	var full *ErrRangeFull
	require.ErrorAs(t, err, &full)
	require.EqualError(t, err, "no IP addresses available in range set: 10.244.1.1-10.244.1.6")
}

func TestHostLocalErrors(t *testing.T) {
	for _, tc := range []struct{ subnet, want string }{
		{"10.244.1.5/24", "host bits"},
		{"10.244.1.0/31", "too small"},
		{"fd00::/64", "not an IPv4"},
	} {
		_, err := NewHostLocal(netip.MustParsePrefix(tc.subnet))
		require.ErrorContains(t, err, tc.want, tc.subnet)
	}
	h, _ := NewHostLocal(netip.MustParsePrefix("10.244.1.0/24"))
	_, err := h.Allocate("x")
	require.NoError(t, err)
	_, err = h.Allocate("x")
	var dup *ErrDuplicate
	require.ErrorAs(t, err, &dup)
	require.False(t, h.Release("nope"))
}

// Allocations and releases in a range whose addresses cross octets agree
// with a model of the plugin (next free after the last reserved,
// wrapping): the addresses, Lookup, the duplicate error and InUse.
func TestHostLocalAgreesWithModel(t *testing.T) {
	h, err := NewHostLocal(netip.MustParsePrefix("10.200.0.0/22"))
	require.NoError(t, err)
	held := map[string]netip.Addr{}
	used := map[netip.Addr]bool{}
	last := netip.Addr{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 6000 {
		id := fmt.Sprint("c", rng.IntN(1200))
		if a, ok := held[id]; ok {
			if rng.IntN(2) == 0 {
				_, err := h.Allocate(id)
				require.EqualError(t, err, a.String()+" has been allocated to "+id+", duplicate allocation is not allowed")
				continue
			}
			require.True(t, h.Release(id))
			delete(held, id)
			delete(used, a)
			_, ok := h.Lookup(id)
			require.False(t, ok)
			continue
		}
		want := netip.MustParseAddr("10.200.0.2")
		if last.IsValid() {
			want = last
			for {
				want = want.Next()
				if want == netip.MustParseAddr("10.200.3.255") {
					want = netip.MustParseAddr("10.200.0.2")
				}
				if !used[want] {
					break
				}
			}
		}
		a, err := h.Allocate(id)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, want, a, "step %d", i)
		held[id], used[a], last = a, true, a
		got, ok := h.Lookup(id)
		require.True(t, ok)
		require.Equal(t, a, got)
		require.Equal(t, len(held), h.InUse())
	}
}
