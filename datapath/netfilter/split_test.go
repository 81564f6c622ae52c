package netfilter

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func uintptrOf(s string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(s))) }

// TestSplitLine: the words of restore lines, with and without double
// quotes, as iptables-restore's add_param_to_argv splits them; a line
// without quotes takes splitPlain, and gives what the quote-aware split
// gives.
func TestSplitLine(t *testing.T) {
	for _, tc := range []struct {
		line  string
		words []string
		err   string
	}{
		{line: "", words: nil},
		{line: " \t\r\n", words: nil},
		{line: "-A KUBE-SERVICES -j KUBE-NODEPORTS", words: []string{"-A", "KUBE-SERVICES", "-j", "KUBE-NODEPORTS"}},
		{line: "  -A\tX  -j\r\nY  ", words: []string{"-A", "X", "-j", "Y"}},
		{line: `-A X -m comment --comment \ns/svc -j Y`, words: []string{"-A", "X", "-m", "comment", "--comment", `\ns/svc`, "-j", "Y"}},
		{line: `-A X -m comment --comment "default/web:http cluster IP" -j Y`, words: []string{"-A", "X", "-m", "comment", "--comment", "default/web:http cluster IP", "-j", "Y"}},
		{line: `a"b c"d "e\"f" ""`, words: []string{"ab cd", `e"f`, ""}},
		{line: `-A X --comment "open`, err: "unterminated quoted string"},
	} {
		words, err := splitLine(tc.line)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, "%q", tc.line)
			continue
		}
		require.NoError(t, err, "%q", tc.line)
		require.Equal(t, tc.words, words, "%q", tc.line)
		if !strings.Contains(tc.line, `"`) {
			quoted, err := splitQuoted(tc.line)
			require.NoError(t, err)
			require.Equal(t, quoted, splitPlain(tc.line), "%q", tc.line)
		}
	}
}

// TestSplitPlainCopiesTheLine: the words of a line without quotes do not
// point into the restore input (a rule keeping one would keep all of it).
func TestSplitPlainCopiesTheLine(t *testing.T) {
	input := "-A KUBE-SVC-X -j KUBE-SEP-Y\nCOMMIT\n"
	line := input[:strings.IndexByte(input, '\n')]
	words := splitPlain(line)
	require.Equal(t, []string{"-A", "KUBE-SVC-X", "-j", "KUBE-SEP-Y"}, words)
	lo, hi := uintptrOf(input), uintptrOf(input)+uintptr(len(input))
	for _, w := range words {
		p := uintptrOf(w)
		require.False(t, p >= lo && p < hi, "word %q points into the input", w)
	}
}

// FuzzSplitLine: a line without double quotes splits the same way
// through splitPlain as through the quote-aware split.
func FuzzSplitLine(f *testing.F) {
	for _, s := range []string{"", "-A X -j Y", " \t-s 10.0.0.0/8\r\n", `a\b c`, `x "y z"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := splitLine(s)
		quoted, qerr := splitQuoted(s)
		require.Equal(t, qerr, err)
		require.Equal(t, quoted, words)
	})
}
