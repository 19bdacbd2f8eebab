package lines

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

type got struct {
	text      string
	num       int
	cr, trunc bool
	partial   bool
}

func split(t testing.TB, max int, chunks ...string) []got {
	t.Helper()
	var out []got
	s := New(max, func(l Line) {
		out = append(out, got{string(l.Text), l.Num, l.CR, l.Truncated, l.Partial})
	})
	for _, c := range chunks {
		if n, err := s.Write([]byte(c)); n != len(c) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	s.Flush()
	return out
}

func TestSplitter(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		chunks []string
		want   []got
	}{
		{"plain", 0, []string{"a\nb\n"}, []got{{"a", 1, false, false, false}, {"b", 2, false, false, false}}},
		{"crlf is one break", 0, []string{"a\r\nb\r\n"}, []got{{"a", 1, false, false, false}, {"b", 2, false, false, false}}},
		{"crlf split across writes", 0, []string{"a\r", "\nb\n"}, []got{{"a", 1, false, false, false}, {"b", 2, false, false, false}}},
		{"tqdm frames share a line number", 0, []string{" 10%|#\r 20%|##\r100%|###\ndone\n"}, []got{
			{" 10%|#", 1, true, false, false}, {" 20%|##", 1, true, false, false}, {"100%|###", 1, false, false, false}, {"done", 2, false, false, false}}},
		{"empty frames dropped", 0, []string{"\r\r\rx\n"}, []got{{"x", 1, false, false, false}}},
		{"empty lines kept", 0, []string{"\n\nx\n"}, []got{{"", 1, false, false, false}, {"", 2, false, false, false}, {"x", 3, false, false, false}}},
		{"partial last line", 0, []string{"a\nno newline"}, []got{{"a", 1, false, false, false}, {"no newline", 2, false, false, true}}},
		{"trailing cr is a frame", 0, []string{"50%|##\r"}, []got{{"50%|##", 1, true, false, false}}},
		{"ansi colour stripped", 0, []string{"\x1b[1;31mError\x1b[0m: bad\n"}, []got{{"Error: bad", 1, false, false, false}}},
		{"ansi split across writes", 0, []string{"\x1b[3", "1mred\x1b", "[0m\n"}, []got{{"red", 1, false, false, false}}},
		{"cursor up and erase", 0, []string{"a\x1b[A\x1b[2Kb\n"}, []got{{"ab", 1, false, false, false}}},
		{"osc title", 0, []string{"\x1b]0;title\x07x\n", "\x1b]2;t\x1b\\y\n"}, []got{{"x", 1, false, false, false}, {"y", 2, false, false, false}}},
		{"truncated", 4, []string{"abcdefgh\nij\n"}, []got{{"abcd", 1, false, true, false}, {"ij", 2, false, false, false}}},
		{"exactly the bound", 4, []string{"abcd\nabcde\rabcd\r\n"}, []got{{"abcd", 1, false, false, false}, {"abcd", 2, true, true, false}, {"abcd", 2, false, false, false}}},
		{"truncated partial", 4, []string{"abcdefgh"}, []got{{"abcd", 1, false, true, true}}},
		{"glued traceback", 0, []string{"100%|####| 5/5 [00:01<00:00]Traceback (most recent call last):\n"}, []got{
			{"100%|####| 5/5 [00:01<00:00]Traceback (most recent call last):", 1, false, false, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := split(t, tt.max, tt.chunks...)
			if fmt.Sprint(out) != fmt.Sprint(tt.want) {
				t.Errorf("got  %+v\nwant %+v", out, tt.want)
			}
		})
	}
}

// The same stream cut at every possible point gives the same lines.
func TestSplitterChunkingInvariant(t *testing.T) {
	stream := "epoch 1\r\n\x1b[32m 10%\x1b[0m|#\r 20%|##\rval\x1b]0;t\x07\nlast"
	want := fmt.Sprint(split(t, 0, stream))
	for i := 0; i <= len(stream); i++ {
		if g := fmt.Sprint(split(t, 0, stream[:i], stream[i:])); g != want {
			t.Fatalf("cut at %d: %s, want %s", i, g, want)
		}
	}
}

func TestSplitterHugeLineBounded(t *testing.T) {
	var n, longest int
	s := New(0, func(l Line) {
		n++
		if len(l.Text) > longest {
			longest = len(l.Text)
		}
	})
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for i := 0; i < 10; i++ {
		s.Write(chunk)
	}
	s.Write([]byte("\nend\n"))
	s.Flush()
	if n != 2 || longest != DefaultMax {
		t.Fatalf("lines=%d longest=%d, want 2 and %d", n, longest, DefaultMax)
	}
	if cap(s.buf) > 2*DefaultMax {
		t.Fatalf("buffer grew to %d bytes", cap(s.buf))
	}
}

func FuzzSplitter(f *testing.F) {
	f.Add([]byte("a\r\nb\rc\x1b[31md\x1b]0;x\x07e\n"), 3)
	f.Add([]byte(strings.Repeat("\r", 10)+"\x1b"), 1)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		var total int
		lastNum := 0
		s := New(128, func(l Line) {
			if len(l.Text) > 128 {
				t.Fatalf("line of %d bytes", len(l.Text))
			}
			if l.Num < lastNum {
				t.Fatalf("line numbers went back: %d after %d", l.Num, lastNum)
			}
			if bytes.IndexByte(l.Text, '\n') >= 0 || bytes.IndexByte(l.Text, '\r') >= 0 || bytes.IndexByte(l.Text, 0x1b) >= 0 {
				t.Fatalf("terminator or ESC in %q", l.Text)
			}
			lastNum = l.Num
			total += len(l.Text)
		})
		if cut < 0 {
			cut = -cut
		}
		if len(data) > 0 {
			cut %= len(data) + 1
		} else {
			cut = 0
		}
		s.Write(data[:cut])
		s.Write(data[cut:])
		s.Flush()
		// Lines that lie whole in a write are handed on from it, the
		// others from the Splitter's buffer: both give the same lines.
		var cuts []string
		for i := range data {
			cuts = append(cuts, fmt.Sprint(split(t, 128, string(data[:i]), string(data[i:]))))
		}
		whole := fmt.Sprint(split(t, 128, string(data)))
		one := make([]string, len(data))
		for i := range data {
			one[i] = string(data[i : i+1])
		}
		if g := fmt.Sprint(split(t, 128, one...)); g != whole {
			t.Fatalf("byte by byte: %s, in one write: %s", g, whole)
		}
		for i, g := range cuts {
			if g != whole {
				t.Fatalf("cut at %d: %s, in one write: %s", i, g, whole)
			}
		}
		if total > len(data) {
			t.Fatalf("emitted %d bytes from %d", total, len(data))
		}
		if want := bytes.Count(data, []byte("\n")) + 1; s.LineNum() != want {
			t.Fatalf("LineNum = %d, want %d", s.LineNum(), want)
		}
	})
}

