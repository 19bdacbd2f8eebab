package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

const causePolicy = `version: 1
knobs:
  batch_size: {flag: --batch-size}
  workers: {flag: --workers}
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - halve: batch_size
      - cut_workers: workers
budget: {relaunches: 10}
`

// oomAsking is an OOM in phase at attempt n asking for req bytes (0: the
// message did not say).
func oomAsking(n int, phase classify.Phase, req int64) Outcome {
	o := oom(phase)
	o.Attempt = n
	o.Verdict.OOM = &classify.OOM{}
	if req > 0 {
		o.Verdict.OOM.RequestedBytes = ptr(req)
	}
	return o
}

// oomAt is oomAsking at a site of the code (Verdict.Site).
func oomAt(n int, phase classify.Phase, req int64, site string) Outcome {
	o := oomAsking(n, phase, req)
	o.Verdict.Site = site
	return o
}

// The place of the failure counts where both attempts' tracebacks show it:
// the same request at another place is another allocation (the knob may
// well be the cause); at the same place, the decision names it.
func TestNotTheCauseComparesTheSite(t *testing.T) {
	p := mustParse(t, causePolicy)
	const gib = 1 << 30
	const conv = "/venv/torch/nn/modules/conv.py:456 in _conv_forward"
	start := NewState(Values{"batch_size": Text("64"), "workers": Text("8")})
	first := p.Decide(start, oomAt(1, classify.PhaseTrain, 2*gib, conv))
	if l := first.State.Last; l == nil || l.Site != conv {
		t.Fatalf("State.Last = %+v, want the site kept", l)
	}
	for _, tc := range []struct {
		name, site, want, note string
	}{
		{"same place", conv, "rule train-oom step 2: workers 8→4",
			"batch_size is not the cause: after batch_size 64→32, attempt 2 failed asking for the same 2.00 GiB in train at " + conv + "; rule train-oom goes on to step 2"},
		{"another place", "/venv/torch/nn/functional.py:2943 in cross_entropy", "rule train-oom step 1: batch_size 32→16", ""},
		{"no traceback this time", "", "rule train-oom step 2: workers 8→4",
			"batch_size is not the cause: after batch_size 64→32, attempt 2 failed asking for the same 2.00 GiB in train; rule train-oom goes on to step 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(first.State, oomAt(2, classify.PhaseTrain, 2*gib, tc.site))
			if d.Verb != Relaunch || !strings.HasPrefix(d.Describe(), tc.want) || d.Note != tc.note {
				t.Errorf("%s: %s\nnote %q\nwant %q, note %q", d.Verb, d.Describe(), d.Note, tc.want, tc.note)
			}
		})
	}
}

