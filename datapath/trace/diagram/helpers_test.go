package diagram_test

import (
	"net/netip"

	"github.com/kubewalk/kubewalk/datapath"
)

func datapathRoute() datapath.RouteSpec {
	return datapath.RouteSpec{Dst: netip.MustParsePrefix("10.244.0.0/16"), Via: netip.MustParseAddr("192.168.122.21")}
}
