package classify

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// naiveHits is the prefilter's answer computed the slow way: each keyword
// searched for on its own, its first occurrence.
func naiveHits(t []byte) hitSet {
	var h hitSet
	for _, k := range kwTable {
		i := -1
		if k.fold {
			i = indexFoldASCII(t, k.text)
		} else {
			i = bytes.Index(t, []byte(k.text))
		}
		if i >= 0 {
			h.set(k.id, i)
		}
	}
	return h
}

// checkScan compares the scan with naiveHits on one line.
func checkScan(t *testing.T, m *kwMatcher, line []byte) {
	t.Helper()
	var got hitSet
	m.scan(line, &got)
	want := naiveHits(line)
	if got.bits != want.bits {
		for _, k := range kwTable {
			if got.has(k.id) != want.has(k.id) {
				t.Errorf("%q: keyword %q found %v, want %v", line, k.text, got.has(k.id), want.has(k.id))
			}
		}
		return
	}
	for _, k := range kwTable {
		if want.has(k.id) && got.at(k.id) != want.at(k.id) {
			t.Errorf("%q: keyword %q first at %d, want %d", line, k.text, got.at(k.id), want.at(k.id))
		}
	}
}

// The prefilter finds exactly the keywords a line holds, where they first
// occur: every keyword at every offset of an 8-byte word (the scan's unit),
// in both cases where it ignores case, next to a progress bar's multi-byte
// blocks, and on every line of the benchmark's mixed log.
func TestScanFindsEveryKeyword(t *testing.T) {
	m := getKWMatcher()
	// Every alignment after a run of non-ASCII bytes (skipped a word at a
	// time) and after ASCII text.
	pads := []string{"ab█", "█x", "0123456"}
	for n := 0; n < 24; n++ {
		pads = append(pads, strings.Repeat("\x96", n), strings.Repeat("-", n))
	}
	for _, k := range kwTable {
		variants := []string{k.text}
		if k.fold {
			variants = append(variants, string(bytes.ToUpper([]byte(k.text))))
		}
		for _, v := range variants {
			for _, pre := range pads {
				for _, post := range []string{"", "█", "x", "\x96\x96\x96\x96\x96\x96\x96\x96"} {
					checkScan(t, m, []byte(pre+v+post))
					checkScan(t, m, []byte(pre+v+post+v)) // the first occurrence is recorded
				}
			}
			// One byte changed by 0x20 (the other case of a letter, or a
			// near miss: '[' for '{', '\x00' for ' '), or by one: a hit
			// only where the naive search finds one.
			for j := range len(v) {
				for _, d := range []byte{0x20, 1} {
					b := []byte(v)
					b[j] ^= d
					checkScan(t, m, append([]byte("x█"), b...))
					checkScan(t, m, append([]byte("█"), b...))
				}
			}
			// Cut anywhere: a keyword's prefix is no hit.
			for n := 1; n < len(v); n++ {
				checkScan(t, m, []byte("██"+v[:n]))
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(mixedLog(1 << 20)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		for _, fr := range bytes.Split(sc.Bytes(), []byte("\r")) {
			checkScan(t, m, fr)
		}
	}
	if files, _ := filepath.Glob(filepath.Join("testdata", "*", "*", "*.log")); len(files) > 0 {
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range bytes.Split(data, []byte("\n")) {
				checkScan(t, m, l)
			}
		}
	}
}

// FuzzScan: the prefilter agrees with the naive search on any bytes.
func FuzzScan(f *testing.F) {
	for _, k := range kwTable {
		f.Add([]byte("█ " + k.text + " █"))
	}
	m := getKWMatcher()
	f.Fuzz(func(t *testing.T, line []byte) {
		checkScan(t, m, line)
	})
}

// BenchmarkScan: the prefilter alone over the lines of the mixed log.
func BenchmarkScan(b *testing.B) {
	ls := splitLines(mixedLog(4 << 20))
	var n int64
	for _, l := range ls {
		n += int64(len(l.Text)) + 1
	}
	m := getKWMatcher()
	var h hitSet
	b.SetBytes(n)
	c0 := startCPU()
	for b.Loop() {
		for _, l := range ls {
			m.scan(l.Text, &h)
		}
	}
	reportCPU(b, n, processCPU()-c0)
}
