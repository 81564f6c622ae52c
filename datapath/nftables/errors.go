package nftables

import (
	"strconv"
	"strings"
)

// Error is an `nft -f` error as nft prints it: the file, line and column
// range of the offending token, the message, then the input line with
// carets under the token:
//
//	/dev/stdin:1:20-23: Error: syntax error, unexpected string
//	add rule ip k c ip dadr 1.2.3.4 drop
//	                   ^^^^
//
// A transaction with an error changes nothing.
type Error struct {
	// File is the input's name ("/dev/stdin" for standard input).
	File string
	// Line is 1-based; Col and EndCol are the 1-based first and last
	// columns of the token.
	Line, Col, EndCol int
	// Msg is nft's message, e.g. "No such file or directory" or
	// "syntax error, unexpected string".
	Msg string
	// Text is the input line.
	Text string
}

// Error implements error with nft's three-line layout (no trailing
// newline).
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(e.Line))
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(e.Col))
	b.WriteByte('-')
	b.WriteString(strconv.Itoa(e.EndCol))
	b.WriteString(": Error: ")
	b.WriteString(e.Msg)
	b.WriteByte('\n')
	b.WriteString(e.Text)
	b.WriteByte('\n')
	b.WriteString(strings.Repeat(" ", max(e.Col-1, 0)))
	b.WriteString(strings.Repeat("^", max(e.EndCol-e.Col+1, 1)))
	return b.String()
}

// Errors is every error of one `nft -f` run, in input order (nft reports
// each failing command, then applies none).
type Errors []*Error

// Error joins the errors, one block per error, as nft prints them.
func (es Errors) Error() string {
	var parts []string
	for _, e := range es {
		parts = append(parts, e.Error())
	}
	return strings.Join(parts, "\n")
}

// nft's messages for kernel errors (strerror of the netlink errno).
const (
	msgNoEnt    = "No such file or directory"
	msgExist    = "File exists"
	msgBusy     = "Device or resource busy"
	msgNotSupp  = "Operation not supported"
	msgInval    = "Invalid argument"
	msgCouldNot = "Could not process rule: "
)
