package supervisor

// Budgets across restarts from outside: a Slurm requeue, a preemption,
// --resume-run.
//
// The relaunch budgets (relaunches, per kind (hang among them), crash,
// no_progress) live in state.json's policy state, which a requeued job
// finds by job id (resolveRunDir): they carry on, so that a failure that
// recurs is not relaunched afresh after every requeue. A --resume-run
// carries them on too when the earlier run did not end (it was stopped
// from outside: a node that died, a preemption without requeue) or when
// it runs inside a requeued Slurm job; a person who resumes a run that
// gave up gets them afresh (resumeBudgets).
//
// Two tallies sit beside them in state.json (record.Restarts):
//   - Preempted: attempts that ended on a signal from outside (SIGTERM of a
//     preemption, scontrol requeue or scancel; a signal of
//     slurm.requeue_on). They are not failures: the policy counts them
//     against no budget, and gpuguard says so (countPreempted).
//   - GaveUp: runs that gave up saying a retry may help (75 with
//     --exit-codes scheduler). A run that carries the budgets on after such
//     a give-up, and gives up again, says a retry cannot help (79), so that
//     a batch script that requeues itself on 75 and gpuguard's own budgets
//     cannot retry a job without end (retryVerdict).

import (
	"fmt"
	"syscall"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// budgetHook counts the attempts a signal from outside ended apart from
// failures. Registered with a policy.
type budgetHook struct{ l *loop }

func (budgetHook) asking(*policy.Outcome) {}

// revise: an attempt stopped by SIGTERM from outside is counted apart; the
// decision (not relaunching) stands.
func (h budgetHook) revise(o *outcome, _ *policy.Outcome, d policy.Decision) (policy.Decision, int, action) {
	if o.terminated && o.sig == syscall.SIGTERM {
		h.l.countPreempted(o.n, o.sig)
	}
	return d, 0, goOn
}

// countPreempted records that attempt n ended on sig from outside, and
// says that it counts against no failure budget.
func (l *loop) countPreempted(n int, sig syscall.Signal) {
	l.state.Restarts.Preempted++
	used := ""
	if l.pol != nil {
		used = fmt.Sprintf(" (relaunches used: %d of %d)", l.state.Policies.Relaunches, l.pol.RelaunchBudget())
	}
	l.job.Status.Printf("attempt %d ended on %s from outside (a preemption, scontrol requeue, scancel or the end of the allocation): not a failure; %s counted apart, not against the failure budgets%s",
		n, policy.SignalName(sig), preemptedText(l.state.Restarts.Preempted), used)
}

// preemptedText is "1 such stop so far" or "N such stops so far".
func preemptedText(n int) string {
	if n == 1 {
		return "1 such stop so far"
	}
	return fmt.Sprintf("%d such stops so far", n)
}

// resumeBudgets decides, for an explicit --resume-run of the run whose
// state was st, whether the budgets carry on; it resets them in l.state
// when they do not, and returns how, in words. inRequeue: gpuguard runs in
// a Slurm job that Slurm has restarted.
func (l *loop) resumeBudgets(st runState, inRequeue bool) string {
	switch {
	case inRequeue:
		return "budgets carried over (Slurm requeue)"
	case !st.Done:
		return "budgets carried over: the run was stopped before it ended"
	}
	// A person chose to continue a run that ended: the relaunch budgets
	// start afresh; the settings and each rule's position are kept.
	l.state.Policies.Relaunches, l.state.Policies.ByKind, l.state.Policies.NoProgress = 0, nil, 0
	l.state.Restarts.GaveUp = 0
	return "relaunch budgets start afresh"
}

// carriedText says what a resumed run carries besides its budgets, or "".
func carriedText(r record.Restarts) string {
	s := ""
	if r.Preempted > 0 {
		s += "; " + preemptedText(r.Preempted) + " from outside (preemptions, requeues), not counted against the budgets"
	}
	if len(r.ExcludedNodes) > 0 {
		s += fmt.Sprintf("; nodes left out after machine failures: %v", r.ExcludedNodes)
	}
	return s
}

// retryVerdict is what a give-up g tells the scheduler once the run's
// earlier give-ups are known: a run that carried its budgets on after a
// give-up that said a retry may help, and gives up again, says it cannot.
// It counts g in the run's tally.
func (l *loop) retryVerdict(g giveUp) giveUp {
	if g != giveUpMayHelp || l.exitCodesMode() != policy.ExitCodesScheduler {
		return g
	}
	if n := l.state.Restarts.GaveUp; n > 0 {
		l.job.Status.Printf("gave up again after a retry from outside (this job gave up %d time(s) before, with its budgets carried on): a further retry cannot help", n)
		return giveUpCannotHelp
	}
	l.state.Restarts.GaveUp++
	return g
}
