package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// oomFigures is a training OOM whose message gave total, free and requested
// memory, in GiB.
func oomFigures(total, free, req float64) Outcome {
	o := oom(classify.PhaseTrain)
	g := func(x float64) *int64 { return ptr(int64(x * (1 << 30))) }
	o.Verdict.OOM = &classify.OOM{TotalBytes: g(total), FreeBytes: g(free), RequestedBytes: g(req)}
	return o
}

func TestFit(t *testing.T) {
	withPeak := oomFigures(80, 30, 40)
	withPeak.Peaks = map[classify.Phase]float64{classify.PhaseTrain: 0.8}
	onlyAllocated := oom(classify.PhaseTrain)
	onlyAllocated.Verdict.OOM = &classify.OOM{TotalBytes: ptr(int64(80 << 30)), RequestedBytes: ptr(int64(40 << 30)), AllocatedBytes: ptr(int64(50 << 30))}
	bigRequest := oomFigures(80, 30, 60)
	bigRequest.Verdict.OOM.AllocatedBytes = ptr(int64(45 << 30))
	for _, tc := range []struct {
		name, step string
		vals       Values
		out        Outcome
		want       string // Describe's changes and notes
	}{
		{"largest value under the ceiling", "fit: a", Values{"a": Text("64")}, oomFigures(80, 30, 40),
			"a 64→35; fit: 64 needed at least 90.00 GiB (50.00 GiB in use + the 40.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); ~35 if what was in use is fixed and the request grows by ~640 MiB per unit; at most 51 if all of it grows with a; taking that estimate; relaunching"},
		{"compensate", "{fit: a, compensate: b}", Values{"a": Text("64"), "b": Text("1")}, oomFigures(80, 30, 40),
			"a 64→35 (b 1→2); fit: 64 needed at least 90.00 GiB"},
		{"multiple_of and headroom", "{fit: a, multiple_of: 8, headroom: 5%}", Values{"a": Text("64")}, oomFigures(80, 30, 40),
			"a 64→40; fit: 64 needed at least 90.00 GiB (50.00 GiB in use + the 40.00 GiB request), over the 76.00 GiB ceiling (80.00 GiB less 5% headroom); ~41 if"},
		{"quadratic, a crop size", "{fit: a, scaling: quadratic, multiple_of: 32}", Values{"a": Text("1024")}, oomFigures(80, 30, 40),
			"a 1024→736; fit: 1024 needed at least 90.00 GiB (50.00 GiB in use + the 40.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); ~759 if what was in use is fixed and the request grows by ~40.0 KiB per unit²; at most 915 if all of it grows with a; taking that estimate"},
		{"the measured peak, when higher, counts as in use; an estimate below half takes half", "fit: a", Values{"a": Text("64")}, withPeak,
			"a 64→32; fit: 64 needed at least 104.00 GiB (64.00 GiB in use at the measured peak + the 40.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); ~12 if what was in use is fixed and the request grows by ~640 MiB per unit; at most 44 if all of it grows with a; taking half the value: that estimate is lower, and pessimistic when more than the request grows with a"},
		{"a request above all PyTorch held: the estimate, below half", "fit: a", Values{"a": Text("64")}, bigRequest,
			"a 64→23; fit: 64 needed at least 110.00 GiB (50.00 GiB in use + the 60.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); ~23 if what was in use is fixed and the request grows by ~960 MiB per unit; at most 41 if all of it grows with a; taking that estimate: the request is larger than all PyTorch had allocated, so little of what was in use grows with a"},
		{"allocated when free is not given", "fit: a", Values{"a": Text("64")}, onlyAllocated, "a 64→35; fit: 64 needed at least 90.00 GiB (50.00 GiB in use"},
		{"held at min", "{fit: a, min: 40}", Values{"a": Text("64")}, oomFigures(80, 30, 40), "a 64→40; fit: 64 needed at least 90.00 GiB"},
		{"held at max", "{fit: a, max: 20}", Values{"a": Text("64")}, oomFigures(80, 30, 40), "a 64→20; fit: 64 needed"},
		{"in use above the ceiling: half", "fit: a", Values{"a": Text("64")}, oomFigures(80, 2, 1),
			"a 64→32; fit: 64 needed at least 79.00 GiB (78.00 GiB in use + the 1.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); at most 58 if all of it grows with a; taking half the value: the figures say no more"},
		{"far over: the upper bound, below half", "fit: a", Values{"a": Text("1024")}, oomFigures(16, 1, 100),
			"a 1024→128; fit: 1024 needed at least 115.00 GiB (15.00 GiB in use + the 100.00 GiB request), over the 14.40 GiB ceiling (16.00 GiB less 10% headroom); at most 128 if all of it grows with a; taking the most"},
		{"figures that leave room for the value: halve", "fit: a", Values{"a": Text("64")}, oomFigures(80, 70, 1),
			"a 64→32; fit: halving, the figures are unusable: 64 needed at least 11.00 GiB, within the 72.00 GiB ceiling (80.00 GiB less 10% headroom): the figures do not explain the failure"},
		{"float knob", "fit: f", Values{"f": Text("0.8")}, oomFigures(80, 30, 40), "f 0.8→0.44"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := actionPolicy(t, tc.step)
			d := p.Decide(NewState(tc.vals), tc.out)
			if d.Verb != Relaunch {
				t.Fatalf("%s: %s", d.Verb, d.Reason)
			}
			got := strings.TrimPrefix(d.Describe(), "rule r step 1: ")
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("Describe\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestFitPreviewSaysSo(t *testing.T) {
	p := actionPolicy(t, "fit: a")
	lines := p.Preview(Values{"a": Text("64")})
	if len(lines) != 1 || !strings.Contains(lines[0], "a 64→32") || !strings.Contains(lines[0], "(fit sets a from the OOM message's figures; shown: halving, what it does without them)") {
		t.Errorf("preview %q", lines)
	}
}
