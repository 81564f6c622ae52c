package netstack

import "syscall"

// osYield gives the processor's OS thread up (sched_yield(2)), so a
// thread the kernel descheduled (one running a goroutine on another Go
// processor) gets the core.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
