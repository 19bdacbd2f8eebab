package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

func oom(phase classify.Phase) Outcome {
	return Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: phase}, Rand: 0.5}
}

func ptr[T any](v T) *T { return &v }

// actionPolicy has knobs a, b (whole numbers), f (a float) and one rule
// whose single step is step.
func actionPolicy(t testing.TB, step string) *Policy {
	return mustParse(t, `version: 1
knobs:
  a: {flag: --a, optional: true}
  b: {flag: --b, optional: true}
  f: {flag: --f, optional: true}
  crop: {env: CROP, optional: true, null_label: full}
rules:
  - name: r
    steps:
      - `+step+`
budget: {relaunches: 100}
`)
}

// actionCases are what each action does, one case at least per verb of the
// actions table (TestActionTable checks): the step, the values before, and
// the changes it makes or why it cannot act.
var actionCases = []struct {
	name  string
	step  string
	vals  Values
	want  string // Describe's changes, or "cannot: <why>"
	after Values // values after, when it acts
}{
	{"set", "set: {a: 3, crop: 256}", Values{"a": Text("1"), "crop": null}, "a 1→3, crop full→256", Values{"a": Text("3"), "crop": Text("256")}},
	{"set an unset knob", "set: {a: 3}", Values{}, "a unset→3", Values{"a": Text("3")}},
	{"set to null", "set: {crop: null}", Values{"crop": Text("256")}, "crop 256→full", Values{"crop": null}},
	{"set already there", "set: {a: 3}", Values{"a": Text("3")}, "cannot: a is already 3", nil},
	{"set, one of two already there", "set: {a: 3, b: 4}", Values{"a": Text("3"), "b": Text("1")}, "b 1→4", Values{"a": Text("3"), "b": Text("4")}},
	{"halve", "halve: a", Values{"a": Text("64")}, "a 64→32", Values{"a": Text("32")}},
	{"halve odd rounds down", "halve: a", Values{"a": Text("7")}, "a 7→3", Values{"a": Text("3")}},
	{"halve odd, round up", "{halve: a, round: up}", Values{"a": Text("7")}, "a 7→4", Values{"a": Text("4")}},
	{"halve odd, round nearest", "{halve: a, round: nearest}", Values{"a": Text("5")}, "a 5→3", Values{"a": Text("3")}},
	{"halve at implicit floor 1", "halve: a", Values{"a": Text("1")}, "cannot: a is 1, at its floor (min 1)", nil},
	{"halve to min", "{halve: a, min: 24}", Values{"a": Text("32")}, "a 32→24", Values{"a": Text("24")}},
	{"halve at min", "{halve: a, min: 24}", Values{"a": Text("24")}, "cannot: a is 24, at its floor (min 24)", nil},
	{"halve below min already", "{halve: a, min: 24}", Values{"a": Text("16")}, "cannot: a is 16, already below min 24", nil},
	{"halve float keeps float", "halve: f", Values{"f": Text("0.7")}, "f 0.7→0.35", Values{"f": Text("0.35")}},
	{"halve multiple_of", "{halve: a, multiple_of: 32}", Values{"a": Text("400")}, "a 400→192", Values{"a": Text("192")}},
	{"halve null", "halve: crop", Values{"crop": null}, "cannot: crop is full, not a number", nil},
	{"halve not a number", "halve: a", Values{"a": Text("auto")}, "cannot: a is auto, not a number", nil},
	{"halve negative (AutoBatch)", "halve: a", Values{"a": Text("-1")}, "cannot: a is -1, not a positive number", nil},
	{"halve no value", "halve: a", Values{}, "cannot: a has no value (the command does not set it)", nil},
	{"scale down", "{scale: a, by: 0.75}", Values{"a": Text("10")}, "a 10→7", Values{"a": Text("7")}},
	{"scale up to max", "{scale: a, by: 2, max: 12}", Values{"a": Text("8")}, "a 8→12", Values{"a": Text("12")}},
	{"scale up at max", "{scale: a, by: 2, max: 12}", Values{"a": Text("12")}, "cannot: a is 12, at its ceiling (max 12)", nil},
	{"scale up rounding stuck", "{scale: a, by: 1.1}", Values{"a": Text("3")}, "cannot: a is 3, and ×1.1 rounds back to it", nil},
	{"compensate", "{halve: a, compensate: b}", Values{"a": Text("64"), "b": Text("1")}, "a 64→32 (b 1→2)", Values{"a": Text("32"), "b": Text("2")}},
	{"compensate odd: nearest, halves up", "{halve: a, compensate: b}", Values{"a": Text("5"), "b": Text("1")}, "a 5→2 (b 1→3); effective batch 5 → 6: 5 is not divisible by 2", Values{"a": Text("2"), "b": Text("3")}},
	{"compensate odd with accumulation", "{halve: a, compensate: b}", Values{"a": Text("7"), "b": Text("9")}, "a 7→3 (b 9→21)", Values{"a": Text("3"), "b": Text("21")}},
	{"compensate inexact down", "{halve: a, compensate: b}", Values{"a": Text("50"), "b": Text("2")}, "a 50→25 (b 2→4)", Values{"a": Text("25"), "b": Text("4")}},
	{"compensate inexact", "{halve: a, compensate: b}", Values{"a": Text("25"), "b": Text("2")}, "a 25→12 (b 2→4); effective batch 50 → 48: 50 is not divisible by 12", Values{"a": Text("12"), "b": Text("4")}},
	{"compensate without value", "{halve: a, compensate: b}", Values{"a": Text("8")}, "cannot: b cannot compensate: it has no value", nil},
	{"compensate float", "{halve: f, compensate: b}", Values{"f": Text("0.5"), "b": Text("2")}, "cannot: cannot keep f × b: both must be positive whole numbers (0.5, 2)", nil},
	{"cut workers to 0", "cut_workers: a", Values{"a": Text("1")}, "a 1→0", Values{"a": Text("0")}},
	{"cut workers at 0", "cut_workers: a", Values{"a": Text("0")}, "cannot: a is 0, not a positive number", nil},
	{"cut workers min", "{cut_workers: a, min: 2}", Values{"a": Text("3")}, "a 3→2", Values{"a": Text("2")}},
	{"fit without figures halves, and says so", "{fit: a, compensate: b}", Values{"a": Text("64"), "b": Text("1")},
		"a 64→32 (b 1→2); fit: halving, the figures are unusable: the error gave no total and requested memory", Values{"a": Text("32"), "b": Text("2")}},
	{"fit at its floor", "{fit: a, min: 8}", Values{"a": Text("8")}, "cannot: a is 8, at its floor (min 8)", nil},
	{"fit not a number", "fit: a", Values{"a": Text("auto")}, "cannot: a is auto, not a number", nil},
	{"set_env", "set_env: {NCCL_DEBUG: INFO}", Values{}, "NCCL_DEBUG unset→INFO", Values{EnvKey("NCCL_DEBUG"): Text("INFO")}},
	{"set_env same", "set_env: {NCCL_DEBUG: INFO}", Values{EnvKey("NCCL_DEBUG"): Text("INFO")}, "cannot: NCCL_DEBUG is already INFO", nil},
	{"set_env null unsets", "set_env: {X: null}", Values{EnvKey("X"): Text("1")}, "X 1→unset", Values{EnvKey("X"): null}},
	{"merge_env into unset", `merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}`, Values{},
		"PYTORCH_CUDA_ALLOC_CONF unset→expandable_segments:True", Values{EnvKey("PYTORCH_CUDA_ALLOC_CONF"): Text("expandable_segments:True")}},
	{"merge_env keeps the user's options", `merge_env: {PYTORCH_CUDA_ALLOC_CONF: "garbage_collection_threshold:0.6"}`,
		Values{EnvKey("PYTORCH_CUDA_ALLOC_CONF"): Text("max_split_size_mb:128, expandable_segments:True")},
		"PYTORCH_CUDA_ALLOC_CONF max_split_size_mb:128, expandable_segments:True→max_split_size_mb:128,expandable_segments:True,garbage_collection_threshold:0.6",
		Values{EnvKey("PYTORCH_CUDA_ALLOC_CONF"): Text("max_split_size_mb:128,expandable_segments:True,garbage_collection_threshold:0.6")}},
	{"merge_env replaces the same key in place", `merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}`,
		Values{EnvKey("PYTORCH_CUDA_ALLOC_CONF"): Text("expandable_segments:False,max_split_size_mb:64")},
		"PYTORCH_CUDA_ALLOC_CONF expandable_segments:False,max_split_size_mb:64→expandable_segments:True,max_split_size_mb:64",
		Values{EnvKey("PYTORCH_CUDA_ALLOC_CONF"): Text("expandable_segments:True,max_split_size_mb:64")}},
	{"merge_env already there", `merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}`,
		Values{EnvKey("PYTORCH_CUDA_ALLOC_CONF"): Text("max_split_size_mb:64, expandable_segments:True")},
		"cannot: PYTORCH_CUDA_ALLOC_CONF already has expandable_segments:True", nil},
	{"retry", "{retry: true}", Values{"a": Text("1")}, "relaunch unchanged", Values{"a": Text("1")}},
	{"raise_slurm_mem outside Slurm", "raise_slurm_mem: {by: 1.5, max: 64G}", Values{"a": Text("1")}, "cannot: not a Slurm job with a memory request (sbatch --mem or --mem-per-cpu)", nil},
	{"do: several actions, one at its floor", "do: [{halve: a}, {set: {crop: 256}}]", Values{"a": Text("1"), "crop": null},
		"crop full→256", Values{"a": Text("1"), "crop": Text("256")}},
	{"do: all at floors", "do: [{halve: a}, {set: {crop: 256}}]", Values{"a": Text("1"), "crop": Text("256")},
		"cannot: a is 1, at its floor (min 1); crop is already 256", nil},
}

