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
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/kubewalk/kubewalk/sim/scenario"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// usageError is bad input: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// exitStatus ends a command that writes its output whatever happens, as
// kubectl and a shell do: stdout, then stderr as the command wrote it
// (kubectl's "No resources found", "Error from server (NotFound): ..."),
// then the status.
type exitStatus struct {
	code   int
	stderr string
}

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// errHelp asks for help text on stdout and exit status 0.
var errHelp = errors.New("help")

// command is one subcommand. run gets the arguments after the command
// name, writes its output into out (copied to stdout only when run
// succeeds) and its help into help (printed when it returns errHelp,
// which parse does for -h and --help). It returns a usageError (usagef,
// flagConflict) for bad input: one line on stderr and exit status 2.
type command struct {
	name, short string
	run         func(args []string, out *bytes.Buffer, help io.Writer) error
}

// commands maps subcommand names to their functions, in the order the
// help lists them: the one place a new subcommand is added.
var commands = []command{
	{"scenarios", "List the built-in scenarios", runScenarios},
	{"trace", "Walk a packet (TCP handshake, UDP datagram or ping) and show where it went", runTrace},
	{"state", "Print a node's datapath state (ip addr/route/neigh, bridge fdb, ...)", runState},
	{"export", "Write a shell script that builds the scenario in real network namespaces", runExport},
	{"get", "List API objects as kubectl get does (nodes, pods, svc, ...; -o wide|yaml|json|name)", runGet},
	{"describe", "Describe a node, pod or Service as kubectl describe does", runDescribe},
	{"exec", "Run a command in a pod as kubectl exec does (cat /etc/resolv.conf, ip, wget -qO- URL)", runExec},
	{"play", "Run a lab script (kubectl, sleep, trace, node NAME: CMD) in virtual time", runPlay},
	{"version", "Print the version of kubewalk", runVersion},
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
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
	warnOut = stderr
	defer func() { warnOut = io.Discard }()
	if len(args) == 0 {
		fmt.Fprint(stderr, rootHelp())
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && name == "help" {
			args = []string{args[1], "--help"}
			name = args[0]
		} else {
			fmt.Fprint(stdout, rootHelp())
			return 0
		}
	case "--version", "-version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	c, ok := lookupCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "kubewalk: unknown command %q (want %s; see kubewalk --help)\n", name, commandNames())
		return 2
	}
	var out, help bytes.Buffer
	err := c.run(args[1:], &out, &help)
	var es *exitStatus
	switch {
	case errors.As(err, &es):
		stdout.Write(out.Bytes())
		io.WriteString(stderr, es.stderr)
		return es.code
	case errors.Is(err, errHelp):
		stdout.Write(help.Bytes())
		return 0
	case err != nil:
		var ue *usageError
		code := 1
		var fe fileError
		if errors.As(err, &ue) || errors.As(err, &fe) {
			code = 2
		}
		for _, line := range errorLines(err) {
			fmt.Fprintf(stderr, "kubewalk %s: %s\n", name, line)
		}
		return code
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(stderr, "kubewalk %s: %s\n", name, oneLine(err.Error()))
		return 1
	}
	return 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// errorLines is an error as lines on stderr: one per problem of a scenario
// file (file:line:column: message), else the error on one line.
func errorLines(err error) []string {
	var errs scenario.Errors
	if !errors.As(err, &errs) {
		return []string{oneLine(err.Error())}
	}
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = oneLine(e.Error())
	}
	return lines
}

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
// For -h and --help the FlagSet has already printed its usage into the
// help buffer (flag.Parse calls Usage itself): parse returns errHelp.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
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

// given returns the names of the flags set on the command line (not those
// left at their defaults).
func given(fs *flag.FlagSet) map[string]bool {
	m := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
}

// flagConflict is the usage error for flag a given where it means
// nothing: "--level applies to text output, not --explore".
func flagConflict(a, why string) error { return usagef("--%s %s", a, why) }

// noPositionals refuses arguments a command does not take.
func noPositionals(pos []string, hint string) error {
	if len(pos) > 0 {
		if hint != "" {
			return usagef("unexpected argument %q (%s)", pos[0], hint)
		}
		return usagef("unexpected argument %q", pos[0])
	}
	return nil
}

const versionUsage = `Print the version of kubewalk: the module version it was built at (or
"(devel)" for a build from a checkout), the VCS revision when the build
recorded one, and the Go toolchain.

Usage:
  kubewalk version
  kubewalk --version
`

func runVersion(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("version", versionUsage, help)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := noPositionals(pos, ""); err != nil {
		return err
	}
	fmt.Fprintf(out, "kubewalk %s\n", version(debug.ReadBuildInfo))
	return nil
}

// version describes the build from its build information: the main
// module's version, the VCS revision and whether the tree was modified,
// the Go version and platform. Without build information (a binary
// stripped of it) it says "(unknown)".
func version(read func() (*debug.BuildInfo, bool)) string {
	bi, ok := read()
	if !ok || bi == nil {
		return fmt.Sprintf("(unknown) %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " rev " + rev
		if modified == "true" {
			v += " (modified)"
		}
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return fmt.Sprintf("%s %s %s/%s", v, goVersion, runtime.GOOS, runtime.GOARCH)
}
