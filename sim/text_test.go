package sim

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The kubelet's texts, made once per word, are the texts made each time.
func TestKubeletTextsAreMadeOnce(t *testing.T) {
	c := &Cluster{}
	for _, w := range []string{"web", "nginx:1.27", `we"ird`, ""} {
		for range 2 {
			assert.Equal(t, w+"@sha256:"+strings.Repeat("0", 64), c.text(textImageID, w))
			assert.Equal(t, "Container image "+strconv.Quote(w)+" already present on machine", c.text(textPulled, w))
			assert.Equal(t, "Created container: "+w, c.text(textCreated, w))
			assert.Equal(t, "Started container "+w, c.text(textStarted, w))
		}
	}
	n := &Node{InternalIP: netip.MustParseAddr("192.168.1.11")}
	assert.Equal(t, "192.168.1.11", n.internalIPString())
	n.InternalIP = netip.MustParseAddr("10.0.0.7")
	assert.Equal(t, "10.0.0.7", n.internalIPString(), "a changed InternalIP is made again")
}
