package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// when: {shared_memory: ...} is checked where it is written.
func TestSharedMemoryParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"not a boolean", "version: 1\nrules:\n  - name: r\n    when: {kind: host_oom, shared_memory: shm}\n    steps: [{retry: true}]\n",
			`f.yaml:4:43: rule r: when shared_memory must be true or false, not "shm"`},
		{"never holds for the kinds given", "version: 1\nrules:\n  - name: r\n    when: {kind: [gpu_oom, cpu_alloc_oom], shared_memory: true}\n    steps: [{retry: true}]\n",
			`f.yaml:4:44: rule r: when: shared_memory: true matches only host_oom (the shared memory of /dev/shm), and kind is [gpu_oom, cpu_alloc_oom]: add host_oom to kind or drop shared_memory`},
		{"a misspelling is named", "version: 1\nrules:\n  - name: r\n    when: {kind: host_oom, shared_mem: true}\n    steps: [{retry: true}]\n",
			`f.yaml:4:28: rule r: when: unknown key "shared_mem" (did you mean "shared_memory"?); allowed: kind, phase, fragmentation, other_processes, build, shared_memory, worker, rank, attempt, peak, stall`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.src))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
	// shared_memory: false with any kind, and true with host_oom or no
	// kind at all, are valid.
	for _, src := range []string{
		"version: 1\nrules:\n  - {name: r, when: {kind: gpu_oom, shared_memory: false}, steps: [{retry: true}]}\n",
		"version: 1\nrules:\n  - {name: r, when: {kind: [host_oom, cpu_alloc_oom], shared_memory: true}, steps: [{retry: true}]}\n",
		"version: 1\nrules:\n  - {name: r, when: {shared_memory: true}, steps: [{retry: true}]}\n",
	} {
		if _, err := Parse("f.yaml", []byte(src)); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

const shmPolicy = `version: 1
knobs:
  workers: {flag: --workers}
  bs: {flag: --bs}
rules:
  - {name: shm, when: {kind: host_oom, shared_memory: true}, steps: [{cut_workers: workers, min: 0}]}
  - {name: not-shm, when: {kind: host_oom, shared_memory: false}, steps: [{cut_workers: workers, min: 1}]}
  - {name: gpu, when: {kind: gpu_oom}, steps: [{halve: bs}]}
`

func TestSharedMemoryMatching(t *testing.T) {
	p := mustParse(t, shmPolicy)
	vals := Values{"workers": Text("8"), "bs": Text("64")}
	for _, tc := range []struct {
		name string
		v    classify.Verdict
		want string
	}{
		{"shared memory", classify.Verdict{Kind: classify.KindHostOOM, Phase: classify.PhaseTrain, SharedMemory: true}, "shm"},
		{"other host memory", classify.Verdict{Kind: classify.KindHostOOM, Phase: classify.PhaseTrain}, "not-shm"},
		{"GPU", classify.Verdict{Kind: classify.KindGPUOOM, Phase: classify.PhaseTrain}, "gpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(NewState(vals), Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: tc.v, Rand: 0.5})
			if d.Verb != Relaunch || d.Rule != tc.want {
				t.Fatalf("%s by rule %q (%s), want rule %q", d.Verb, d.Rule, d.Reason, tc.want)
			}
			if tc.v.SharedMemory != strings.Contains(d.Reason, "(shared memory)") {
				t.Errorf("reason %q", d.Reason)
			}
		})
	}
	// At the floor the run gives up and says what only the user can do.
	d := p.Decide(NewState(Values{"workers": Text("0"), "bs": Text("64")}), Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Rand: 0.5,
		Verdict: classify.Verdict{Kind: classify.KindHostOOM, SharedMemory: true}})
	if d.Verb != GiveUp || !strings.Contains(d.Reason, "docker run --shm-size") {
		t.Errorf("%s: %s", d.Verb, d.Reason)
	}
	d = p.Decide(NewState(Values{"workers": Text("0"), "bs": Text("64")}), Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Rand: 0.5,
		Verdict: classify.Verdict{Kind: classify.KindHostOOM}})
	if d.Verb != GiveUp || strings.Contains(d.Reason, "--shm-size") {
		t.Errorf("a host OOM that is not shared memory: %s: %s", d.Verb, d.Reason)
	}
}