// TestNotTheCause: a knob changed for an OOM, followed by the same request
// at the same place, is not the cause: the rule moves to its next step, or
// gives up, and says why; a different request, phase or kind, or no figure,
// keeps halving.
func TestNotTheCause(t *testing.T) {
	p := mustParse(t, causePolicy)
	const gib = 1 << 30
	start := NewState(Values{"batch_size": Text("64"), "workers": Text("8")})
	first := p.Decide(start, oomAsking(1, classify.PhaseTrain, 2*gib))
	if first.Verb != Relaunch || first.Describe() != "rule train-oom step 1: batch_size 64→32; relaunching in 5s" {
		t.Fatalf("first: %s", first.Describe())
	}
	if l := first.State.Last; l == nil || l.RequestedBytes == nil || *l.RequestedBytes != 2*gib || l.Phase != "train" || l.Rule != "train-oom" || l.Step != 1 {
		t.Fatalf("State.Last = %+v", l)
	}
	for _, tc := range []struct {
		name string
		out  Outcome
		want string // Describe's start
		note string // in the decision, "" for none
	}{
		{"same request, same phase", oomAsking(2, classify.PhaseTrain, 2*gib),
			"rule train-oom step 2: workers 8→4",
			"batch_size is not the cause: after batch_size 64→32, attempt 2 failed asking for the same 2.00 GiB in train; rule train-oom goes on to step 2"},
		{"smaller request", oomAsking(2, classify.PhaseTrain, gib), "rule train-oom step 1: batch_size 32→16", ""},
		{"same request in another phase", oomAsking(2, classify.PhaseVal, 2*gib), "rule train-oom step 1: batch_size 32→16", ""},
		{"no request figure", oomAsking(2, classify.PhaseTrain, 0), "rule train-oom step 1: batch_size 32→16", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(first.State, tc.out)
			if d.Verb != Relaunch || !strings.HasPrefix(d.Describe(), tc.want) {
				t.Fatalf("%s: %s (%s)", d.Verb, d.Describe(), d.Reason)
			}
			if d.Note != tc.note {
				t.Errorf("note %q, want %q", d.Note, tc.note)
			}
			if tc.note != "" && (!strings.Contains(d.Describe(), tc.note) || !strings.Contains(d.Reason, tc.note)) {
				t.Errorf("the note is not in Describe %q and Reason %q", d.Describe(), d.Reason)
			}
			if tc.note != "" && d.State.Rules["train-oom"].Step != 1 {
				t.Errorf("rule position %d, want 1 (step 2)", d.State.Rules["train-oom"].Step)
			}
		})
	}

	// The rule's last step not the cause either: give up, saying why.
	second := p.Decide(first.State, oomAsking(2, classify.PhaseTrain, 2*gib))
	third := p.Decide(second.State, oomAsking(3, classify.PhaseTrain, 2*gib))
	if third.Verb != GiveUp || !strings.Contains(third.Reason, "rule train-oom step 2: workers is not the cause: after workers 8→4, attempt 3 failed asking for the same 2.00 GiB in train") {
		t.Errorf("third: %s: %s", third.Verb, third.Reason)
	}
}

// A compensating change is not a cause candidate; an allocator step (no
// knob changed) is not judged either.
func TestNotTheCauseNamesTheScaledKnob(t *testing.T) {
	last := &Relaunched{Rule: "r", Step: 1, Kind: "gpu_oom", Phase: "train", RequestedBytes: ptr(int64(5)),
		Changes: []Change{{Knob: "a", Old: "8", New: "4"}, {Knob: "b", Old: "1", New: "2", Compensation: true}}}
	out := oomAsking(2, classify.PhaseTrain, 5)
	why, ok := notTheCause(last, "r", 0, classify.KindGPUOOM, out)
	if !ok || !strings.HasPrefix(why, "a is not the cause: after a 8→4,") {
		t.Errorf("%v %q", ok, why)
	}
	last.Changes = []Change{{Env: "PYTORCH_CUDA_ALLOC_CONF", Old: "unset", New: "expandable_segments:True"}}
	if _, ok := notTheCause(last, "r", 0, classify.KindGPUOOM, out); ok {
		t.Errorf("an environment change judged")
	}
	if _, ok := notTheCause(last, "other", 0, classify.KindGPUOOM, out); ok {
		t.Errorf("another rule judged")
	}
}

// When the rule whose step was not the cause has no step left, the next
// matching rule fires, and the note names the rule that moved on.
func TestNotTheCauseThenAnotherRule(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  batch_size: {flag: --batch-size}
rules:
  - name: shrink
    when: {kind: gpu_oom}
    steps: [{halve: batch_size}]
  - name: allocator
    when: {kind: gpu_oom}
    steps: [{merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}}]
`)
	const gib = 1 << 30
	first := p.Decide(NewState(Values{"batch_size": Text("64")}), oomAsking(1, classify.PhaseTrain, gib))
	d := p.Decide(first.State, oomAsking(2, classify.PhaseTrain, gib))
	if d.Verb != Relaunch || d.Rule != "allocator" {
		t.Fatalf("%s %s: %s", d.Verb, d.Rule, d.Reason)
	}
	want := "batch_size is not the cause: after batch_size 64→32, attempt 2 failed asking for the same 1.00 GiB in train"
	if d.Note != want {
		t.Errorf("note %q, want %q", d.Note, want)
	}
	if d.State.Rules["shrink"].Step != 1 {
		t.Errorf("rule shrink at %d, want past its only step", d.State.Rules["shrink"].Step)
	}
}
