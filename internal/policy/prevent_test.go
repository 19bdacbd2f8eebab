package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

const preventPolicy = `version: 1
knobs:
  workers: {flag: --workers, default: 4}
rules:
  - name: frag
    when: {kind: gpu_oom, fragmentation: true}
    steps:
      - set_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
  - name: host-workers
    when: {kind: host_oom, worker: true}
    steps:
      - halve: workers
        min: 1
  - name: any-oom
    when: {kind: [gpu_oom, host_oom]}
    steps:
      - halve: workers
        min: 1
checkpoints:
  globs: [ckpt/epoch-*.ckpt]
  pass: {flag: --resume}
prevent: {memory_growth: restart, budget: 2}
`

func growth(cause string) Growth {
	return Growth{Attempt: 1, Phase: classify.PhaseTrain, Device: "host", Ceiling: "RLIMIT_DATA", CeilingBytes: 330 << 20,
		From: 2, To: 6, Runs: 5, Epochs: true, SlopeBytes: 48 << 20, MarginBytes: 3 << 20, LastBytes: 300 << 20,
		NextLabel: 7, NextBytes: 351 << 20, NextWontFit: true, Cause: cause, Checkpoint: "ckpt/epoch-6.ckpt"}
}

func TestPreventGrowth(t *testing.T) {
	p, err := Parse("p.yaml", []byte(preventPolicy))
	if err != nil {
		t.Fatal(err)
	}
	st := NewState(Values{"workers": {Text: "4"}})

	// A leak: restart, no rule step (none names a leak), its own budget.
	d, ok := p.PreventGrowth(st, growth(GrowthLeak))
	if !ok || d.Verb != Relaunch || len(d.Changes) != 0 || d.Backoff != 0 {
		t.Fatalf("leak: %v %+v", ok, d)
	}
	for _, want := range []string{"host memory projected at 351 MiB in epoch 7, over RLIMIT_DATA's 330 MiB", "fit over epochs 2-6: 48.0 MiB per epoch", "checkpoint ckpt/epoch-6.ckpt is complete", "prevent 1 of 2"} {
		if !strings.Contains(d.Reason, want) {
			t.Errorf("reason %q lacks %q", d.Reason, want)
		}
	}
	if d.State.Relaunches != 0 || d.State.Prevented == nil || d.State.Prevented.Restarts != 1 || st.Prevented != nil {
		t.Fatalf("state: %+v (given %+v)", d.State, st)
	}

	// The same projection again, or one with no epoch beyond it: no new evidence.
	if d2, ok := p.PreventGrowth(d.State, growth(GrowthLeak)); ok {
		t.Fatalf("same projection acted on twice: %+v", d2)
	}
	g := growth(GrowthLeak)
	g.Attempt, g.From, g.To = 2, 4, 6
	if d2, ok := p.PreventGrowth(d.State, g); ok || !strings.Contains(d2.Reason, "no new evidence") {
		t.Fatalf("no progress beyond the last projection: %v %q", ok, d2.Reason)
	}
	// New evidence: the next attempt's epochs beyond it; then the budget.
	g.From, g.To, g.NextLabel = 8, 11, 12
	d2, ok := p.PreventGrowth(d.State, g)
	if !ok {
		t.Fatalf("new evidence: %q", d2.Reason)
	}
	g.Attempt, g.From, g.To, g.NextLabel = 3, 13, 16, 17
	if d3, ok := p.PreventGrowth(d2.State, g); ok || !strings.Contains(d3.Reason, "prevent budget exhausted (2/2)") {
		t.Fatalf("budget: %v %q", ok, d3.Reason)
	}

	// Never without a checkpoint, never when the next run fits.
	g = growth(GrowthLeak)
	g.Checkpoint = ""
	if d, ok := p.PreventGrowth(st, g); ok || !strings.Contains(d.Reason, "no completed checkpoint") {
		t.Fatalf("no checkpoint: %v %q", ok, d.Reason)
	}
	g = growth(GrowthLeak)
	g.NextWontFit = false
	if _, ok := p.PreventGrowth(st, g); ok {
		t.Fatal("acted on a projection that fits")
	}

	// The workers' growth: the rule naming workers halves them.
	d, ok = p.PreventGrowth(st, growth(GrowthWorkers))
	if !ok || d.Rule != "host-workers" || len(d.Changes) != 1 || d.Changes[0].String() != "workers 4→2" {
		t.Fatalf("workers: %v %+v", ok, d)
	}
	if d.State.Values["workers"].Text != "2" || d.State.Rules["host-workers"].Fired != 1 {
		t.Fatalf("workers state: %+v", d.State)
	}

	// Fragmentation on a GPU: expandable_segments.
	g = growth(GrowthFragmentation)
	g.Device, g.Ceiling = "GPU0", "the GPU's capacity"
	d, ok = p.PreventGrowth(st, g)
	if !ok || d.Rule != "frag" || len(d.Changes) != 1 || !strings.Contains(d.Changes[0].New, "expandable_segments:True") {
		t.Fatalf("fragmentation: %v %+v", ok, d)
	}
}

func TestPreventParse(t *testing.T) {
	if p, err := Parse("p.yaml", []byte("version: 1\n")); err != nil {
		t.Fatal(err)
	} else if _, on := p.Prevent(); on {
		t.Fatal("prevention is on without prevent:")
	}
	for _, c := range []struct{ yaml, want string }{
		{"prevent: {memory_growth: restrat}\ncheckpoints: {globs: [c/*], pass: {flag: --resume}}\n", `p.yaml:2:26: prevent memory_growth: unknown action "restrat" (did you mean "restart"?)`},
		{"prevent: {memory_growth: restart}\n", "p.yaml:2:10: prevent: needs the checkpoints: section to say where the checkpoints are"},
		{"prevent: {memory_growth: restart, budget: 0}\ncheckpoints: {globs: [c/*], pass: {flag: --resume}}\n", "p.yaml:2:43: prevent budget must be at least 1"},
		{"prevent: {budget: 2}\ncheckpoints: {globs: [c/*], pass: {flag: --resume}}\n", "p.yaml:2:10: prevent: say what to do"},
		{"prevent: {memory_growth: restart, when: x}\ncheckpoints: {globs: [c/*], pass: {flag: --resume}}\n", `p.yaml:2:35: prevent: unknown key "when"`},
	} {
		_, err := Parse("p.yaml", []byte("version: 1\n"+c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
}
