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
	buf      []byte // pending bytes
	spare    []byte
	writing  bool          // the writer goroutine runs
	progress chan struct{} // closed, and replaced, whenever bytes are written
	stuck    bool
	dropped  int64 // bytes dropped in all
	err      error // the destination's write error: nothing more goes there
}

const (
	// termQueueMax bounds the bytes queued for one destination.
	termQueueMax = 4 << 20
	// termChunk is the most written in one call, so that progress is seen
	// while a slow reader takes a large backlog.
	termChunk = 64 << 10
	// stuckAfter is how long a destination may take nothing, with bytes
	// pending, before it is taken to be stuck.
	stuckAfter = 2 * time.Second
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
		if len(q.buf)+len(p) <= termQueueMax || len(q.buf) == 0 {
			break
		}
		if q.stuck {
			q.dropped += int64(len(p))
			return len(p), nil
		}
		q.waitLocked()
	}
	q.buf = append(q.buf, p...)
	if !q.writing {
		q.writing = true
		go q.run()
	}
	return len(p), nil
}

// waitLocked waits, without q.mu, for the destination to take bytes, or
// marks it stuck after stuckAfter without.
func (q *termQueue) waitLocked() {
	ch := q.progress
	q.mu.Unlock()
	t := time.NewTimer(stuckAfter)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	q.mu.Lock()
	if q.progress == ch && q.writing {
		q.stuck = true
	}
}

// run writes the queue out until it is empty.
func (q *termQueue) run() {
	q.mu.Lock()
	for len(q.buf) > 0 && q.err == nil {
		out, orig := q.buf, q.buf
		q.buf = q.spare[:0]
		q.mu.Unlock()
		var err error
		for len(out) > 0 && err == nil {
			n := min(len(out), termChunk)
			n, err = q.w.Write(out[:n])
			out = out[n:]
			q.mu.Lock()
			q.stuck = false
			close(q.progress)
			q.progress = make(chan struct{})
			q.mu.Unlock()
		}
		q.mu.Lock()
		if err != nil {
			q.err = err
			q.dropped += int64(len(out) + len(q.buf))
			q.buf = nil
		}
		q.spare = orig[:0]
	}
	q.writing = false
	close(q.progress)
	q.progress = make(chan struct{})
	q.mu.Unlock()
}

// flush waits until what is queued has been written, or the destination is
// stuck. It reports the bytes not shown: dropped in all, and, when the
// destination is stuck, those still queued.
func (q *termQueue) flush() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	for (len(q.buf) > 0 || q.writing) && !q.stuck && q.err == nil {
		q.waitLocked()
	}
	if q.stuck {
		return q.dropped + int64(len(q.buf))
	}
	return q.dropped
}
