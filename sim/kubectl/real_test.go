package kubectl

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// The differential test: the real kubectl, talking to a loopback API
// server that serves the fixture's objects as JSON (legacy discovery, get,
// list with label and field selectors), describes them and prints -o
// yaml/json/name; kubewalk's views of the same objects must print the
// same bytes. kubectl's describe is client-side, so this compares the
// layouts themselves; `get` tables are server-side (not compared here).

type fakeServer struct {
	l *fakeLister
}

func (s *fakeServer) resourceList(gv string) map[string]any {
	var rs []map[string]any
	for _, r := range resources {
		if r.GroupVersionKind().GroupVersion().String() != gv {
			continue
		}
		rs = append(rs, map[string]any{"name": r.Plural, "singularName": r.Singular, "namespaced": r.Namespaced,
			"kind": r.Kind, "verbs": []string{"get", "list"}, "shortNames": r.Short})
	}
	return map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": rs}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// fieldOf reads the fields kubectl's describers select on.
func fieldOf(o Object, path string) string {
	m, err := toMap(&Resource{}, o)
	if err != nil {
		return ""
	}
	var v any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = mm[k]
	}
	s, _ := v.(string)
	return s
}

func (s *fakeServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := strings.Trim(req.URL.Path, "/")
	switch p {
	case "api":
		writeJSON(w, 200, map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []map[string]string{{"clientCIDR": "0.0.0.0/0", "serverAddress": req.Host}}})
		return
	case "apis":
		var groups []map[string]any
		for _, g := range []string{"apps", "discovery.k8s.io", "policy", "coordination.k8s.io"} {
			gv := map[string]string{"groupVersion": g + "/v1", "version": "v1"}
			groups = append(groups, map[string]any{"name": g, "versions": []any{gv}, "preferredVersion": gv})
		}
		writeJSON(w, 200, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
		return
	case "api/v1":
		writeJSON(w, 200, s.resourceList("v1"))
		return
	}
	parts := strings.Split(p, "/")
	if parts[0] == "apis" && len(parts) == 3 {
		writeJSON(w, 200, s.resourceList(parts[1]+"/"+parts[2]))
		return
	}
	// /api/v1/[namespaces/NS/]RESOURCE[/NAME], /apis/G/V/...
	if len(parts) < 3 || parts[0] == "apis" && len(parts) < 4 {
		http.NotFound(w, req)
		return
	}
	rest := parts[2:]
	if parts[0] == "apis" {
		rest = parts[3:]
	}
	ns := ""
	if len(rest) >= 3 && rest[0] == "namespaces" {
		ns, rest = rest[1], rest[2:]
	}
	if len(rest) == 0 {
		http.NotFound(w, req)
		return
	}
	var r *Resource
	for _, x := range resources {
		if x.Plural == rest[0] {
			r = x
		}
	}
	if r == nil {
		http.NotFound(w, req)
		return
	}
	if len(rest) == 2 {
		o, err := s.l.Get(r.Kind, ns, rest[1])
		if err != nil {
			st := err.(*apierrors.StatusError).Status()
			st.Kind, st.APIVersion = "Status", "v1"
			writeJSON(w, 404, st)
			return
		}
		m, _ := toMap(r, o)
		writeJSON(w, 200, m)
		return
	}
	lsel, _ := labels.Parse(req.URL.Query().Get("labelSelector"))
	fsel, _ := fields.ParseSelector(req.URL.Query().Get("fieldSelector"))
	var items []any
	for _, o := range s.l.List(r.Kind, ns) {
		if !lsel.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		set := fields.Set{"metadata.name": o.GetName(), "metadata.namespace": o.GetNamespace()}
		for _, f := range []string{"involvedObject.name", "involvedObject.namespace", "involvedObject.kind", "involvedObject.uid", "spec.nodeName", "status.phase"} {
			set[f] = fieldOf(o, f)
		}
		if !fsel.Matches(set) {
			continue
		}
		m, _ := toMap(r, o)
		items = append(items, m)
	}
	writeJSON(w, 200, map[string]any{"kind": r.Kind + "List", "apiVersion": r.GroupVersionKind().GroupVersion().String(),
		"metadata": map[string]any{"resourceVersion": "1"}, "items": items})
}

