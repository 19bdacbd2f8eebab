package presets

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// A compiler killed while building an extension at start-up: every preset
// lowers MAX_JOBS to 2, then 1, in the job's environment, then gives up; it
// never cuts the DataLoader workers or the batch. An ordinary host OOM
// still cuts the workers and leaves MAX_JOBS alone.
func TestPresetsBuildOOM(t *testing.T) {
	for _, tc := range presetCases {
		t.Run(tc.preset, func(t *testing.T) {
			p, job, vals := startPreset(t, tc.preset, tc.argv)
			st := policy.NewState(vals)
			var jobs []string
			var last policy.Decision
			for i := 1; i <= 5; i++ {
				o := policy.Outcome{Attempt: i, Exit: classify.Exit{Code: 1}, Rand: 0.5,
					Verdict: classify.Verdict{Kind: classify.KindHostOOM, Build: true, Reason: "a compiler was killed while building an extension (cc1plus, SIGKILL)"}}
				last = p.Decide(st, o)
				if last.Verb != policy.Relaunch {
					break
				}
				if last.Rule != "build-oom" {
					t.Fatalf("rule %s fired for a build: %s", last.Rule, last.Describe())
				}
				st = last.State
				l, err := p.Render(job, st.Values, "", "/d", os.ReadFile)
				if err != nil {
					t.Fatal(err)
				}
				i := slices.IndexFunc(l.Env, func(e string) bool { return strings.HasPrefix(e, "MAX_JOBS=") })
				if i < 0 {
					t.Fatalf("no MAX_JOBS in the relaunch's environment: %v", l.Env)
				}
				jobs = append(jobs, l.Env[i])
				if !slices.Equal(l.Argv, tc.argv) {
					t.Errorf("a build failure changed the command: %v", l.Argv)
				}
			}
			if strings.Join(jobs, " ") != "MAX_JOBS=2 MAX_JOBS=1" || last.Verb != policy.GiveUp {
				t.Errorf("MAX_JOBS went %v, then %s; want 2, 1, give up", jobs, last.Describe())
			}

			o := policy.Outcome{Attempt: 1, Exit: classify.Exit{Code: 137}, Rand: 0.5, Verdict: classify.Verdict{Kind: classify.KindHostOOM}}
			d := p.Decide(policy.NewState(vals), o)
			if d.Rule == "build-oom" {
				t.Errorf("a plain host OOM fired build-oom: %s", d.Describe())
			}
		})
	}
}
