//go:build ignore

// failed prints the output of the tests that failed in a `go test -json`
// stream read from stdin, test by test, so that a test which fails once
// and passes when re-run still shows why it failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	type key struct{ pkg, test string }
	out := map[key][]string{}
	var failed []key
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			out[k] = append(out[k], e.Output)
		case "fail":
			failed = append(failed, k)
		}
	}
	for _, k := range failed {
		name := k.test
		if name == "" {
			name = "(package)"
		}
		fmt.Printf("--- %s %s\n", k.pkg, name)
		for _, l := range out[k] {
			fmt.Print(l)
		}
	}
}
