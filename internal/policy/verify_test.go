package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// unappliedAfter is attempt 2 of a run whose first relaunch halved the
// batch 32→16 under policy src: it failed the same way (the same request
// in the same phase), and the job said it used 32 (resumed from ckpt).
func unappliedAfter(t *testing.T, src, ckpt string) (*Policy, State, Outcome) {
	t.Helper()
	p := mustParse(t, src)
	const gib = 1 << 30
	first := p.Decide(NewState(Values{"batch_size": Text("32"), "workers": Text("8")}), oomAsking(1, classify.PhaseTrain, gib))
	if first.Verb != Relaunch || !strings.HasPrefix(first.Describe(), "rule train-oom step 1: batch_size 32→16") {
		t.Fatalf("first decision: %s", first.Describe())
	}
	out := oomAsking(2, classify.PhaseTrain, gib)
	out.StartStep = ptr(int64(10))
	out.Unapplied = []Unapplied{{Knob: "batch_size", Set: "16", Used: "32", Line: 3,
		Text: "Restoring train_batch_size=32 from the checkpoint", Checkpoint: ckpt}}
	return p, first.State, out
}

// A change that did not take hold is no evidence against the knob: the
// cause check does not conclude "batch_size is not the cause", no rule
// moves on, and by default the run gives up saying why and what to set.
func TestUnappliedIsNotEvidence(t *testing.T) {
	p, st, out := unappliedAfter(t, causePolicy, "ckpt/step_10.pt")
	d := p.Decide(st, out)
	if d.Verb != GiveUp || strings.Contains(d.Reason, "not the cause") || d.State.Rules["train-oom"].Step != 0 {
		t.Fatalf("decision %s, rule state %+v", d.Describe(), d.State.Rules)
	}
	for _, want := range []string{
		`batch_size 16 did not take hold: the job used 32 (line 3: "Restoring train_batch_size=32 from the checkpoint")`,
		"kept the value it resumed with from ckpt/step_10.pt",
		"attempt 2 says nothing of whether batch_size is the cause",
		"set verify: {unapplied: drop_checkpoint}",
	} {
		if !strings.Contains(d.Reason, want) {
			t.Errorf("reason lacks %q:\n%s", want, d.Reason)
		}
	}
	// Without the verification, the same attempt is taken as evidence.
	out.Unapplied = nil
	if d := p.Decide(st, out); !strings.Contains(d.Note, "batch_size is not the cause") {
		t.Errorf("without Unapplied: %s", d.Describe())
	}
}

// verify: {unapplied: drop_checkpoint}: the job is relaunched with the same
// values, without the checkpoint, once; the relaunch counts; the rule stays
// where it was, so that a failure at the value that now holds is judged as
// usual.
func TestUnappliedDropCheckpoint(t *testing.T) {
	p, st, out := unappliedAfter(t, causePolicy+"verify: {unapplied: drop_checkpoint}\n", "ckpt/step_10.pt")
	d := p.Decide(st, out)
	want := `batch_size 16 did not take hold: the job used 32 (line 3: "Restoring train_batch_size=32 from the checkpoint"); starting without the checkpoint that pins it, ckpt/step_10.pt (verify: {unapplied: drop_checkpoint}); relaunching in`
	if d.Verb != Relaunch || !d.FromScratch || len(d.Changes) != 0 || !strings.HasPrefix(d.Describe(), want) {
		t.Fatalf("decision %+v\n%s", d, d.Describe())
	}
	if d.State.Relaunches != 2 || d.State.Values["batch_size"] != Text("16") || d.State.Rules["train-oom"].Step != 0 || d.State.Last.Attempt != 2 {
		t.Errorf("state %+v", d.State)
	}
	// The attempt without the checkpoint fails the same way at 16: now
	// that is evidence, and the rule moves on.
	next := oomAsking(3, classify.PhaseTrain, 1<<30)
	if d := p.Decide(d.State, next); !strings.Contains(d.Note, "batch_size is not the cause") || !strings.HasPrefix(d.Describe(), "rule train-oom step 2: workers 8→4") {
		t.Errorf("after the fresh start: %s", d.Describe())
	}
	// An attempt that did not resume: no checkpoint pinned the value.
	out.Unapplied[0].Checkpoint = ""
	d = p.Decide(st, out)
	if d.Verb != GiveUp || !strings.Contains(d.Reason, "did not resume from a checkpoint, so none pins the old value") {
		t.Errorf("without a checkpoint: %s", d.Describe())
	}
}

func TestVerifyKey(t *testing.T) {
	if p := mustParse(t, causePolicy); p.UnappliedMode() != UnappliedGiveUp {
		t.Errorf("default %q", p.UnappliedMode())
	}
	for src, want := range map[string]string{
		"verify: {unapplied: drop_checkpint}\n": `verify.unapplied must be give_up or drop_checkpoint, not "drop_checkpint" (did you mean "drop_checkpoint"?)`,
		"verify: {unaplied: give_up}\n":         `verify: unknown key "unaplied"`,
		"verify: {unapplied: drop_checkpoint}\ncheckpoints: {globs: [c/*.pt], pass: {flag: --resume}, required: true}\n": "which checkpoints: {required: true} forbids",
	} {
		_, err := Parse("p.yaml", []byte(causePolicy+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
	p := mustParse(t, `version: 1
knobs:
  batch_size: {flag: [--batch-size, -b]}
  lr: {env: LEARNING_RATE}
  crop: {yaml: {key: data.val.crop, flag: --config}}
`)
	for knob, want := range map[string]string{"batch_size": "--batch-size -b", "lr": "LEARNING_RATE", "crop": "data.val.crop crop", "none": ""} {
		if got := strings.Join(p.KeySpellings(knob), " "); got != want {
			t.Errorf("KeySpellings(%s) = %q, want %q", knob, got, want)
		}
	}
}
