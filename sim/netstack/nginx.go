package netstack

import (
	"io"
	"net/http"
	"strconv"
	"strings"
)

// NginxVersion is the version the nginx-like server reports
// (nginx:1.27, the image tag the teaching notes' Deployments use).
const NginxVersion = "nginx/1.27.3"

// nginxWelcome is a welcome page in the shape of nginx's default
// index.html: its title and heading are the ones `wget -qO-` shows.
const nginxWelcome = `<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
<style>
html { color-scheme: light dark; }
body { width: 35em; margin: 0 auto;
font-family: Tahoma, Verdana, Arial, sans-serif; }
</style>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>This page is served by the nginx-like handler of a kubewalk pod, over a
gVisor TCP/IP stack on the simulated network.</p>

<p>Real nginx documentation lives at
<a href="http://nginx.org/">nginx.org</a>.</p>

<p><em>Served in virtual time.</em></p>
</body>
</html>
`

// NginxHandler answers like the default server of the nginx image: GET and
// HEAD of / (or /index.html) give the welcome page with nginx's headers
// (Server, Date on the world's clock, Content-Type text/html,
// Content-Length, Last-Modified, ETag, Accept-Ranges); other paths give
// nginx's 404 page; other methods 405. With s nil the handler serves
// outside any world (over real sockets, say) and its Date is Epoch.
func NginxHandler(s *Stack) http.Handler {
	modified := Epoch
	var date []string
	if s == nil {
		date = []string{Epoch.UTC().Format(http.TimeFormat)}
	}
	return &nginx{s: s, date: date,
		lastModified: []string{modified.UTC().Format(http.TimeFormat)},
		etag:         []string{`"` + strconv.FormatInt(modified.Unix(), 16) + "-" + strconv.FormatInt(int64(len(nginxWelcome)), 16) + `"`},
	}
}

// Header values that do not change between responses, shared (net/http
// only reads them).
var (
	nginxServer        = []string{NginxVersion}
	nginxKeepAlive     = []string{"keep-alive"}
	nginxHTML          = []string{"text/html"}
	nginxWelcomeLength = []string{strconv.Itoa(len(nginxWelcome))}
	nginxBytes         = []string{"bytes"}
)

type nginx struct {
	s                  *Stack
	lastModified, etag []string

	// The Date header of the current virtual second, under the world
	// lock.
	dateSec int64
	date    []string
}

// dateHeader is the Date header for the world's current time.
func (n *nginx) dateHeader() []string {
	if n.s == nil {
		return n.date // set once by NginxHandler
	}
	d := n.s.d
	d.lock()
	defer d.unlock()
	now := Epoch.Add(d.e.Now())
	if n.date == nil || now.Unix() != n.dateSec {
		n.dateSec, n.date = now.Unix(), []string{now.UTC().Format(http.TimeFormat)}
	}
	return n.date
}

func (n *nginx) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Server"] = nginxServer
	h["Date"] = n.dateHeader()
	if !strings.EqualFold(r.Header.Get("Connection"), "close") && r.ProtoAtLeast(1, 1) {
		h["Connection"] = nginxKeepAlive
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		n.page(w, r, http.StatusMethodNotAllowed, "405 Not Allowed")
		return
	}
	if r.URL.Path != "/" && r.URL.Path != "/index.html" {
		n.page(w, r, http.StatusNotFound, "404 Not Found")
		return
	}
	h["Content-Type"] = nginxHTML
	h["Content-Length"] = nginxWelcomeLength
	h["Last-Modified"] = n.lastModified
	h["Etag"] = n.etag
	h["Accept-Ranges"] = nginxBytes
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = io.WriteString(w, nginxWelcome)
	}
}

func (n *nginx) page(w http.ResponseWriter, r *http.Request, code int, title string) {
	body := "<html>\r\n<head><title>" + title + "</title></head>\r\n<body>\r\n<center><h1>" + title +
		"</h1></center>\r\n<hr><center>" + NginxVersion + "</center>\r\n</body>\r\n</html>\r\n"
	w.Header().Set("Content-Type", "text/html")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(body))
	}
}
