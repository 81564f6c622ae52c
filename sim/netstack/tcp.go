package netstack

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// TCPConn is a TCP connection of a Stack, a net.Conn. Its blocking calls
// (Read, Write) drive the world when it is a foreground connection (one
// from Dial) and nobody else drives; a background connection (one from
// Accept, or dialled by the http.Transport of Stack.Transport) only waits
// for whoever drives. Deadlines are on the world's clock.
type TCPConn struct {
	sock
	laddr, raddr *net.TCPAddr
	rto          error // readTimeout's error, under the world lock
	// tr is the Transport that dialled the connection (nil for others):
	// its reads that return data are counted there (Transport.noteRead).
	tr *Transport
	// peek, set by a response body's direct read (body.readDirect),
	// makes the next Read return 0 bytes and no error at once, touching
	// nothing: the read needed bytes net/http had not buffered yet.
	// Under the world lock.
	peek bool
}

var _ net.Conn = (*TCPConn)(nil)

func (c *TCPConn) opErr(op string, err error) error {
	sc := ""
	if op == "read" || op == "write" {
		sc = op
	}
	return opError(op, "tcp", sc, c.laddr, c.raddr, err)
}

// Read implements net.Conn.
func (c *TCPConn) Read(b []byte) (int, error) {
	c.enter()
	defer c.leaveQuiet()
	if c.peek {
		c.peek = false
		return 0, nil
	}
	if c.rd.passed() && !isClosed(c.closed) {
		// A read after its deadline (net/http's server ends the
		// background read it starts for every request this way): kept
		// out of read, whose frame would grow a fresh goroutine's stack.
		return 0, c.readTimeout()
	}
	return c.read(b)
}

// readTimeout is the error of a read past its deadline, made once per
// connection: "read tcp 10.244.1.3:80->10.244.2.5:41234: i/o timeout".
func (c *TCPConn) readTimeout() error {
	if c.rto == nil {
		c.rto = c.opErr("read", os.ErrDeadlineExceeded)
	}
	return c.rto
}

// read is Read with the world lock held.
func (c *TCPConn) read(b []byte) (int, error) {
	for {
		if isClosed(c.closed) {
			return 0, c.opErr("read", net.ErrClosed)
		}
		if c.rd.passed() {
			return 0, c.readTimeout()
		}
		c.sw = tcpip.SliceWriter(b)
		res, err := c.ep.Read(&c.sw, tcpip.ReadOptions{})
		c.sw = nil
		switch err.(type) {
		case nil:
			if c.tr != nil && res.Count > 0 {
				c.tr.noteRead(c)
			}
			return res.Count, nil
		case *tcpip.ErrClosedForReceive:
			return 0, io.EOF
		case *tcpip.ErrWouldBlock:
		default:
			return 0, c.opErr("read", errno(err))
		}
		if len(b) == 0 {
			return 0, nil
		}
		werr := c.s.wait(c.fg, c.ep, c.wq, waiter.ReadableEvents, &c.rd, c.closed, &c.rws)
		if werr != nil && werr != errWaitClosed {
			return 0, c.opErr("read", werr)
		}
	}
}

// Write implements net.Conn.
func (c *TCPConn) Write(b []byte) (int, error) {
	c.enter()
	defer c.leaveQuiet()
	n := 0
	for {
		if isClosed(c.closed) {
			return n, c.opErr("write", net.ErrClosed)
		}
		if c.wd.passed() {
			return n, c.opErr("write", os.ErrDeadlineExceeded)
		}
		c.br.Reset(b[n:])
		m, err := c.ep.Write(&c.br, tcpip.WriteOptions{})
		c.br.Reset(nil)
		n += int(m)
		switch err.(type) {
		case nil:
			if n == len(b) {
				return n, nil
			}
			continue
		case *tcpip.ErrWouldBlock:
		default:
			return n, c.opErr("write", errno(err))
		}
		c.s.dirty = true
		werr := c.s.wait(c.fg, c.ep, c.wq, waiter.WritableEvents, &c.wd, c.closed, &c.wws)
		if werr != nil && werr != errWaitClosed {
			return n, c.opErr("write", werr)
		}
	}
}

