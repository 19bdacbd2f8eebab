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
