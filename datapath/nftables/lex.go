package nftables

import "strings"

// token is one lexical unit of nft input with its position.
type token struct {
	text   string
	quoted bool // a "string"
	nl     bool // end of a command (newline or ';' at top level)
	line   int
	col    int // 1-based first column
	end    int // 1-based last column
}

// lex splits nft input into tokens. Like nft's scanner it treats newlines
// as command separators (a trailing backslash continues the line), '#'
// starts a comment, and { } , ; : @ are punctuation when they begin or end
// a word (so "1.2.3.4:80" stays one word, "drop," is two tokens). A '.'
// standing alone is the concatenation operator. It returns the tokens and
// the input lines for error messages.
func lex(input string) ([]token, []string, *lexError) {
	lines := strings.Split(input, "\n")
	var toks []token
	for li, line := range lines {
		ln := li + 1
		i := 0
		cont := false
		for i < len(line) {
			ch := line[i]
			switch {
			case ch == ' ' || ch == '\t' || ch == '\r':
				i++
				continue
			case ch == '#':
				i = len(line)
				continue
			case ch == '\\' && strings.TrimSpace(line[i+1:]) == "":
				cont = true
				i = len(line)
				continue
			case ch == '"':
				j := strings.IndexByte(line[i+1:], '"')
				if j < 0 {
					return nil, lines, &lexError{line: ln, col: i + 1, end: len(line), msg: "syntax error, unexpected junk"}
				}
				toks = append(toks, token{text: line[i+1 : i+1+j], quoted: true, line: ln, col: i + 1, end: i + 2 + j})
				i += j + 2
				continue
			case strings.IndexByte("{},;:@", ch) >= 0:
				toks = append(toks, token{text: string(ch), line: ln, col: i + 1, end: i + 1})
				i++
				continue
			}
			j := i
			for j < len(line) && strings.IndexByte(" \t\r\"#{}", line[j]) < 0 {
				j++
			}
			w := line[i:j]
			// Trailing punctuation is its own token.
			k := len(w)
			for k > 0 && strings.IndexByte(",;:", w[k-1]) >= 0 {
				k--
			}
			if k == 0 {
				k = len(w)
			}
			toks = append(toks, token{text: w[:k], line: ln, col: i + 1, end: i + k})
			for q := k; q < len(w); q++ {
				toks = append(toks, token{text: string(w[q]), line: ln, col: i + q + 1, end: i + q + 1})
			}
			i = j
		}
		if !cont {
			toks = append(toks, token{nl: true, line: ln, col: len(line) + 1, end: len(line) + 1})
		}
	}
	return toks, lines, nil
}

type lexError struct {
	line, col, end int
	msg            string
}
