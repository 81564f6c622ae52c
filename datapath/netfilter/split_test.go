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

// splitQuotedByWord is splitQuoted as it was, one builder per word: the
// reference its one-copy split is checked against.
func splitQuotedByWord(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, quoted, escaped := false, false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if quoted {
			switch {
			case escaped:
				cur.WriteByte(ch)
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				quoted = false
			default:
				cur.WriteByte(ch)
			}
			continue
		}
		switch ch {
		case '"':
			quoted, inWord = true, true
		case ' ', '\t', '\n', '\r':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if quoted {
		return nil, errorf("unterminated quoted string")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// TestSplitQuotedOneCopy: the words of a line with quotes are those the
// word-by-word split gives, substrings of one copy of the line's
// characters that is not the restore input.
func TestSplitQuotedOneCopy(t *testing.T) {
	input := `-A KUBE-SVC-X -m comment --comment "ns/svc:http -> 10.0.0.1:80" -j KUBE-SEP-Y` + "\nCOMMIT\n"
	line := input[:strings.IndexByte(input, '\n')]
	words, err := splitQuoted(line)
	require.NoError(t, err)
	want, err := splitQuotedByWord(line)
	require.NoError(t, err)
	require.Equal(t, want, words)
	lo, hi := uintptrOf(input), uintptrOf(input)+uintptr(len(input))
	first := uintptrOf(words[0])
	for _, w := range words {
		p := uintptrOf(w)
		require.False(t, p >= lo && p < hi, "word %q points into the input", w)
		require.True(t, p >= first && p < first+uintptr(len(line)), "word %q not in the one copy", w)
	}
}

// FuzzSplitQuoted: the one-copy split gives the word-by-word split's
// words and errors, quotes and escapes included.
func FuzzSplitQuoted(f *testing.F) {
	for _, s := range []string{"", `a"b c"d "e\"f" ""`, `-A X -m comment --comment "a b" -j Y`, `"`, `"\`, `x ""  "" y`, "\"\t\"\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := splitQuoted(s)
		want, werr := splitQuotedByWord(s)
		require.Equal(t, werr, err)
		require.Equal(t, want, words)
	})
}
