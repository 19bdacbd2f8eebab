package attempt

import (
	"bytes"
	"testing"
)

// Finding 10 of issue 23: a job stream ending in a NUL byte, which moves no
// cursor, must not make gpuguard's next line start with a newline of its
// own; a stream ending mid-line still does.
func TestStatusLineAfterNUL(t *testing.T) {
	for _, c := range []struct{ job, want string }{
		{"\x00", "\x00gpuguard: done\n"},
		{"line\n\x00", "line\n\x00gpuguard: done\n"},
		{"50%\x00", "50%\x00\ngpuguard: done\n"},
		{"50%", "50%\ngpuguard: done\n"},
	} {
		var term bytes.Buffer
		s := NewStatus(&term, &term)
		s.Stdout().Write([]byte(c.job))
		s.Printf("done")
		if got := term.String(); got != c.want {
			t.Errorf("job output %q: terminal shows %q, want %q", c.job, got, c.want)
		}
	}
}
