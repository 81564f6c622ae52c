// Command kubewalk walks packets through simulated Kubernetes clusters and
// prints where they went, kubectl-style:
//
//	kubewalk scenarios
//	kubewalk trace --scenario reference --from net/client --to net/web-2 --port 80 -o svg > walk.svg
//	kubewalk state --scenario reference --node cka-w1 ip-route
//
// Output is built in memory and written only when the command succeeds; bad
// input prints one line on stderr and exits with status 2.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// usageError is bad input: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// errHelp asks for help text on stdout and exit status 0.
var errHelp = errors.New("help")

type command struct {
	name, short, usage string
	run                func(args []string, out *bytes.Buffer, help io.Writer) error
}

var commands = []command{
	{"scenarios", "List the built-in scenarios", scenariosUsage, runScenarios},
	{"trace", "Walk a packet (TCP handshake, UDP datagram or ping) and show where it went", traceUsage, runTrace},
	{"state", "Print a node's datapath state (ip addr/route/neigh, bridge fdb, ...)", stateUsage, runState},
	{"export", "Write a shell script that builds the scenario in real network namespaces", exportUsage, runExport},
}

const rootUsage = `kubewalk walks packets through a simulated Kubernetes node datapath.

Usage:
  kubewalk <command> [flags]

Commands:
%s
Examples:
  # List the clusters you can walk through
  kubewalk scenarios

  # A TCP handshake between pods on two nodes, over flannel's VXLAN overlay
  kubewalk trace --scenario reference --from net/client --to net/web-2 --port 80

  # The same walk as a picture, a sequence diagram or a capture for Wireshark
  kubewalk trace --scenario reference --from net/client --to net/web-2 -o svg > walk.svg
  kubewalk trace --scenario reference --from net/client --to net/web-2 -o pcapng > walk.pcapng

  # The routing table flannel wrote on cka-w1
  kubewalk state --scenario reference --node cka-w1 ip-route

Use "kubewalk <command> --help" for more about a command.
`

func rootHelp() string {
	var b strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.short)
	}
	return fmt.Sprintf(rootUsage, b.String())
}

// run is main without the process: it parses args, runs the command into a
// buffer and copies the buffer to stdout only on success.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, rootHelp())
		return 2
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		if len(args) > 1 && name == "help" {
			args = []string{args[1], "--help"}
			name = args[0]
		} else {
			fmt.Fprint(stdout, rootHelp())
			return 0
		}
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		var out, help bytes.Buffer
		err := c.run(args[1:], &out, &help)
		switch {
		case errors.Is(err, errHelp):
			stdout.Write(help.Bytes())
			return 0
		case err != nil:
			var ue *usageError
			code := 1
			if errors.As(err, &ue) {
				code = 2
			}
			fmt.Fprintf(stderr, "kubewalk %s: %s\n", name, oneLine(err.Error()))
			return code
		}
		if _, err := stdout.Write(out.Bytes()); err != nil {
			fmt.Fprintf(stderr, "kubewalk %s: %s\n", name, oneLine(err.Error()))
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "kubewalk: unknown command %q (want scenarios, trace, state or export; see kubewalk --help)\n", name)
	return 2
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// newFlagSet returns a FlagSet that reports errors instead of exiting and
// prints its help into help.
func newFlagSet(name, usage string, help io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kubewalk "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(help, usage)
		fmt.Fprintln(help, "\nFlags:")
		fs.SetOutput(help)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses flags, allowing positional arguments between them
// (kubewalk state ip-route --node cka-w1), and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, errHelp
			}
			return nil, usagef("%s", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
