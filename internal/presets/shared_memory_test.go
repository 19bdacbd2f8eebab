package presets

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// A job that runs out of shared memory (/dev/shm) gets fewer DataLoader
// workers from every preset (down to none, within the host_oom budget),
// never a smaller batch nor another knob; when it gives up (no worker left
// to cut, the budget spent, no workers knob set) it says to give the job a
// larger /dev/shm.
func TestPresetsSharedMemory(t *testing.T) {
	for _, tc := range presetCases {
		t.Run(tc.preset, func(t *testing.T) {
			p, _, vals := startPreset(t, tc.preset, tc.argv)
			st := policy.NewState(vals)
			var d policy.Decision
			relaunches := 0
			for i := 1; i <= 12; i++ {
				o := policy.Outcome{Attempt: i, Exit: classify.Exit{Code: 1}, Rand: 0.5, Verdict: classify.Verdict{
					Kind: classify.KindHostOOM, Phase: classify.PhaseTrain, SharedMemory: true,
					Reason: "shared memory (/dev/shm) exhausted: a DataLoader worker died of a bus error",
				}}
				d = p.Decide(st, o)
				if d.Verb != policy.Relaunch {
					break
				}
				relaunches++
				if d.Rule != "shared-memory" {
					t.Errorf("relaunch %d by rule %s, want shared-memory: %s", relaunches, d.Rule, d.Describe())
				}
				for _, c := range d.Changes {
					if c.Knob != "workers" {
						t.Errorf("relaunch %d changed %q, not the workers: %s", relaunches, c.Knob, d.Describe())
					}
				}
				st = d.State
			}
			if d.Verb != policy.GiveUp || !strings.Contains(d.Reason, "--shm-size") || !strings.Contains(d.Reason, "(shared memory)") {
				t.Errorf("after %d relaunch(es): %s %q, want a give-up that says --shm-size", relaunches, d.Verb, d.Reason)
			}
			if st.Values[tc.batchKnob] != vals[tc.batchKnob] {
				t.Errorf("%s went from %s to %s", tc.batchKnob, vals[tc.batchKnob], st.Values[tc.batchKnob])
			}
			if w, ok := vals["workers"]; ok && w.String() != "" && w.String() != "0" {
				if relaunches == 0 || st.Values["workers"].String() == w.String() {
					t.Errorf("workers %s → %s in %d relaunch(es), want fewer", w, st.Values["workers"], relaunches)
				}
			}
			t.Logf("%s: %d relaunch(es), workers %s → %s; %s", tc.preset, relaunches, vals["workers"], st.Values["workers"], d.Reason)
		})
	}
}
