package netstack

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/sim"
)

// WgetTimeout is busybox wget's default -T: 900 seconds without progress
// on a connect or a read.
const WgetTimeout = 900 * time.Second

// Wget runs `wget -qO- URL` as busybox 1.36 does, from namespace ns (a
// stack is attached to it if it has none): it sends
//
//	GET /path HTTP/1.1
//	Host: host[:port]
//	User-Agent: Wget
//	Connection: close
//
// and writes the body to stdout. Failures print busybox's messages to
// stderr with exit status 1: "wget: can't connect to remote host
// (10.96.0.1): Connection refused", "wget: server returned error: HTTP/1.1
// 404 Not Found", "wget: download timed out", "wget: bad address 'x'"
// (a name that does not resolve through the stack's resolv.conf, see
// SetResolvConf and LookupHost; without one only IPv4 addresses do). Redirects
// (301, 302, 303) are followed, at most 5. Time is the world's: the call
// drives the world until wget would exit.
func Wget(w *sim.World, ns *datapath.Netns, url string) (stdout, stderr string, exit int) {
	s, err := Attach(w, ns)
	if err != nil {
		return "", "wget: " + err.Error() + "\n", 1
	}
	var out strings.Builder
	if err := s.wget(&out, url, 5); err != nil {
		return out.String(), "wget: " + err.Error() + "\n", 1
	}
	return out.String(), "", 0
}

type wgetURL struct {
	host string // as in the URL, with :port if given (the Host header)
	name string // the host without the port
	port uint16
	path string
}

func parseWgetURL(raw string) (wgetURL, error) {
	rest := raw
	if i := strings.Index(raw, "://"); i >= 0 {
		if raw[:i] != "http" {
			return wgetURL{}, errors.New("not an http or ftp url: " + raw)
		}
		rest = raw[i+3:]
	}
	var u wgetURL
	cut := len(rest)
	for _, c := range "/?#" {
		if i := strings.IndexRune(rest, c); i >= 0 && i < cut {
			cut = i
		}
	}
	u.host = rest[:cut]
	switch {
	case cut == len(rest):
		u.path = ""
	case rest[cut] == '/':
		u.path = rest[cut+1:]
	default:
		u.path = rest[cut+1:]
	}
	if i := strings.LastIndexByte(u.host, '@'); i >= 0 {
		u.host = u.host[i+1:]
	}
	name, port := u.host, "80"
	if i := strings.LastIndexByte(u.host, ':'); i >= 0 {
		name, port = u.host[:i], u.host[i+1:]
	}
	p, perr := strconv.ParseUint(port, 10, 16)
	if a, err := netip.ParseAddr(name); perr != nil || name == "" || (err == nil && !a.Is4()) {
		return wgetURL{}, errors.New("bad address '" + u.host + "'")
	}
	u.name, u.port = name, uint16(p)
	return u, nil
}

// strerror is glibc's and musl's text for the errnos a connect or read
// meets.
func strerror(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.ECONNREFUSED:
			return "Connection refused"
		case syscall.EHOSTUNREACH:
			return "No route to host"
		case syscall.ENETUNREACH:
			return "Network is unreachable"
		case syscall.ETIMEDOUT:
			return "Connection timed out"
		case syscall.ECONNRESET:
			return "Connection reset by peer"
		}
		s := en.Error()
		return strings.ToUpper(s[:1]) + s[1:]
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func (s *Stack) wget(out io.Writer, raw string, redirects int) error {
	u, err := parseWgetURL(raw)
	if err != nil {
		return err
	}
	d := s.d
	for {
		// busybox's xhost2sockaddr: getaddrinfo, the first address.
		addrs, err := s.lookup(u.name, true)
		if err != nil || len(addrs) == 0 || !addrs[0].Is4() {
			return errors.New("bad address '" + u.host + "'")
		}
		addr := netip.AddrPortFrom(addrs[0], u.port)
		c, err := s.dialTimeout(addr.String(), WgetTimeout)
		if err != nil {
			if isTimeout(err) {
				return errors.New("download timed out")
			}
			return errors.New("can't connect to remote host (" + addr.Addr().String() + "): " + strerror(err))
		}
		tc := c.(*TCPConn)
		req := "GET /" + u.path + " HTTP/1.1\r\nHost: " + u.host + "\r\nUser-Agent: Wget\r\nConnection: close\r\n\r\n"
		rd := &idleReader{c: tc, d: d}
		if _, err := tc.Write([]byte(req)); err != nil {
			tc.Close()
			return errors.New("write error: " + strerror(err))
		}
		br := bufio.NewReader(rd)
		status, loc, clen, chunked, err := readWgetHeaders(br)
		if err != nil {
			tc.Close()
			return err
		}
		if loc != "" && redirects > 0 && status >= 300 && status <= 303 {
			tc.Close()
			redirects--
			if strings.HasPrefix(loc, "/") {
				u.path = loc[1:]
				continue
			}
			if u, err = parseWgetURL(loc); err != nil {
				return err
			}
			continue
		}
		if loc != "" && redirects == 0 {
			tc.Close()
			return errors.New("too many redirections")
		}
		err = copyWgetBody(out, br, clen, chunked)
		tc.Close()
		return err
	}
}

