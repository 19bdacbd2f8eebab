package supervisor

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/lines"
)

// The output pump. One reader goroutine per stream (the pty master, or the
// stdout and stderr pipes) reads the child's bytes and, in this order, writes
// them to the terminal side, writes them to the log, and hands a copy to the
// scanner queue. The queue is bounded; when the scanner falls behind, the
// reader drops what does not fit (and counts it) rather than wait, so a slow
// scanner can never make the child block in write(). The scanner goroutine
// feeds each stream's lines.Splitter and calls AttemptSpec.Scan; it is the
// only goroutine that ever calls Scan.
//
// A drop leaves a gap in the scanned stream. The scanner keeps line numbers
// in step with the log by feeding the splitter the newlines that were
// dropped, with delivery switched off, and it withholds the first line after
// a gap when that line began inside the dropped bytes: a line is either
// delivered whole or not at all.

const (
	readBufSize = 64 << 10 // one read from the pty or a pipe
	chunkSize   = 64 << 10 // the largest chunk in the scanner queue
	queueChunks = 64       // chunks in the queue: with chunkSize, 4 MiB at most
)

// gap describes bytes of one stream dropped before a chunk.
type gap struct {
	bytes    int64
	newlines int
	endsLine bool // the last dropped byte was '\n'
}

func (g *gap) add(p []byte) {
	g.bytes += int64(len(p))
	g.newlines += bytes.Count(p, []byte{'\n'})
	g.endsLine = p[len(p)-1] == '\n'
}

type chunk struct {
	stream int
	b      []byte
	gap    gap // dropped just before b
}

// scanQueue is the bounded queue between the readers and the scanner.
type scanQueue struct {
	mu      sync.Mutex
	cond    sync.Cond
	items   []chunk
	free    [][]byte
	closed  bool
	gaps    [3]gap // per stream: bytes dropped since its last queued chunk
	dropped int64
	onDrop  func() // called (under no lock) at the first drop
	warned  bool
}

func newScanQueue(onDrop func()) *scanQueue {
	q := &scanQueue{onDrop: onDrop}
	q.cond.L = &q.mu
	return q
}

// push queues a copy of p for stream. When the queue is full it drops the
// oldest queued chunk to make room: the scanner always gets the most recent
// output (where a failure is printed), and push never waits for it.
func (q *scanQueue) push(stream int, p []byte) {
	q.mu.Lock()
	// Coalesce into the last queued chunk of the same stream while the
	// scanner has not taken it and no gap separates them.
	if n := len(q.items); n > 0 && q.gaps[stream].bytes == 0 {
		last := &q.items[n-1]
		if last.stream == stream && len(last.b)+len(p) <= chunkSize {
			last.b = append(last.b, p...)
			q.mu.Unlock()
			return
		}
	}
	first := false
	if len(q.items) >= queueChunks {
		first = q.dropOldest()
	}
	var buf []byte
	if n := len(q.free); n > 0 {
		buf, q.free = q.free[n-1][:0], q.free[:n-1]
	} else {
		buf = make([]byte, 0, chunkSize)
	}
	q.items = append(q.items, chunk{stream: stream, b: append(buf, p...), gap: q.gaps[stream]})
	q.gaps[stream] = gap{}
	q.mu.Unlock()
	q.cond.Signal()
	if first && q.onDrop != nil {
		q.onDrop()
	}
}

// dropOldest removes the oldest queued chunk and records its bytes as a gap
// before the next chunk of its stream. It reports whether this is the first
// drop.
func (q *scanQueue) dropOldest() bool {
	h := q.items[0]
	q.items[0] = chunk{}
	q.items = q.items[1:]
	g := h.gap
	if len(h.b) > 0 {
		g.add(h.b)
	}
	q.dropped += int64(len(h.b))
	// The gap goes before the next chunk of the same stream: the bytes
	// dropped now came before that chunk's own gap.
	target := &q.gaps[h.stream]
	for i := range q.items {
		if q.items[i].stream == h.stream {
			target = &q.items[i].gap
			break
		}
	}
	if target.bytes > 0 {
		g.bytes += target.bytes
		g.newlines += target.newlines
		g.endsLine = target.endsLine
	}
	*target = g
	if cap(h.b) == chunkSize && len(q.free) < 4 {
		q.free = append(q.free, h.b)
	}
	first := !q.warned
	q.warned = true
	return first
}

