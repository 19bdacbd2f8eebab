package classify

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// checkBounded asserts the classifier's state stays bounded.
func checkBounded(t *testing.T, c *Classifier) {
	t.Helper()
	if len(c.marks) > maxPhaseMarks {
		t.Fatalf("%d phase marks kept", len(c.marks))
	}
	if len(c.pend.buf) > maxPendingBytes {
		t.Fatalf("pending message of %d bytes", len(c.pend.buf))
	}
	if len(c.handled) > 4 {
		t.Fatalf("%d handled failures kept", len(c.handled))
	}
	if cap(c.buf) > 2*lines.DefaultMax+64 {
		t.Fatalf("frame buffer of %d bytes", cap(c.buf))
	}
	if len(c.stText) > maxStepText {
		t.Fatalf("step text of %d bytes", len(c.stText))
	}
	if f := c.cur; f != nil && (len(f.text) > maxText+8 || len(f.detail) > maxDetail) {
		t.Fatalf("failure text %d bytes, detail %d bytes", len(f.text), len(f.detail))
	}
}

func fuzzClassify(t *testing.T, chunks ...[]byte) Verdict {
	c, err := NewClassifier(ClassifierOptions{PhasePatterns: []PhasePattern{{PhaseVal, `(?i)eval step \d+`}}})
	if err != nil {
		t.Fatal(err)
	}
	s := lines.New(lines.DefaultMax, c.Line)
	for _, ch := range chunks {
		s.Write(ch)
		_ = c.Verdict() // any time
		checkBounded(t, c)
	}
	s.Flush()
	v := c.Verdict()
	checkBounded(t, c)
	return v
}

// FuzzClassifier: no input panics, state stays bounded, the verdict is
// well-formed and does not depend on how the stream was cut into writes.
func FuzzClassifier(f *testing.F) {
	seeds := []string{
		modernOOM,
		"Epoch 1:  10%|#| 10/100\r" + modernOOM + "\n",
		"RuntimeError: CUDA out of memory. Tried to allocate 20.00 Mi\nB (GPU 0; 1.00 GiB total capacity;\n",
		"Root Cause (first observed failure):\n  rank : 3\n  exitcode  : -9 (pid: 1)\n",
		"[1,mpirank:0,algo-1]<stdout>:#015Validation: 0it#033[A#033\n",
		"torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\nRequested : 1 GiB\n",
		"OOM when allocating tensor with shape[99999999999,99999999999,9] and type float on /gpu:0\n",
		"5.37GiB (99999999999999999999999B) RESOURCE_EXHAUSTED: Failed to allocate request for 9e99GiB\n",
		"已杀死\nGetötet\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	forms, _ := filepath.Glob(filepath.Join("testdata", "forms", "*.log"))
	forms2026, _ := filepath.Glob(filepath.Join("testdata", "forms2026", "*.log"))
	forms = append(forms, forms2026...)
	if m, err := filepath.Glob(filepath.Join(corpusDir, "*", "*.log")); err == nil || len(forms) > 0 {
		for _, p := range append(m, forms...) {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data, uint16(len(data)/3))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		whole := fuzzClassify(t, data)
		k := int(cut) % (len(data) + 1)
		split := fuzzClassify(t, data[:k], data[k:])
		if whole.Kind != split.Kind || whole.Line != split.Line || whole.Phase != split.Phase || len(whole.Phases) != len(split.Phases) {
			t.Fatalf("cut at %d changes the verdict: %s/%d/%q vs %s/%d/%q", k, whole.Kind, whole.Line, whole.Phase, split.Kind, split.Line, split.Phase)
		}
		v := whole
		switch v.Kind {
		case KindNone, KindGPUOOM, KindCPUAllocOOM, KindHostOOM, KindCrash:
		default:
			t.Fatalf("kind %q", v.Kind)
		}
		nl := bytes.Count(data, []byte("\n")) + 1
		if v.Kind != KindNone && (v.Line < 1 || v.Line > nl) {
			t.Fatalf("failure at line %d of %d", v.Line, nl)
		}
		if v.Kind == KindNone && v.Line != 0 {
			t.Fatalf("no failure but line %d", v.Line)
		}
		if v.Phase != PhaseNone && v.Phase != PhaseTrain && v.Phase != PhaseVal {
			t.Fatalf("phase %q", v.Phase)
		}
		for i, m := range v.Phases {
			if m.Line < 1 || m.Line > nl || i > 0 && m.Line < v.Phases[i-1].Line {
				t.Fatalf("phase marks out of order or range: %v", v.Phases)
			}
		}
		if v.Diagnosis == "" || v.Suggestions == nil {
			t.Fatal("verdict without a diagnosis or with nil suggestions")
		}
		if o := v.OOM; o != nil {
			for _, p := range []*int64{o.RequestedBytes, o.TotalBytes, o.FreeBytes, o.InUseBytes, o.AllocatedBytes, o.ReservedTotalBytes, o.ReservedUnallocatedBytes} {
				if p != nil && *p < 0 {
					t.Fatalf("negative size in %+v", o)
				}
			}
		}
		if whole.StepLine != split.StepLine || fmtPtr(whole.Step) != fmtPtr(split.Step) || whole.StepKind != split.StepKind {
			t.Fatalf("cut at %d changes the step: %s %q at line %d vs %s %q at line %d", k, fmtPtr(whole.Step), whole.StepKind, whole.StepLine, fmtPtr(split.Step), split.StepKind, split.StepLine)
		}
		switch {
		case v.Step == nil && (v.StepKind != StepNone || v.StepLine != 0 || v.StepText != "" || v.StepTotal != nil),
			v.Step != nil && (v.StepKind != StepGlobal && v.StepKind != StepInEpoch || v.StepLine < 1 || v.StepLine > nl || *v.Step < 0),
			len(v.StepText) > maxStepText || !utf8.ValidString(v.StepText):
			t.Fatalf("step %s kind %q line %d text %q", fmtPtr(v.Step), v.StepKind, v.StepLine, v.StepText)
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	})
}

// An endless stream of every kind of line keeps the state bounded.
func TestEndlessStreamBounded(t *testing.T) {
	c, _ := NewClassifier(ClassifierOptions{})
	s := lines.New(lines.DefaultMax, c.Line)
	block := []byte(strings.Repeat("Epoch 1:  10%|#| 10/100\r", 50) + "\n[train] a\n[val] b\n" + modernOOM + "\n" +
		"RuntimeError: CUDA out of memory. Tried to allocate 20.00 Mi\n" + strings.Repeat("x", 3000) + "\n" +
		"Root Cause (first observed failure):\n  rank : 3\n" + strings.Repeat("#015a", 200) + "\n")
	for i := 0; i < 2000; i++ {
		s.Write(block)
		if i%100 == 0 {
			checkBounded(t, c)
		}
	}
	checkBounded(t, c)
	if v := c.Verdict(); len(v.Phases) != maxPhaseMarks {
		t.Errorf("%d marks", len(v.Phases))
	}
}
