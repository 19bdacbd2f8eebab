package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

const fullPolicy = `version: 1
description: test policy
knobs:
  batch_size: {flag: [--batch-size, --bs], default: 64}
  grad_accum: {flag: --grad-accum, default: 1}
  workers: {arg: workers, default: 8}
  crop: {yaml: {key: DATA.VAL_CROP_SIZE, flag: --config}, null_label: full, optional: true}
  out: {env: OUT_DIR, default: out}
rules:
  - name: val-oom
    when: {kind: gpu_oom, phase: val}
    steps:
      - set: {crop: 512}
  - name: train-oom
    when: {kind: [gpu_oom, cpu_alloc_oom], phase: [train, unknown], rank: [0, 1], attempt: ">=1", peak: {val: "95%"}}
    steps:
      - merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
      - do:
          - halve: batch_size
            compensate: grad_accum
            min: 4
          - cut_workers: workers
        times: 3
budget: {relaunches: 3, per_kind: {gpu_oom: 2}, no_progress: 1, crash: 1}
backoff: {initial: 1s, factor: 3, max: 1m, jitter: 0.5}
oom_grace: 45s
sampling: {base_hz: 2, val_hz: 50, fast_window: 3s}
phases:
  - {phase: val, regexp: '^Evaluating'}
checkpoints:
  globs: ["{out}/ckpt-*"]
  choose: highest_step
  marker: done.txt
  quiet: 3s
  poll: 1s
  pass: {template: "--resume {checkpoint} --strict"}
  required: true
  earlier_runs: true
`

