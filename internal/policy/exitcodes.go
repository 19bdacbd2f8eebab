package policy

import (
	"go.yaml.in/yaml/v3"
)

// Exit-status modes of gpuguard run (policy key exit_codes, flag
// --exit-codes).
const (
	// ExitCodesJob: gpuguard exits with the job's own status (the default).
	ExitCodesJob = "job"
	// ExitCodesScheduler: a run that gave up exits with one of two statuses
	// that tell a scheduler whether retrying the job may help (README, "Exit
	// status"); otherwise the job's own status.
	ExitCodesScheduler = "scheduler"
)

// ExitCodeModes lists the modes, for messages.
var ExitCodeModes = []string{ExitCodesJob, ExitCodesScheduler}

// ExitCodes returns the policy's exit_codes: mode, "" when it has none.
func (p *Policy) ExitCodes() string { return p.exitCodes }

// RelaunchBudgetSpent reports whether st has used the policy's overall
// relaunch budget (budget.relaunches): a run that gives up then gives up
// for want of relaunches, not because relaunching cannot help.
func (p *Policy) RelaunchBudgetSpent(st State) bool { return st.Relaunches >= p.budget.relaunches }

func (w *walker) exitCodesSpec(n *yaml.Node) string {
	s, ok := w.scalar(n, "exit_codes")
	if !ok {
		return ""
	}
	for _, m := range ExitCodeModes {
		if s == m {
			return s
		}
	}
	w.at(n, "exit_codes must be job or scheduler, not %q%s", s, didYouMean(s, ExitCodeModes))
	return ""
}
