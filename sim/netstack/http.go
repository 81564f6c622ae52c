package netstack

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"time"
)

// Transport is an http.RoundTripper whose connections are dialled from a
// Stack. RoundTrip runs the standard library's http.Transport on a helper
// goroutine and drives the world on the caller's until it returns; reads
// of the response body drive it the same way. Keep-alive connections are
// reused across requests as usual.
type Transport struct {
	s     *Stack
	inner *http.Transport
	// Timeout bounds each request, from dial to the end of the response
	// headers, in virtual time (http.Client.Timeout would count wall-clock
	// time, which a simulated request barely takes). Zero: no limit.
	Timeout time.Duration
}

var _ http.RoundTripper = (*Transport)(nil)

// Transport returns an http.RoundTripper dialling from the stack.
func (s *Stack) Transport() *Transport {
	t := &Transport{s: s}
	t.inner = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return s.dial(ctx, network, addr, false)
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
		ForceAttemptHTTP2:   false,
	}
	return t
}

// HTTPClient returns an http.Client whose requests leave from the stack,
// with timeout (virtual time; 0 for none) as the Transport's Timeout.
func (s *Stack) HTTPClient(timeout time.Duration) *http.Client {
	t := s.Transport()
	t.Timeout = timeout
	return &http.Client{Transport: t}
}

// DisableKeepAlives makes every request use a new connection (and close
// it), as http.Transport.DisableKeepAlives does.
func (t *Transport) DisableKeepAlives() { t.inner.DisableKeepAlives = true }

// CloseIdleConnections closes the transport's idle keep-alive connections.
func (t *Transport) CloseIdleConnections() {
	_ = t.s.d.do(t.inner.CloseIdleConnections, nil)
}

// timeoutError is the error of a request that ran out of its Timeout, in
// the words http.Client uses for its own Timeout.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string {
	return "net/http: request canceled (Client.Timeout exceeded while awaiting headers)"
}
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }
func (e *timeoutError) Unwrap() error   { return e.err }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	d := t.s.d
	ctx, cancel := context.WithCancel(req.Context())
	var timedOut bool
	var tm *vtimer
	if t.Timeout > 0 {
		d.lock()
		tm = &vtimer{d: d, f: func() { timedOut = true; cancel() }}
		tm.Reset(t.Timeout)
		d.unlock()
	}
	var resp *http.Response
	var err error
	idle := d.do(func() { resp, err = t.inner.RoundTrip(req.WithContext(ctx)) }, cancel)
	d.lock()
	if tm != nil {
		tm.Stop()
	}
	to := timedOut
	d.unlock()
	switch {
	case to:
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, &timeoutError{err: err}
	case idle != nil:
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, idle
	case err != nil:
		cancel()
		return nil, err
	}
	resp.Body = &body{d: d, rc: resp.Body, cancel: cancel}
	return resp, nil
}

// body is a response body whose reads drive the world.
type body struct {
	d      *driver
	rc     io.ReadCloser
	cancel context.CancelFunc
}

func (b *body) Read(p []byte) (int, error) {
	var n int
	var err error
	if idle := b.d.do(func() { n, err = b.rc.Read(p) }, b.cancel); idle != nil {
		return n, idle
	}
	if err != nil {
		b.cancel()
	}
	return n, err
}

func (b *body) Close() error {
	var err error
	_ = b.d.do(func() { err = b.rc.Close() }, b.cancel)
	b.cancel()
	return err
}

// Server is an http.Server serving in a Stack.
type Server struct {
	*http.Server
	ln net.Listener
}

// ServeHTTP listens on addr (":80") in the stack and serves h on its own
// goroutine, as `go srv.Serve(ln)` would. Close the server with Close,
// which closes the listener and every connection (RST or FIN, as the
// kernel would), and returns without waiting for the serving goroutine.
func (s *Stack) ServeHTTP(addr string, h http.Handler) (*Server, error) {
	ln, err := s.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &Server{Server: &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}, ln: ln}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			srv.ErrorLog.Print(err)
		}
	}()
	return srv, nil
}

// ListenAddr is the address the server listens on.
func (s *Server) ListenAddr() net.Addr { return s.ln.Addr() }
