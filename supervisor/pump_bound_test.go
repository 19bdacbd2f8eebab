package supervisor

import (
	"bytes"
	"testing"

	"github.com/gpuguard/gpuguard/lines"
)

// The scanner queue's buffers, queued and held by the scanner together,
// stay within queueChunks: output that arrives while the scanner holds all
// of them is dropped (and its lines still counted), and a released buffer
// is reused rather than reallocated.
func TestScanQueueBoundsItsBuffers(t *testing.T) {
	full := bytes.Repeat([]byte("a\n"), chunkSize/2) // one full chunk: 32768 lines
	perChunk := chunkSize / 2
	drops := 0
	q := newScanQueue(func() { drops++ })

	// Queued before the scanner starts, so that it takes all of them at once.
	for range queueChunks {
		q.push(1, full)
	}
	started, proceed, drained := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var lastText string
	var lastNum int
	var count int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := 0
		count = runScanner(q, func(_ int, l lines.Line) {
			seen++
			switch seen {
			case 1:
				close(started)
				<-proceed
			case queueChunks * perChunk:
				close(drained)
			}
			lastText, lastNum = string(l.Text), l.Num
		})
	}()
	<-started
	q.mu.Lock()
	held, queued := q.held, len(q.items)
	q.mu.Unlock()
	if held != queueChunks || queued != 0 {
		t.Fatalf("the scanner holds %d buffers and %d are queued, want %d and 0", held, queued, queueChunks)
	}
	for range 2 {
		q.push(1, full) // nothing queued to drop: dropped themselves
	}
	q.mu.Lock()
	queued = len(q.items)
	q.mu.Unlock()
	if queued != 0 || q.droppedBytes() != int64(2*len(full)) || drops != 1 {
		t.Fatalf("after two pushes with every buffer held: %d queued, %d bytes dropped, %d drop warnings; want 0, %d, 1",
			queued, q.droppedBytes(), drops, 2*len(full))
	}
	close(proceed)
	<-drained
	q.push(1, []byte("end\n"))
	q.close()
	<-done

	if want := int64(queueChunks*perChunk + 1); count != want {
		t.Errorf("%d lines delivered, want %d", count, want)
	}
	if want := (queueChunks+2)*perChunk + 1; lastText != "end" || lastNum != want {
		t.Errorf("last line %q numbered %d, want \"end\" numbered %d (the dropped lines counted)", lastText, lastNum, want)
	}

	// Steady state: a pushed, scanned and released chunk allocates nothing.
	var batch []chunk
	allocs := testing.AllocsPerRun(100, func() {
		q.push(1, full)
		batch, _ = q.popAll(batch)
		for _, c := range batch {
			q.release(c.b)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per chunk in steady state, want 0", allocs)
	}
}
