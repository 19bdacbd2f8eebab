package policy

import (
	"os"
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

// withStart is oomFigures with the fraction in use when the train phase
// began, as the sampler measures it.
func withStart(o Outcome, start float64) Outcome {
	o.Starts = map[classify.Phase]float64{classify.PhaseTrain: start}
	return o
}

// With the phase's start, fit splits what the step needed into the fixed
// part and what grew with the knob, and trusts the growth only when the
// failing request is most of it.
func TestFitWithPhaseStart(t *testing.T) {
	for _, tc := range []struct {
		name, step string
		v          string
		out        Outcome
		want       string
	}{
		// 80 GiB; 20 in use when train began; 40 in use + a 40 GiB request
		// (logits): the growth is 60 GiB at 64, 0.9375 GiB per sample; (72 −
		// 20) / 0.9375 = 55.
		{"one large request: the estimate, above half", "fit: a", "64", withStart(oomFigures(80, 40, 40), 0.25),
			"a 64→55; fit: 64 needed at least 80.00 GiB (in use + the 40.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 20.00 GiB of it in use when train began (fixed), 60.00 GiB grew with a; ~960 MiB per unit; the failing request is most of that growth, so the step's growth is known: taking 55, the largest whose estimate stays under the ceiling"},
		// The same need, but the request is one 4 GiB layer of a series: 60
		// GiB seen bounds the value at 55; what follows is unknown: half.
		{"a series seen in part: half", "fit: a", "64", withStart(oomFigures(80, 4, 4), 0.25),
			"a 64→32; fit: 64 needed at least 80.00 GiB (in use + the 4.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 20.00 GiB of it in use when train began (fixed), 60.00 GiB grew with a; ~960 MiB per unit; the 4.00 GiB request is one of several and what follows it is unknown, so that only bounds the value (at most 55): taking 32, half the memory a drives"},
		{"quadratic: half the memory is the side over √2", "{fit: a, scaling: quadratic}", "1024", withStart(oomFigures(24, 1, 2), 0.03125),
			"a 1024→724; fit: 1024 needed at least 25.00 GiB (in use + the 2.00 GiB request), over the 21.60 GiB ceiling (24.00 GiB less 10% headroom); 768 MiB of it in use when train began (fixed), 24.25 GiB grew with a; ~24.2 KiB per unit²; the 2.00 GiB request is one of several and what follows it is unknown, so that only bounds the value (at most 949): taking 724, half the memory a drives"},
		{"the fixed part alone over the ceiling: half", "fit: a", "64", withStart(oomFigures(80, 4, 60), 0.92),
			"a 64→32; fit: 64 needed at least 136.00 GiB (in use + the 60.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 73.60 GiB of it in use when train began (fixed), 62.40 GiB grew with a; the fixed part alone is over the ceiling: taking half the value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := actionPolicy(t, tc.step)
			d := p.Decide(NewState(Values{"a": Text(tc.v)}), tc.out)
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

// fit combines the attempts of a run: each failed attempt's figures are
// kept in the State (Seen), and a later failure at another value takes the
// steepest line through the phase's start and each attempt's need.
func TestFitCombinesAttempts(t *testing.T) {
	p := actionPolicy(t, "fit: a")
	// Attempt 1 at 64: 20 GiB fixed, a 40 GiB request on 40 in use: 60 GiB
	// grew (0.94 GiB per unit) → 55.
	d := p.Decide(NewState(Values{"a": Text("64")}), withStart(oomFigures(80, 40, 40), 0.25))
	if d.Verb != Relaunch || d.State.Values["a"].Text != "55" || len(d.State.Seen) != 1 {
		t.Fatalf("attempt 1: %s, seen %+v", d.Describe(), d.State.Seen)
	}
	if s := d.State.Seen[0]; s.Values["a"] != "64" || s.Need != 80<<30 || s.Fixed != 20<<30 || s.Total != 80<<30 || s.Phase != classify.PhaseTrain {
		t.Errorf("seen %+v", s)
	}
	// Attempt 2, at 32 after other changes, resumed with more in use when
	// train began (45 GiB: optimizer states loaded) and a 3 GiB layer
	// failing on 70 in use: 28 GiB grew, 0.875 per unit, a flatter line
	// than attempt 1's (0.94): fit keeps attempt 1's and the larger fixed
	// part, (72 − 45) / 0.94 = 28, above half: a series, so half, 16.
	st := d.State
	st.Values["a"] = Text("32")
	out := withStart(oomFigures(80, 10, 3), 0.5625)
	out.Attempt = 2
	d2 := p.Decide(st, out)
	want := "a 32→16; fit: 32 needed at least 73.00 GiB (in use + the 3.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 45.00 GiB of it in use when train began (fixed), 28.00 GiB grew with a; attempt 1 at 64 needed 80.00 GiB over its 20.00 GiB fixed, a steeper line; ~960 MiB per unit; the 3.00 GiB request is one of several and what follows it is unknown, so that only bounds the value (at most 28): taking 16, half the memory a drives"
	if got := strings.TrimPrefix(d2.Describe(), "rule r step 1: "); d2.Verb != Relaunch || !strings.HasPrefix(got, want) {
		t.Errorf("attempt 2:\n got %q\nwant %q", got, want)
	}
	if len(d2.State.Seen) != 2 {
		t.Errorf("seen %d entries, want 2", len(d2.State.Seen))
	}
}

// A value fit chose has failed in the same phase: the figures (what was in
// use when one request failed) under-estimate this job's need, so the next
// fit moves at least as far as halving would. On the CPU with real PyTorch
// (e2e TestFitAgainstHalvingOnTheCPU) estimates of 475 and then 414 from a
// batch of 1024 both failed, where halving's 256 and 128 would not have
// taken longer.
func TestFitAfterAFailedFitTakesAtLeastHalf(t *testing.T) {
	p := actionPolicy(t, "fit: a")
	d := p.Decide(NewState(Values{"a": Text("64")}), withStart(oomFigures(80, 40, 40), 0.25))
	if d.State.Values["a"].Text != "55" {
		t.Fatalf("attempt 1: %s", d.Describe())
	}
	// Attempt 2 at 55 fails in train too: a 45 GiB request with 30 free,
	// 20 fixed: 1.36 GiB per unit, (72 − 20) / 1.36 = 38 by the figures
	// alone.
	st := d.State
	out := withStart(oomFigures(80, 30, 45), 0.25)
	out.Attempt = 2
	d2 := p.Decide(st, out)
	got := d2.Describe()
	if d2.Verb != Relaunch || d2.State.Values["a"].Text != "27" {
		t.Fatalf("attempt 2: %s, want a 55→27", got)
	}
	if !strings.Contains(got, "taking 38, the largest whose estimate stays under the ceiling; but attempt 1 failed in train at 64, and 55, reduced from it, failed too: the figures under-estimate the need, so taking half, as halving would") {
		t.Errorf("attempt 2 does not say why it takes half:\n%s", got)
	}
	// docs/policy.md quotes the note.
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	quote := "but attempt 1 failed in train at 64, and 55, reduced from it, failed too: the figures under-estimate the need, so taking half, as halving would"
	if !strings.Contains(got, quote) || !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), quote) {
		t.Errorf("docs/policy.md does not quote the note as Decide says it: %q", quote)
	}
	// A failure at a larger value in another phase says nothing of this one.
	out.Verdict.Phase = classify.PhaseVal
	if d3 := p.Decide(st, out); strings.Contains(d3.Describe(), "but attempt 1 failed") {
		t.Errorf("a failure in train capped a fit in validation: %s", d3.Describe())
	}
}

// docs/policy.md quotes a fit decision; it is what Decide says for the
// figures it shows.
func TestDocsQuoteAFitDecision(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	p := actionPolicy(t, "fit: a")
	d := p.Decide(NewState(Values{"a": Text("64")}), withStart(oomFigures(80, 40, 40), 0.25))
	if !strings.Contains(string(doc), "\n"+d.Describe()+"\n") {
		t.Errorf("docs/policy.md does not quote, on a line of its own:\n%s", d.Describe())
	}
}

// withBlock is o with the torch probe's place of the failure.
func withBlock(o Outcome, index, of int, backward, noGrad bool) Outcome {
	o.Block = &OOMBlock{Index: index, Of: of, Backward: backward, NoGrad: noGrad}
	return o
}

// With the failing block's place, a series seen in part is read as the
// fraction of the forward it is: 80 GiB, 20 in use when train began, a 4
// GiB layer failing with 4 free: 60 GiB grew at 64.
func TestFitWithBlock(t *testing.T) {
	series := withStart(oomFigures(80, 4, 4), 0.25)
	for _, tc := range []struct {
		name string
		out  Outcome
		want string
	}{
		// Block 24 of 32: 60 GiB is 24/32 of the forward's, 80 GiB at 64,
		// 1.25 GiB per sample: (72 − 20) / 1.25 = 41.6.
		{"three quarters through the forward", withBlock(series, 23, 32, false, false),
			"a 64→41; fit: 64 needed at least 80.00 GiB (in use + the 4.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 20.00 GiB of it in use when train began (fixed), 60.00 GiB grew with a; ~1.25 GiB per unit; block 24 of 32 in forward: what grew so far is about 24/32 of the forward's activations, so the step grows by ~80.00 GiB: taking 41, the largest whose estimate stays under the ceiling (at most 55 counting only what was seen); relaunching"},
		// Block 8 of 32: 240 GiB at 64, 3.75 per sample: 52 / 3.75 = 13.9,
		// below half.
		{"early in the forward: below half", withBlock(series, 7, 32, false, false),
			"a 64→13; fit: 64 needed at least 80.00 GiB"},
		// The last block: all of the forward was seen, the bound.
		{"the last block: the bound", withBlock(series, 31, 32, false, false),
			"a 64→55; fit: 64 needed at least 80.00 GiB (in use + the 4.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 20.00 GiB of it in use when train began (fixed), 60.00 GiB grew with a; ~960 MiB per unit; block 32 of 32 in forward"},
		{"backward: half, as without the place", withBlock(series, 23, 32, true, false),
			"a 64→32; fit: 64 needed at least 80.00 GiB (in use + the 4.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 20.00 GiB of it in use when train began (fixed), 60.00 GiB grew with a; ~960 MiB per unit; the 4.00 GiB request is one of several"},
		{"a forward without grad: half", withBlock(series, 23, 32, false, true),
			"a 64→32; fit: 64 needed at least 80.00 GiB (in use + the 4.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 20.00 GiB of it in use when train began (fixed), 60.00 GiB grew with a; ~960 MiB per unit; the 4.00 GiB request is one of several"},
		{"a nonsense place: half", withBlock(series, 32, 32, false, false), "a 64→32; fit:"},
		// One large request is the step's growth whatever its place.
		{"one large request: the growth is known", withBlock(withStart(oomFigures(80, 40, 40), 0.25), 3, 32, false, false),
			"a 64→55; fit: 64 needed at least 80.00 GiB (in use + the 40.00 GiB request), over the 72.00 GiB ceiling (80.00 GiB less 10% headroom); 20.00 GiB of it in use when train began (fixed), 60.00 GiB grew with a; ~960 MiB per unit; the failing request is most of that growth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := actionPolicy(t, "fit: a")
			d := p.Decide(NewState(Values{"a": Text("64")}), tc.out)
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
