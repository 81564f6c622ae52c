//go:build !linux

package netstack

// osYield is sched_yield(2) where there is one; elsewhere nothing.
func osYield() {}