// Close implements net.Conn: the socket is closed as close(2) does (FIN,
// or RST when unread data is left).
func (c *TCPConn) Close() error {
	c.enter()
	defer c.leave()
	if isClosed(c.closed) {
		return c.opErr("close", net.ErrClosed)
	}
	close(c.closed)
	c.rws.closeWake()
	c.wws.closeWake()
	c.stopDeadlines()
	c.ep.Close()
	return nil
}

// CloseWrite shuts down the sending side (shutdown(SHUT_WR)): a FIN.
func (c *TCPConn) CloseWrite() error {
	c.enter()
	defer c.leave()
	if err := c.ep.Shutdown(tcpip.ShutdownWrite); err != nil {
		return c.opErr("close", errno(err))
	}
	return nil
}

// LocalAddr implements net.Conn.
func (c *TCPConn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr implements net.Conn.
func (c *TCPConn) RemoteAddr() net.Addr { return c.raddr }

// SetKeepAlive turns TCP keepalive on or off (SO_KEEPALIVE).
func (c *TCPConn) SetKeepAlive(on bool) error {
	c.enter()
	defer c.leave()
	c.ep.SocketOptions().SetKeepAlive(on)
	return nil
}

// SetKeepAliveConfig sets the keepalive idle time, probe interval and probe
// count (TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT) and turns keepalive on
// when cfg.Enable is set. Zero fields keep their values (Linux: 7200 s,
// 75 s, 9).
func (c *TCPConn) SetKeepAliveConfig(cfg net.KeepAliveConfig) error {
	c.enter()
	defer c.leave()
	if cfg.Idle > 0 {
		o := tcpip.KeepaliveIdleOption(cfg.Idle)
		if err := c.ep.SetSockOpt(&o); err != nil {
			return c.opErr("set", errno(err))
		}
	}
	if cfg.Interval > 0 {
		o := tcpip.KeepaliveIntervalOption(cfg.Interval)
		if err := c.ep.SetSockOpt(&o); err != nil {
			return c.opErr("set", errno(err))
		}
	}
	if cfg.Count > 0 {
		if err := c.ep.SetSockOptInt(tcpip.KeepaliveCountOption, cfg.Count); err != nil {
			return c.opErr("set", errno(err))
		}
	}
	c.ep.SocketOptions().SetKeepAlive(cfg.Enable)
	return nil
}

// acceptedConn is a connection from Accept. It has no CloseWrite, so
// net/http's server closes it without its 500 ms wall-clock wait for the
// client's ACK (closeWriteAndWait), which virtual time cannot shorten.
type acceptedConn struct{ c *TCPConn }

func (a acceptedConn) Read(b []byte) (int, error)         { return a.c.Read(b) }
func (a acceptedConn) Write(b []byte) (int, error)        { return a.c.Write(b) }
func (a acceptedConn) Close() error                       { return a.c.Close() }
func (a acceptedConn) LocalAddr() net.Addr                { return a.c.laddr }
func (a acceptedConn) RemoteAddr() net.Addr               { return a.c.raddr }
func (a acceptedConn) SetDeadline(t time.Time) error      { return a.c.SetDeadline(t) }
func (a acceptedConn) SetReadDeadline(t time.Time) error  { return a.c.SetReadDeadline(t) }
func (a acceptedConn) SetWriteDeadline(t time.Time) error { return a.c.SetWriteDeadline(t) }

// TCP returns the underlying connection.
func (a acceptedConn) TCP() *TCPConn { return a.c }

// Listener is a listening TCP socket of a Stack, a net.Listener. Accept is
// a background wait (it never drives the world), so a server can run in
// its own goroutine.
type Listener struct {
	s      *Stack
	ep     tcpip.Endpoint
	wq     *waiter.Queue
	addr   *net.TCPAddr
	fg     bool
	closed chan struct{}
	ws     waitSlot
}

var _ net.Listener = (*Listener)(nil)

// SetDriving makes Accept drive the world (for a test that accepts on its
// own goroutine).
func (l *Listener) SetDriving(fg bool) {
	l.s.d.lock()
	l.fg = fg
	l.s.d.unlock()
}

// Accept implements net.Listener. The connection it returns is a
// background one.
func (l *Listener) Accept() (net.Conn, error) {
	d := l.s.d
	d.lock()
	defer func() {
		l.s.dirty = true
		d.unlock()
	}()
	for {
		if isClosed(l.closed) {
			return nil, opError("accept", "tcp", "", nil, l.addr, net.ErrClosed)
		}
		var peer tcpip.FullAddress
		nep, nwq, err := l.ep.Accept(&peer)
		switch err.(type) {
		case nil:
			c := l.s.newTCPConn(nep, nwq, false)
			return acceptedConn{c}, nil
		case *tcpip.ErrWouldBlock:
		default:
			return nil, opError("accept", "tcp", "accept", nil, l.addr, errno(err))
		}
		werr := l.s.wait(l.fg, l.ep, l.wq, waiter.ReadableEvents, nil, l.closed, &l.ws)
		if werr != nil && werr != errWaitClosed {
			return nil, opError("accept", "tcp", "", nil, l.addr, werr)
		}
	}
}

// Close implements net.Listener.
func (l *Listener) Close() error {
	d := l.s.d
	d.lock()
	defer func() {
		l.s.dirty = true
		d.unlock()
	}()
	if isClosed(l.closed) {
		return opError("close", "tcp", "", nil, l.addr, net.ErrClosed)
	}
	close(l.closed)
	l.ws.closeWake()
	l.ep.Close()
	return nil
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.addr }

func (s *Stack) newTCPConn(ep tcpip.Endpoint, wq *waiter.Queue, fg bool) *TCPConn {
	c := &TCPConn{sock: sock{s: s, ep: ep, wq: wq, fg: fg, closed: make(chan struct{})}}
	if a, err := ep.GetLocalAddress(); err == nil {
		c.laddr = tcpAddr(a)
	}
	if a, err := ep.GetRemoteAddress(); err == nil {
		c.raddr = tcpAddr(a)
	}
	return c
}

func tcpAddr(a tcpip.FullAddress) *net.TCPAddr {
	return &net.TCPAddr{IP: ip4(a.Addr), Port: int(a.Port)}
}

// ip4 converts a gVisor address to a 4-byte net.IP (0.0.0.0 when unset).
func ip4(a tcpip.Address) net.IP {
	if a.Len() != 4 {
		return net.IPv4zero.To4()
	}
	b := a.As4()
	return net.IPv4(b[0], b[1], b[2], b[3]).To4()
}

// dialAddr is parseAddr for a dial, with a host name resolved through the
// stack's resolv.conf (LookupHost) to its first address: a foreground dial
// drives the lookup, a background one (the Transport's) waits for the
// driver. Called without the world lock.
func (s *Stack) dialAddr(network, address string, fg bool) (netip.Addr, uint16, error) {
	host, portStr, err := net.SplitHostPort(address)
	if _, perr := netip.ParseAddr(host); err != nil || host == "" || perr == nil {
		return parseAddr("dial", network, address)
	}
	// A name: the port's errors first, as net.Dial reports them.
	_, port, err := parseAddr("dial", network, net.JoinHostPort("0.0.0.0", portStr))
	if err != nil {
		return netip.Addr{}, 0, err
	}
	addrs, err := s.lookup(host, fg)
	if err != nil {
		return netip.Addr{}, 0, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	for _, a := range addrs {
		if a.Is4() {
			return a, port, nil
		}
	}
	return netip.Addr{}, 0, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
}

// parseAddr parses "host:port" where host is an IPv4 address or empty.
func parseAddr(op, network, address string) (netip.Addr, uint16, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.Addr{}, 0, &net.OpError{Op: op, Net: network, Err: err}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.Addr{}, 0, &net.OpError{Op: op, Net: network, Err: &net.AddrError{Err: "invalid port", Addr: address}}
	}
	if host == "" {
		return netip.IPv4Unspecified(), uint16(p), nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, 0, &net.OpError{Op: op, Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
	}
	if !a.Is4() {
		return netip.Addr{}, 0, &net.OpError{Op: op, Net: network, Err: &net.AddrError{Err: "IPv6 is not modelled", Addr: host}}
	}
	return a, uint16(p), nil
}

// Dial connects to address on the named network ("tcp", "tcp4", "udp",
// "udp4"), as net.Dial does, from the stack's namespace. A host name is
// resolved through the stack's resolv.conf (SetResolvConf; see LookupHost)
// and the first address dialled. The connection is
// a foreground one: its blocking calls drive the world. Dial blocks until
// the handshake completes or fails (connection refused, no route to host,
// timed out after the SYN retries), in virtual time.
func (s *Stack) Dial(network, address string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context; the context's deadline is read on the
// world's clock (relative to the wall clock when the call starts).
func (s *Stack) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return s.dial(ctx, network, address, true)
}

func (s *Stack) dial(ctx context.Context, network, address string, fg bool) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4":
		return s.dialTCP(ctx, network, address, fg)
	case "udp", "udp4":
		return s.dialUDP(network, address, fg)
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
}

func (s *Stack) dialTCP(ctx context.Context, network, address string, fg bool) (net.Conn, error) {
	a, port, err := s.dialAddr(network, address, fg)
	if err != nil {
		return nil, err
	}
	raddr := &net.TCPAddr{IP: net.IP(a.AsSlice()), Port: int(port)}
	d := s.d
	d.lock()
	defer func() {
		s.dirty = true
		d.unlock()
	}()
	if err := s.syncLocked(); err != nil {
		return nil, err
	}
	wq := &waiter.Queue{}
	ep, terr := s.st.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, wq)
	if terr != nil {
		return nil, opError("dial", network, "socket", nil, raddr, errno(terr))
	}
	var dl deadline
	if t, ok := ctx.Deadline(); ok {
		dl.set(d, t)
	}
	terr = ep.Connect(tcpip.FullAddress{Addr: tcpip.AddrFrom4(a.As4()), Port: port})
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		s.dirty = true
		werr := s.wait(fg, ep, wq, waiter.WritableEvents|waiter.EventHUp|waiter.EventErr, &dl, ctx.Done(), nil)
		if dl.t != nil {
			dl.t.Stop()
		}
		if werr != nil {
			ep.Close()
			if werr == errWaitClosed {
				return nil, opError("dial", network, "", nil, raddr, mapCtxErr(ctx.Err()))
			}
			return nil, opError("dial", network, "", nil, raddr, werr)
		}
		terr = ep.LastError()
	}
	if terr != nil {
		ep.Close()
		return nil, opError("dial", network, "connect", nil, raddr, errno(terr))
	}
	return s.newTCPConn(ep, wq, fg), nil
}