func TestParseFull(t *testing.T) {
	p, err := Parse("p.yaml", []byte(fullPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Knobs(), ","); got != "batch_size,grad_accum,workers,crop,out" {
		t.Errorf("Knobs() = %s", got)
	}
	if got := strings.Join(p.Rules(), ","); got != "val-oom,train-oom" {
		t.Errorf("Rules() = %s", got)
	}
	if p.File() != "p.yaml" || p.Description() != "test policy" {
		t.Errorf("File/Description = %q %q", p.File(), p.Description())
	}
	if p.OOMGrace() != 45*time.Second {
		t.Errorf("OOMGrace = %v", p.OOMGrace())
	}
	if s := p.Sampling(); s != (Sampling{BaseHz: 2, ValHz: 50, FastWindow: 3 * time.Second}) {
		t.Errorf("Sampling = %+v", s)
	}
	if pp := p.PhasePatterns(); len(pp) != 1 || pp[0] != (classify.PhasePattern{Phase: classify.PhaseVal, Regexp: "^Evaluating"}) {
		t.Errorf("PhasePatterns = %+v", pp)
	}
	c := p.Checkpoint()
	if c.Choose != "highest_step" || c.Marker != "done.txt" || c.Quiet != 3*time.Second || c.Poll != time.Second ||
		!c.Required || !c.EarlierRuns || c.Pass != "--resume {checkpoint} --strict" || len(c.Globs) != 1 {
		t.Errorf("Checkpoint = %+v", c)
	}
	ex, err := c.Expand(Values{"out": Text("/runs/a")})
	if err != nil || ex.Globs[0] != "/runs/a/ckpt-*" {
		t.Errorf("Expand = %v, %v", ex.Globs, err)
	}
	if c.Globs[0] != "{out}/ckpt-*" {
		t.Errorf("Expand changed the spec it was called on: %v", c.Globs)
	}
	if _, err := c.Expand(Values{}); err == nil || !strings.Contains(err.Error(), "knob out has no value") {
		t.Errorf("Expand without the knob: %v", err)
	}
}

func TestParseDefaults(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\nknobs:\nrules:\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.OOMGrace() != 30*time.Second {
		t.Errorf("default OOMGrace = %v, want 30s", p.OOMGrace())
	}
	if s := p.Sampling(); s != (Sampling{BaseHz: 1, ValHz: 20, FastWindow: 5 * time.Second}) {
		t.Errorf("default Sampling = %+v", s)
	}
	c := p.Checkpoint()
	if c.Choose != "newest" || c.Required || c.EarlierRuns || c.Pass != "" || len(c.Globs) != 0 {
		t.Errorf("default Checkpoint = %+v", c)
	}
	if p.budget.relaunches != 5 || p.budget.noProgress != 2 || p.budget.crash != 0 {
		t.Errorf("default budget = %+v", p.budget)
	}
}

// TestParseErrors checks each strict-decoding error: its exact position and
// message.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // each a full error line
	}{
		{"empty", "", []string{"f.yaml:1:1: policy file is empty; start from `gpuguard policy init -- COMMAND` or a preset (`gpuguard policy list`)"}},
		{"comment only", "# nothing\n", []string{"f.yaml:1:1: policy file is empty; start from `gpuguard policy init -- COMMAND` or a preset (`gpuguard policy list`)"}},
		{"not a mapping", "- a\n", []string{"f.yaml:1:1: the policy must be a mapping (key: value lines), not a list"}},
		{"missing version", "knobs: {}\n", []string{"f.yaml:1:1: missing version: add `version: 1` as the first line"}},
		{"bad version", "version: 2\n", []string{`f.yaml:1:10: unsupported policy version "2": this gpuguard reads version 1`}},
		{"unknown top key", "version: 1\nrulez: []\n", []string{`f.yaml:2:1: the policy: unknown key "rulez" (did you mean "rules"?); allowed: version, description, knobs, rules, budget, backoff, oom_grace, sampling, phases, checkpoints, slurm, notify, hang, exit_codes, memo, verify, prevent`}},
		{"duplicate key", "version: 1\noom_grace: 1s\noom_grace: 2s\n", []string{`f.yaml:3:1: the policy: key "oom_grace" is given twice (first at line 2)`}},
		{"syntax", "version: 1\nknobs: [\n", []string{"f.yaml:2: YAML syntax error: did not find expected node content (the mistake may be on an earlier line: an unclosed bracket or quote, or a tab used for indentation)"}},
		{"duration without unit", "version: 1\noom_grace: 30\n", []string{`f.yaml:2:12: oom_grace must be a duration such as "30s" or "2m", not "30"; write it with a unit, e.g. "30s"`}},
		{"unknown knob key", "version: 1\nknobs:\n  bs: {flag: --bs, defualt: 3}\n", []string{`f.yaml:3:20: knob bs: unknown key "defualt" (did you mean "default"?); allowed: flag, arg, add_prefix, env, yaml, default, optional, null_label`}},
		{"knob without place", "version: 1\nknobs:\n  bs: {default: 3}\n", []string{"f.yaml:3:3: knob bs: say where it lives with one of flag, arg, env or yaml"}},
		{"knob two places", "version: 1\nknobs:\n  bs: {flag: --bs, env: BS}\n", []string{"f.yaml:3:3: knob bs: give only one of flag, arg, env, yaml (got flag and env)"}},
		{"flag without dash", "version: 1\nknobs:\n  bs: {flag: bs}\n", []string{`f.yaml:3:14: knob bs: flag "bs" must start with - and contain no = or spaces (both --x 1 and --x=1 are recognised)`}},
		{"wrong type optional", "version: 1\nknobs:\n  bs: {flag: --bs, optional: maybe}\n", []string{`f.yaml:3:30: knob bs: optional must be true or false, not "maybe"`}},
		{"yaml knob missing flag", "version: 1\nknobs:\n  c: {yaml: {key: A.B}}\n", []string{"f.yaml:3:13: knob c: yaml needs flag: (e.g. --config) or arg: naming the config file in the command"}},
		{"unknown action", "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - halfe: bs\n", []string{`f.yaml:7:9: rule r step 1: unknown action "halfe" (did you mean "halve"?); actions: set, halve, scale, cut_workers, fit, set_env, merge_env, retry, raise_slurm_mem`}},
		{"unknown knob in rule", "version: 1\nknobs:\n  batch_size: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - halve: batchsize\n", []string{`f.yaml:7:16: rule r step 1: halve: unknown knob "batchsize" (did you mean "batch_size"?); knobs: batch_size`}},
		{"unknown kind", "version: 1\nrules:\n  - name: r\n    when: {kind: cuda_oom}\n    steps: [{retry: true}]\n", []string{`f.yaml:4:18: rule r: when: unknown failure kind "cuda_oom" (did you mean "gpu_oom"?); kinds: gpu_oom, cpu_alloc_oom, host_oom, crash, hang`}},
		{"unknown phase", "version: 1\nrules:\n  - name: r\n    when: {phase: valid}\n    steps: [{retry: true}]\n", []string{`f.yaml:4:19: rule r: when: unknown phase "valid" (did you mean "val"?); phases: train, val, unknown (no marker seen)`}},
		{"unknown option", "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - halve: bs\n        minimum: 2\n", []string{`f.yaml:8:9: rule r step 1: halve has no option "minimum" (did you mean "min"?); options: min, max, round, multiple_of, compensate`}},
		{"raise_slurm_mem without max", "version: 1\nrules:\n  - name: r\n    steps:\n      - raise_slurm_mem: {by: 2}\n", []string{`f.yaml:5:9: rule r step 1: raise_slurm_mem needs max: (the largest request, e.g. 64G; per CPU for a job submitted with --mem-per-cpu)`}},
		{"raise_slurm_mem bad max and by", "version: 1\nrules:\n  - name: r\n    steps:\n      - raise_slurm_mem: {by: 0.5, max: lots}\n", []string{`f.yaml:5:31: rule r step 1: raise_slurm_mem: by must be a factor above 1 (1.5 asks for half as much again)`, `f.yaml:5:41: rule r step 1: raise_slurm_mem: max: "lots" is not a memory size (a number of MiB, or with K, M, G or T: 64G)`}},
		{"two verbs", "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - {halve: bs, retry: true}\n", []string{`f.yaml:7:21: rule r step 1: one action per step entry (halve and retry); list several under do:`}},
		{"fit bad headroom", "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - {fit: bs, headroom: 120%}\n", []string{`f.yaml:7:29: rule r step 1: headroom must be the fraction of GPU memory to keep free, from 0 to 0.9, such as 0.1 or "10%", not "120%"`}},
		{"fit bad scaling", "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - fit: bs\n        scaling: cubic\n", []string{`f.yaml:8:18: rule r step 1: scaling must be linear (memory grows with the value: a batch size) or quadratic (with its square: a crop size), not "cubic"`}},
		{"fit unknown option", "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - {fit: bs, by: 0.5}\n", []string{`f.yaml:7:19: rule r step 1: fit has no option "by"; options: min, max, multiple_of, compensate, headroom, scaling`}},
		{"scale without by", "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    steps:\n      - scale: bs\n", []string{"f.yaml:7:9: rule r step 1: scale needs by: (the factor, e.g. 0.75)"}},
		{"duplicate rule", "version: 1\nrules:\n  - {name: a, steps: [{retry: true}]}\n  - {name: a, steps: [{retry: true}]}\n", []string{"f.yaml:4:5: rule a: another rule has this name (line 3); names must be unique, they key the rule's progress in state.json"}},
		{"no steps", "version: 1\nrules:\n  - name: a\n", []string{"f.yaml:3:5: rule a: needs steps: (a list of actions, tried in order across repeated failures)"}},
		{"bad regexp", "version: 1\nphases:\n  - {phase: val, regexp: 'a('}\n", []string{"f.yaml:3:26: phases entry 1: regexp does not compile: error parsing regexp: missing closing ): `a(` (Go RE2 syntax; no lookaround or backreferences)"}},
		{"env of knob", "version: 1\nknobs:\n  crop: {env: CROP}\nrules:\n  - name: r\n    steps:\n      - set_env: {CROP: 3}\n", []string{"f.yaml:7:19: rule r step 1: CROP is knob crop's variable; change it with `set: {crop: VALUE}` so its value is tracked once"}},
		{"merge not options", "version: 1\nrules:\n  - name: r\n    steps:\n      - merge_env: {PYTORCH_CUDA_ALLOC_CONF: expandable}\n", []string{`f.yaml:5:46: rule r step 1: merge_env PYTORCH_CUDA_ALLOC_CONF: option "expandable" is not key:value`}},
		{"allocator option PyTorch would reject", "version: 1\nrules:\n  - name: r\n    steps:\n      - merge_env: {PYTORCH_CUDA_ALLOC_CONF: \"a:b c\"}\n", []string{`f.yaml:5:46: rule r step 1: merge_env PYTORCH_CUDA_ALLOC_CONF: invalid value "b c" for allocator option "a": give one word, or a [bracketed,list]`}},
		{"required without pass", "version: 1\ncheckpoints: {required: true}\n", []string{"f.yaml:2:14: checkpoints: required is true but pass: does not say how to give the job its checkpoint"}},
		{"glob unknown knob", "version: 1\nknobs:\n  out: {flag: --out}\ncheckpoints: {globs: ['{outdir}/x']}\n", []string{`f.yaml:4:22: checkpoints globs: "{outdir}/x" names unknown knob {outdir} (did you mean "out"?)`}},
		{"glob with **", "version: 1\ncheckpoints: {globs: ['logs/**/x.ckpt']}\n", []string{`f.yaml:2:22: checkpoints globs: "logs/**/x.ckpt": ** is not supported; globs use Go's path/filepath.Match (* ? [a-z] within one directory level), so write one * per level`}},
		{"bad glob", "version: 1\ncheckpoints: {globs: ['ckpt[']}\n", []string{`f.yaml:2:22: checkpoints globs: "ckpt[": syntax error in pattern (the syntax is Go's path/filepath.Match: * ? [a-z])`}},
		{"default not a number", "version: 1\nknobs:\n  bs: {flag: --bs, default: auto}\nrules:\n  - name: r\n    steps: [{halve: bs}]\n", []string{`f.yaml:3:3: knob bs: halve in rule r needs a number, but the default is "auto"`}},
		{"several at once", "version: 1\noom_grace: soon\nsampling: {base_hz: 0}\n", []string{
			`f.yaml:2:12: oom_grace must be a duration such as "30s" or "2m", not "soon"`,
			"f.yaml:3:21: sampling base_hz must be above 0 and at most 1000 samples a second",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded; want %q", tc.want)
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n got: %q\nwant: %q", got, tc.want)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.File != "f.yaml" {
				t.Errorf("error is not a *policy.Error for f.yaml: %#v", err)
			}
		})
	}
}

func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		got  string
		want string
	}{
		{"rulez", ` (did you mean "rules"?)`},
		{"bakcoff", ` (did you mean "backoff"?)`}, // transposition
		{"zzzzzz", ""},
		{"rules", ""}, // exact match needs no suggestion
	} {
		if got := DidYouMean(tc.got, topKeys); got != tc.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tc.got, got, tc.want)
		}
	}
}
