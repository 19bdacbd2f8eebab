package attempt

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// The output pump. One reader goroutine per stream (the pty master, or the
// stdout and stderr pipes) reads the child's bytes and, in this order, writes
// them to the terminal side, writes them to the log, and hands a copy to the
// scanner queue. The queue is bounded; when the scanner falls behind, the
// reader drops what does not fit (and counts it) rather than wait, so a slow
// scanner can never make the child block in write(). The scanner goroutine
// feeds each stream's lines.Splitter and calls Spec.Scan; it is the
// only goroutine that ever calls Scan.
//
// The bytes of a line past the splitter's length bound are never scanned, so
// they are not queued either (see runTracker): a megabyte line without a
// newline takes one chunk of the queue, not sixteen, and cannot push the
// start of the line, or the lines before it, out of the queue.
//
// A drop leaves a gap in the scanned stream. The scanner keeps line numbers
// in step with the log by feeding the splitter the newlines that were
// dropped, with delivery switched off, and it withholds the first line after
// a gap when that line began inside the dropped bytes: a line is either
// delivered whole or not at all.

const (
	readBufSize = 64 << 10 // one read from the pty or a pipe
	chunkSize   = 64 << 10 // the largest chunk in the scanner queue
	// queueChunks bounds the chunks queued plus those the scanner holds:
	// with chunkSize, 4 MiB of buffers at most, reused, never garbage.
	queueChunks = 64
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
	free    [][]byte // buffers for reuse
	held    int      // chunk buffers taken by the scanner and not released
	closed  bool
	gaps    [3]gap // per stream: bytes dropped since its last queued chunk
	runs    [3]runTracker
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
// output (where a failure is printed), and push never waits for it. When
// the scanner itself holds every buffer (nothing is queued to drop), p is
// dropped. The buffers of queued and held chunks together never exceed
// queueChunks, so a flood costs at most 4 MiB and makes no garbage.
func (q *scanQueue) push(stream int, p []byte) {
	q.mu.Lock()
	head, tail := q.runs[stream].elide(p)
	if len(tail) == 0 {
		q.pushLocked(stream, head)
		return
	}
	if len(head) > 0 {
		q.pushLocked(stream, head)
		q.mu.Lock()
	}
	q.pushLocked(stream, tail)
}

// pushLocked is push after the elision; it is called holding q.mu and
// returns having released it.
func (q *scanQueue) pushLocked(stream int, p []byte) {
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
	if len(q.items)+q.held >= queueChunks {
		if len(q.items) == 0 {
			q.gaps[stream].add(p)
			q.dropped += int64(len(p))
			first = !q.warned
			q.warned = true
			q.mu.Unlock()
			if first && q.onDrop != nil {
				q.onDrop()
			}
			return
		}
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

// runTracker follows, for one stream, the run of bytes since the last line
// break ('\n' or '\r', where lines.Splitter ends a line or a frame). While the
// run holds no escape sequence, every byte of it is line text to the
// splitter, and once it is longer than lines.DefaultMax the splitter has
// marked the line truncated and ignores every byte up to the next break:
// elide leaves those bytes out of the queue. What the scanner sees is the
// same either way (the line is delivered cut at the bound, Truncated, with
// the same number), and no newline is ever left out, so line numbers stay
// in step with the log.
type runTracker struct {
	n     int  // bytes since the last break
	dirty bool // an escape byte in the run: its text length is unknown
}

// keep is how many bytes of a clean run are queued: one more than the
// splitter keeps, so that it marks the line truncated.
const keep = lines.DefaultMax + 1

// elide returns what of p is queued: head, then tail. tail is nil unless
// bytes were left out between them. head and tail are parts of p.
func (r *runTracker) elide(p []byte) (head, tail []byte) {
	head = p
	// The common case: the run cannot pass the bound within p.
	if r.dirty || r.n+len(p) <= keep {
		r.advance(p)
		return head, nil
	}
	// The first break in p ends the run.
	end := len(p)
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		end = i
	}
	if i := bytes.IndexByte(p[:end], '\r'); i >= 0 {
		end = i
	}
	if esc := bytes.IndexByte(p[:end], 0x1b); esc >= 0 && r.n+esc < keep {
		// An escape sequence before the bound: its bytes are not text,
		// and the run is left whole.
		r.advance(p)
		return head, nil
	}
	cut := max(0, keep-r.n) // bytes of the run still queued
	if cut >= end {
		r.advance(p)
		return head, nil
	}
	head, tail = p[:cut], p[end:]
	if len(tail) == 0 {
		tail = nil
		r.n += end
	} else {
		r.n = 0
		r.dirty = false
		r.advance(tail)
	}
	return head, tail
}

// advance follows the run through p, all of which is queued.
func (r *runTracker) advance(p []byte) {
	i := len(p) - 1
	for ; i >= 0; i-- {
		if c := p[i]; c == '\n' || c == '\r' {
			break
		}
	}
	if i < 0 {
		r.n += len(p)
		r.dirty = r.dirty || bytes.IndexByte(p, 0x1b) >= 0
		return
	}
	rest := p[i+1:]
	r.n = len(rest)
	r.dirty = bytes.IndexByte(rest, 0x1b) >= 0
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
	if cap(h.b) == chunkSize && len(q.free) < queueChunks {
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

// popAll takes every queued chunk, waiting for one; ok is false once the
// queue is closed and empty. buf is reused for the result.
func (q *scanQueue) popAll(buf []chunk) ([]chunk, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return buf[:0], false
	}
	buf = append(buf[:0], q.items...)
	for i := range q.items {
		if cap(q.items[i].b) == chunkSize {
			q.held++
		}
	}
	clear(q.items)
	q.items = q.items[:0]
	return buf, true
}

// release returns a chunk's buffer, taken by popAll, for reuse.
func (q *scanQueue) release(b []byte) {
	if cap(b) != chunkSize {
		return
	}
	q.mu.Lock()
	q.held--
	if len(q.free) < queueChunks {
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
	count    *int64
	other    *scanStream // the other pipe's stream
}

func newScanStream(stream int, scan func(int, lines.Line), count *int64) *scanStream {
	s := &scanStream{stream: stream, scan: scan, count: count}
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
	*s.count++
	// Each splitter numbers its own stream's lines; the scanner's line
	// numbers count both pipes' lines in the order they reached it, as
	// output.log holds them. (Under a pty the other stream stays empty.)
	if s.other != nil {
		l.Num += s.other.split.LineNum() - 1
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
	if g.newlines == 0 && s.split.Truncated() {
		// The gap lies inside a line already cut at the length bound: it
		// holds only bytes the line drops anyway.
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

// scanLinger is how long the scanner lets output pile up after each batch:
// under a flood of output it then wakes a few hundred times a second instead
// of once per read (each wake-up costs the runtime more than scanning the
// read), the queue (4 MiB) holds far more than that much output, and a line
// is scanned at most this late.
const scanLinger = 10 * time.Millisecond

// runScanner drains q into the streams until q is closed and empty, then
// delivers each stream's partial last line. It returns the number of lines
// delivered.
func runScanner(q *scanQueue, scan func(int, lines.Line)) int64 {
	var n int64
	streams := [3]*scanStream{nil, newScanStream(1, scan, &n), newScanStream(2, scan, &n)}
	streams[1].other, streams[2].other = streams[2], streams[1]
	var batch []chunk
	for {
		var ok bool
		batch, ok = q.popAll(batch)
		if !ok {
			break
		}
		size := 0
		for i := range batch {
			c := &batch[i]
			s := streams[c.stream]
			s.skip(c.gap)
			if len(c.b) > 0 {
				_, _ = s.split.Write(c.b)
				size += len(c.b)
			}
			q.release(c.b)
			*c = chunk{}
		}
		if size > 0 {
			time.Sleep(scanLinger)
		}
	}
	for _, s := range streams[1:] {
		s.split.Flush()
	}
	return n
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
// other side is closed), or the drain deadline.
//
// It reads the non-blocking descriptor itself (one read per wake-up, into a
// 64 KiB buffer) and, when there is nothing to read, waits in the runtime's
// poller, which the drain deadline (the file's read deadline) also wakes.
type reader struct {
	stream   int
	src      *os.File
	out      io.Writer // terminal side; nil to discard
	log      io.Writer // may be nil
	q        *scanQueue
	logger   *zap.Logger
	deadline drainDeadline

	// mu is held from each read of the stream until what it read has been
	// passed on; takeFirst holds it too. It is never held while waiting
	// for output.
	mu sync.Mutex
	// outFailed and logFailed (under mu): a write to out or log failed, and
	// the stream no longer goes there. Zero at the start: takeFirst may pass
	// output on before run has begun.
	outFailed, logFailed bool
	// raw: src is non-blocking, and read uses readNonblock (run's goroutine
	// only).
	raw bool
	// first, for stderr under pipes, is the stdout reader: before passing on
	// what it read, stderr's reader passes on what stdout's pipe holds at
	// that moment (see takeFirst).
	first *reader
	// firstBuf is takeFirst's buffer, used under first.mu.
	firstBuf []byte
}

// takeFirst passes on, as o's output, what o's pipe holds now, and what o's
// reader has read and not passed on yet (by waiting for o.mu). The order in
// which two pipes were written is lost in the kernel, and two readers woken
// together run in any order; stderr's reader calls this before passing on
// its own output, so that stdout's output written before it goes first. The
// progress and phase lines a job prints come before the traceback it dies
// with on stderr, and the classifier must see them in that order to tell the
// phase of the failure (and output.log must show them so). It reads o's pipe
// itself rather than wait for o's reader to be scheduled, so no clock and no
// load on the machine can reorder the two; it reads only what the pipe holds
// on entry (FIONREAD), so a flood on stdout cannot hold stderr up.
func (r *reader) takeFirst(o *reader) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rc, err := o.src.SyscallConn()
	if err != nil {
		return
	}
	// Control keeps the descriptor open (o's reader may have ended and the
	// attempt closed the file) and, unlike Read, does not wait for o's
	// reader, which may be parked in the poller.
	_ = rc.Control(func(fd uintptr) {
		left, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
		if err != nil {
			return
		}
		if r.firstBuf == nil && left > 0 {
			r.firstBuf = make([]byte, readBufSize)
		}
		for left > 0 {
			// At most what the pipe held: a read of a pipe with data in
			// it returns at once, blocking descriptor or not.
			n, err := unix.Read(int(fd), r.firstBuf[:min(left, len(r.firstBuf))])
			if err == unix.EINTR {
				continue
			}
			if n <= 0 {
				return
			}
			o.pass(r.firstBuf[:n])
			left -= n
		}
	})
}

// drainDeadline is the time after which a reader stops waiting for more
// output, set by the attempt once the job's process tree is gone (see
// reader.setDeadline).
type drainDeadline struct {
	ns atomic.Int64 // unix nanoseconds; 0: none
}

// Load returns the deadline, 0 when none is set.
func (d *drainDeadline) Load() int64 { return d.ns.Load() }

// setDeadline sets the drain deadline (unix nanoseconds). A reader waiting
// for output waits in the runtime's poller, and the file's read deadline
// wakes it there; it may be called before the reader starts.
func (r *reader) setDeadline(ns int64) {
	r.deadline.ns.Store(ns)
	_ = r.src.SetReadDeadline(time.Unix(0, ns))
}

func (r *reader) run() {
	buf := make([]byte, readBufSize)
	rc, err := r.src.SyscallConn()
	if err != nil {
		r.logger.Error("cannot read the job's output", zap.Int("stream", r.stream), zap.Error(err))
		return
	}
	// Raw reads only where the descriptor cannot block (see readNonblock):
	// an *os.File goes blocking for good once anything calls its Fd.
	r.raw = nonblocking(rc)
	r.readAll(rc, buf)
}

// readAll reads rc until the end of the stream or the drain deadline,
// passing on what it reads.
func (r *reader) readAll(rc syscall.RawConn, buf []byte) {
	for {
		n, err := r.read(rc, buf)
		if n > 0 {
			// read returned holding r.mu.
			if r.first != nil {
				r.takeFirst(r.first)
			}
			r.pass(buf[:n])
			r.mu.Unlock()
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && r.raw {
				r.finalReads(rc, buf)
			}
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

// maxFinalReads bounds finalReads: output that keeps coming after the drain
// deadline is from a process outside the job's tree, which is not waited for.
const maxFinalReads = 16

// finalReads reads what the stream holds once the drain deadline has
// passed. At the deadline the runtime's poller gives up without reading
// again, and the last output of a job may not have woken it yet: a pty
// moves what the job wrote to the reading side in kernel work that can lag
// on a busy machine, and a read (not a poll) pushes it through. Only for a
// non-blocking descriptor: the reads never wait for more.
func (r *reader) finalReads(rc syscall.RawConn, buf []byte) {
	_ = rc.Control(func(fd uintptr) {
		for i := 0; i < maxFinalReads; {
			r.mu.Lock()
			n, err := unix.Read(int(fd), buf)
			if n > 0 {
				if r.first != nil {
					r.takeFirst(r.first)
				}
				r.pass(buf[:n])
				r.mu.Unlock()
				i++
				continue
			}
			r.mu.Unlock()
			if err != unix.EINTR {
				return
			}
		}
	})
}

// pass passes p on, as this reader's stream: to the terminal side, to the
// log, and to the scanner queue. The caller holds r.mu.
func (r *reader) pass(p []byte) {
	if r.out != nil && !r.outFailed {
		if _, werr := r.out.Write(p); werr != nil {
			r.outFailed = true
			r.logger.Warn("writing the job's output to the terminal failed; it still goes to the log",
				zap.Int("stream", r.stream), zap.Error(werr))
		}
	}
	if r.log != nil && !r.logFailed {
		if _, werr := r.log.Write(p); werr != nil {
			r.logFailed = true
			r.logger.Error("writing the job's output to output.log failed; the log is incomplete",
				zap.Error(werr))
		}
	}
	if r.q != nil {
		r.q.push(r.stream, p)
	}
}

// read reads once. With nothing to read it waits in the runtime's poller
// (the goroutine parks; no thread is held in a system call), until output
// comes, the stream ends, or the drain deadline passes (the file's read
// deadline, see setDeadline). Waiting in poll(2) on a thread of its own
// instead cost the pty relay about a fifth of its throughput in scheduler
// hand-offs (docs/performance.md, "Passthrough").
//
// Each read happens under r.mu. When read returns n > 0 it still holds r.mu,
// and the caller unlocks it once the bytes are passed on; otherwise r.mu is
// not held.
func (r *reader) read(rc syscall.RawConn, buf []byte) (int, error) {
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			r.mu.Lock()
			if r.raw {
				n, rerr = readNonblock(fd, buf)
			} else {
				n, rerr = unix.Read(int(fd), buf)
			}
			if n > 0 {
				return true // holding r.mu
			}
			r.mu.Unlock()
			switch rerr {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				if d := r.deadline.Load(); d != 0 && time.Now().UnixNano() >= d {
					n, rerr = 0, os.ErrDeadlineExceeded
					return true
				}
				return false // wait in the poller
			}
			n = 0
			if rerr == nil {
				rerr = io.EOF
			}
			return true
		}
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// readNonblock reads the non-blocking descriptor fd once, with a raw system
// call: one that does not tell the Go scheduler it is in the kernel. A read
// of a non-blocking descriptor does not wait for output (a pty's at most waits
// for the kernel's pending pty work), so the thread keeps its processor and
// the scheduler has nothing to hand off. Under a flood, where a reader makes
// tens of thousands of reads a second, this made the pty relay about 6%
// faster (bench/relayfloor.sh; docs/performance.md). It must never be used on
// a descriptor that can block: a thread blocked in a raw system call holds
// up the garbage collector, and with it all of gpuguard, until the call
// returns. run checks with nonblocking.
func readNonblock(fd uintptr, buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// nonblocking reports whether rc's descriptor is in non-blocking mode.
func nonblocking(rc syscall.RawConn) bool {
	var flags int
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		return false
	}
	return flags&unix.O_NONBLOCK != 0
}

// endOfStream reports whether err is a normal end of the child's output: end
// of file, EIO (Linux's end of a pty), or the drain deadline / a close.
func endOfStream(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, os.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded)
}
