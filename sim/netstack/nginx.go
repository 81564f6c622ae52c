package netstack

import (
	"net/http"
	"strconv"
	"strings"
	"time"
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
// nginx's 404 page; other methods 405.
func NginxHandler(s *Stack) http.Handler {
	return &nginx{s: s, modified: Epoch}
}

type nginx struct {
	s        *Stack
	modified time.Time
}

func (n *nginx) now() time.Time {
	n.s.d.lock()
	defer n.s.d.unlock()
	return Epoch.Add(n.s.d.e.Now())
}

func (n *nginx) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Server", NginxVersion)
	h.Set("Date", n.now().UTC().Format(http.TimeFormat))
	if !strings.EqualFold(r.Header.Get("Connection"), "close") && r.ProtoAtLeast(1, 1) {
		h.Set("Connection", "keep-alive")
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		n.page(w, r, http.StatusMethodNotAllowed, "405 Not Allowed")
		return
	}
	if r.URL.Path != "/" && r.URL.Path != "/index.html" {
		n.page(w, r, http.StatusNotFound, "404 Not Found")
		return
	}
	h.Set("Content-Type", "text/html")
	h.Set("Content-Length", strconv.Itoa(len(nginxWelcome)))
	h.Set("Last-Modified", n.modified.UTC().Format(http.TimeFormat))
	h.Set("ETag", `"`+strconv.FormatInt(n.modified.Unix(), 16)+"-"+strconv.FormatInt(int64(len(nginxWelcome)), 16)+`"`)
	h.Set("Accept-Ranges", "bytes")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write([]byte(nginxWelcome))
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
