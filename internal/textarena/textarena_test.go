package textarena

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// The arena's strings read as the bytes they were made of, whatever is
// made after them and whatever the caller does with its buffer next;
// texts made one after another in a chunk lie one after another in it,
// a long one gets its own allocation.
func TestArena(t *testing.T) {
	var a Arena
	var texts, want []string
	buf := make([]byte, 0, 64)
	for i := range 3000 { // several chunks
		buf = fmt.Appendf(buf[:0], "default/pod-%d.%x", i, i*i)
		texts = append(texts, a.Text(buf))
		want = append(want, string(buf))
		clear(buf[:cap(buf)]) // the caller's buffer reused
	}
	long := strings.Repeat("x", Chunk/4+1)
	texts, want = append(texts, a.Text([]byte(long)), a.Text(nil), a.Text([]byte{})), append(want, long, "", "")
	assert.Equal(t, want, texts)
	first, second := a.Text([]byte("ab")), a.Text([]byte("cd"))
	assert.Equal(t, "ab", first)
	assert.Equal(t, "cd", second)
	assert.Equal(t, unsafe.Add(unsafe.Pointer(unsafe.StringData(first)), 2), unsafe.Pointer(unsafe.StringData(second)), "in one chunk")
	assert.Equal(t, unsafe.Pointer(unsafe.StringData(second)), unsafe.Pointer(&a.buf[len(a.buf)-2]))
}