func TestActions(t *testing.T) {
	for _, tc := range actionCases {
		t.Run(tc.name, func(t *testing.T) {
			p := actionPolicy(t, tc.step)
			st := NewState(tc.vals)
			d := p.Decide(st, oom(classify.PhaseTrain))
			if !reflect.DeepEqual(st.Values, NewState(tc.vals).Values) {
				t.Errorf("Decide changed the state it was given")
			}
			if tc.after == nil {
				if d.Verb != GiveUp {
					t.Fatalf("verb %s (%s), want give_up", d.Verb, d.Describe())
				}
				want := "rule r step 1: " + strings.TrimPrefix(tc.want, "cannot: ")
				if !strings.Contains(d.Reason, want) {
					t.Errorf("reason %q lacks %q", d.Reason, want)
				}
				return
			}
			if d.Verb != Relaunch {
				t.Fatalf("verb %s (%s), want relaunch", d.Verb, d.Reason)
			}
			if got := strings.TrimPrefix(d.Describe(), "rule r step 1: "); !strings.HasPrefix(got, tc.want+"; relaunching in ") {
				t.Errorf("Describe = %q, want %q", got, tc.want)
			}
			if !reflect.DeepEqual(d.State.Values, tc.after) {
				t.Errorf("values after = %v, want %v", d.State.Values, tc.after)
			}
		})
	}
}

