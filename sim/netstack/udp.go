package netstack

import (
	"net"
	"os"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// UDPConn is a UDP socket of a Stack: a net.Conn when dialled (connected:
// an ICMP port unreachable for it makes the next read fail with
// ECONNREFUSED, as on Linux) and a net.PacketConn either way. A dialled
// socket is a foreground one (its reads drive the world); one from
// ListenPacket is a background one.
type UDPConn struct {
	sock
	laddr, raddr *net.UDPAddr
}

var (
	_ net.Conn       = (*UDPConn)(nil)
	_ net.PacketConn = (*UDPConn)(nil)
)

func (c *UDPConn) opErr(op string, to net.Addr, err error) error {
	sc := ""
	switch op {
	case "read":
		sc = "recvfrom"
	case "write":
		sc = "sendto"
	}
	if to == nil && c.raddr != nil {
		to = c.raddr
	}
	return opError(op, "udp", sc, c.laddr, to, err)
}

// Read implements net.Conn.
func (c *UDPConn) Read(b []byte) (int, error) {
	n, _, err := c.ReadFrom(b)
	return n, err
}

// ReadFrom implements net.PacketConn.
func (c *UDPConn) ReadFrom(b []byte) (int, net.Addr, error) {
	c.enter()
	defer c.leave()
	for {
		if isClosed(c.closed) {
			return 0, nil, c.opErr("read", nil, net.ErrClosed)
		}
		if c.rd.passed() {
			return 0, nil, c.opErr("read", nil, os.ErrDeadlineExceeded)
		}
		c.sw = tcpip.SliceWriter(b)
		res, err := c.ep.Read(&c.sw, tcpip.ReadOptions{NeedRemoteAddr: true})
		c.sw = nil
		switch err.(type) {
		case nil:
			return res.Count, &net.UDPAddr{IP: ip4(res.RemoteAddr.Addr), Port: int(res.RemoteAddr.Port)}, nil
		case *tcpip.ErrWouldBlock:
		default:
			return 0, nil, c.opErr("read", nil, errno(err))
		}
		werr := c.s.wait(c.fg, c.ep, c.wq, waiter.ReadableEvents|waiter.EventErr, &c.rd, c.closed, &c.rws)
		if werr != nil && werr != errWaitClosed {
			return 0, nil, c.opErr("read", nil, werr)
		}
	}
}

// Write implements net.Conn.
func (c *UDPConn) Write(b []byte) (int, error) { return c.write(b, nil) }

// WriteTo implements net.PacketConn.
func (c *UDPConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok || ua.IP.To4() == nil {
		return 0, c.opErr("write", addr, &net.AddrError{Err: "not an IPv4 UDP address", Addr: addr.String()})
	}
	return c.write(b, ua)
}

func (c *UDPConn) write(b []byte, to *net.UDPAddr) (int, error) {
	c.enter()
	defer c.leave()
	if isClosed(c.closed) {
		return 0, c.opErr("write", nil, net.ErrClosed)
	}
	var opts tcpip.WriteOptions
	var dst net.Addr
	if to != nil {
		opts.To = &tcpip.FullAddress{Addr: tcpip.AddrFrom4([4]byte(to.IP.To4())), Port: uint16(to.Port)}
		dst = to
	}
	c.br.Reset(b)
	n, err := c.ep.Write(&c.br, opts)
	c.br.Reset(nil)
	if err != nil {
		return int(n), c.opErr("write", dst, errno(err))
	}
	return int(n), nil
}

// Close implements net.Conn.
func (c *UDPConn) Close() error {
	c.enter()
	defer c.leave()
	if isClosed(c.closed) {
		return c.opErr("close", nil, net.ErrClosed)
	}
	close(c.closed)
	c.rws.closeWake()
	c.wws.closeWake()
	c.stopDeadlines()
	c.ep.Close()
	return nil
}

// LocalAddr implements net.Conn.
func (c *UDPConn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr implements net.Conn (nil for an unconnected socket).
func (c *UDPConn) RemoteAddr() net.Addr {
	if c.raddr == nil {
		return nil
	}
	return c.raddr
}

func (s *Stack) newUDP(network, op string, laddr, raddr *net.UDPAddr, fg bool) (*UDPConn, error) {
	d := s.d
	d.lock()
	defer func() {
		s.dirty = true
		d.unlock()
	}()
	if err := s.syncLocked(); err != nil {
		return nil, err
	}
	var addr net.Addr = laddr
	if raddr != nil {
		addr = raddr
	}
	wq := &waiter.Queue{}
	ep, terr := s.st.NewEndpoint(udp.ProtocolNumber, ipv4.ProtocolNumber, wq)
	if terr != nil {
		return nil, opError(op, network, "socket", nil, addr, errno(terr))
	}
	if laddr != nil {
		full := tcpip.FullAddress{Port: uint16(laddr.Port)}
		if ip := laddr.IP.To4(); ip != nil && !ip.IsUnspecified() {
			full.Addr = tcpip.AddrFrom4([4]byte(ip))
		}
		if terr := ep.Bind(full); terr != nil {
			ep.Close()
			return nil, opError(op, network, "bind", nil, addr, errno(terr))
		}
	}
	if raddr != nil {
		if terr := ep.Connect(tcpip.FullAddress{Addr: tcpip.AddrFrom4([4]byte(raddr.IP.To4())), Port: uint16(raddr.Port)}); terr != nil {
			ep.Close()
			return nil, opError(op, network, "connect", nil, addr, errno(terr))
		}
	}
	c := &UDPConn{sock: sock{s: s, ep: ep, wq: wq, fg: fg, closed: make(chan struct{})}, raddr: raddr}
	if a, err := ep.GetLocalAddress(); err == nil {
		c.laddr = &net.UDPAddr{IP: ip4(a.Addr), Port: int(a.Port)}
	}
	return c, nil
}

func (s *Stack) dialUDP(network, address string, fg bool) (net.Conn, error) {
	a, port, err := s.dialAddr(network, address, fg)
	if err != nil {
		return nil, err
	}
	return s.newUDP(network, "dial", nil, &net.UDPAddr{IP: net.IP(a.AsSlice()), Port: int(port)}, fg)
}

// ListenPacket binds a UDP socket to the local address ("udp", ":53"), as
// net.ListenPacket does. The socket is a background one (a server's).
func (s *Stack) ListenPacket(network, address string) (net.PacketConn, error) {
	switch network {
	case "udp", "udp4":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	a, port, err := parseAddr("listen", network, address)
	if err != nil {
		return nil, err
	}
	return s.newUDP(network, "listen", &net.UDPAddr{IP: net.IP(a.AsSlice()), Port: int(port)}, nil, false)
}
