package attempt

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// Under pipes, the scanner numbers lines across both streams in the order
// their bytes came, as output.log holds them; a stream's partial line keeps
// its place until its newline arrives.
func TestScannerNumbersLinesAcrossStreams(t *testing.T) {
	q := newScanQueue(func() {})
	q.push(1, []byte("out 1\nout 2\n"))
	q.push(2, []byte("err 1\nerr "))
	q.push(1, []byte("out 3\n"))
	q.push(2, []byte("2\n"))
	q.push(1, []byte("tail"))
	q.close()
	var got []string
	n := runScanner(q, func(stream int, l lines.Line) {
		got = append(got, fmt.Sprintf("%d:%d:%s", stream, l.Num, l.Text))
	})
	want := []string{"1:1:out 1", "1:2:out 2", "2:3:err 1", "1:4:out 3", "2:5:err 2", "1:6:tail"}
	if fmt.Sprint(got) != fmt.Sprint(want) || n != int64(len(want)) {
		t.Fatalf("lines %q (%d), want %q", got, n, want)
	}
}

// A job that prints a line on stdout and then dies with a message on
// stderr: under pipes the scanner (and output.log) must see them in that
// order, though the two pipes are read apart (the phase of a failure is
// read from the lines before it).
func TestStdoutBeforeStderr(t *testing.T) {
	const runs = 40
	swapped := 0
	for i := 0; i < runs; i++ {
		var got []string
		var log supervisortest.SyncBuffer
		a := start(t, Spec{
			Argv: []string{"sh", "-c", "echo gpuguard: phase=train; echo 'CUDA out of memory' >&2; exit 1"},
			Log:  &log,
			Scan: func(stream int, l lines.Line) { got = append(got, fmt.Sprintf("%d:%s", stream, l.Text)) },
		})
		waitDone(t, a)
		if fmt.Sprint(got) != "[1:gpuguard: phase=train 2:CUDA out of memory]" {
			swapped++
			t.Logf("run %d: scanned %q", i, got)
		}
		if log.String() != "gpuguard: phase=train\nCUDA out of memory\n" {
			t.Logf("run %d: output.log %q", i, log.String())
			swapped++
		}
	}
	if swapped > 0 {
		t.Errorf("%d of %d runs saw stderr's line before stdout's", swapped, runs)
	}
}

// The order of the two streams must not depend on when stdout's reader gets
// to run (on a loaded machine it may not run for many milliseconds): here it
// has not started at all when stderr's reader reads the traceback, and what
// stdout's pipe held still goes first, once. Output written to stdout after
// that is stdout's reader's own.
func TestStderrPassesOnStdoutsPendingOutputFirst(t *testing.T) {
	pipe := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	outR, outW := pipe()
	errR, errW := pipe()
	var log supervisortest.SyncBuffer
	q := newScanQueue(func() {})
	stdout := &reader{stream: 1, src: outR, log: &lockedWriter{w: &log}, q: q, logger: zap.NewNop()}
	stderr := &reader{stream: 2, src: errR, log: &lockedWriter{w: &log}, q: q, logger: zap.NewNop(), first: stdout}
	write := func(f *os.File, s string) {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}

	write(outW, "step 4/6\ngpuguard: phase=val\n")
	write(errW, "RuntimeError: CUDA out of memory\n")
	errW.Close()
	stderr.run() // to the end of its stream, with stdout's reader not started
	want := "step 4/6\ngpuguard: phase=val\nRuntimeError: CUDA out of memory\n"
	if got := log.String(); got != want {
		t.Fatalf("before stdout's reader ran, the log holds %q, want %q", got, want)
	}

	write(outW, "exiting\n")
	outW.Close()
	stdout.run()
	want += "exiting\n"
	if got := log.String(); got != want {
		t.Fatalf("the log holds %q, want %q", got, want)
	}
	q.close() // both readers have ended, as the attempt closes it
	var scanned []string
	runScanner(q, func(stream int, l lines.Line) { scanned = append(scanned, fmt.Sprintf("%d:%s", stream, l.Text)) })
	if w := "[1:step 4/6 1:gpuguard: phase=val 2:RuntimeError: CUDA out of memory 1:exiting]"; fmt.Sprint(scanned) != w {
		t.Errorf("scanned %q, want %s", scanned, w)
	}
}
