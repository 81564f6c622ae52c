package netstack

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"time"
)

// Transport is an http.RoundTripper whose connections are dialled from a
// Stack. RoundTrip runs the standard library's http.Transport on a helper
// goroutine and drives the world on the caller's until it returns; reads
// of the response body drive it the same way when they need the
// connection (a read of bytes net/http already holds, most often the whole
// body of a small response, runs on the caller's goroutine without a
// worker). Keep-alive connections are reused across requests as usual.
//
// Timeouts are on the world's clock: Timeout, an http.Client's Timeout
// around this Transport, and a request context's deadline. A deadline
// given as a time.Time (what Client.Timeout and context.WithTimeout set)
// is read relative to the wall clock when RoundTrip starts, and runs in
// virtual time from there (see WithTimeout for a deadline fixed in virtual
// time when the context is made).
type Transport struct {
	s     *Stack
	inner *http.Transport
	// Timeout bounds each exchange in virtual time as http.Client.Timeout
	// does in wall-clock time: dial, request, response headers and
	// reading the body. Zero: no limit.
	Timeout time.Duration

	// The reads of the transport's connections that returned data (under
	// the world lock): how many, the connection of the last one, and the
	// count when that connection became the last to read. RoundTrip
	// learns from them which connection carried its response.
	reads, lastSince uint64
	lastRead         *TCPConn
}

// noteRead counts a read of c, one of the transport's connections, that
// returned data. Called with the world lock held.
func (t *Transport) noteRead(c *TCPConn) {
	t.reads++
	if t.lastRead != c {
		t.lastRead, t.lastSince = c, t.reads
	}
}

var _ http.RoundTripper = (*Transport)(nil)

// Transport returns an http.RoundTripper dialling from the stack.
func (s *Stack) Transport() *Transport {
	t := &Transport{s: s}
	t.inner = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := s.dial(ctx, network, addr, false)
			if tc, ok := c.(*TCPConn); ok {
				s.d.lock()
				tc.tr = t
				s.d.unlock()
			}
			return c, err
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
		ForceAttemptHTTP2:   false,
	}
	return t
}

// HTTPClient returns an http.Client whose requests leave from the stack,
// with timeout (virtual time; 0 for none) as the Transport's Timeout: it
// acts as Client.Timeout does, on the world's clock.
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

// timeoutError is net/http's error for a request that ran out of its
// Client.Timeout: a timeout (net.Error) that is context.DeadlineExceeded
// for errors.Is.
type timeoutError struct{ err string }

func (e *timeoutError) Error() string     { return e.err }
func (e *timeoutError) Timeout() bool     { return true }
func (e *timeoutError) Temporary() bool   { return true }
func (e *timeoutError) Is(err error) bool { return err == context.DeadlineExceeded }

// errRequestCanceled is the words of net/http's error for a request
// cancelled by Transport.CancelRequest.
const errRequestCanceled = "net/http: request canceled"

// Where an exchange's virtual deadline comes from, which decides the words
// of its error.
const (
	fromClient  = iota + 1 // Transport.Timeout, or an http.Client's Timeout
	fromContext            // the request context's own deadline
)

// exchange is one RoundTrip: its virtual deadline, armed until the body is
// read to its end or closed, and the calls it has a worker make (the
// exchange is the worker's task, so a call allocates no closure).
type exchange struct {
	d *driver
	// The transport and the request, for cancelling it: an exchange
	// gives up by http.Transport's CancelRequest, the cancellation the
	// transport sets up for every request anyway, rather than through a
	// context of its own (which cost five allocations per request: the
	// context, its cancel function, its done channel, the map of the
	// transport's child context, the request's copy).
	tr       *http.Transport
	orig     *http.Request
	tm       *vtimer
	from     int
	timedOut bool // under d.mu
	// reads0 is the transport's read count when RoundTrip began; conn,
	// once the response is in, the connection that carried it, when
	// that is certain (see RoundTrip): the body's reads try it directly.
	reads0 uint64
	conn   *TCPConn

	// The call the worker makes (op), its arguments and results.
	op   int
	t    *http.Transport
	req  *http.Request
	resp *http.Response
	p    []byte
	n    int
	err  error

	body *body // the response's Body
}

// maxFreeExchanges bounds a driver's free list of exchanges.
const maxFreeExchanges = 16

// newExchange returns a cleared exchange, from the driver's free list
// when it has one (a kept-alive GET then allocates none of its own).
// Called with d.mu held.
func (d *driver) newExchange() *exchange {
	if n := len(d.freeExchanges); n > 0 {
		x := d.freeExchanges[n-1]
		d.freeExchanges = d.freeExchanges[:n-1]
		return x
	}
	return &exchange{d: d}
}

