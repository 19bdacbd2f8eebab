package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// A short flag is read in both argparse forms, and the launch notes name
// the flag as the command spells it.
func TestShortFlagSpelling(t *testing.T) {
	p := mustParse(t, "version: 1\nknobs:\n  bs: {flag: [--batch-size, -b]}\nrules:\n  - name: r\n    steps: [{halve: bs}]\n")
	for _, argv := range [][]string{
		{"train.py", "-b", "16"},
		{"train.py", "-b16"},
	} {
		vals, err := p.Start(Job{Argv: argv}, nil)
		if err != nil {
			t.Fatalf("%q: %v", argv, err)
		}
		if got := vals["bs"].Text; got != "16" {
			t.Errorf("%q: bs %q, want 16", argv, got)
		}
		l, err := p.Render(Job{Argv: argv}, Values{"bs": Text("8")}, "", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := argv[:len(argv)-1]; len(argv) == 3 && !slices.Equal(l.Argv, []string{"train.py", "-b", "8"}) ||
			len(argv) == 2 && !slices.Equal(l.Argv, []string{"train.py", "-b8"}) {
			t.Errorf("%q rendered %q (%q)", argv, l.Argv, want)
		}
		if len(l.Notes) != 1 || l.Notes[0] != "bs: -b 16 → 8" {
			t.Errorf("%q: notes %q, want the command's own -b", argv, l.Notes)
		}
	}
	// A longer word that starts like the short flag is not it.
	if occ := findFlag([]string{"x", "--bs", "3"}, []string{"-b"}); len(occ) != 0 {
		t.Errorf("-b found in --bs: %+v", occ)
	}
}

// set seeds an unset knob from another knob, and never overrides a value.
func TestSetSeedsFromKnob(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  train_crop: {flag: --train-crop-size, optional: true}
  val_crop: {env: VAL_CROP, optional: true, null_label: full}
rules:
  - name: r
    steps: [{set: {val_crop: "{train_crop}"}}]
`)
	for _, tc := range []struct {
		name   string
		vals   Values
		change string // "" for none
		why    string
	}{
		{"unset, seeded", Values{"train_crop": Text("176")}, "val_crop unset→176", ""},
		{"null, seeded", Values{"train_crop": Text("176"), "val_crop": null}, "val_crop full→176", ""},
		{"set, kept", Values{"train_crop": Text("176"), "val_crop": Text("256")}, "", "val_crop is already 256 (it is seeded from train_crop only while unset)"},
		{"nothing to seed from", Values{}, "", "train_crop has no value to seed val_crop from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := oom(classify.PhaseVal)
			_, changes, why := p.applyStep(p.rules[0].steps[0], tc.vals, &out)
			if tc.change != "" {
				if why != "" || len(changes) != 1 || changes[0].String() != tc.change || !strings.Contains(changes[0].Note, "seeded from train_crop") {
					t.Errorf("changes %v (%q), want %s", changes, why, tc.change)
				}
				return
			}
			if len(changes) != 0 || !strings.Contains(why, tc.why) {
				t.Errorf("changes %v, why %q; want none because %q", changes, why, tc.why)
			}
		})
	}
	for _, src := range []string{
		"version: 1\nknobs:\n  v: {env: V, optional: true}\nrules:\n  - name: r\n    steps: [{set: {v: \"{nope}\"}}]\n",
		"version: 1\nknobs:\n  v: {env: V, optional: true}\nrules:\n  - name: r\n    steps: [{set: {v: \"{v}\"}}]\n",
	} {
		if _, err := Parse("p.yaml", []byte(src)); err == nil {
			t.Errorf("accepted %q", src)
		}
	}
}

// when: {worker: true} matches a failure the log places in a DataLoader
// worker, and worker: false every other.
func TestWorkerCondition(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  workers: {flag: --workers}
  bs: {flag: --bs}
rules:
  - name: in-worker
    when: {worker: true}
    steps: [{cut_workers: workers}]
  - name: elsewhere
    when: {kind: cpu_alloc_oom, worker: false}
    steps: [{halve: bs}]
budget: {relaunches: 5, per_kind: {cpu_alloc_oom: 5}}
`)
	st := NewState(Values{"workers": Text("8"), "bs": Text("64")})
	out := Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindCPUAllocOOM, Phase: classify.PhaseTrain}}
	if d := p.Decide(st, out); d.Rule != "elsewhere" {
		t.Errorf("in the main process: %s", d.Describe())
	}
	out.Verdict.Requester = classify.RequesterDataLoaderWorker
	if d := p.Decide(st, out); d.Rule != "in-worker" {
		t.Errorf("in a worker: %s", d.Describe())
	}
}