// Listen announces on the local address ("tcp", ":80" or "10.244.1.3:80"),
// as net.Listen does, in the stack's namespace.
func (s *Stack) Listen(network, address string) (net.Listener, error) {
	switch network {
	case "tcp", "tcp4":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	a, port, err := parseAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	d := s.d
	d.lock()
	defer func() {
		s.dirty = true
		d.unlock()
	}()
	if err := s.syncLocked(); err != nil {
		return nil, err
	}
	laddr := &net.TCPAddr{IP: net.IP(a.AsSlice()), Port: int(port)}
	wq := &waiter.Queue{}
	ep, terr := s.st.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, wq)
	if terr != nil {
		return nil, opError("listen", network, "socket", nil, laddr, errno(terr))
	}
	ep.SocketOptions().SetReuseAddress(true) // as Go's net.Listen sets SO_REUSEADDR
	full := tcpip.FullAddress{Port: port}
	if !a.IsUnspecified() {
		full.Addr = tcpip.AddrFrom4(a.As4())
	}
	if terr := ep.Bind(full); terr != nil {
		ep.Close()
		return nil, opError("listen", network, "bind", nil, laddr, errno(terr))
	}
	if terr := ep.Listen(4096); terr != nil {
		ep.Close()
		return nil, opError("listen", network, "listen", nil, laddr, errno(terr))
	}
	if la, err := ep.GetLocalAddress(); err == nil {
		laddr.Port = int(la.Port)
	}
	return &Listener{s: s, ep: ep, wq: wq, addr: laddr, closed: make(chan struct{})}, nil
}