const matchPolicy = `version: 1
rules:
  - {name: kinds, when: {kind: [host_oom, cpu_alloc_oom]}, steps: [{retry: true}]}
  - {name: frag, when: {kind: gpu_oom, fragmentation: true}, steps: [{retry: true}]}
  - {name: others, when: {kind: gpu_oom, other_processes: true}, steps: [{retry: true}]}
  - {name: rank1, when: {kind: gpu_oom, rank: [1, 3]}, steps: [{retry: true}]}
  - {name: late, when: {kind: gpu_oom, attempt: ">=3"}, steps: [{retry: true}]}
  - {name: peak, when: {kind: gpu_oom, phase: train, peak: {val: 0.95}}, steps: [{retry: true}]}
  - {name: val, when: {kind: gpu_oom, phase: val}, steps: [{retry: true}]}
  - {name: unknown, when: {phase: unknown}, steps: [{retry: true}]}
budget: {crash: 1}
`

func TestMatching(t *testing.T) {
	p := mustParse(t, matchPolicy)
	v := func(kind classify.Kind, phase classify.Phase) classify.Verdict {
		return classify.Verdict{Kind: kind, Phase: phase}
	}
	for _, tc := range []struct {
		name string
		out  Outcome
		want string // rule that fires, "" for none
	}{
		{"host oom", Outcome{Verdict: v(classify.KindHostOOM, "train")}, "kinds"},
		{"cpu alloc oom", Outcome{Verdict: v(classify.KindCPUAllocOOM, "val")}, "kinds"},
		{"fragmentation", Outcome{Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: "val", Fragmentation: true}}, "frag"},
		{"other processes", Outcome{Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: "val", OtherProcesses: true}}, "others"},
		{"rank in list", Outcome{Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: "train", Rank: ptr(3)}}, "rank1"},
		{"rank not in list", Outcome{Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: "val", Rank: ptr(0)}}, "val"},
		{"rank unknown does not match a rank condition", Outcome{Verdict: v(classify.KindGPUOOM, "val")}, "val"},
		{"attempt 3", Outcome{Attempt: 3, Verdict: v(classify.KindGPUOOM, "val")}, "late"},
		{"attempt 2", Outcome{Attempt: 2, Verdict: v(classify.KindGPUOOM, "val")}, "val"},
		{"val peak over", Outcome{Verdict: v(classify.KindGPUOOM, "train"), Peaks: map[classify.Phase]float64{classify.PhaseVal: 0.97}}, "peak"},
		{"val peak at threshold", Outcome{Verdict: v(classify.KindGPUOOM, "train"), Peaks: map[classify.Phase]float64{classify.PhaseVal: 0.95}}, ""},
		{"peak unknown", Outcome{Verdict: v(classify.KindGPUOOM, "train")}, ""},
		{"unknown phase, any kind", Outcome{Verdict: v(classify.KindGPUOOM, "")}, "unknown"},
		{"unrecognised failure is a crash", Outcome{Verdict: v(classify.KindNone, "")}, "unknown"},
		{"crash in train", Outcome{Verdict: v(classify.KindCrash, "train")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.out.Exit.Code = 1
			if tc.out.Attempt == 0 {
				tc.out.Attempt = 1
			}
			d := p.Decide(NewState(nil), tc.out)
			if d.Rule != tc.want {
				t.Errorf("rule %q fired (%s), want %q", d.Rule, d.Reason, tc.want)
			}
			if tc.want == "" && (d.Verb != GiveUp || !strings.Contains(d.Reason, "no rule matches")) {
				t.Errorf("verb %s reason %q, want give_up: no rule matches", d.Verb, d.Reason)
			}
		})
	}
}