func TestAgainstRealKubectl(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: the differential test needs the real kubectl")
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	defer func(e time.Time) { epoch = e }(epoch)

	for _, tc := range []struct {
		args []string
		ours func(l Lister, out *bytes.Buffer) error
	}{
		{[]string{"describe", "pod", "pinned", "-n", "net"}, func(l Lister, out *bytes.Buffer) error {
			return Describe(l, []string{"pod", "pinned"}, "net", out, out)
		}},
		{[]string{"describe", "pod", "crashy", "-n", "net"}, func(l Lister, out *bytes.Buffer) error {
			return Describe(l, []string{"pod", "crashy"}, "net", out, out)
		}},
		{[]string{"describe", "pod", "client", "-n", "net"}, func(l Lister, out *bytes.Buffer) error {
			return Describe(l, []string{"pod", "client"}, "net", out, out)
		}},
		{[]string{"describe", "svc", "web-lb", "-n", "net"}, func(l Lister, out *bytes.Buffer) error {
			return Describe(l, []string{"svc", "web-lb"}, "net", out, out)
		}},
		{[]string{"describe", "svc", "nothing", "-n", "net"}, func(l Lister, out *bytes.Buffer) error {
			return Describe(l, []string{"svc", "nothing"}, "net", out, out)
		}},
		{[]string{"describe", "svc", "kubernetes"}, func(l Lister, out *bytes.Buffer) error {
			return Describe(l, []string{"svc", "kubernetes"}, "", out, out)
		}},
		{[]string{"describe", "node", "cka-w1"}, func(l Lister, out *bytes.Buffer) error { return Describe(l, []string{"node", "cka-w1"}, "", out, out) }},
		{[]string{"describe", "node", "cka-w2"}, func(l Lister, out *bytes.Buffer) error { return Describe(l, []string{"node", "cka-w2"}, "", out, out) }},
		{[]string{"get", "svc", "web", "-n", "net", "-o", "yaml"}, func(l Lister, out *bytes.Buffer) error {
			return Get(l, []string{"svc", "web"}, GetOptions{Namespace: "net", Output: "yaml"}, out, out)
		}},
		{[]string{"get", "pdb", "-n", "net", "-o", "json"}, func(l Lister, out *bytes.Buffer) error {
			return Get(l, []string{"pdb"}, GetOptions{Namespace: "net", Output: "json"}, out, out)
		}},
		{[]string{"get", "deploy,pods", "-n", "net", "-o", "name"}, func(l Lister, out *bytes.Buffer) error {
			if err := Get(l, []string{"deploy"}, GetOptions{Namespace: "net", Output: "name"}, out, out); err != nil {
				return err
			}
			return Get(l, []string{"pods"}, GetOptions{Namespace: "net", Output: "name"}, out, out)
		}},
		{[]string{"get", "deploy,svc", "-n", "net", "-o", "yaml"}, func(l Lister, out *bytes.Buffer) error {
			return Get(l, []string{"deploy,svc"}, GetOptions{Namespace: "net", Output: "yaml"}, out, out)
		}},
		{[]string{"get", "pods", "-A", "-l", "k8s-app in (kube-proxy)", "-o", "name"}, func(l Lister, out *bytes.Buffer) error {
			return Get(l, []string{"pods"}, GetOptions{AllNamespaces: true, Selector: "k8s-app in (kube-proxy)", Output: "name"}, out, out)
		}},
		{[]string{"describe", "pods", "web-7c5ddbdf54-2", "-n", "net"}, func(l Lister, out *bytes.Buffer) error {
			return Describe(l, []string{"pods", "web-7c5ddbdf54-2"}, "net", out, out)
		}},
		{[]string{"get", "pod", "nope", "-n", "net"}, func(l Lister, out *bytes.Buffer) error {
			out.WriteString(ErrorText(Get(l, []string{"pod", "nope"}, GetOptions{Namespace: "net"}, out, out)))
			return nil
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// The fixture is 25 hours old; kubectl measures ages on the
			// wall clock, so ours are rendered at every whole second
			// kubectl may have read while it ran, and one must match.
			epoch = time.Now().Truncate(time.Second).Add(-25 * time.Hour)
			l := fixture()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			srv := &http.Server{Handler: &fakeServer{l}}
			go srv.Serve(ln)
			defer srv.Close()

			cmd := exec.Command(bin, append([]string{"--server", "http://" + ln.Addr().String(), "--kubeconfig", kubeconfig,
				"--cache-dir", filepath.Join(dir, "cache")}, tc.args...)...)
			cmd.Env = append(os.Environ(), "HOME="+dir, "KUBECONFIG="+kubeconfig)
			start := time.Now()
			out, _ := cmd.CombinedOutput()
			end := time.Now()
			real := string(out)
			// kubectl before 1.33 still printed the deprecated
			// nodeInfo.kubeProxyVersion; 1.36, the release modelled, does not.
			real = strings.Replace(real, "  Kube-Proxy Version:         \n", "", 1)
			var ours bytes.Buffer
			for now := start.Truncate(time.Second); !now.After(end); now = now.Add(time.Second) {
				l.now = now
				ours.Reset()
				require.NoError(t, tc.ours(l, &ours))
				if ours.String() == real {
					break
				}
			}
			assert.Equal(t, real, ours.String())
		})
	}
}
