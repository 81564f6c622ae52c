package netstack_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim/netstack"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// segments summarizes the TCP segments the client pod's eth0 saw, each as
// "who flags length" (C: the client sent it, S: the server), with the
// virtual time since the previous one when it is at least a millisecond.
func segments(tr *trace.Trace) []string {
	var out []string
	var last time.Duration
	for _, o := range tr.Obs {
		if o.Netns != "net/client" || o.Device != "eth0" || o.Frame == nil {
			continue
		}
		ip, tcp := tcpOf(o.Frame)
		if ip == nil {
			continue
		}
		who := "S"
		if o.Action == trace.Transmitted {
			who = "C"
		}
		f := tcp.Flags()
		flags := ""
		for _, x := range []struct {
			f header.TCPFlags
			c string
		}{{header.TCPFlagSyn, "S"}, {header.TCPFlagFin, "F"}, {header.TCPFlagRst, "R"}, {header.TCPFlagPsh, "P"}, {header.TCPFlagAck, "."}} {
			if f&x.f != 0 {
				flags += x.c
			}
		}
		s := fmt.Sprintf("%s %s %d", who, flags, int(ip.TotalLength())-int(ip.HeaderLength())-int(tcp.DataOffset()))
		if gap := o.At - last; last != 0 && gap >= time.Millisecond {
			s = fmt.Sprintf("+%v %s", gap.Round(time.Millisecond), s)
		}
		last = o.At
		out = append(out, s)
	}
	return out
}

// tracedToWeb2 is a world whose one web endpoint is web-2 (across
// nodes from the client), the client's and web-2's stacks captured into
// one trace, and the client's transport.
func tracedToWeb2(t *testing.T) (*web, *trace.Trace, *netstack.Transport) {
	w := newWeb(t, 1)
	w.onlyWeb2(t)
	tr := &trace.Trace{Capture: true}
	w.client.Trace, w.web2.Trace = tr, tr
	return w, tr, w.client.Transport()
}

// TestDelayedACK runs what a Go client and server did over real Linux
// 6.18 sockets (two namespaces and a veth pair, captured with tcpdump):
// four GETs on one kept-alive connection, 5 ms apart, then one after
// 300 ms, then the client closes. Linux acks the first request and the
// first response at once (quick-ACK mode), then the connection is
// interactive and each ACK rides on the next request or response; the
// ACK of the third response waits out the 40 ms delayed-ACK timer, which
// takes the client out of interactive mode, so it acks the fourth
// response at once; the server's ACK of the client's FIN rides on its own
// FIN.
func TestDelayedACK(t *testing.T) {
	// The exact sequence is the one-processor guarantee (see Determinism
	// in the package documentation): with more, the server's FIN may
	// leave a little later in virtual time.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	w, tr, tp := tracedToWeb2(t)
	c := &http.Client{Transport: tp}
	for i := range 4 {
		resp, body := getBody(t, c, "http://10.111.80.136/")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, "Welcome to nginx!")
		pause := 5 * time.Millisecond
		if i == 2 {
			pause = 300 * time.Millisecond
		}
		require.NoError(t, w.World.Advance(pause))
	}
	tp.CloseIdleConnections()
	require.NoError(t, w.World.Advance(time.Second))
	got := segments(tr)
	resp := "S P. " + fmt.Sprint(len(respOf(t, tr)))
	want := []string{
		"C S 0", "S S. 0", "C . 0", // handshake
		"C P. 71", "S . 0", resp, "C . 0", // quick ACKs
		"+5ms C P. 71", resp, // interactive: ACKs ride on data
		"+5ms C P. 71", resp,
		"+40ms C . 0",                   // the delayed-ACK timer
		"+260ms C P. 71", resp, "C . 0", // out of interactive mode: at once
		"+5ms C F. 0", "S F. 0", "C . 0", // the server's ACK rides on its FIN
	}
	require.Equal(t, strings.Join(want, "\n"), strings.Join(got, "\n"))

	// The ACK that waited carries the time it left: its TSval is the
	// third request's plus the virtual milliseconds between them (and its
	// checksum holds, or the server would have dropped it and resent).
	var sent []trace.Observation
	for _, o := range tr.Obs {
		if o.Netns == "net/client" && o.Device == "eth0" && o.Action == trace.Transmitted && o.Frame != nil {
			if ip, _ := tcpOf(o.Frame); ip != nil {
				sent = append(sent, o)
			}
		}
	}
	tsval := func(o trace.Observation) uint32 {
		_, tcp := tcpOf(o.Frame)
		opts := header.ParseTCPOptions(tcp.Options())
		require.True(t, opts.TS)
		return opts.TSVal
	}
	// SYN, ACK, request 1, ACK, request 2, request 3, the late ACK.
	req3, late := sent[5], sent[6]
	require.Equal(t, "C . 0", segments(&trace.Trace{Obs: []trace.Observation{late}})[0])
	ms := func(d time.Duration) uint32 { return uint32(d / time.Millisecond) }
	require.Equal(t, ms(late.At)-ms(req3.At), tsval(late)-tsval(req3))
	require.GreaterOrEqual(t, late.At-req3.At, 40*time.Millisecond)

	// An ACK held back and never sent got no packet number: the trace's
	// numbers run without a gap.
	seen := map[int]bool{}
	top := 0
	for _, o := range tr.Obs {
		seen[o.Packet], top = true, max(top, o.Packet)
	}
	for i := 1; i <= top; i++ {
		require.True(t, seen[i], "packet %d of %d never observed", i, top)
	}
}

// respOf returns the payload of the first response the server sent.
func respOf(t *testing.T, tr *trace.Trace) []byte {
	for _, o := range tr.Obs {
		if o.Netns == "net/client" && o.Device == "eth0" && o.Action == trace.Received && o.Frame != nil {
			if _, tcp := tcpOf(o.Frame); tcp != nil && strings.HasPrefix(string(tcp[tcp.DataOffset():]), "HTTP/1.1 200") {
				return tcp[tcp.DataOffset():]
			}
		}
	}
	t.Fatal("no response")
	return nil
}

// TestDelayedACKFresh is a GET on a connection of its own
// (DisableKeepAlives). Linux 6.18, between a Go client and server, sent
// S, S., ., the request, the server's quick ACK, the response, the
// client's quick ACK, the server's FIN, the client's FIN carrying the ACK
// of the server's (delayed: a FIN received while established makes the
// connection interactive), and the server's ACK. Here the server's FIN
// arrives at the same virtual instant as the response, and the client,
// which reads the response at once, closes before its stack takes in
// that FIN: its FIN acknowledges the response only, and the ACK of the
// server's FIN, received in FIN-WAIT-1, goes out at once, as Linux's
// tcp_fin sends it in that state.
func TestDelayedACKFresh(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	w, tr, tp := tracedToWeb2(t)
	tp.DisableKeepAlives()
	resp, body := getBody(t, &http.Client{Transport: tp}, "http://10.111.80.136/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Welcome to nginx!")
	require.NoError(t, w.World.Advance(time.Second))
	r := "S P. " + fmt.Sprint(len(respOf(t, tr)))
	want := []string{
		"C S 0", "S S. 0", "C . 0",
		"C P. 90", "S . 0", r, "S F. 0", "C . 0",
		"C F. 0", "C . 0", "S . 0",
	}
	require.Equal(t, strings.Join(want, "\n"), strings.Join(segments(tr), "\n"))
}
