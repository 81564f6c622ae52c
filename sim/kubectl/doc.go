// Package kubectl prints API objects the way kubectl does: `kubectl get`
// tables (the server-side column sets of kubernetes
// pkg/printers/internalversion/printers.go AddHandlers, laid out by
// cli-runtime's table printer), `-o wide|yaml|json|name`, and `kubectl
// describe` for nodes, pods and Services (kubectl pkg/describe/describe.go).
//
// Every time shown (AGE, event ages, "(x2 over 5m)") is measured against the
// lister's virtual clock, never the wall clock, so a view of the same
// simulated history prints the same bytes on every run.
//
// The release modelled is Kubernetes 1.36 (kubectl and the printers of
// kubernetes-1.36.x); column sets noted where older releases differ.
package kubectl
