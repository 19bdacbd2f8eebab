package attempt

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// splitLines runs chunks through a lines.Splitter and returns what it
// delivers, flushed at the end, as comparable strings.
func splitLines(chunks [][]byte) []string {
	var out []string
	sp := lines.New(0, func(l lines.Line) {
		out = append(out, fmt.Sprintf("%d cr=%v trunc=%v partial=%v %q", l.Num, l.CR, l.Truncated, l.Partial, l.Text))
	})
	for _, c := range chunks {
		sp.Write(c)
	}
	sp.Flush()
	return out
}

// randomOutput makes a stream of the shapes a job prints around the
// splitter's length bound: runs of text just under, at and over it, frames
// ended by '\r', escape sequences inside long runs, "\r\n".
func randomOutput(r *rand.Rand) []byte {
	var b bytes.Buffer
	for b.Len() < 6*lines.DefaultMax {
		switch r.IntN(7) {
		case 0:
			n := lines.DefaultMax + r.IntN(5) - 2
			b.Write(bytes.Repeat([]byte{'a' + byte(r.IntN(26))}, n))
		case 1:
			b.Write(bytes.Repeat([]byte("z"), r.IntN(3*lines.DefaultMax)))
		case 2:
			b.WriteString("\x1b[31m")
		case 3:
			b.WriteByte('\n')
		case 4:
			b.WriteByte('\r')
		case 5:
			b.WriteString("\r\n")
		case 6:
			fmt.Fprintf(&b, "step %d loss=0.5", r.IntN(1000))
		}
	}
	return b.Bytes()
}

// What the scanner is given after elision splits into exactly the lines
// the whole output splits into, however the output is cut into reads.
func TestElisionKeepsEveryScannedLine(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		out := randomOutput(r)
		var reads, queued [][]byte
		var rt runTracker
		for rest := out; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(readBufSize))
			reads = append(reads, rest[:n])
			head, tail := rt.elide(rest[:n])
			queued = append(queued, head, tail)
			rest = rest[n:]
		}
		if got, want := splitLines(queued), splitLines(reads); !slices.Equal(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("seed %d: line %d\n got %.200s\nwant %.200s", seed, i, got[i], want[i])
				}
			}
			t.Fatalf("seed %d: %d lines after elision, want %d", seed, len(got), len(want))
		}
	}
}

// A line of megabytes without a newline takes one bound's worth of the
// queue, so it cannot push anything out of it.
func TestLongLineTakesOneBoundOfTheQueue(t *testing.T) {
	q := newScanQueue(func() { t.Error("a drop") })
	q.push(1, []byte("before\n"))
	x := bytes.Repeat([]byte("x"), readBufSize)
	for range (10 << 20) / readBufSize {
		q.push(1, x)
	}
	q.push(1, []byte("\nafter\n"))
	queued := 0
	for _, c := range q.items {
		queued += len(c.b)
	}
	if want := len("before\n") + lines.DefaultMax + 1 + len("\nafter\n"); queued != want {
		t.Errorf("%d bytes queued, want %d", queued, want)
	}
	q.close()
	var got []string
	runScanner(q, func(_ int, l lines.Line) {
		got = append(got, fmt.Sprintf("%d %v %d", l.Num, l.Truncated, len(l.Text)))
	})
	want := []string{"1 false 6", fmt.Sprintf("2 true %d", lines.DefaultMax), "3 false 5"}
	if !slices.Equal(got, want) {
		t.Errorf("scanned %q, want %q", got, want)
	}
}
