package explain

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// benchLog is a 16 MiB training log: steps, a phase change now and then.
func benchLog(b *testing.B) (string, int64) {
	var buf bytes.Buffer
	for i := 0; buf.Len() < 16<<20; i++ {
		if i%1000 == 0 {
			buf.WriteString("gpuguard: phase=train\n")
		}
		fmt.Fprintf(&buf, "step %d loss %.3f lr 0.0003 grad_norm 1.25 tokens/s 41234\n", i, 1/float64(i+1))
	}
	path := filepath.Join(b.TempDir(), "train.log")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return path, int64(buf.Len())
}

// BenchmarkExplainPlainLog: explain of a log without gpuguard's lines, which
// it looks through for them as it classifies, against the classification
// alone; the difference is what reading console logs costs a plain log.
func BenchmarkExplainPlainLog(b *testing.B) {
	path, size := benchLog(b)
	b.Run("classify", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, _ := os.Open(path)
			if _, err := classify.ClassifyReader(f, classify.ClassifierOptions{}); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("explain", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if err := Command(Options{Paths: []string{path}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkExplainConsoleLog: the same log as a console log (gpuguard's
// lines at its start and end): looked through, then read again attempt by
// attempt.
func BenchmarkExplainConsoleLog(b *testing.B) {
	path, _ := benchLog(b)
	data, _ := os.ReadFile(path)
	data = append([]byte("gpuguard: run directory .gpuguard/runs/x\n"), data...)
	data = append(data, "gpuguard:   attempt  ended  phase\ngpuguard:   1        ok     train\n"...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := Command(Options{Paths: []string{path}}); err != nil {
			b.Fatal(err)
		}
	}
}
