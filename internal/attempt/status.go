package attempt

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Status writes gpuguard's own lines to stderr: few, each prefixed
// "gpuguard: ", each starting on a fresh line. It knows where the job's
// output left the cursor because the job's output reaches the terminal
// through its Stdout and Stderr writers: if the last byte shown on stderr's
// destination (stdout's too, when both are the same file) was not a newline
// (a progress bar, a prompt), a newline is written first. While the terminal
// is in raw mode, lines end in "\r\n".
type Status struct {
	mu      sync.Mutex
	err     io.Writer
	errFile *os.File // stderr, when it is a file (for the raw-mode check)
	out     *trackWriter
	errw    *trackWriter
}

// lastByte is the last byte shown on a destination that moved the cursor:
// NUL bytes, which terminals ignore, do not count, so that a stream ending
// in one does not make the next status line start with a newline of its own.
type lastByte struct {
	b   byte
	set bool
}

func (l *lastByte) note(p []byte) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0 {
			l.b, l.set = p[i], true
			return
		}
	}
}

type trackWriter struct {
	s    *Status
	w    io.Writer
	last *lastByte
}

// NewStatus returns a Status for gpuguard's stdout and stderr (either may be
// nil: discarded).
func NewStatus(stdout, stderr io.Writer) *Status {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	s := &Status{err: stderr}
	s.errFile, _ = stderr.(*os.File)
	errLast := &lastByte{}
	outLast := &lastByte{}
	if SameFile(stdout, stderr) {
		outLast = errLast
	}
	s.out = &trackWriter{s: s, w: stdout, last: outLast}
	s.errw = &trackWriter{s: s, w: stderr, last: errLast}
	return s
}

// SameFile reports whether a and b write to the same open file (the same
// terminal, typically).
func SameFile(a, b io.Writer) bool {
	fa, ok1 := a.(*os.File)
	fb, ok2 := b.(*os.File)
	if !ok1 || !ok2 {
		return a == b
	}
	sa, err1 := fa.Stat()
	sb, err2 := fb.Stat()
	if err1 != nil || err2 != nil {
		return fa == fb
	}
	return os.SameFile(sa, sb) || sameRdev(sa, sb)
}

func sameRdev(a, b os.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Rdev != 0 && sa.Rdev == sb.Rdev
}

// Stdout is the writer the job's stdout (or pty) output goes through.
func (s *Status) Stdout() io.Writer { return s.out }

// Stderr is the writer the job's stderr output goes through.
func (s *Status) Stderr() io.Writer { return s.errw }

func (t *trackWriter) Write(p []byte) (int, error) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	n, err := t.w.Write(p)
	t.last.note(p[:n])
	return n, err
}

// Printf writes one status line. Newlines inside the message are kept on
// one line (written as spaces) so that every line carries the prefix.
func (s *Status) Printf(format string, args ...any) {
	msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")
	nl := "\n"
	if rawOutput(s.errFile) {
		nl = "\r\n"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	if l := s.errw.last; l.set && l.b != '\n' {
		b.WriteString(nl)
	}
	b.WriteString("gpuguard: ")
	b.WriteString(msg)
	b.WriteString(nl)
	_, _ = io.WriteString(s.err, b.String())
	s.errw.last.b, s.errw.last.set = '\n', true
}
