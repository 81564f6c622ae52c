package main

import (
	"bytes"
	"fmt"
	"io"

	"github.com/kubewalk/kubewalk/sim/export"
)

const exportUsage = `Write a shell script that builds a scenario in real Linux network
namespaces: one per node and per pod, an underlay bridge in a namespace of
its own, veth pairs, cni0 and flannel.1 (a real vxlan device) with the same
names, MACs, addresses, routes, PERMANENT neighbour and FDB entries, sysctls
and iptables rules as the simulation. Every name starts with a prefix
(kw-XXXX by default) so nothing can collide with the machine's own; the
host namespace is never touched. Run the script as root; poke at the result
with ip netns exec, tcpdump and iptables; remove it with the teardown script.

Usage:
  kubewalk export (--scenario NAME | -f FILE...) [-o sh] [--teardown] [--prefix P] [--seed N]

Examples:
  kubewalk export --scenario reference > up.sh && sudo sh up.sh
  sudo ip netns exec kw-XXXX-cka-w1 ip route
  kubewalk export --scenario reference --teardown > down.sh && sudo sh down.sh
`

func runExport(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("export", exportUsage, help)
	scenario := scenarioFlags(fs)
	seed := fs.Uint64("seed", 1, "random seed of the simulated world (MACs, veth names)")
	output := fs.String("o", "sh", "output format: sh")
	teardown := fs.Bool("teardown", false, "write the script that deletes everything the setup script creates")
	prefix := fs.String("prefix", "", "namespace name prefix (default kw- and a hash of the script)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *output != "sh" {
		return usagef("unknown output format %q (want sh)", *output)
	}
	c, err := loadScenario(*scenario, *seed)
	if err != nil {
		return err
	}
	e, err := export.Generate(c, export.Options{Prefix: *prefix})
	if err != nil {
		return usagef("%v", err)
	}
	if *teardown {
		fmt.Fprint(out, e.Teardown)
		return nil
	}
	fmt.Fprint(out, e.Setup)
	return nil
}
