package attempt

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/gpuguard/gpuguard/internal/redact"
)

// Status writes gpuguard's own lines to stderr: few, each prefixed
// "gpuguard: ", each starting on a fresh line. It knows where the job's
// output left the cursor because the job's output reaches the terminal
// through its Stdout and Stderr writers: if the last byte shown on stderr's
// destination (stdout's too, when both are the same file) was not a newline
// (a progress bar, a prompt), a newline is written first. While the terminal
// is in raw mode, lines end in "\r\n".
//
// Writes to a file (the terminal, a pipe) go through a termQueue, so that
// one that takes nothing never blocks gpuguard: the job's output is dropped
// from it, counted, and said (Flush), while output.log keeps every byte.
type Status struct {
	mu      sync.Mutex
	err     io.Writer
	errFile *os.File // stderr, when it is a file (for the raw-mode check)
	out     *trackWriter
	errw    *trackWriter
	said    int64 // dropped bytes already said
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
	q    *termQueue // nil: w is written directly (it cannot block: a buffer)
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
	errQ, outQ := queueFor(stderr), queueFor(stdout)
	if SameFile(stdout, stderr) {
		outLast, outQ = errLast, errQ
	}
	s.out = &trackWriter{s: s, w: stdout, q: outQ, last: outLast}
	s.errw = &trackWriter{s: s, w: stderr, q: errQ, last: errLast}
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

// queueFor is the queue for w, nil for a writer that is not a file.
func queueFor(w io.Writer) *termQueue {
	if _, ok := w.(*os.File); ok {
		return newTermQueue(w)
	}
	return nil
}

func (t *trackWriter) Write(p []byte) (int, error) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	var n int
	var err error
	if t.q != nil {
		n, err = t.q.write(p)
	} else {
		n, err = t.w.Write(p)
	}
	t.last.note(p[:n])
	return n, err
}

// Flush is Status.Flush (the attempt flushes the writers it is given).
func (t *trackWriter) Flush() int64 { return t.s.Flush() }

// Flush waits until the output queued for stdout and stderr has been
// written, or found stuck, and returns the bytes of output dropped because
// a destination was stuck, in all. New drops are said in a status line.
func (s *Status) Flush() int64 {
	var dropped int64
	for i, q := range []*termQueue{s.out.q, s.errw.q} {
		if q != nil && (i == 0 || q != s.out.q) {
			dropped += q.flush()
		}
	}
	s.mu.Lock()
	news := dropped - s.said
	s.said = dropped
	s.mu.Unlock()
	if news > 0 {
		s.Printf("%d bytes of the job's output were not shown: the terminal (or the pipe gpuguard writes to) took nothing for %s; output.log has every byte",
			news, stuckAfter)
	}
	return dropped
}

// Printf writes one status line. Newlines inside the message are kept on
// one line (written as spaces) so that every line carries the prefix. It
// returns once the line is written, or its destination found stuck.
func (s *Status) Printf(format string, args ...any) {
	msg := redact.Text(strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")) // no secret on stderr (docs/secrets.md)
	nl := "\n"
	if rawOutput(s.errFile) {
		nl = "\r\n"
	}
	s.mu.Lock()
	var b strings.Builder
	if l := s.errw.last; l.set && l.b != '\n' {
		b.WriteString(nl)
	}
	b.WriteString("gpuguard: ")
	b.WriteString(msg)
	b.WriteString(nl)
	q := s.errw.q
	if q != nil {
		_, _ = q.write([]byte(b.String()))
	} else {
		_, _ = io.WriteString(s.err, b.String())
	}
	s.errw.last.b, s.errw.last.set = '\n', true
	s.mu.Unlock()
	if q != nil {
		q.flush()
	}
}
