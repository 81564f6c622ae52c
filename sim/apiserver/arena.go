package apiserver

import "unsafe"

// textArena makes the short strings every object gets (UIDs,
// resourceVersions) in shared chunks instead of one allocation each: a
// string is a view of bytes of a chunk that are never written again, so
// it reads as any other, and 150,000 pods' UIDs are a few hundred
// objects for the collector instead of 150,000. A chunk lives while any
// of its strings does.
type textArena struct {
	buf []byte
}

// textChunk is the size of one chunk; a text longer than a quarter of it
// gets its own allocation.
const textChunk = 16 << 10

// text returns a string of b's bytes.
func (a *textArena) text(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > textChunk/4 {
		return string(b)
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, textChunk)
	}
	n := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[n], len(b))
}