// Escalation: a step repeats until its floor, then the rule moves on; when
// the rule is exhausted the next matching rule acts; then the run gives up.
func TestEscalation(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  bs: {flag: --bs, default: 8}
  ga: {flag: --ga, default: 1}
  crop: {env: CROP, null_label: full}
rules:
  - name: val-oom
    when: {kind: gpu_oom, phase: val}
    steps:
      - set: {crop: 512}
      - {halve: crop, min: 256, multiple_of: 32}
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
      - {halve: bs, compensate: ga, min: 2, times: 1}
      - {halve: bs, min: 1}
budget: {relaunches: 20}
`)
	st := NewState(Values{"bs": Text("8"), "ga": Text("1"), "crop": null})
	var got []string
	for i := 1; i <= 12; i++ {
		phase := classify.PhaseVal
		if i > 3 {
			phase = classify.PhaseTrain
		}
		out := oom(phase)
		out.Attempt = i
		d := p.Decide(st, out)
		if d.Verb != Relaunch {
			got = append(got, "give up")
			if !strings.Contains(d.Reason, "every matching rule is at its floors (rule train-oom step 3: bs is 1, at its floor (min 1))") {
				t.Errorf("final reason: %s", d.Reason)
			}
			break
		}
		got = append(got, strings.Split(d.Describe(), "; relaunching")[0])
		st = d.State
		// The state survives a JSON round trip (state.json).
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, st) {
			t.Fatalf("state JSON round trip: %v\n%+v\n%+v", err, back, st)
		}
		st = back
	}
	want := []string{
		"rule val-oom step 1: crop full→512",
		"rule val-oom step 2: crop 512→256",
		// val-oom is at its floor: a fourth val OOM would fall to train-oom.
		"rule train-oom step 1: PYTORCH_CUDA_ALLOC_CONF unset→expandable_segments:True",
		"rule train-oom step 2: bs 8→4 (ga 1→2)",
		"rule train-oom step 3: bs 4→2",
		"rule train-oom step 3: bs 2→1",
		"give up",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("escalation:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st.Relaunches != 6 || st.ByKind[classify.KindGPUOOM] != 6 || st.Rules["train-oom"].Fired != 4 || st.Rules["train-oom"].Step != 2 {
		t.Errorf("state counters: %+v", st)
	}
}

// A matching rule at its floors yields to the next matching rule.
func TestFloorFallsToNextRule(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  vbs: {flag: --vbs, default: 1}
  bs: {flag: --bs, default: 4}
rules:
  - {name: val, when: {phase: val}, steps: [{halve: vbs}]}
  - {name: any, steps: [{halve: bs}]}
`)
	d := p.Decide(NewState(Values{"vbs": Text("1"), "bs": Text("4")}), oom(classify.PhaseVal))
	if d.Rule != "any" || d.Describe() != "rule any step 1: bs 4→2; relaunching in 5s" {
		t.Errorf("got %s: %s", d.Rule, d.Describe())
	}
}