// ordinaryRun finds the first special byte wherever it stands in an
// eight-byte word, after any bytes (control characters that are not special,
// among them the neighbours of the special bytes, bytes at 0x20 and 0x80
// around the test's threshold, UTF-8), and with another special byte after
// it (a borrow of the word's mask must not move the first).
func TestOrdinaryRun(t *testing.T) {
	fill := []byte("\t\x1f \x00\x7f\x80\xff█a\x09\x0b\x0c\x0e\x1a\x1c")
	for n := 0; n < 40; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = fill[(i*7+n)%len(fill)]
		}
		if got := ordinaryRun(b); got != n {
			t.Fatalf("%q: %d, want %d (no special byte)", b, got, n)
		}
		for at := 0; at < n; at++ {
			for _, sp := range []byte{'\n', '\r', 0x1b} {
				c := append([]byte(nil), b...)
				c[at] = sp
				want := bytes.IndexAny(c, "\n\r\x1b")
				if got := ordinaryRun(c); got != want {
					t.Fatalf("%q: %d, want %d", c, got, want)
				}
				for at2 := at + 1; at2 < n; at2++ {
					d := append([]byte(nil), c...)
					d[at2] = '\n'
					if got := ordinaryRun(d); got != at {
						t.Fatalf("%q: %d, want %d", d, got, at)
					}
				}
			}
		}
	}
}

func BenchmarkSplitter(b *testing.B) {
	var buf bytes.Buffer
	for buf.Len() < 1<<20 {
		buf.WriteString("Epoch 3:  42%|████▏     | 420/1000 [01:02<01:26, 6.71it/s, loss=0.412]\r")
		buf.WriteString("INFO step 1200 loss 0.41 lr 3e-4\r\n")
	}
	data := buf.Bytes()
	s := New(0, func(Line) {})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Write(data)
	}
}
