package main

import (
	"bytes"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kubewalk/kubewalk/scenarios"
	"github.com/kubewalk/kubewalk/sim"
)

const scenariosUsage = `List the built-in scenarios (clusters) trace and state can use.

Usage:
  kubewalk scenarios

Examples:
  kubewalk scenarios
`

func runScenarios(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("scenarios", scenariosUsage, help)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION")
	for _, s := range scenarios.Registry() {
		fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Description)
	}
	return tw.Flush()
}

// loadScenario builds the named scenario.
func loadScenario(name string, seed uint64) (*sim.Cluster, error) {
	if name == "" {
		return nil, usagef("--scenario is required (one of: %s)", scenarios.Names())
	}
	s, ok := scenarios.Lookup(name)
	if !ok {
		return nil, usagef("unknown scenario %q (one of: %s)", name, scenarios.Names())
	}
	return s.New(seed)
}
