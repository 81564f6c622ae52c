package netstack_test

import (
	"io"
	"testing"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/netstack"
	"github.com/stretchr/testify/require"
)

func TestSmokeEcho(t *testing.T) {
	r, err := scenarios.NewReference(1)
	require.NoError(t, err)
	cs, err := netstack.AttachPod(r.World, r.Client)
	require.NoError(t, err)
	ss, err := netstack.AttachPod(r.World, r.Web2)
	require.NoError(t, err)
	ln, err := ss.Listen("tcp", ":7")
	require.NoError(t, err)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.Close()
	}()
	c, err := cs.Dial("tcp", r.Web2.IP.String()+":7")
	require.NoError(t, err)
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf))
	t.Log(r.World.Now())
}