// finish disarms the exchange's deadline and puts the exchange on the
// free list: its response body is closed (or it has none), so nothing
// refers to it any more but a stopped timer's queued event, which never
// calls the timer's function.
func (x *exchange) finish() {
	d := x.d
	d.lock()
	if x.tm != nil {
		x.tm.Stop()
	}
	*x = exchange{d: d}
	if len(d.freeExchanges) < maxFreeExchanges {
		d.freeExchanges = append(d.freeExchanges, x)
	}
	d.unlock()
}

// The calls an exchange's worker makes.
const (
	opRoundTrip = iota
	opRead
	opClose
)

// run implements task.
func (x *exchange) run() {
	switch x.op {
	case opRoundTrip:
		x.resp, x.err = x.t.RoundTrip(x.req)
	case opRead:
		b := x.body
		x.n, x.err = b.rc.Read(x.p)
		if x.err == nil && int64(x.n) == b.left && x.n < len(x.p) {
			// The last bytes: read the io.EOF now too, in the same
			// drive (it does not block).
			var m int
			m, x.err = b.rc.Read(x.p[x.n:])
			x.n += m
		}
	case opClose:
		x.err = x.body.rc.Close()
	}
}

// giveUp implements task: the request is cancelled, as its context's
// cancellation would (the transport closes its connection).
func (x *exchange) giveUp() { x.cancelRequest() }

// cancelRequest cancels the exchange's request; after its response body
// is read or closed, it does nothing.
func (x *exchange) cancelRequest() {
	//lint:ignore SA1019 the transport's own cancellation of a request, set up for every request
	x.tr.CancelRequest(x.orig)
}

func (x *exchange) expired() bool {
	x.d.lock()
	defer x.d.unlock()
	return x.timedOut
}

// stop disarms the deadline.
func (x *exchange) stop() {
	if x.tm != nil {
		x.d.lock()
		x.tm.Stop()
		x.d.unlock()
	}
}

// timeout is the error of an exchange whose deadline passed, in net/http's
// words: what http.Client returns for its Timeout (while awaiting headers
// or while reading the body), or the context's error.
func (x *exchange) timeout(err error, while string) error {
	if x.from == fromContext {
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return context.DeadlineExceeded
	}
	if while == "headers" {
		return &timeoutError{"context deadline exceeded (Client.Timeout exceeded while awaiting headers)"}
	}
	msg := err.Error()
	if msg == errRequestCanceled {
		// The transport's error for a request cancelled without a
		// context (CancelRequest); cancelled by its deadline's context,
		// as net/http's Client does, it is the context's.
		msg = context.DeadlineExceeded.Error()
	}
	return &timeoutError{msg + " (Client.Timeout or context cancellation while reading body)"}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	d := t.s.d
	in := time.Duration(-1)
	from := 0
	if t.Timeout > 0 {
		in, from = t.Timeout, fromClient
	}
	if dl, ok := req.Context().Deadline(); ok {
		if v := untilVirtual(dl); in < 0 || v < in {
			in, from = max(v, 0), fromContext
			// http.Client puts its Timeout in the request's context and,
			// for a RoundTripper it does not know, sets Cancel too.
			//lint:ignore SA1019 read, not set: it tells Client.Timeout from a caller's deadline
			if req.Cancel != nil {
				from = fromClient
			}
		}
	}
	d.lock()
	x := d.newExchange()
	x.tr, x.orig, x.from = t.inner, req, from
	if in >= 0 {
		x.tm = &vtimer{d: d, f: func() { x.timedOut = true; x.cancelRequest() }}
		x.tm.Reset(in)
	}
	x.reads0 = t.reads
	d.unlock()
	x.op, x.t, x.req = opRoundTrip, t.inner, req
	idle := d.doTask(x, true)
	resp, err := x.resp, x.err
	x.t, x.req, x.resp, x.err = nil, nil, nil, nil
	switch {
	case (err != nil || idle != nil) && x.expired():
		if resp != nil {
			resp.Body.Close()
		}
		err = x.timeout(err, "headers")
		x.finish()
		return nil, err
	case idle != nil:
		if resp != nil {
			resp.Body.Close()
		}
		x.finish()
		return nil, idle
	case err != nil:
		x.finish()
		return nil, err
	}
	if directBody && resp.ContentLength > 0 {
		// The response came in on the one connection of the transport
		// that read data since RoundTrip began, when only one did (its
		// bytes cannot have come before the request): the connection
		// the body is read from.
		d.lock()
		if t.reads > x.reads0 && t.lastSince <= x.reads0+1 {
			x.conn = t.lastRead
		}
		d.unlock()
	}
	x.body = &body{d: d, rc: resp.Body, x: x, left: resp.ContentLength}
	resp.Body = x.body
	return resp, nil
}

