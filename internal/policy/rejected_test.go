package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

func TestRejectionLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"train.py: error: unrecognized arguments: --accum-steps 2", true},
		{"Could not override 'data.accum'.", true},
		{"omegaconf.errors.ConfigAttributeError: Key 'accum' is not in struct", true},
		{"TypeError: __init__() got an unexpected keyword argument 'accum_steps'", true},
		{"KeyError: 'VAL_CROP'", true},
		{"step 3 loss 0.5", false},
		{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", false},
	} {
		if got := RejectionLine([]byte(tc.line)); got != tc.want {
			t.Errorf("RejectionLine(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

const rejectPolicy = `version: 1
knobs:
  batch_size: {flag: --batch-size}
  accum: {flag: [--accum-steps, --accum], default: 1}
  hydra_accum: {arg: trainer.accumulate_grad_batches, optional: true}
  crop: {yaml: {key: DATA.VAL_CROP, flag: --config}, optional: true}
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - {halve: batch_size, compensate: accum}
budget: {crash: 0}
`

// A relaunch that added a flag the job does not take ends the run at the
// next attempt, naming the knob and where the policy defines it; a
// rejection of something the relaunch did not change is a plain crash.
func TestRejectedKnob(t *testing.T) {
	p := mustParse(t, rejectPolicy)
	st := NewState(Values{"batch_size": Text("8"), "accum": Text("1")})
	d := p.Decide(st, oom(classify.PhaseTrain))
	if d.Verb != Relaunch || d.State.Last == nil || d.State.Last.Rule != "train-oom" {
		t.Fatalf("first decision %s %+v", d.Describe(), d.State.Last)
	}
	crash := func(lines ...string) Outcome {
		return Outcome{Attempt: 2, Exit: classify.Exit{Code: 2}, Verdict: classify.Verdict{Kind: classify.KindCrash}, Rejections: lines}
	}
	for _, tc := range []struct {
		name, line string
		want       string // "" : not a rejection
	}{
		{"argparse", "train.py: error: unrecognized arguments: --accum-steps 2", "does not take --accum-steps: give the knob the flag"},
		{"argparse alias, = form", "train.py: error: unrecognized arguments: --accum=2", "rejected knob accum"},
		{"argparse refuses the value", "train.py: error: argument --accum-steps: invalid int value: '2'", "the job does not take 2 as --accum-steps"},
		{"a longer flag is another flag", "train.py: error: unrecognized arguments: --accum-steps-max 2", ""},
		{"a knob the relaunch did not change", "train.py: error: unrecognized arguments: --foo", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.Decide(d.State, crash(tc.line))
			if got.Verb != GiveUp {
				t.Fatalf("verb %s", got.Verb)
			}
			if tc.want == "" {
				if got.Rejected != "" || !strings.Contains(got.Reason, "does not retry crashes") {
					t.Errorf("reason %q (rejected %q), want a plain crash", got.Reason, got.Rejected)
				}
				return
			}
			for _, w := range []string{tc.want, "which rule train-oom step 1 had just changed (accum 1→2)", "defined at p.yaml:4", "the job does not take ", tc.line} {
				if !strings.Contains(got.Reason, w) {
					t.Errorf("reason %q lacks %q", got.Reason, w)
				}
			}
			if got.Rejected != "accum" {
				t.Errorf("Rejected = %q", got.Rejected)
			}
		})
	}
	// Without a relaunch before it (attempt 1), the job's own argument
	// error is its own.
	if got := p.Decide(st, crash("train.py: error: unrecognized arguments: --accum-steps 2")); got.Rejected != "" {
		t.Errorf("attempt 1: rejected %q", got.Rejected)
	}
}

func TestRejectedKeys(t *testing.T) {
	p := mustParse(t, rejectPolicy)
	for _, tc := range []struct {
		knob, line string
	}{
		{"hydra_accum", "Could not override 'trainer.accumulate_grad_batches'."},
		{"hydra_accum", "omegaconf.errors.ConfigAttributeError: Key 'accumulate_grad_batches' is not in struct"},
		{"crop", "KeyError: 'VAL_CROP'"},
		{"crop", "TypeError: build() got an unexpected keyword argument 'VAL_CROP'"},
	} {
		last := &Relaunched{Rule: "r", Step: 1, Changes: []Change{{Knob: tc.knob, Old: "1", New: "2"}}}
		if c, _, ok := p.rejected(last, []string{tc.line}); !ok || c.Knob != tc.knob {
			t.Errorf("%q: rejected %v %v, want %s", tc.line, c, ok, tc.knob)
		}
	}
	last := &Relaunched{Changes: []Change{{Knob: "hydra_accum"}}}
	if _, _, ok := p.rejected(last, []string{"KeyError: 'accumulate_grad_batches_x'"}); ok {
		t.Errorf("a longer key counted as the knob's")
	}
}
