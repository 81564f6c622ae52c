package kubeproxy

import "fmt"

// Mode is kube-proxy's proxy mode (KubeProxyConfiguration.mode, --proxy-mode).
//
// kube-proxy v1.33 on Linux accepts "iptables", "ipvs" and "nftables" (GA
// in v1.33); "" selects the best available proxier, which on Linux is
// iptables. IPVS mode is deprecated in v1.35.
type Mode string

// The Linux proxy modes.
const (
	ModeIPTables Mode = "iptables"
	ModeNFTables Mode = "nftables"
	ModeIPVS     Mode = "ipvs"
)

// ModeError is kube-proxy's configuration validation error for a mode it
// does not know (pkg/proxy/apis/config/validation), a field.Invalid on
// KubeProxyConfiguration.ProxyMode.
type ModeError struct {
	// Value is the mode as written.
	Value string
}

// Error implements error in kube-proxy's words.
func (e *ModeError) Error() string {
	return fmt.Sprintf("KubeProxyConfiguration.ProxyMode: Invalid value: %q: must be iptables, ipvs, nftables or blank (blank means the best-available proxy [currently iptables])", e.Value)
}

// ParseMode returns the mode kube-proxy runs for the configured value s:
// "" is iptables on Linux; any value other than the three Linux modes
// (including Windows' "kernelspace") is a *ModeError.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return ModeIPTables, nil
	case ModeIPTables, ModeNFTables, ModeIPVS:
		return Mode(s), nil
	}
	return "", &ModeError{Value: s}
}

// Proxier is one node's kube-proxy in one mode: it keeps the state of its
// last sync (rules written, the previous snapshot for stale UDP conntrack
// cleanup) and writes its mode's datapath state for a new snapshot, as the
// proxier's syncProxyRules does. The Cluster calls Sync on every node's
// proxier after each change of Services or endpoints.
type Proxier interface {
	// Mode is the proxier's mode.
	Mode() Mode
	// Sync programs the node's datapath for snap (a full sync) and clears
	// conntrack entries the change made stale. On error nothing of the new
	// snapshot is half-applied and the previous state stays in force.
	Sync(snap Snapshot) error
}
