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
	for _, tc := range []struct {
		name, step string
		vals       Values
		out        Outcome
		want       string // Describe's changes and notes
	}{
		{"largest value under the ceiling", "fit: a", Values{"a": Text("64")}, oomFigures(80, 30, 40),
			"a 64→35; fit: needs ~640 MiB per unit (the 40.00 GiB request at 64), 50.00 GiB in use before it counted as fixed, 22.00 GiB free under the 72.00 GiB ceiling (80.00 GiB less 10% headroom)"},
		{"compensate", "{fit: a, compensate: b}", Values{"a": Text("64"), "b": Text("1")}, oomFigures(80, 30, 40),
			"a 64→35 (b 1→2); fit: needs ~640 MiB per unit (the 40.00 GiB request at 64), 50.00 GiB in use before it counted as fixed, 22.00 GiB free under the 72.00 GiB ceiling (80.00 GiB less 10% headroom); effective batch 64 → 70: 64 is not divisible by 35"},
		{"multiple_of and headroom", "{fit: a, multiple_of: 8, headroom: 5%}", Values{"a": Text("64")}, oomFigures(80, 30, 40),
			"a 64→40; fit: needs ~640 MiB per unit (the 40.00 GiB request at 64), 50.00 GiB in use before it counted as fixed, 26.00 GiB free under the 76.00 GiB ceiling (80.00 GiB less 5% headroom)"},
		{"quadratic, a crop size", "{fit: a, scaling: quadratic, multiple_of: 32}", Values{"a": Text("1024")}, oomFigures(80, 30, 40),
			"a 1024→736; fit: needs ~40 KiB per unit² (the 40.00 GiB request at 1024), 50.00 GiB in use before it counted as fixed, 22.00 GiB free under the 72.00 GiB ceiling (80.00 GiB less 10% headroom)"},
		{"the measured peak, when higher, counts as fixed", "fit: a", Values{"a": Text("64")}, withPeak,
			"a 64→12; fit: needs ~640 MiB per unit (the 40.00 GiB request at 64), 64.00 GiB in use at the measured peak counted as fixed, 8.00 GiB free under the 72.00 GiB ceiling (80.00 GiB less 10% headroom)"},
		{"allocated when free is not given", "fit: a", Values{"a": Text("64")}, onlyAllocated, "a 64→35; fit: needs ~640 MiB per unit"},
		{"held at min", "{fit: a, min: 40}", Values{"a": Text("64")}, oomFigures(80, 30, 40), "a 64→40; fit: needs ~640 MiB per unit"},
		{"held at max", "{fit: a, max: 20}", Values{"a": Text("64")}, oomFigures(80, 30, 40), "a 64→20; fit: needs"},
		{"in use above the ceiling: halve", "fit: a", Values{"a": Text("64")}, oomFigures(80, 2, 1),
			"a 64→32; fit: halving, the figures are unusable: 78.00 GiB was in use before it, already above the 72.00 GiB ceiling (80.00 GiB less 10% headroom): the figures cannot tell the fixed part from the per-unit part"},
		{"figures that leave room for the value: halve", "fit: a", Values{"a": Text("64")}, oomFigures(80, 70, 1),
			"a 64→32; fit: halving, the figures are unusable: they leave room for 64 itself, so they do not explain the failure (needs ~16 MiB per unit"},
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
