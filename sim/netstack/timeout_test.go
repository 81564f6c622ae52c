package netstack_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/sim/netstack"
	"github.com/stretchr/testify/require"
)

// stall serves on web-2:9000 an HTTP server that reads requests and never
// answers, or (withHeaders) answers with headers and the first bytes of a
// body it never finishes.
func stall(t *testing.T, w *web, withHeaders bool) string {
	t.Helper()
	ln, err := w.web2.Listen("tcp", ":9000")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				if withHeaders {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst bytes")
				}
				io.Copy(io.Discard, br)
			}()
		}
	}()
	return "http://" + w.Web2.IP.String() + ":9000/"
}

// TestClientTimeoutVirtual: a 30 s timeout on an exchange that never ends
// expires after 30 s of the world's clock, in milliseconds of wall-clock
// time, with the errors net/http gives for each kind of timeout.
func TestClientTimeoutVirtual(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers bool
		get     func(w *web, url string) (*http.Response, error)
		// msg is the error, as net/http gives it on a real node (checked
		// against a loopback server in a network namespace); %s is the URL.
		msg string
	}{
		{"HTTPClient timeout", false, func(w *web, url string) (*http.Response, error) {
			return w.client.HTTPClient(30 * time.Second).Get(url)
		}, `Get "%s": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`},
		{"http.Client.Timeout around the Transport", false, func(w *web, url string) (*http.Response, error) {
			c := &http.Client{Transport: w.client.Transport(), Timeout: 30 * time.Second}
			return c.Get(url)
		}, `Get "%s": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`},
		{"context.WithTimeout", false, func(w *web, url string) (*http.Response, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			return w.client.HTTPClient(0).Do(req)
		}, `Get "%s": context deadline exceeded`},
		{"netstack.WithTimeout", false, func(w *web, url string) (*http.Response, error) {
			ctx, cancel := netstack.WithTimeout(w.World, context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			return w.client.HTTPClient(0).Do(req)
		}, `Get "%s": context deadline exceeded`},
		{"HTTPClient timeout while reading the body", true, func(w *web, url string) (*http.Response, error) {
			resp, err := w.client.HTTPClient(30 * time.Second).Get(url)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
			return nil, err
		}, "context deadline exceeded (Client.Timeout or context cancellation while reading body)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWeb(t, 1)
			url := stall(t, w, tc.headers)
			start, wall := w.World.Now(), time.Now()
			_, err := tc.get(w, url)
			require.Error(t, err)
			msg := tc.msg
			if strings.Contains(msg, "%s") {
				msg = fmt.Sprintf(msg, url)
			}
			require.EqualError(t, err, msg)
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			require.True(t, ne.Timeout(), "a timeout: %v", err)
			require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
			// The deadline is read against the wall clock when RoundTrip
			// starts (see the package doc), so the wall-clock time between
			// the client arming it and RoundTrip (milliseconds on a loaded
			// machine) comes off the 30 s.
			took := w.World.Now() - start
			require.GreaterOrEqual(t, took, 29*time.Second, "the timeout ran on the world's clock")
			require.Less(t, took, 31*time.Second)
			require.Less(t, time.Since(wall), 10*time.Second, "and did not wait 30 s of wall-clock time")
		})
	}
}

// TestWithTimeoutVirtual: netstack.WithTimeout's deadline is fixed in
// virtual time when it is made: an hour of virtual time later it has
// passed, and a dial with it fails at once as net.Dialer does.
func TestWithTimeoutVirtual(t *testing.T) {
	w := newWeb(t, 1)
	ctx, cancel := netstack.WithTimeout(w.World, context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.RunFor(time.Hour))
	select {
	case <-ctx.Done():
	default:
		t.Fatal("not done after an hour of virtual time")
	}
	require.Equal(t, context.DeadlineExceeded, ctx.Err())
	_, ok := ctx.Deadline()
	require.False(t, ok)

	// A fresh one spent on a dial nobody answers (192.0.2.1, TEST-NET-1,
	// leaves the cluster and is never answered): the dial ends at the
	// context's deadline, in virtual time, with net.Dialer's error.
	ctx, cancel = netstack.WithTimeout(w.World, context.Background(), 3*time.Second)
	defer cancel()
	start := w.World.Now()
	_, err := w.client.DialContext(ctx, "tcp", "192.0.2.1:80")
	require.EqualError(t, err, "dial tcp 192.0.2.1:80: i/o timeout")
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Equal(t, 3*time.Second, w.World.Now()-start)

	// Cancelled before use: "operation was canceled", as net.Dialer says.
	ctx, cancel = netstack.WithTimeout(w.World, context.Background(), time.Minute)
	cancel()
	_, err = w.client.DialContext(ctx, "tcp", w.Web2.IP.String()+":80")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "operation was canceled")
}
