package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kubewalk/kubewalk/datapath/trace"
	"github.com/kubewalk/kubewalk/sim/play"
)

const playUsage = `Run a lab script against a scenario in virtual time and print it as a
terminal would show it: each command as "$ command", then its output.

Usage:
  kubewalk play (--scenario NAME | -f FILE...) SCRIPT|-

SCRIPT is a file ("-" reads stdin) of one command a line; # starts a
comment; a command ending in <<EOF takes the lines up to EOF as its stdin;
a command ending in || true may fail. The script stops at the first failing
command, as a shell with set -e does, with that command's exit status.

Commands:
  kubectl get|describe ...            as kubewalk get and describe
  kubectl apply -f - <<EOF            create or update the manifests up to EOF
  kubectl delete|scale|label|patch    kubectl's own syntax and output
  kubectl [-n NS] exec POD [-c C] -- cat /etc/resolv.conf | ip addr | ip route
  sleep 90s                           let 90 virtual seconds pass
  trace --from SOURCE --to DEST       walk a packet (kubewalk trace's flags)
  node NAME: CMD                      ip route, ip neigh, ip addr, ip -d link show DEV,
                                      bridge fdb, iptables-save, conntrack -L

Examples:
  kubewalk play --scenario reference lab.play
  printf 'kubectl get nodes\nsleep 60s\nkubectl get pods -A\n' | kubewalk play --scenario reference -
`

// stdin is what "-" reads (a test replaces it).
var stdin io.Reader = os.Stdin

func runPlay(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("play", playUsage, help)
	var cf clusterFlags
	cf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("one SCRIPT is required (a file, or - for stdin)")
	}
	var script []byte
	if pos[0] == "-" {
		script, err = io.ReadAll(stdin)
	} else {
		script, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return usagef("reading the script: %v", err)
	}
	if _, err := play.Parse(bytes.NewReader(script)); err != nil {
		return usagef("%s: %v", pos[0], err)
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	r := play.New(c)
	r.Register(play.Command{Name: "trace", Usage: "trace --from SOURCE --to DESTINATION [--proto P] [--level L]", Run: playTrace})
	err = r.Run(bytes.NewReader(script), out)
	var ee *play.ExitError
	if errors.As(err, &ee) {
		return &exitStatus{code: ee.Code}
	}
	return err
}

// playTrace is a script's `trace`: kubewalk trace's walk flags on the
// script's cluster, printed as text (--level, summary by default).
func playTrace(r *play.Runner, args []string, _ string, out io.Writer) error {
	var f traceFlags
	var help bytes.Buffer
	fs := newFlagSet("trace", traceUsage, &help)
	f.walkFlags(fs)
	fs.StringVar(&f.level, "level", "summary", "text detail: minimal, summary or detailed")
	pos, err := parse(fs, args[1:])
	if err == nil {
		err = noPositionals(pos, "give source and destination with --from and --to")
	}
	if err == nil {
		err = f.checkWalk(fs)
	}
	if err == nil && (f.from == "" || f.to == "") {
		err = usagef("--from and --to are required")
	}
	lvl, lerr := trace.ParseLevel(f.level)
	if err == nil && lerr != nil {
		err = usagef("unknown --level %q (want minimal, summary or detailed)", f.level)
	}
	if err != nil {
		return fmt.Errorf("trace: %s", oneLine(err.Error()))
	}
	tr := &trace.Trace{}
	if _, err := f.walk(r.Cluster, tr); err != nil {
		return fmt.Errorf("trace: %s", oneLine(err.Error()))
	}
	return tr.WriteText(out, lvl)
}
