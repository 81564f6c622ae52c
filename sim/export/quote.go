package export

import (
	"fmt"
	"regexp"
	"strings"
)

// MaxPrefixLen is the longest prefix Options.Prefix may have. The prefix
// only starts namespace names, which are file names under /run/netns
// (NAME_MAX, 255 bytes, bounds the whole name); interface names never
// carry it, so IFNAMSIZ does not bound it. 63 is a DNS label's limit, the
// shape the prefix has.
const MaxPrefixLen = 63

// nameMax is NAME_MAX: a namespace name is a file under /run/netns.
const nameMax = 255

// ifNameMax is IFNAMSIZ-1: the longest interface name Linux accepts.
const ifNameMax = 15

var (
	prefixRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	// objectRE is a DNS-1123 subdomain, what Kubernetes allows in node
	// and pod names (namespaces are DNS-1123 labels, a subset).
	objectRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	ifNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

// ValidatePrefix checks a namespace name prefix: lower-case letters,
// digits and '-', starting and ending with a letter or a digit (so that
// `ip netns add` cannot read it as an option), at most MaxPrefixLen
// characters.
func ValidatePrefix(p string) error {
	if len(p) > MaxPrefixLen || !prefixRE.MatchString(p) {
		return &Error{Msg: fmt.Sprintf("invalid prefix %q: want lower-case letters, digits and '-', "+
			"starting and ending with a letter or digit, at most %d characters", p, MaxPrefixLen)}
	}
	return nil
}

// ValidateName checks the name of a node, an outside host, or a pod's
// namespace or name as the export writes it into namespace names: a
// DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and
// ending with a letter or digit, at most 253 characters), what the API
// server accepts for these objects.
func ValidateName(what, name string) error {
	if len(name) > 253 || !objectRE.MatchString(name) {
		return &Error{Msg: fmt.Sprintf("%s name %q cannot be exported: want a DNS-1123 subdomain "+
			"(lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)", what, name)}
	}
	return nil
}

// ValidateIfName checks an interface name the way the kernel's
// dev_valid_name does (at most IFNAMSIZ-1 = 15 bytes, not "." or "..",
// no '/', ':' or white space) and, stricter, allows only letters, digits,
// '_', '.' and '-' and no leading '-', so that iproute2 cannot read it as
// an option or a keyword separator.
func ValidateIfName(name string) error { return checkIfName(name) }

func checkIfName(name string) error {
	if len(name) > ifNameMax || name == "." || name == ".." || !ifNameRE.MatchString(name) {
		return &Error{Msg: fmt.Sprintf("interface name %q cannot be exported: want at most %d letters, digits, '_', '.' or '-', not starting with '-'",
			name, ifNameMax)}
	}
	return nil
}

// checkRef validates the names that make up an exported namespace's
// name, and the interface names inside it.
func checkRef(r nsRef) error {
	if err := ValidateName("node", r.key.Node); err != nil {
		return err
	}
	if r.key.Netns != "host" {
		ns, name, _ := strings.Cut(r.key.Netns, "/")
		if err := ValidateName("pod namespace", ns); err != nil {
			return err
		}
		if strings.Contains(ns, ".") {
			return &Error{Msg: fmt.Sprintf("pod namespace name %q cannot be exported: a namespace is a DNS-1123 label (no '.')", ns)}
		}
		if err := ValidateName("pod", name); err != nil {
			return err
		}
	}
	for _, d := range r.ns.Devices() {
		if err := checkIfName(d.Name); err != nil {
			return &Error{Msg: fmt.Sprintf("%s/%s: %s", r.key.Node, r.key.Netns, strings.TrimPrefix(err.Error(), "export: "))}
		}
	}
	return nil
}

// words is several shell words: cmd quotes each and joins them with
// spaces.
type words []string

// quote returns s as one shell word: unchanged when every byte is one no
// POSIX shell treats specially, else in single quotes, where each single
// quote of s closes the quoting, is written escaped with a backslash, and
// reopens it. It is the only way a value enters a script.
func quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func quoteArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case words:
			q := make([]string, len(v))
			for j, w := range v {
				q[j] = quote(w)
			}
			out[i] = strings.Join(q, " ")
		case int, int64, uint8, uint16, uint32, uint64:
			out[i] = v // %d verbs
		default:
			out[i] = quote(fmt.Sprint(v))
		}
	}
	return out
}

// commentSafe replaces what a one-line comment cannot hold.
func commentSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
