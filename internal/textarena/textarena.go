// Package textarena makes many short strings in shared chunks instead of
// one allocation each. The sim's pod keys and container IDs and the API
// server's UIDs and resourceVersions come from it: 150,000 pods' strings
// are a few hundred objects for the garbage collector instead of
// hundreds of thousands.
package textarena

import "unsafe"

// Arena hands out strings that are views of bytes of a chunk that are
// never written again, so each reads as any other string. A chunk lives
// while any of its strings does. The zero Arena is ready to use; it is
// not safe for concurrent use.
type Arena struct {
	buf []byte
}

// Chunk is the size of one chunk; a text longer than a quarter of it
// gets its own allocation.
const Chunk = 16 << 10

// Text returns a string of b's bytes; b may be reused by the caller
// afterwards.
func (a *Arena) Text(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > Chunk/4 {
		return string(b)
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, Chunk)
	}
	n := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[n], len(b))
}
