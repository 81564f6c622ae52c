package sim

import (
	"fmt"

	"github.com/kubewalk/kubewalk/datapath/trace"
)

// Branch is one way a walk can go: the choices taken at each branch point
// (a `-m statistic --mode random` match, in order of evaluation), the
// probability of that path, and its trace.
type Branch struct {
	Choices     []bool
	Probability float64
	Trace       *trace.Trace
}

// MaxBranches bounds Explore so a walk with many branch points cannot run
// away.
const MaxBranches = 4096

// Explore enumerates every path a walk can take through random choices.
// build must construct a fresh cluster (the same one every time: same
// seed, same objects); walk sends the packets to study into tr and runs the
// world. Explore runs build+walk once per path, forcing the choices
// depth-first (true before false), and returns the branches in that order.
// Branch points with probability 1 are not forks. The probabilities sum to
// 1 up to rounding.
func Explore(build func() (*Cluster, error), walk func(c *Cluster, tr *trace.Trace) error) ([]Branch, error) {
	var out []Branch
	var prefix []bool
	for {
		if len(out) == MaxBranches {
			return out, fmt.Errorf("explore: more than %d branches", MaxBranches)
		}
		c, err := build()
		if err != nil {
			return nil, err
		}
		var taken []bool
		var probs []float64
		prob := 1.0
		c.World.Walk().Chooser = func(p float64) bool {
			if p >= 1 {
				return true
			}
			i := len(taken)
			choice := true
			if i < len(prefix) {
				choice = prefix[i]
			}
			taken = append(taken, choice)
			probs = append(probs, p)
			if choice {
				prob *= p
			} else {
				prob *= 1 - p
			}
			return choice
		}
		tr := &trace.Trace{}
		err = walk(c, tr)
		c.World.Walk().Chooser = nil
		if err != nil {
			return nil, err
		}
		out = append(out, Branch{Choices: taken, Probability: prob, Trace: tr})
		// Backtrack: flip the deepest true choice whose false side is
		// possible, drop everything after it.
		next := -1
		for i := len(taken) - 1; i >= 0; i-- {
			if taken[i] && probs[i] < 1 {
				next = i
				break
			}
		}
		if next < 0 {
			return out, nil
		}
		prefix = append(append(prefix[:0], taken[:next]...), false)
	}
}
