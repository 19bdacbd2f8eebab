package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

const buildPolicy = `version: 1
knobs:
  workers: {flag: --workers, default: 8}
rules:
  - name: build-oom
    when: {kind: host_oom, build: true}
    steps:
      - set_env: {MAX_JOBS: "2"}
      - set_env: {MAX_JOBS: "1"}
  - name: host-oom
    when: {kind: host_oom, build: false}
    steps:
      - cut_workers: workers
        min: 1
`

// when: {build: ...} tells a compiler killed at start-up from other host
// OOMs: the build rule lowers MAX_JOBS and then gives up; it never cuts the
// DataLoader workers, and an ordinary host OOM never touches MAX_JOBS.
func TestBuildCondition(t *testing.T) {
	p := mustParse(t, buildPolicy)
	build := Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindHostOOM, Build: true}}
	st := NewState(nil)
	var got []string
	for i := 1; i <= 4; i++ {
		build.Attempt = i
		d := p.Decide(st, build)
		if d.Verb != Relaunch {
			if !strings.Contains(d.Reason, "a compiler killed while building an extension") || !strings.Contains(d.Reason, "floors") {
				t.Errorf("give-up reason %q", d.Reason)
			}
			break
		}
		if d.Rule != "build-oom" {
			t.Fatalf("rule %s fired for a build: %s", d.Rule, d.Describe())
		}
		st = d.State
		got = append(got, st.Values[EnvKey("MAX_JOBS")].Text)
	}
	if strings.Join(got, ",") != "2,1" {
		t.Errorf("MAX_JOBS went %v, want 2 then 1, then give up", got)
	}
	if w := st.Values["workers"]; w.Text != "" && w.Text != "8" {
		t.Errorf("a build failure cut the workers to %s", w.Text)
	}

	host := Outcome{Attempt: 1, Exit: classify.Exit{Code: 137}, Verdict: classify.Verdict{Kind: classify.KindHostOOM}}
	d := p.Decide(NewState(Values{"workers": Text("8")}), host)
	if d.Rule != "host-oom" || len(d.Changes) != 1 || d.Changes[0].Knob != "workers" {
		t.Errorf("plain host OOM: %s", d.Describe())
	}
	if _, ok := d.State.Values[EnvKey("MAX_JOBS")]; ok {
		t.Errorf("plain host OOM set MAX_JOBS: %v", d.State.Values)
	}
	// A GPU OOM carries no build flag: neither rule is about it.
	gpu := Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindGPUOOM}}
	if d := p.Decide(NewState(nil), gpu); d.Verb != GiveUp || !strings.Contains(d.Reason, "no rule matches") {
		t.Errorf("gpu OOM: %s", d.Describe())
	}
}

func TestBuildConditionErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"not a boolean", "version: 1\nrules:\n  - name: r\n    when: {kind: host_oom, build: maybe}\n    steps: [{retry: true}]\n",
			`f.yaml:4:35: rule r: when build must be true or false, not "maybe"`},
		{"build beside another kind", "version: 1\nrules:\n  - name: r\n    when: {kind: gpu_oom, build: true}\n    steps: [{retry: true}]\n",
			`f.yaml:4:27: rule r: when: build: true matches only host_oom (a compiler killed while building an extension), and kind is gpu_oom: add host_oom to kind or drop build`},
		{"build beside a list of kinds", "version: 1\nrules:\n  - name: r\n    when:\n      kind: [gpu_oom, crash]\n      build: true\n    steps: [{retry: true}]\n",
			`f.yaml:6:7: rule r: when: build: true matches only host_oom (a compiler killed while building an extension), and kind is [gpu_oom, crash]: add host_oom to kind or drop build`},
		{"misspelt", "version: 1\nrules:\n  - name: r\n    when: {kind: host_oom, biuld: true}\n    steps: [{retry: true}]\n",
			`f.yaml:4:28: rule r: when: unknown key "biuld" (did you mean "build"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to contain %s", err, tc.want)
			}
		})
	}
	// build: false beside any kind, and build: true with host_oom in a list, are fine.
	mustParse(t, "version: 1\nrules:\n  - {name: a, when: {kind: [host_oom, cpu_alloc_oom], build: false}, steps: [{retry: true}]}\n  - {name: b, when: {kind: [host_oom, gpu_oom], build: true}, steps: [{retry: true}]}\n  - {name: c, when: {build: true}, steps: [{retry: true}]}\n")
}
