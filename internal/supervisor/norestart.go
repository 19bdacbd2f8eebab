package supervisor

import (
	"fmt"

	"github.com/gpuguard/gpuguard/internal/policy"
)

// exitNoRestart is the status with which NVIDIA's ft_launcher (the fault
// tolerance launcher of nvidia-resiliency-ext) ends when the workload asked
// it not to restart: the job knows another try cannot help. gpuguard never
// relaunches a job that exited with it, whatever the rules say, and passes
// the status on (with --exit-codes scheduler: 79, retry cannot help).
const exitNoRestart = 93

// noRestartHook turns a relaunch of a job that exited 93 into the run's
// end (docs/neighbours.md).
type noRestartHook struct{}

func (noRestartHook) asking(*policy.Outcome) {}

func (noRestartHook) revise(o *outcome, _ *policy.Outcome, d policy.Decision) (policy.Decision, int, action) {
	if d.Verb != policy.Relaunch || o.terminated || o.exit.Signal != 0 || o.exit.Code != exitNoRestart {
		return d, 0, goOn
	}
	rule := d.Rule
	d.Verb, d.Rule, d.Step, d.Changes, d.Backoff, d.Note = policy.GiveUp, "", 0, nil, 0, ""
	d.Reason = fmt.Sprintf("the job exited %d, ft_launcher's \"do not restart\": not relaunched (rule %s not used)", exitNoRestart, rule)
	return d, 0, goOn
}
