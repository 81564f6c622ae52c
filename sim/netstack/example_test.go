package netstack_test

import (
	"fmt"
	"io"
	"regexp"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim/netstack"
)

// A real http.Get from net/client on cka-w1 to the ClusterIP of net/web,
// whose one endpoint (net/web-2, nginx-like) is on cka-w2: DNAT by
// kube-proxy's rules, VXLAN over flannel, un-DNAT on the way back.
func Example() {
	r, _ := scenarios.NewReference(1)
	_ = r.DeletePod("net", "web-1") // leave the endpoint across nodes
	web, _ := netstack.AttachPod(r.World, r.Web2)
	srv, _ := web.ServeHTTP(":80", netstack.NginxHandler(web))
	defer srv.Close()
	client, _ := netstack.AttachPod(r.World, r.Client)
	resp, err := client.HTTPClient(0).Get("http://10.111.80.136/")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, regexp.MustCompile(`<title>.*</title>`).FindString(string(body)))
	// Output: 200 OK <title>Welcome to nginx!</title>
}
