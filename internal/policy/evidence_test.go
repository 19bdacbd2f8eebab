package policy

import (
	"os"
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

// After a host OOM labelled validation, the sampler's evidence that the
// workers held the memory wins over the validation rule, and the decision
// says so; with the main process holding it, the phase's rule fires.
func TestEvidenceOverLabels(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  workers: {flag: --workers}
  crop: {env: CROP}
rules:
  - name: val-host
    when: {kind: host_oom, phase: val}
    steps: [{halve: crop}]
  - name: host-oom
    when: {kind: host_oom}
    steps: [{cut_workers: workers}]
budget: {relaunches: 5, per_kind: {host_oom: 5}}
`)
	st := NewState(Values{"workers": Text("4"), "crop": Text("512")})
	out := Outcome{Attempt: 1, Exit: classify.Exit{Signal: 9}, Verdict: classify.Verdict{Kind: classify.KindHostOOM, Phase: classify.PhaseVal}}
	if d := p.Decide(st, out); d.Rule != "val-host" {
		t.Errorf("no evidence: %s, want the label's rule", d.Describe())
	}
	const gib = 1 << 30
	out.Host = &HostMemory{Main: gib / 4, Workers: 1535 * (1 << 20), Limit: 1525 * (1 << 20)}
	d := p.Decide(st, out)
	want := "rule host-oom step 1: workers 4→2; workers held 1.50 of 1.49 GiB: the evidence wins over rule val-host (when: phase val, kind host_oom)"
	if d.Rule != "host-oom" || !strings.HasPrefix(d.Describe(), want+";") {
		t.Errorf("workers held it:\n got %s\nwant %s", d.Describe(), want)
	}
	out.Host = &HostMemory{Main: gib, Workers: gib / 8, Limit: 2 * gib}
	if d := p.Decide(st, out); d.Rule != "val-host" || !strings.Contains(d.Describe(), "the main process held 1.00 of 2.00 GiB") {
		t.Errorf("the main process held it: %s", d.Describe())
	}
	// No clear holder: the label decides, and nothing is claimed.
	out.Host = &HostMemory{Main: gib, Workers: gib, Limit: 2 * gib}
	if d := p.Decide(st, out); d.Rule != "val-host" || strings.Contains(d.Describe(), "held") {
		t.Errorf("no clear holder: %s", d.Describe())
	}
	// worker: true holds on the evidence too.
	q := mustParse(t, "version: 1\nknobs:\n  workers: {flag: --workers}\nrules:\n  - name: w\n    when: {worker: true}\n    steps: [{cut_workers: workers}]\n")
	out.Host = &HostMemory{Main: 1, Workers: gib, Limit: gib}
	if d := q.Decide(NewState(Values{"workers": Text("4")}), out); d.Rule != "w" {
		t.Errorf("worker: true on the evidence: %s", d.Describe())
	}
}

// Under a host ceiling (RLIMIT_DATA here) fit reads the ceiling and the
// phase's figures, where it used to halve for want of a total.
func TestFitUnderHostCeiling(t *testing.T) {
	p := mustParse(t, "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps: [{fit: bs}]\nbudget: {relaunches: 5, per_kind: {cpu_alloc_oom: 5}}\n")
	const mib = 1 << 20
	out := Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindCPUAllocOOM, Phase: classify.PhaseTrain,
		OOM: &classify.OOM{RequestedBytes: ptr(int64(1024 * mib))}}}
	st := NewState(Values{"bs": Text("1024")})
	if d := p.Decide(st, out); !strings.Contains(d.Describe(), "bs 1024→512") || !strings.Contains(d.Describe(), "no host memory ceiling was found") {
		t.Errorf("without a ceiling: %s", d.Describe())
	}
	// 1 GiB asked at batch 1024 on top of 600 MiB in use when training
	// began, under 1000 MiB: 1 MiB per sample, 300 MiB free after the
	// headroom → 300.
	out.Host = &HostMemory{Ceiling: 1000 * mib, CeilingFrom: "RLIMIT_DATA", Last: 600 * mib,
		Starts: map[classify.Phase]int64{classify.PhaseTrain: 600 * mib}, Peaks: map[classify.Phase]int64{classify.PhaseTrain: 600 * mib}}
	d := p.Decide(st, out)
	if !strings.Contains(d.Describe(), "bs 1024→300") || !strings.Contains(d.Describe(), "1000 MiB of RLIMIT_DATA") {
		t.Errorf("under RLIMIT_DATA: %s", d.Describe())
	}
}

// docs/policy.md quotes an evidence decision and a fit under RLIMIT_DATA;
// they are what Decide says for these outcomes.
func TestDocQuotesHostDecisions(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	p := mustParse(t, `version: 1
knobs:
  batch_size: {flag: --batch-size}
  workers: {flag: --workers}
rules:
  - name: val-host
    when: {kind: host_oom, phase: val}
    steps: [{halve: batch_size}]
  - name: host-oom
    when: {kind: host_oom}
    steps: [{cut_workers: workers}]
  - name: train-oom
    when: {kind: cpu_alloc_oom}
    steps: [{fit: batch_size}]
budget: {relaunches: 5, per_kind: {host_oom: 5, cpu_alloc_oom: 5}}
backoff: {initial: 0s}
`)
	st := NewState(Values{"batch_size": Text("4096"), "workers": Text("4")})
	ev := p.Decide(st, Outcome{Attempt: 1, Exit: classify.Exit{Signal: 9},
		Verdict: classify.Verdict{Kind: classify.KindHostOOM, Phase: classify.PhaseVal},
		Host:    &HostMemory{Main: 256 * mib, Workers: 1535 * mib, Limit: 1525 * mib}})
	fit := p.Decide(st, Outcome{Attempt: 1, Exit: classify.Exit{Code: 1},
		Verdict: classify.Verdict{Kind: classify.KindCPUAllocOOM, OOM: &classify.OOM{RequestedBytes: ptr(int64(1 << 30))}},
		Host: &HostMemory{Ceiling: 618 * mib, CeilingFrom: "RLIMIT_DATA", Last: 142 * mib,
			Starts: map[classify.Phase]int64{classify.PhaseNone: 142 * mib}}})
	for _, line := range []string{
		"attempt 1 died of host OOM in validation → " + ev.Describe(),
		fit.Describe(),
	} {
		if !strings.Contains(string(doc), "\n"+line+"\n") {
			t.Errorf("docs/policy.md does not quote, on a line of its own:\n%s", line)
		}
	}
}
