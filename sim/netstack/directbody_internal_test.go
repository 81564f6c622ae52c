package netstack

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/stretchr/testify/require"
)

// bigBody is the body of /big: 64 KiB, many segments, more than
// net/http's 4 KiB read buffer.
var bigBody = bytes.Repeat([]byte("0123456789abcdef"), 4096)

// bodiesWorld is crossNodeGET's world whose server also answers /big
// (bigBody with a Content-Length) and /chunked (two flushed writes, no
// Content-Length), without a Date header.
func bodiesWorld(t *testing.T) (*scenarios.Reference, *Stack, *Stack, *http.Client) {
	t.Helper()
	r, client, web := referenceStacks(t, 3)
	nginx := NginxHandler(web)
	srv, err := web.ServeHTTP(":80", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header()["Date"] = nil
		switch req.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
			_, _ = w.Write(bigBody)
		case "/chunked":
			_, _ = w.Write([]byte("first part\n"))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte("second part\n"))
		default:
			nginx.ServeHTTP(w, req)
		}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return r, client, web, client.HTTPClient(0)
}

// readAllIn reads resp's body in reads of size bytes.
func readAllIn(t *testing.T, resp *http.Response, size int) []byte {
	t.Helper()
	var out []byte
	p := make([]byte, size)
	for {
		n, err := resp.Body.Read(p)
		out = append(out, p[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.NoError(t, resp.Body.Close())
	return out
}

// bodyExchange runs GETs whose bodies are read every way the direct read
// meets: a small body in one read, in small reads, a body larger than
// what has arrived (the direct read needs the connection and the read is
// made on a worker), a chunked body (never read directly), a body closed
// unread, and a fresh connection per request (the read loop closes the
// connection after the last byte). It returns every frame with its time
// and place.
func bodyExchange(t *testing.T) []string {
	_, client, web, c := bodiesWorld(t)
	tr := &trace.Trace{Capture: true}
	client.Trace, web.Trace = tr, tr
	url := "http://10.111.80.136"
	get := func(c *http.Client, path string, size int) string {
		resp, err := c.Get(url + path)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return string(readAllIn(t, resp, size))
	}
	for range 2 {
		require.Contains(t, get(c, "/", 32<<10), "Welcome to nginx!")
	}
	require.Contains(t, get(c, "/", 100), "Welcome to nginx!")
	for range 2 {
		require.Equal(t, string(bigBody), get(c, "/big", 32<<10))
	}
	require.Equal(t, "first part\nsecond part\n", get(c, "/chunked", 512))
	resp, err := c.Get(url + "/big")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Contains(t, get(c, "/", 32<<10), "Welcome to nginx!")
	// A GET started on another goroutine while a body is unread: the
	// body's last read frees the connection, and that goroutine's request
	// goes out on it before the UDP datagram the caller sends next. (Not
	// with the race detector: it shuffles the order in which goroutines
	// readied together run, and here two that act on the world are, the
	// read loop taking the connection back and that goroutine.)
	if !raceEnabled {
		getMeanwhile(t, client, c, url)
	}
	fresh := client.Transport()
	fresh.DisableKeepAlives()
	for range 2 {
		require.Contains(t, get(&http.Client{Transport: fresh}, "/", 32<<10), "Welcome to nginx!")
	}
	frames := FrameLines(tr)
	require.NotEmpty(t, frames)
	return frames
}

// TestDirectBodySameFrames: reading response bodies on the caller's
// goroutine gives the frames the worker's reads give, byte for byte, at
// the same virtual times, and the bodies are the same.
func TestDirectBodySameFrames(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	restore := SetDirectBody(false)
	a := bodyExchange(t)
	restore()
	b := bodyExchange(t)
	require.Equal(t, len(a), len(b))
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("frame %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
}

// TestDirectBody: the body of a kept-alive GET is read on the caller's
// goroutine (no worker, no drive), and a body that has not all arrived is
// still read whole (its reads that need the connection drive the world).
func TestDirectBody(t *testing.T) {
	_, client, _, c := bodiesWorld(t)
	d := client.d
	get := func(path string) string {
		resp, err := c.Get("http://10.111.80.136" + path)
		require.NoError(t, err)
		return string(readAllIn(t, resp, 32<<10))
	}
	get("/")
	direct := d.directReads
	for range 3 {
		require.Contains(t, get("/"), "Welcome to nginx!")
	}
	require.Equal(t, direct+3, d.directReads, "one direct read per GET")
	require.Equal(t, string(bigBody), get("/big"))
	require.Greater(t, d.directReads, direct+3, "some of /big is read directly")
}

// TestDirectBodyConcurrent: GETs on one transport from several goroutines
// at once (so RoundTrip cannot always tell which connection carried its
// response) all get their bodies.
func TestDirectBodyConcurrent(t *testing.T) {
	_, _, _, c := bodiesWorld(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/"
			if i%2 == 1 {
				path = "/big"
			}
			for range 5 {
				resp, err := c.Get("http://10.111.80.136" + path)
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
				if path == "/big" && !bytes.Equal(b, bigBody) || path == "/" && !bytes.Contains(b, []byte("Welcome to nginx!")) {
					errs <- fmt.Errorf("%s: wrong body (%d bytes)", path, len(b))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// getMeanwhile is bodyExchange's GET from another goroutine while a body
// is unread, and a UDP datagram sent right after the body's last read.
func getMeanwhile(t *testing.T, client *Stack, c *http.Client, url string) {
	resp, err := c.Get(url + "/")
	require.NoError(t, err)
	done := make(chan string)
	go func() {
		r, err := c.Get(url + "/")
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		done <- string(b)
	}()
	require.Contains(t, string(readAllIn(t, resp, 32<<10)), "Welcome to nginx!")
	u, err := client.Dial("udp", "10.244.2.9:9")
	require.NoError(t, err)
	_, err = u.Write([]byte("after the body"))
	require.NoError(t, err)
	require.Contains(t, <-done, "Welcome to nginx!")
	require.NoError(t, u.Close())
}

// TestExchangeReused: a kept-alive GET whose body is closed gives its
// exchange back, and the next GET takes it (no exchange allocated per
// GET); the reused exchange's deadline is its own (the stopped timer of
// the earlier GET, still queued, passes without cancelling it); a body
// read or closed after Close gets net/http's answers.
func TestExchangeReused(t *testing.T) {
	w, client, _, _ := bodiesWorld(t)
	d := client.d
	c := client.HTTPClient(10 * time.Second)
	resp, err := c.Get("http://10.111.80.136/")
	require.NoError(t, err)
	x := resp.Body.(*body).x
	require.Contains(t, string(readAllIn(t, resp, 32<<10)), "Welcome to nginx!")
	require.Len(t, d.freeExchanges, 1)
	require.Same(t, x, d.freeExchanges[0])
	n, err := resp.Body.Read(make([]byte, 10))
	require.Zero(t, n)
	require.EqualError(t, err, "http: read on closed response body", "net/http's error")
	require.NoError(t, resp.Body.Close(), "net/http's second Close")

	require.NoError(t, w.RunFor(5*time.Second))
	resp, err = c.Get("http://10.111.80.136/")
	require.NoError(t, err)
	require.Same(t, x, resp.Body.(*body).x, "the free exchange is taken")
	require.Empty(t, d.freeExchanges)
	require.NoError(t, w.RunFor(7*time.Second), "past the first GET's deadline, not the second's")
	require.Contains(t, string(readAllIn(t, resp, 32<<10)), "Welcome to nginx!")
}