// dialTimeout dials with a connect timeout on the world's clock.
func (s *Stack) dialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.DialContext(ctx, "tcp", addr)
}

// idleReader reads with busybox's -T: a read that makes no progress for
// WgetTimeout fails with "download timed out".
type idleReader struct {
	c *TCPConn
	d *driver
}

func (r *idleReader) Read(p []byte) (int, error) {
	r.d.lock()
	r.c.rd.setAfter(r.d, WgetTimeout)
	r.d.unlock()
	n, err := r.c.Read(p)
	if err != nil && err != io.EOF {
		if isTimeout(err) {
			return n, errors.New("download timed out")
		}
		return n, errors.New("read error: " + strerror(err))
	}
	return n, err
}

func readWgetHeaders(br *bufio.Reader) (status int, loc string, clen int64, chunked bool, err error) {
	clen = -1
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, "", 0, false, wgetReadErr(err)
		}
		line = strings.TrimRight(line, "\r\n")
		f := strings.Fields(line)
		if len(f) >= 2 {
			status, _ = strconv.Atoi(f[1])
		}
		if status == 0 || status == 100 {
			if err := skipHeaders(br); err != nil {
				return 0, "", 0, false, err
			}
			continue
		}
		switch {
		case status >= 200 && status <= 204, status >= 300 && status <= 303:
		default:
			return 0, "", 0, false, errors.New("server returned error: " + line)
		}
		break
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, "", 0, false, wgetReadErr(err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return status, loc, clen, chunked, nil
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return 0, "", 0, false, errors.New("bad header line: " + line)
		}
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "content-length":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return 0, "", 0, false, errors.New("content-length " + v + " is garbage")
			}
			clen = n
		case "transfer-encoding":
			if strings.ToLower(v) != "chunked" {
				return 0, "", 0, false, errors.New("transfer encoding '" + v + "' is not supported")
			}
			chunked = true
		case "location":
			if status >= 300 {
				loc = v
			}
		}
	}
}

func skipHeaders(br *bufio.Reader) error {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return wgetReadErr(err)
		}
		if strings.TrimRight(line, "\r\n") == "" {
			return nil
		}
	}
}

func wgetReadErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errors.New("error getting response: Connection reset by peer")
	}
	return err
}

func copyWgetBody(out io.Writer, br *bufio.Reader, clen int64, chunked bool) error {
	if !chunked {
		var err error
		if clen >= 0 {
			_, err = io.CopyN(out, br, clen)
		} else {
			_, err = io.Copy(out, br)
		}
		if err == io.EOF {
			return nil
		}
		return err
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return wgetReadErr(err)
		}
		line = strings.TrimSpace(line)
		if i := strings.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(line, 16, 64)
		if err != nil || n < 0 {
			return errors.New("bad chunk length '" + line + "'")
		}
		if n == 0 {
			return nil
		}
		if _, err := io.CopyN(out, br, n); err != nil {
			return err
		}
		if _, err := br.ReadString('\n'); err != nil {
			return wgetReadErr(err)
		}
	}
}