// finish queues the trailing gap of a stream whose last chunks were dropped,
// so that the scanner accounts for its line numbers.
func (q *scanQueue) finish(stream int) {
	q.mu.Lock()
	if q.gaps[stream].bytes == 0 {
		q.mu.Unlock()
		return
	}
	if len(q.items) >= queueChunks {
		q.dropOldest()
	}
	q.items = append(q.items, chunk{stream: stream, gap: q.gaps[stream]})
	q.gaps[stream] = gap{}
	q.mu.Unlock()
	q.cond.Signal()
}

// pop takes the oldest chunk, waiting for one; ok is false once the queue is
// closed and empty.
func (q *scanQueue) pop() (chunk, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return chunk{}, false
	}
	c := q.items[0]
	q.items[0] = chunk{}
	q.items = q.items[1:]
	return c, true
}

// release returns a chunk's buffer for reuse.
func (q *scanQueue) release(b []byte) {
	if cap(b) != chunkSize {
		return
	}
	q.mu.Lock()
	if len(q.free) < 4 {
		q.free = append(q.free, b)
	}
	q.mu.Unlock()
}

func (q *scanQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *scanQueue) droppedBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// scanStream is the scanner's state for one stream.
type scanStream struct {
	stream   int
	split    *lines.Splitter
	scan     func(int, lines.Line)
	mute     bool // feeding the newlines of a gap
	skipNext bool // the next line began inside a gap
}

func newScanStream(stream int, scan func(int, lines.Line)) *scanStream {
	s := &scanStream{stream: stream, scan: scan}
	s.split = lines.New(lines.DefaultMax, s.emit)
	return s
}

func (s *scanStream) emit(l lines.Line) {
	if s.mute {
		return
	}
	if s.skipNext {
		s.skipNext = false
		return
	}
	s.scan(s.stream, l)
}

var newlines = bytes.Repeat([]byte{'\n'}, 4096)

// skip accounts for a gap: its newlines advance the line count unseen, and a
// line cut by the gap is not delivered.
func (s *scanStream) skip(g gap) {
	if g.bytes == 0 {
		return
	}
	s.mute = true
	for n := g.newlines; n > 0; {
		k := min(n, len(newlines))
		_, _ = s.split.Write(newlines[:k])
		n -= k
	}
	s.mute = false
	s.skipNext = !g.endsLine
}

// runScanner drains q into the streams until q is closed and empty, then
// delivers each stream's partial last line.
func runScanner(q *scanQueue, scan func(int, lines.Line)) {
	streams := [3]*scanStream{nil, newScanStream(1, scan), newScanStream(2, scan)}
	for {
		c, ok := q.pop()
		if !ok {
			break
		}
		s := streams[c.stream]
		s.skip(c.gap)
		if len(c.b) > 0 {
			_, _ = s.split.Write(c.b)
		}
		q.release(c.b)
	}
	for _, s := range streams[1:] {
		s.split.Flush()
	}
}

// lockedWriter serialises writes of the two pipe readers into one log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// reader copies one stream of the child until end of file, EIO (a pty whose
// other side is closed), or the read deadline set by the drain.
type reader struct {
	stream int
	src    *os.File
	out    io.Writer // terminal side; nil to discard
	log    io.Writer // may be nil
	q      *scanQueue
	logger *zap.Logger
}

func (r *reader) run() {
	buf := make([]byte, readBufSize)
	outOK, logOK := r.out != nil, r.log != nil
	for {
		n, err := r.src.Read(buf)
		if n > 0 {
			p := buf[:n]
			if outOK {
				if _, werr := r.out.Write(p); werr != nil {
					outOK = false
					r.logger.Warn("writing the job's output to the terminal failed; it still goes to the log",
						zap.Int("stream", r.stream), zap.Error(werr))
				}
			}
			if logOK {
				if _, werr := r.log.Write(p); werr != nil {
					logOK = false
					r.logger.Error("writing the job's output to output.log failed; the log is incomplete",
						zap.Error(werr))
				}
			}
			if r.q != nil {
				r.q.push(r.stream, p)
			}
		}
		if err != nil {
			if !endOfStream(err) {
				r.logger.Warn("reading the job's output failed", zap.Int("stream", r.stream), zap.Error(err))
			}
			break
		}
	}
	if r.q != nil {
		r.q.finish(r.stream)
	}
}

// endOfStream reports whether err is a normal end of the child's output: end
// of file, EIO (Linux's end of a pty), or the drain deadline / a close.
func endOfStream(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, os.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded)
}
