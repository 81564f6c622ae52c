package play

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/apiserver"
	"github.com/kubewalk/kubewalk/sim/dns"
)

// Runner runs steps against one cluster. The zero value is not usable;
// use New.
type Runner struct {
	// Cluster is the simulated cluster the steps act on.
	Cluster *sim.Cluster
	// API is its API server (Cluster.API).
	API *apiserver.Server
	// KubeletDNS, when set, gives a node's kubelet DNS configuration for
	// the resolv.conf of its pods (see dns.PodResolvConf).
	KubeletDNS func(node string) dns.KubeletDNS

	commands []Command
	nginx    map[string]bool // pods whose nginx server runs (see startNginx)
}

// Command is one top-level command of a script, found by its first word.
// Adding a command is adding one of these (Register).
type Command struct {
	// Name is the first word of the command line ("kubectl", "sleep").
	Name string
	// Usage is one line for the "command not found" help.
	Usage string
	// Run executes args (args[0] == Name) with stdin (the heredoc body)
	// and writes what a terminal would show to out. A returned error is
	// printed by the runner (see Error) and fails the step.
	Run func(r *Runner, args []string, stdin string, out io.Writer) error
}

// New returns a runner over c with the built-in commands: kubectl, sleep
// and node.
func New(c *sim.Cluster) *Runner {
	r := &Runner{Cluster: c, API: c.API}
	r.Register(
		Command{"kubectl", "kubectl get|describe|apply -f -|delete|scale|label|patch|exec ...", runKubectl},
		Command{"sleep", "sleep DURATION (virtual time: 90s, 2m, 1.5)", runSleep},
		Command{"node", "node NAME: CMD (ip route, ip neigh, ip addr, ip -d link show DEV, bridge fdb, iptables-save, conntrack -L)", runNode},
	)
	return r
}

// Register adds commands, replacing any of the same name.
func (r *Runner) Register(cs ...Command) {
	for _, c := range cs {
		r.commands = slices.DeleteFunc(r.commands, func(x Command) bool { return x.Name == c.Name })
		r.commands = append(r.commands, c)
	}
}

// ExitError ends a script: the step that failed and the status a shell
// with `set -e` would exit with (1 for a failed command, 127 for an
// unknown one, 2 for a script that does not parse).
type ExitError struct {
	Line int
	Code int
	Err  error
}

// Error implements the error interface.
func (e *ExitError) Error() string {
	return fmt.Sprintf("line %d: exit status %d: %v", e.Line, e.Code, e.Err)
}

// Unwrap returns the step's error.
func (e *ExitError) Unwrap() error { return e.Err }

// NotFoundError is a command no table has.
type NotFoundError struct {
	Name  string
	Known []string
}

// Error implements the error interface.
func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s: command not found (kubewalk play knows %s)", e.Name, strings.Join(e.Known, ", "))
}

// Run parses script and runs its steps in order, echoing each as
// "$ command" (a heredoc's lines as "> line", as an interactive shell
// prompts for them) followed by its output. It stops at the first failing
// step not marked `|| true` and returns an *ExitError.
func (r *Runner) Run(script io.Reader, out io.Writer) error {
	steps, err := Parse(script)
	if err != nil {
		var se *SyntaxError
		line := 0
		if errors.As(err, &se) {
			line = se.Line
		}
		fmt.Fprintf(out, "play: %v\n", err)
		return &ExitError{Line: line, Code: 2, Err: err}
	}
	for _, st := range steps {
		if err := r.RunStep(st, out); err != nil {
			return err
		}
	}
	return nil
}

// RunStep echoes and runs one parsed step.
func (r *Runner) RunStep(st Step, out io.Writer) error {
	if st.Comment {
		fmt.Fprintln(out, st.Text)
		return nil
	}
	fmt.Fprintf(out, "$ %s\n", st.Text)
	for _, l := range st.Heredoc {
		fmt.Fprintf(out, "> %s\n", l)
	}
	err := r.Exec(st.Args, st.Stdin, out)
	if err == nil || st.MayFail {
		return nil
	}
	code := 1
	var nf *NotFoundError
	if errors.As(err, &nf) {
		code = 127
	}
	return &ExitError{Line: st.Line, Code: code, Err: err}
}

// Exec runs one command (its words; stdin is its heredoc body), writing
// its output and, on failure, its error text to out. It is the step-by-
// step Go API: a test can Exec an apply, then `sleep 40s`, then read the
// cluster.
func (r *Runner) Exec(args []string, stdin string, out io.Writer) error {
	if len(args) == 0 {
		return nil
	}
	for _, c := range r.commands {
		if c.Name == args[0] {
			err := c.Run(r, args, stdin, out)
			if err != nil {
				io.WriteString(out, errorText(err))
			}
			return err
		}
	}
	known := make([]string, len(r.commands))
	for i, c := range r.commands {
		known[i] = c.Name
	}
	err := &NotFoundError{Name: args[0], Known: known}
	fmt.Fprintf(out, "play: %v\n", err)
	return err
}

// Line runs one command line (split as a script line is), for tests.
func (r *Runner) Line(line, stdin string, out io.Writer) error {
	args, err := split(line)
	if err != nil {
		err = &SyntaxError{Line: 1, Msg: err.Error()}
		fmt.Fprintf(out, "play: %v\n", err)
		return err
	}
	return r.Exec(args, stdin, out)
}

// settle runs what is due at the current virtual instant: a command's
// immediate consequences (the API server's watchers), not those that wait
// (a kubelet's sync, a grace period), which need a sleep.
func (r *Runner) settle() error { return r.Cluster.RunFor(0) }

// runSleep is sleep(1) in virtual time: a number of seconds or a
// duration with a unit suffix (s, m, h, d, as GNU sleep takes; Go's ms
// and us too).
func runSleep(r *Runner, args []string, _ string, out io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("sleep: want one duration, as in: sleep 90s")
	}
	d, err := parseSleep(args[1])
	if err != nil {
		return err
	}
	return r.Cluster.RunFor(d)
}

func parseSleep(s string) (time.Duration, error) {
	v := s
	if n := len(v); n > 0 && v[n-1] >= '0' && v[n-1] <= '9' || strings.HasSuffix(v, ".") {
		v += "s"
	}
	if d, ok := strings.CutSuffix(v, "d"); ok {
		v = d + "h"
		h, err := time.ParseDuration(v)
		if err != nil || h < 0 {
			return 0, fmt.Errorf("sleep: invalid time interval %q", s)
		}
		return 24 * h, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("sleep: invalid time interval %q", s)
	}
	return d, nil
}
