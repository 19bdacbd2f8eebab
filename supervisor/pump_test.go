package supervisor

import (
	"fmt"
	"testing"

	"github.com/gpuguard/gpuguard/lines"
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
		var log syncBuffer
		a := start(t, AttemptSpec{
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
