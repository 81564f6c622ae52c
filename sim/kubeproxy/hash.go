package kubeproxy

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Chain-name prefixes used by kube-proxy's iptables mode.
const (
	// PrefixService is the per-service-port chain holding the Cluster
	// traffic-policy endpoint choice.
	PrefixService = "KUBE-SVC-"
	// PrefixServiceLocal is the per-service-port chain holding only the
	// node-local endpoints (Local traffic policy).
	PrefixServiceLocal = "KUBE-SVL-"
	// PrefixExternal is the per-service-port chain external destinations
	// (NodePort, externalIPs, LB IPs) jump to.
	PrefixExternal = "KUBE-EXT-"
	// PrefixFirewall is the per-service-port chain enforcing
	// loadBalancerSourceRanges.
	PrefixFirewall = "KUBE-FW-"
	// PrefixEndpoint is the per-endpoint chain that DNATs.
	PrefixEndpoint = "KUBE-SEP-"
)

// ServicePortName renders kube-proxy's name for a service port:
// "namespace/name" followed by ":portName" when the port is named. It appears
// in every rule comment and is the input of the chain-name hash.
func ServicePortName(namespace, name, portName string) string {
	if portName == "" {
		return namespace + "/" + name
	}
	return namespace + "/" + name + ":" + portName
}

// ChainHash is the 16-character hash in per-service chain names:
// the standard-alphabet base32 encoding of
// sha256(servicePortName + lowercase protocol), truncated. iptables chain
// names are limited to 28 characters, hence the truncation.
func ChainHash(servicePortName string, protocol Protocol) string {
	sum := sha256.Sum256([]byte(servicePortName + strings.ToLower(string(normProto(protocol)))))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// ServiceChainName returns prefix (one of PrefixService, PrefixServiceLocal,
// PrefixExternal, PrefixFirewall) followed by ChainHash: KUBE-SVC, KUBE-SVL,
// KUBE-EXT and KUBE-FW chains of one service port share the hash.
func ServiceChainName(prefix, servicePortName string, protocol Protocol) string {
	return prefix + ChainHash(servicePortName, protocol)
}

// EndpointChainName returns the KUBE-SEP chain of one endpoint of a service
// port: the hash covers servicePortName + lowercase protocol + "ip:port", so
// the same pod behind two service ports gets two chains.
func EndpointChainName(servicePortName string, protocol Protocol, endpoint string) string {
	sum := sha256.Sum256([]byte(servicePortName + strings.ToLower(string(normProto(protocol))) + endpoint))
	return PrefixEndpoint + base32.StdEncoding.EncodeToString(sum[:])[:16]
}
