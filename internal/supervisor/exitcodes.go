package supervisor

import (
	"fmt"
	"strings"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Exit statuses of --exit-codes scheduler (README, "Exit status").
const (
	ExitRetryMayHelp    = exitcode.RetryMayHelp
	ExitRetryCannotHelp = exitcode.RetryCannotHelp
)

// giveUp is why a run gave up, as a scheduler sees it.
type giveUp int

const (
	giveUpNone       giveUp = iota // the run did not give up after a failure (or the job's status says it all)
	giveUpCannotHelp               // the same job would fail the same way
	giveUpMayHelp                  // another try, later or elsewhere, may succeed
)

// CheckExitCodes returns an error when mode is not an --exit-codes value.
func CheckExitCodes(mode string) error {
	if mode == "" || mode == policy.ExitCodesJob || mode == policy.ExitCodesScheduler {
		return nil
	}
	return &Error{Code: ExitUsage, Msg: fmt.Sprintf("--exit-codes %q is not one of %s", mode, strings.Join(policy.ExitCodeModes, ", "))}
}

// classifyGiveUp says whether a scheduler's retry may help a run that gave
// up after a failure v; budgetSpent: the policy's overall relaunch budget
// was used up (false without a policy).
func classifyGiveUp(v classify.Verdict, budgetSpent bool) giveUp {
	switch {
	case v.Kind == classify.KindHang, v.Machine, budgetSpent:
		return giveUpMayHelp
	}
	return giveUpCannotHelp // memory rules exhausted, a crash not retried
}

// noteGiveUp records that the run gives up after attempt's verdict v, with
// the policy's decision d (nil without a policy).
func (l *loop) noteGiveUp(v classify.Verdict, d *policy.Decision) {
	l.gaveUp = l.retryVerdict(classifyGiveUp(v, d != nil && l.pol != nil && l.pol.RelaunchBudgetSpent(d.State))) // budgets.go
}

// exitCodesMode is the run's exit-status mode: --exit-codes, else the
// policy's exit_codes:, else the job's own status.
func (l *loop) exitCodesMode() string {
	if l.cfg.ExitCodes != "" {
		return l.cfg.ExitCodes
	}
	if l.pol != nil && l.pol.ExitCodes() != "" {
		return l.pol.ExitCodes()
	}
	return policy.ExitCodesJob
}

// exitStatus is the status gpuguard exits with when the run ends with the
// job's status code: in scheduler mode, after a give-up, one of the two
// scheduler statuses (said on the status output); otherwise code.
func (l *loop) exitStatus(code int) int {
	if code == 0 || l.gaveUp == giveUpNone || l.exitCodesMode() != policy.ExitCodesScheduler {
		return code
	}
	out, why := ExitRetryCannotHelp, "a retry cannot help"
	if l.gaveUp == giveUpMayHelp {
		out, why = ExitRetryMayHelp, "a retry may help"
	}
	l.job.Status.Printf("exit status %d (exit codes for schedulers: gave up, %s); the job's was %d", out, why, code)
	return out
}
