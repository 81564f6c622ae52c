// Package play runs lab scripts against a simulated cluster in virtual
// time: one shell-like step per line (kubectl, sleep, trace, node NAME:
// CMD, kubectl exec), each printed as "$ cmd" followed by what a terminal
// would show, stopping at the first failing step as `set -e` would.
//
// A script is deterministic: the same scenario, seed and script give the
// same bytes, because every step acts on the simulation's virtual clock
// and seeded random source.
package play

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Step is one command of a script.
type Step struct {
	// Line is the 1-based line the command starts on.
	Line int
	// Text is the command line as written (without a heredoc body).
	Text string
	// Args are the command's words after shell-like splitting: single
	// and double quotes group, a backslash escapes outside single quotes,
	// `#` at the start of a word ends the line.
	Args []string
	// Stdin is the heredoc body (`<<EOF` ... `EOF`), lines joined with
	// "\n" and ending in one; empty without a heredoc.
	Stdin string
	// Heredoc holds the body's lines and the terminator as typed, for the
	// transcript.
	Heredoc []string
	// MayFail is set by a trailing `|| true`: the step's failure does not
	// stop the script.
	MayFail bool
	// Comment is set for a comment line (Text is the comment).
	Comment bool
}

// SyntaxError is a script that cannot be split into steps.
type SyntaxError struct {
	Line int
	Msg  string
}

// Error implements the error interface.
func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Parse splits a script into steps: blank lines are skipped, a line whose
// first word starts with `#` is a comment step, every other line is a
// command, with a heredoc body when it ends in `<<WORD` (or `<<'WORD'`,
// `<<"WORD"`, `<<-WORD`, whose body lines lose their leading tabs).
func Parse(r io.Reader) ([]Step, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var steps []Step
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			steps = append(steps, Step{Line: n, Text: trimmed, Comment: true})
			continue
		}
		args, err := split(trimmed)
		if err != nil {
			return nil, &SyntaxError{Line: n, Msg: err.Error()}
		}
		st := Step{Line: n, Text: trimmed}
		if k := len(args); k >= 2 && args[k-2] == "||" && args[k-1] == "true" {
			st.MayFail = true
			args = args[:k-2]
		}
		if len(args) > 0 {
			last := args[len(args)-1]
			if word, ok := strings.CutPrefix(last, "<<"); ok {
				args = args[:len(args)-1]
				stripTabs := false
				if w, ok := strings.CutPrefix(word, "-"); ok {
					word, stripTabs = w, true
				}
				if word == "" {
					return nil, &SyntaxError{Line: n, Msg: "heredoc without a terminator word (want <<EOF)"}
				}
				var body []string
				closed := false
				for sc.Scan() {
					n++
					l := strings.TrimRight(sc.Text(), "\r")
					st.Heredoc = append(st.Heredoc, l)
					if stripTabs {
						l = strings.TrimLeft(l, "\t")
					}
					if l == word {
						closed = true
						break
					}
					body = append(body, l)
				}
				if !closed {
					return nil, &SyntaxError{Line: st.Line, Msg: fmt.Sprintf("here-document delimited by end-of-file (wanted %q)", word)}
				}
				if len(body) > 0 {
					st.Stdin = strings.Join(body, "\n") + "\n"
				}
			}
		}
		if len(args) == 0 {
			return nil, &SyntaxError{Line: n, Msg: "no command"}
		}
		st.Args = args
		steps = append(steps, st)
	}
	if err := sc.Err(); err != nil {
		return nil, &SyntaxError{Line: n + 1, Msg: err.Error()}
	}
	return steps, nil
}

// split is the shell's word splitting for one line, without expansions.
// A heredoc operator ("<<EOF", "<< 'EOF'") comes back as one word; quotes
// around its terminator are dropped.
func split(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case ch == '#' && !inWord:
			return joinHeredoc(words), nil
		case ch == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unexpected EOF while looking for matching `''")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case ch == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unexpected EOF while looking for matching `\"'")
			}
			inWord = true
		case ch == '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
			inWord = true
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return joinHeredoc(words), nil
}

// joinHeredoc glues "<<" to its terminator word when they were written
// apart ("<< EOF").
func joinHeredoc(words []string) []string {
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "<<" || words[i] == "<<-" {
			words[i] += words[i+1]
			words = append(words[:i+1], words[i+2:]...)
		}
	}
	return words
}