func TestBudgets(t *testing.T) {
	p := mustParse(t, `version: 1
rules:
  - {name: r, steps: [{retry: true}]}
budget: {relaunches: 4, per_kind: {gpu_oom: 2}, no_progress: 1, crash: 1}
`)
	st := NewState(nil)
	step := func(s int64) *int64 { return &s }
	for _, tc := range []struct {
		name   string
		st     func(State) State
		out    Outcome
		verb   Verb
		reason string
	}{
		{"success", nil, Outcome{Attempt: 1, Verdict: classify.Verdict{Kind: classify.KindGPUOOM}}, Done, "the job exited with status 0"},
		{"terminated never relaunches", nil, Outcome{Attempt: 1, Terminated: true, Exit: classify.Exit{Code: 143, Signal: 15}, Verdict: classify.Verdict{Kind: classify.KindGPUOOM}}, GiveUp,
			"gpuguard was told to stop (preemption, cancel or Ctrl-C): the job is not relaunched; its status 143 is passed on"},
		{"first gpu oom", nil, oom(classify.PhaseTrain), Relaunch, "attempt 1: gpu_oom in train matched rule r (step 1 of 1); relaunch 1 of 4, gpu_oom 1 of 2"},
		{"per kind exhausted", func(s State) State { s.Relaunches, s.ByKind[classify.KindGPUOOM] = 2, 2; return s }, oom(classify.PhaseTrain), GiveUp,
			"attempt 1: gpu_oom in train; budget for gpu_oom exhausted (2/2)"},
		{"other kind still has budget", func(s State) State { s.Relaunches, s.ByKind[classify.KindGPUOOM] = 2, 2; return s },
			Outcome{Attempt: 3, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindHostOOM}}, Relaunch,
			"attempt 3: host_oom in an unknown phase matched rule r (step 1 of 1); relaunch 3 of 4"},
		{"overall exhausted", func(s State) State { s.Relaunches = 4; return s }, Outcome{Attempt: 5, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindHostOOM}}, GiveUp,
			"attempt 5: host_oom in an unknown phase; relaunch budget exhausted (4/4)"},
		{"crash retried once", nil, Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindCrash, Reason: "NCCL timeout"}}, Relaunch,
			"attempt 1: crash in an unknown phase matched rule r (step 1 of 1); relaunch 1 of 4, crash 1 of 1"},
		{"crash budget exhausted", func(s State) State { s.Relaunches, s.ByKind[classify.KindCrash] = 1, 1; return s },
			Outcome{Attempt: 2, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindCrash}}, GiveUp,
			"attempt 2: crash in an unknown phase; budget for crash exhausted (1/1)"},
		{"no progress counted", nil, func() Outcome { o := oom("train"); o.StartStep = step(500); atStep(&o, 500); return o }(), Relaunch,
			"attempt 1: gpu_oom in train matched rule r (step 1 of 1); relaunch 1 of 4, gpu_oom 1 of 2, no progress 1 of 1"},
		{"no progress exhausted", func(s State) State { s.Relaunches, s.NoProgress = 1, 1; return s },
			func() Outcome {
				o := oom("train")
				o.Attempt, o.StartStep = 2, step(500)
				atStep(&o, 480)
				return o
			}(), GiveUp,
			"attempt 2: gpu_oom in train; attempt 2 resumed from step 500 and got no further (step 480, read at line 7: \"step 480/1000 loss=2.1\"), and the no-progress budget is exhausted (1/1)"},
		{"progress is fine", func(s State) State { s.Relaunches, s.NoProgress = 1, 1; return s },
			func() Outcome {
				o := oom("train")
				o.Attempt, o.StartStep = 2, step(500)
				atStep(&o, 501)
				return o
			}(), Relaunch,
			"attempt 2: gpu_oom in train matched rule r (step 1 of 1); relaunch 2 of 4, gpu_oom 1 of 2"},
		// A progress bar's batch within an epoch is not a training step:
		// batch 29 of an epoch after resuming from step 100 is no evidence
		// either way (issue 12: such a run was given up while it trained).
		{"a bar position is not compared with a checkpoint's step", func(s State) State { s.Relaunches, s.NoProgress = 1, 1; return s },
			func() Outcome {
				o := oom("train")
				o.Attempt, o.StartStep = 2, step(100)
				atStep(&o, 29)
				o.Verdict.StepKind, o.Verdict.Epoch = classify.StepInEpoch, step(3)
				return o
			}(), Relaunch,
			"attempt 2: gpu_oom in train matched rule r (step 1 of 1); relaunch 2 of 4, gpu_oom 1 of 2"},
		{"no step printed is no evidence", func(s State) State { s.Relaunches, s.NoProgress = 1, 1; return s },
			func() Outcome { o := oom("train"); o.Attempt, o.StartStep = 2, step(500); return o }(), Relaunch,
			"attempt 2: gpu_oom in train matched rule r (step 1 of 1); relaunch 2 of 4, gpu_oom 1 of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := st.clone()
			if tc.st != nil {
				s = tc.st(s)
			}
			d := p.Decide(s, tc.out)
			if d.Verb != tc.verb || d.Reason != tc.reason {
				t.Errorf("got %s %q\nwant %s %q", d.Verb, d.Reason, tc.verb, tc.reason)
			}
			if d.Verb != Relaunch && d.Backoff != 0 {
				t.Errorf("backoff %v on %s", d.Backoff, d.Verb)
			}
		})
	}
}

