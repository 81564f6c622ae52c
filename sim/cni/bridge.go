// Package cni models the CNI plugins a kubeadm + flannel node runs for each
// pod sandbox: bridge (cni0, veth pairs, gateway, hairpin), host-local IPAM
// and loopback. ADD wires a pod's network namespace to the node exactly as
// the real plugins do; DEL undoes it.
package cni

import (
	"fmt"
	"net/netip"

	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/sim/ipam"
)

// BridgeConf is the bridge plugin's configuration as flannel's CNI plugin
// delegates it: {"type":"bridge","name":"cbr0","bridge":"cni0","mtu":1450,
// "hairpinMode":true,"isGateway":true,"isDefaultGateway":true,"ipMasq":false,
// "ipam":{"type":"host-local","subnet":"10.244.1.0/24"}}.
type BridgeConf struct {
	Bridge           string // "cni0"
	MTU              int
	HairpinMode      bool
	IsGateway        bool
	IsDefaultGateway bool
	IPMasq           bool
	// Text, when set, makes the strings the node keeps of b (the host
	// veth's name) in place of string(b): the runtime's shared chunks
	// (nil: string(b)).
	Text func(b []byte) string
}

// Result is what ADD returns: the interfaces and the address assigned.
type Result struct {
	HostVeth  *datapath.Device
	PodEth0   *datapath.Device
	Addr      netip.Prefix
	Gateway   netip.Addr
	BridgeDev *datapath.Device
}

// Error is a plugin failure, with the plugin name as the runtime reports it.
type Error struct {
	Plugin string
	Err    error
}

// Error implements the error interface.
func (e *Error) Error() string {
	return "plugin type=\"" + e.Plugin + "\" failed (add): " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// BridgeAdd runs the bridge plugin's ADD for containerID, whose sandbox is
// podNS, on the node whose root namespace is host: create cni0 if needed
// (with the gateway address when IsGateway), a veth pair named
// veth<8 hex> / eth0, the pod address from IPAM, and the default route via
// the gateway when IsDefaultGateway.
func BridgeAdd(host, podNS *datapath.Netns, containerID string, conf BridgeConf, alloc *ipam.HostLocal) (*Result, error) {
	fail := func(err error) (*Result, error) { return nil, &Error{Plugin: "bridge", Err: err} }
	if conf.Bridge == "" {
		conf.Bridge = "cni0"
	}
	if conf.MTU == 0 {
		conf.MTU = 1500
	}
	br := host.Device(conf.Bridge)
	if br == nil {
		var err error
		if br, err = host.AddBridge(conf.Bridge); err != nil {
			return fail(err)
		}
		if err := host.SetMTU(conf.Bridge, conf.MTU); err != nil {
			return fail(err)
		}
	} else if br.Kind != datapath.KindBridge {
		return fail(fmt.Errorf("%q already exists but is not a bridge", conf.Bridge))
	}
	br.SetUp(true)
	if podNS.Device("eth0") != nil {
		return fail(fmt.Errorf("container veth name provided (eth0) already exists"))
	}
	addr, err := alloc.Allocate(containerID)
	if err != nil {
		return nil, &Error{Plugin: "host-local", Err: err}
	}
	undo := func() { alloc.Release(containerID) }
	rng := host.Engine().Rand()
	var hostVeth, eth0 *datapath.Device
	for range 16 {
		name := vethName(rng.Uint32(), conf.Text)
		if host.Device(name) != nil {
			continue
		}
		eth0, hostVeth, err = podNS.AddVeth("eth0", host, name)
		break
	}
	if err != nil || hostVeth == nil {
		undo()
		return fail(fmt.Errorf("could not create a uniquely named veth: %v", err))
	}
	for _, d := range []struct {
		ns   *datapath.Netns
		name string
	}{{host, hostVeth.Name}, {podNS, "eth0"}} {
		if err := d.ns.SetMTU(d.name, conf.MTU); err != nil {
			undo()
			return fail(err)
		}
		_ = d.ns.SetUp(d.name, true)
	}
	if err := host.SetMaster(hostVeth.Name, conf.Bridge); err != nil {
		undo()
		return fail(err)
	}
	hostVeth.SetHairpin(conf.HairpinMode)
	pfx := netip.PrefixFrom(addr, alloc.Subnet.Bits())
	if err := podNS.AddAddr("eth0", pfx); err != nil {
		undo()
		return fail(err)
	}
	gw := alloc.Gateway
	if conf.IsDefaultGateway {
		if err := podNS.AddRoute(datapath.RouteSpec{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: gw, Dev: "eth0"}); err != nil {
			undo()
			return fail(err)
		}
	}
	if conf.IsGateway || conf.IsDefaultGateway {
		has := false
		for _, a := range host.Addrs() {
			if a.Dev == br && a.Prefix.Addr() == gw {
				has = true
			}
		}
		if !has {
			if err := host.AddAddr(conf.Bridge, netip.PrefixFrom(gw, alloc.Subnet.Bits())); err != nil {
				undo()
				return fail(err)
			}
		}
	}
	return &Result{HostVeth: hostVeth, PodEth0: eth0, Addr: pfx, Gateway: gw, BridgeDev: br}, nil
}

// BridgeDel runs DEL: release the address and delete the veth pair. cni0
// stays, as it does on a real node.
func BridgeDel(host, podNS *datapath.Netns, containerID string, alloc *ipam.HostLocal) error {
	alloc.Release(containerID)
	if podNS.Device("eth0") != nil {
		return podNS.DeleteDevice("eth0")
	}
	return nil
}

// vethName is "veth" and v in eight hex digits ("veth%08x"), made
// without fmt (every pod's host-side veth is named so), by text (string
// when nil).
func vethName(v uint32, text func([]byte) string) string {
	b := [12]byte{'v', 'e', 't', 'h'}
	for i := 11; i >= 4; i-- {
		b[i] = "0123456789abcdef"[v&0xf]
		v >>= 4
	}
	if text != nil {
		return text(b[:])
	}
	return string(b[:])
}
