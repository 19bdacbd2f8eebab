package attempt

import (
	"io"
	"sync"
	"time"
)

// termQueue stands between gpuguard and one of its own output files (the
// terminal, a pipe to `tee` or to a container's log): what is written to it
// is queued, and a goroutine of its own writes it out, so that a destination
// that takes nothing (a terminal frozen with ^S, a reader that stopped) never
// blocks gpuguard. The job's output still goes to output.log in full, its
// signals are still forwarded, and the run still ends and is recorded.
//
// The queue is bounded (termQueueMax). While the destination makes progress,
// a write that does not fit waits for room, so a slow reader slows the job
// as it would without gpuguard and nothing is lost. Once the destination has
// taken nothing for stuckAfter with bytes pending, it is stuck: what does not
// fit is dropped and counted, at once, until it takes bytes again.
type termQueue struct {
	w io.Writer

	mu       sync.Mutex
	chunks   [][]byte      // pending bytes, in chunks of up to termChunk
	size     int           // bytes in chunks
	free     [][]byte      // chunk buffers for reuse: a flood makes no garbage
	writing  bool          // the writer goroutine runs
	progress chan struct{} // closed, and replaced, when bytes are written and waiters wait
	gen      uint64        // counts the writes that took bytes
	waiters  int           // goroutines in waitLocked
	stuck    bool
	dropped  int64 // bytes dropped in all
	err      error // the destination's write error: nothing more goes there
}

const (
	// termQueueMax bounds the bytes queued for one destination.
	termQueueMax = 4 << 20
	// termChunk is the size of the queue's buffers, and the most written in
	// one call, so that progress is seen while a slow reader takes a large
	// backlog.
	termChunk = 64 << 10
	// stuckAfter is how long a destination may take nothing, with bytes
	// pending, before it is taken to be stuck.
	stuckAfter = 2 * time.Second
	// termLinger is how long the writer lets output pile up after a
	// write that emptied the queue. Under a flood it then wakes at most a
	// thousand times a second rather than once per read of the job's
	// output, and a line after a pause is written at once.
	termLinger = time.Millisecond
)

func newTermQueue(w io.Writer) *termQueue {
	return &termQueue{w: w, progress: make(chan struct{})}
}

// write queues p, waiting for room while the destination makes progress,
// and dropping p when it is stuck. It returns the destination's write error,
// once there has been one.
func (q *termQueue) write(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.err != nil {
			return 0, q.err
		}
		if q.size+len(p) <= termQueueMax || q.size == 0 {
			break
		}
		if q.stuck {
			q.dropped += int64(len(p))
			return len(p), nil
		}
		q.waitLocked()
	}
	n := len(p)
	for len(p) > 0 {
		var last []byte
		if k := len(q.chunks); k > 0 && len(q.chunks[k-1]) < termChunk {
			last = q.chunks[k-1]
			q.chunks = q.chunks[:k-1]
		} else if k := len(q.free); k > 0 {
			last, q.free = q.free[k-1][:0], q.free[:k-1]
		} else {
			last = make([]byte, 0, termChunk)
		}
		m := min(len(p), termChunk-len(last))
		q.chunks = append(q.chunks, append(last, p[:m]...))
		p = p[m:]
	}
	q.size += n
	if !q.writing {
		q.writing = true
		go q.run()
	}
	return n, nil
}

// waitLocked waits, without q.mu, for the destination to take bytes, or
// marks it stuck after stuckAfter without.
func (q *termQueue) waitLocked() {
	ch, gen := q.progress, q.gen
	q.waiters++
	q.mu.Unlock()
	t := time.NewTimer(stuckAfter)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	q.mu.Lock()
	q.waiters--
	if q.gen == gen && q.writing {
		q.stuck = true
	}
}

// progressedLocked records a write that took bytes, and wakes the waiters.
func (q *termQueue) progressedLocked() {
	q.gen++
	q.stuck = false
	if q.waiters > 0 {
		close(q.progress)
		q.progress = make(chan struct{})
	}
}

// run writes the queue out, chunk by chunk, until it is empty.
func (q *termQueue) run() {
	q.mu.Lock()
	for len(q.chunks) > 0 && q.err == nil {
		c := q.chunks[0]
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.mu.Unlock()
		n, err := q.w.Write(c)
		q.mu.Lock()
		q.size -= len(c)
		if n > 0 {
			q.progressedLocked()
		}
		if err != nil {
			q.err = err
			q.dropped += int64(len(c) - n + q.size)
			q.chunks, q.size = nil, 0
		}
		if len(q.free) < termQueueMax/termChunk {
			q.free = append(q.free, c[:0])
		}
		if len(q.chunks) == 0 && q.err == nil {
			q.mu.Unlock()
			time.Sleep(termLinger)
			q.mu.Lock()
		}
	}
	q.writing = false
	q.progressedLocked()
	q.mu.Unlock()
}

// flush waits until what is queued has been written, or the destination is
// stuck. It reports the bytes not shown: dropped in all, and, when the
// destination is stuck, those still queued.
func (q *termQueue) flush() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	for (q.size > 0 || q.writing) && !q.stuck && q.err == nil {
		q.waitLocked()
	}
	if q.stuck {
		return q.dropped + int64(q.size)
	}
	return q.dropped
}