// Crashes are not retried by default, even with a rule that matches.
func TestCrashNotRetriedByDefault(t *testing.T) {
	p := mustParse(t, "version: 1\nrules:\n  - {name: r, steps: [{retry: true}]}\n")
	d := p.Decide(NewState(nil), Outcome{Attempt: 1, Exit: classify.Exit{Code: 134, Signal: 6}, Verdict: classify.Verdict{Kind: classify.KindCrash, Phase: "train"}})
	if d.Verb != GiveUp || d.Reason != "attempt 1: crash in train: not a memory failure, and the policy does not retry crashes (budget.crash is 0); status 134 is passed on" {
		t.Errorf("%s: %s", d.Verb, d.Reason)
	}
	if d.Describe() != "giving up: "+d.Reason {
		t.Errorf("Describe = %q", d.Describe())
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{initial: 10 * time.Second, factor: 2, max: 5 * time.Minute, jitter: 0.2}
	for _, tc := range []struct {
		n      int
		r      float64
		lo, hi time.Duration
	}{
		{0, 0.5, 10 * time.Second, 10 * time.Second},
		{0, 0, 8 * time.Second, 8 * time.Second},
		{0, 0.999999, 11999 * time.Millisecond, 12 * time.Second},
		{1, 0.5, 20 * time.Second, 20 * time.Second},
		{3, 0.5, 80 * time.Second, 80 * time.Second},
		{10, 0.5, 5 * time.Minute, 5 * time.Minute}, // capped
		{10, 1, 5 * time.Minute, 5 * time.Minute},   // jitter never exceeds max
		{10, 0, 4 * time.Minute, 4 * time.Minute},
		{100, 0.5, 5 * time.Minute, 5 * time.Minute}, // no overflow
		{0, -3, 8 * time.Second, 8 * time.Second},    // out-of-range rand clamped
	} {
		if got := b.wait(tc.n, tc.r); got < tc.lo || got > tc.hi {
			t.Errorf("wait(%d, %v) = %v, want in [%v, %v]", tc.n, tc.r, got, tc.lo, tc.hi)
		}
	}
	// Every draw stays within ±jitter of the nominal wait.
	for i := 0; i <= 1000; i++ {
		r := float64(i) / 1001
		for n := 0; n < 8; n++ {
			nominal := min(float64(10*time.Second)*float64(int(1)<<n), float64(5*time.Minute))
			got := float64(b.wait(n, r))
			if got < nominal*0.8-1 || got > min(nominal*1.2, float64(5*time.Minute))+1 {
				t.Fatalf("wait(%d, %v) = %v outside ±20%% of %v", n, r, time.Duration(got), time.Duration(nominal))
			}
		}
	}
	// Decide uses the relaunch count and the outcome's random number.
	p := mustParse(t, "version: 1\nrules: [{name: r, steps: [{retry: true}]}]\nbackoff: {initial: 1s, factor: 3, max: 1m, jitter: 0.5}\n")
	st := NewState(nil)
	st.Relaunches = 2
	out := oom("train")
	out.Rand = 0
	if d := p.Decide(st, out); d.Backoff != 4500*time.Millisecond {
		t.Errorf("backoff = %v, want 4.5s (9s × 0.5)", d.Backoff)
	}
}

func TestPreview(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  bs: {flag: --bs}
  ga: {flag: --ga, default: 1}
  crop: {env: CROP, optional: true, null_label: full}
rules:
  - name: val-oom
    when: {kind: gpu_oom, phase: val}
    steps:
      - halve: crop
      - set: {crop: 512}
  - name: train-oom
    when: {kind: [gpu_oom, host_oom], phase: [train, unknown], rank: 0, attempt: "<4"}
    steps:
      - merge_env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
      - {halve: bs, compensate: ga, min: 8, times: 2}
      - retry: true
        times: 2
`)
	got := p.Preview(Values{"bs": Text("64"), "ga": Text("1")})
	want := []string{
		"rule val-oom step 1 [gpu_oom; phase val]: cannot act: crop has no value (the command does not set it)",
		"rule val-oom step 2 [gpu_oom; phase val]: crop unset→512",
		"rule train-oom step 1 [gpu_oom|host_oom; phase train|unknown; rank [0]; attempt <4]: PYTORCH_CUDA_ALLOC_CONF unset→expandable_segments:True",
		"rule train-oom step 2 [gpu_oom|host_oom; phase train|unknown; rank [0]; attempt <4]: bs 64→32 (ga 1→2); repeats on later failures, 2 firings in all, ending at bs 16, ga 4",
		"rule train-oom step 3 [gpu_oom|host_oom; phase train|unknown; rank [0]; attempt <4]: relaunch unchanged; repeats on later failures, 2 firings in all",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Preview:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestValueJSON(t *testing.T) {
	vals := Values{"a": Text("64"), "b": null, "c": Text("")}
	b, err := json.Marshal(vals)
	if err != nil || string(b) != `{"a":"64","b":null,"c":""}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back Values
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, vals) {
		t.Errorf("round trip = %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"a":5}`), &back); err == nil {
		t.Errorf("a number is not a Value")
	}
	if null.String() != "null" || Text("x").String() != "x" {
		t.Errorf("String: %s %s", null, Text("x"))
	}
}

// A step with times: stops acting after that many firings.
func TestStepTimes(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  bs: {flag: --bs, default: 1}
rules:
  - {name: shared, when: {other_processes: true}, steps: [{retry: true, times: 2}, {halve: bs}]}
`)
	out := oom("train")
	out.Verdict.OtherProcesses = true
	st := NewState(Values{"bs": Text("1")})
	for i := 0; i < 2; i++ {
		d := p.Decide(st, out)
		if d.Verb != Relaunch || len(d.Changes) != 0 {
			t.Fatalf("firing %d: %s", i+1, d.Describe())
		}
		st = d.State
	}
	d := p.Decide(st, out)
	want := "attempt 1: gpu_oom in train (other processes on the GPU): every matching rule is at its floors (rule shared step 1 acted its 2 time(s); rule shared step 2: bs is 1, at its floor (min 1)); status 1 is passed on"
	if d.Verb != GiveUp || d.Reason != want {
		t.Errorf("third firing: %s %q", d.Verb, d.Reason)
	}
}

// atStep sets the verdict's step: a training step the job printed on line 7.
func atStep(o *Outcome, n int64) {
	o.Verdict.Step, o.Verdict.StepKind = &n, classify.StepGlobal
	o.Verdict.StepLine, o.Verdict.StepText = 7, fmt.Sprintf("step %d/1000 loss=2.1", n)
}
