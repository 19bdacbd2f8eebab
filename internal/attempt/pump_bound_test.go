package attempt

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/lines"
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

// readerOut is a writer the test can read while a reader writes to it.
type readerOut struct {
	mu  sync.Mutex
	buf bytes.Buffer
	got chan struct{} // receives after each write
}

func (b *readerOut) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	select {
	case b.got <- struct{}{}:
	default:
	}
	return len(p), nil
}

// A reader whose stream stays open (a process outside the job holds it)
// waits without a timeout until the drain deadline is set, then stops at
// that deadline. setDeadline must wake it: it waits in the runtime's poller.
func TestReaderStopsAtDrainDeadline(t *testing.T) {
	for _, setFirst := range []bool{false, true} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		out := &readerOut{got: make(chan struct{}, 1)}
		r := &reader{stream: 1, src: pr, out: out, logger: zap.NewNop()}
		if setFirst { // drain came before the reader started
			r.setDeadline(time.Now().UnixNano())
		}
		done := make(chan struct{})
		go func() { defer close(done); r.run() }()
		if !setFirst {
			if _, err := pw.Write([]byte("hello\n")); err != nil {
				t.Fatal(err)
			}
			<-out.got // the reader is back to waiting
			r.setDeadline(time.Now().Add(50 * time.Millisecond).UnixNano())
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("setFirst=%v: the reader did not stop at the drain deadline (the write side is still open)", setFirst)
		}
		if got := out.buf.String(); !setFirst && got != "hello\n" {
			t.Errorf("the reader passed on %q, want %q", got, "hello\n")
		}
		pw.Close()
		pr.Close()
	}
}

// A reader uses raw reads (readNonblock) only on a non-blocking descriptor.
// On one that something switched to blocking mode (f.Fd() does that), a raw
// read would wait in the kernel unseen by the scheduler and hold up every
// garbage collection until output came: the reader must fall back to an
// ordinary read, during which a collection completes. The pipe's only writer
// is a child process that marks a file, writes and exits, 10 s on: if the
// collection waited for that output, the mark is there when it completes
// (and the test still ends, since the child's exit ends the pipe).
func TestReaderReadsABlockingDescriptorWithoutHoldingUpGC(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if rc, err := pr.SyscallConn(); err != nil || !nonblocking(rc) {
		t.Fatalf("os.Pipe's read end should start non-blocking (err %v)", err)
	}
	_ = pr.Fd() // switches the descriptor to blocking mode
	mark := filepath.Join(t.TempDir(), "wrote")
	late := exec.Command("sh", "-c", `sleep 10; : >"$0"; echo late`, mark)
	late.Stdout = pw
	late.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // sleep too holds the pipe
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	stopLate := func() { _ = syscall.Kill(-late.Process.Pid, syscall.SIGKILL); _ = late.Wait() }
	defer stopLate()

	r := &reader{stream: 1, src: pr, out: &readerOut{got: make(chan struct{}, 1)}, logger: zap.NewNop()}
	done := make(chan struct{})
	go func() { defer close(done); r.run() }()

	// Ready signal: a thread of this process sleeps in the pipe's read.
	blocked := false
	for deadline := time.Now().Add(5 * time.Second); !blocked && time.Now().Before(deadline); {
		blocked = threadWaitsIn(t, "pipe_read")
		if !blocked {
			time.Sleep(time.Millisecond)
		}
	}
	if !blocked {
		t.Fatal("the reader never waited in the pipe's read")
	}
	runtime.GC()
	if _, err := os.Stat(mark); err == nil {
		t.Error("a garbage collection waited until the job wrote: the reader held it up in a raw read of a blocking descriptor")
	}
	stopLate() // the end of the pipe: the reader stops
	<-done
	if r.raw {
		t.Error("the reader chose raw reads on a blocking descriptor")
	}
}

// threadWaitsIn reports whether a thread of this process is asleep in a
// kernel function whose name contains fn (/proc/self/task/*/wchan).
func threadWaitsIn(t *testing.T, fn string) bool {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		w, err := os.ReadFile("/proc/self/task/" + task.Name() + "/wchan")
		if err == nil && strings.Contains(string(w), fn) {
			return true
		}
	}
	return false
}