// body is a response body whose reads drive the world.
type body struct {
	d  *driver
	rc io.ReadCloser
	// x is the exchange, until Close puts it back on the free list.
	x *exchange
	// left is what Content-Length says is still to come (-1: unknown);
	// eof is set once a read returned io.EOF.
	left int64
	eof  bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.x == nil {
		// Closed: net/http's answer, without the world.
		return b.rc.Read(p)
	}
	if b.eof || b.left == 0 {
		// All of the body is in: net/http answers from its buffer (or
		// with io.EOF) without touching the connection, so there is
		// nothing to drive.
		n, err := b.rc.Read(p)
		return b.account(n, err)
	}
	x := b.x
	if x.conn != nil && len(p) > 0 {
		if n, err, ok := b.readDirect(p); ok {
			return b.account(n, err)
		}
	}
	x.op, x.p = opRead, p
	idle := b.d.doTask(x, true)
	n, err := x.n, x.err
	x.p, x.n, x.err = nil, 0, nil
	if idle != nil {
		return n, idle
	}
	return b.account(n, err)
}

// directBody lets a response body's reads run on the caller's goroutine
// (body.readDirect); tests turn it off to compare the frames.
var directBody = true

// readDirect reads the body on the caller's goroutine, without a worker
// and without driving the world, when net/http already holds the bytes:
// the body has a Content-Length, so net/http reads it from its buffered
// reader, which calls the connection only when its buffer is empty. The
// connection is told to answer its next Read with nothing (TCPConn.peek)
// at once; a read that comes back with nothing, then, needed the
// connection and changed nothing in net/http (a bufio.Reader passes an
// empty read through without keeping anything), and ok is false: the
// read is made again on a worker, driving the world, as before. The
// last bytes come with io.EOF and the hand-off to the connection's read
// loop, which puts the connection back in the idle pool (or closes it)
// and reads on for the next response (a background wait); whatever that
// woke, or left for a barrier, is brought to rest before the read
// returns, as the drive of a worker's read would. (Only one of the
// transport's connections can be told so: RoundTrip learns which one
// carried the response, or the body is not read directly. A read of the
// read loop that meets the flag after the hand-off gets nothing and
// reads again: bufio.Reader's fill retries.)
func (b *body) readDirect(p []byte) (n int, err error, ok bool) {
	d, c := b.d, b.x.conn
	d.lock()
	if d.driving {
		// Someone else drives: the worker's read waits for them.
		d.unlock()
		return 0, nil, false
	}
	c.peek = true
	d.unlock()
	n, err = b.rc.Read(p)
	if err == nil && int64(n) == b.left && n < len(p) {
		// The last bytes: the io.EOF comes now (net/http has it).
		var m int
		m, err = b.rc.Read(p[n:])
		n += m
	}
	d.lock()
	c.peek = false
	if n == 0 && err == nil {
		// The connection was needed: nothing read, nothing changed.
		d.unlock()
		return 0, nil, false
	}
	d.directReads++
	if !d.driving && (d.anyDirty() || runtime.GOMAXPROCS(0) > 1 || othersReady()) {
		// Bring to rest what the read woke (the read loop closing the
		// connection, a request waiting for it) before returning.
		d.driving = true
		_ = d.driveLocked(func() bool { return true }, false)
		d.release()
	}
	d.unlock()
	return n, err, true
}

// account notes what a read returned and ends the exchange on an error
// (the deadline's words when it passed).
func (b *body) account(n int, err error) (int, error) {
	if b.left > 0 {
		b.left = max(b.left-int64(n), 0)
	}
	if err != nil {
		if err == io.EOF {
			b.eof = true
		} else if b.x.expired() {
			err = b.x.timeout(err, "body")
		}
		b.x.stop()
	}
	return n, err
}

// Close implements io.Closer; the exchange goes back to the free list.
func (b *body) Close() error {
	x := b.x
	if x == nil {
		return b.rc.Close() // closed before: net/http's answer
	}
	var err error
	if b.eof {
		err = b.rc.Close() // read to its end: nothing left to drive
	} else {
		x.op = opClose
		_ = b.d.doTask(x, true)
		err, x.err = x.err, nil
	}
	b.x = nil
	x.finish()
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
