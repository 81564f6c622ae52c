package main

import (
	"bytes"
	"io"

	"github.com/kubewalk/kubewalk/sim/play"
)

const execUsage = `Run a command in a pod of the scenario's cluster, as kubectl exec does:
cat /etc/resolv.conf, ip addr, ip route, ip link, ip neigh, and busybox's
wget -qO- URL (a real HTTP request over gVisor's TCP/IP stack; nginx
pods answer with nginx's welcome page; a name is resolved through the
pod's resolv.conf by CoreDNS in kube-system, over the simulated network).

Usage:
  kubewalk exec (--scenario NAME | -f FILE...) [-n NAMESPACE] POD [-c CONTAINER] -- COMMAND [ARGS...]

Example:
  kubewalk exec --scenario reference -n net client -- wget -qO- http://10.111.80.136
  kubewalk exec --scenario reference -n net client -- wget -qO- http://web
`

// runExec is `kubewalk exec`: one `kubectl exec` step of a lab script.
func runExec(args []string, out *bytes.Buffer, help io.Writer) error {
	fs := newFlagSet("exec", execUsage, help)
	var cf clusterFlags
	cf.register(fs)
	ns := fs.String("n", "default", "the pod's namespace")
	fs.StringVar(ns, "namespace", "default", "the pod's namespace")
	container := fs.String("c", "", "the container (default: the pod's first)")
	var command []string
	for i, a := range args {
		if a == "--" {
			args, command = args[:i], args[i+1:]
			break
		}
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || len(command) == 0 {
		return usagef("one POD and, after --, a COMMAND are required")
	}
	pos = append(pos, command...)
	c, err := cf.load()
	if err != nil {
		return err
	}
	words := []string{"kubectl", "-n", *ns, "exec", pos[0]}
	if *container != "" {
		words = append(words, "-c", *container)
	}
	words = append(append(words, "--"), pos[1:]...)
	if err := play.New(c).Exec(words, "", out); err != nil {
		return &exitStatus{code: 1}
	}
	return nil
}
