package supervisor

// gpuguard in a group: the gpuguards of one multi-node job (one per node
// around torchrun, or the tasks of one Slurm step) decide as one
// (internal/group). The supervisor acts, the policy decides, the group
// carries messages:
//
//   - a member (rank > 0) never asks the policy: it reports each attempt's
//     end to the leader, waits for the leader's decision, and starts the
//     next attempt when the leader's go comes, with the go's knob values
//     and checkpoint;
//   - the leader (rank 0) collects every member's report, asks the policy
//     about the first failure (group.First), journals and sends the
//     decision, and sends the go of each attempt;
//   - an out-of-memory line on any node stops the other nodes' jobs within
//     oom_grace (watchGroupStops);
//   - a peer lost for longer than --group-timeout ends the run with exit
//     status 76, nothing relaunched.
//
// groupHook plugs all of it into the loop (hooks.go); it is registered
// only when gpuguard runs in a group.

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/group"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// ExitGroupLost: a peer of the group could not be reached within the bound.
const ExitGroupLost = exitcode.GroupLost

// groupRun is this gpuguard's part in its group.
type groupRun struct {
	spec   group.Spec
	leader *group.Leader // rank 0
	member *group.Member // rank > 0
	// final: the attempt whose last decision the leader has sent (end
	// sends one when nothing was).
	final int
	// lastRun: the attempt a member ran last.
	lastRun int
}

// groupHook is this gpuguard's part in its group, as the loop's hook.
type groupHook struct {
	*groupRun
	l   *loop
	cur *groupAttempt // the attempt running
}

// groupAttempt is what the group follows of one attempt.
type groupAttempt struct {
	steps, failedAt      atomic.Int64 // steps printed; when the first failure line came
	stoppedForPeer, lost atomic.Bool
}

// resolveGroup reads the group flags; a bad flag is a usage error.
func (l *loop) resolveGroup(status *Status) (group.Spec, bool, int) {
	host, _ := os.Hostname()
	f := group.Flags{Group: l.cfg.Group, Rank: -1, Size: -1, Timeout: l.cfg.GroupTimeout}
	if l.cfg.GroupRank != nil {
		f.Rank = *l.cfg.GroupRank
	}
	if l.cfg.GroupSize != nil {
		f.Size = *l.cfg.GroupSize
	}
	spec, ok, err := group.Resolve(f,
		l.cfg.Argv, l.userEnv, l.wd, host)
	if err != nil {
		status.Printf("%v", err)
		return spec, false, ExitUsage
	}
	if ok && l.pol == nil {
		status.Printf("--group needs a policy, the same on every member: without one there is nothing to decide (give --policy FILE)")
		return spec, false, ExitConfig
	}
	return spec, ok, 0
}

// startGroup joins the group (a member) or waits until every member has
// joined (the leader). It returns nil and an exit status when the group
// cannot be formed.
func (l *loop) startGroup(spec group.Spec) (*groupRun, int) {
	g := &groupRun{spec: spec}
	st, rd := l.job.Status, l.job.RunDir
	cancel := l.job.Signals.TerminatedC()
	ev := record.GroupJoin{Rank: spec.Rank, Size: spec.Size, Host: spec.Host, ID: spec.ID, Where: spec.Where(), From: spec.From}
	if spec.Leads() {
		ld, err := group.Listen(spec)
		if err != nil {
			st.Printf("%v", err)
			return nil, ExitGroupLost
		}
		st.Printf("group: leading %d members (rank 0; rank and size from %s), listening on %s; waiting up to %s for the others to join",
			spec.Size, spec.From, ld.Addr(), spec.Timeout)
		if err := ld.WaitJoined(cancel); err != nil {
			ld.Close()
			return nil, l.groupFailed(0, err, groupTimeout(l.cfg.GroupTimeout))
		}
		g.leader = ld
		ev.Role, ev.Members = record.GroupLeader, ld.Members()
		st.Printf("group: all %d members joined", spec.Size)
	} else {
		st.Printf("group: member rank %d of %d (from %s); joining the leader at %s", spec.Rank, spec.Size, spec.From, spec.Where())
		m, err := group.Join(spec, cancel)
		if err != nil {
			return nil, l.groupFailed(0, err, groupTimeout(l.cfg.GroupTimeout))
		}
		g.member = m
		ev.Role, ev.Leader = record.GroupMember, m.Leader()
		st.Printf("group: joined the leader at %s; the leader decides every relaunch", m.Leader())
	}
	rd.Write(ev)
	return g, 0
}

// close ends this gpuguard's part in the group.
func (g *groupRun) close() {
	switch {
	case g.leader != nil:
		g.leader.Close()
	case g.member != nil:
		g.member.Close()
	}
}

func (g *groupRun) isMember() bool { return g.member != nil }
func (g *groupRun) isLeader() bool { return g.leader != nil }

// groupFailed says that the group was lost (or could not be formed),
// journals it, and returns the exit status.
func (l *loop) groupFailed(n int, err error, timeout time.Duration) int {
	l.job.Status.Printf("group: %v; giving up without relaunching (a relaunch alone could run with settings the other nodes do not share)", err)
	l.job.quiet.Store(false) // no leader to notify for the job: this member says how it ends
	l.job.RunDir.Write(record.GroupLost{Attempt: n, Error: err.Error(), TimeoutS: timeout.Seconds()})
	return ExitGroupLost
}

// groupTimeout is --group-timeout, or its default.
func groupTimeout(def time.Duration) time.Duration {
	if def <= 0 {
		return group.DefaultTimeout
	}
	return def
}

// lostErr is the group's loss, or nil.
func (g *groupRun) lostErr() error {
	switch {
	case g.isLeader():
		return g.leader.Err()
	case g.isMember():
		return g.member.Err()
	}
	return nil
}

// beforeAttempt is a member's start of an attempt: the leader's go, with
// the attempt's number, knob values and checkpoint; or the run's end.
func (g *groupHook) beforeAttempt(s *attemptStart) (int, action) {
	if !g.isMember() {
		return 0, goOn
	}
	gox, code, ok := g.awaitGo()
	if !ok {
		return code, endRun
	}
	l := g.l
	l.state.Attempt, l.state.Policies = gox.Attempt, gox.State
	s.n, s.ckpt, s.given = gox.Attempt, gox.Checkpoint, true
	return 0, goOn
}

// awaitGo waits for the leader's go. ok is false when the run ends instead
// (code: its exit status).
func (g *groupHook) awaitGo() (group.Go, int, bool) {
	l := g.l
	gox, last, err := g.member.AwaitGo(g.lastRun, l.job.Signals.TerminatedC())
	if err == nil && last != nil {
		l.job.Status.Printf("group: the leader ended its run before attempt %d (%s): not starting the job", last.Attempt, last.Reason)
		l.job.RunDir.Write(record.GroupDecision{Attempt: last.Attempt, Role: record.GroupMember, Verb: string(last.Verb),
			Knobs: rundir.Knobs(last.State.Values), Reason: last.Reason})
		return gox, l.end(l.lastCode()), false
	}
	if err != nil {
		if group.IsCancelled(err) {
			sig, _ := l.job.Signals.Terminated()
			l.job.Status.Printf("%s received while waiting for the group's leader: not starting the job", signalName(sig))
			return gox, l.end(128 + int(sig)), false
		}
		return gox, l.end(l.groupFailed(g.lastRun, err, g.spec.Timeout)), false
	}
	g.lastRun = gox.Attempt
	return gox, 0, true
}

// launching is the leader's start of attempt n: every member gets its go.
func (g *groupHook) launching(n int, p launchPlan) {
	if g.isLeader() {
		g.leader.Begin(group.Go{Attempt: n, State: g.l.state.Policies, Checkpoint: p.ckpt})
	}
}

// notStarted: a member whose job could not start reports it.
func (g *groupHook) notStarted(o *outcome) {
	if g.isMember() {
		g.member.Ended(g.report(o))
	}
}

func (g *groupHook) attemptStarting(*attemptRun) { g.cur = &groupAttempt{} }

// event counts the steps, notes the first failure line and tells the group
// of an out-of-memory error: the leader stops the other nodes' jobs.
func (g *groupHook) event(a *attemptRun, ev classify.Event) {
	switch {
	case ev.Type == classify.EventStep:
		g.cur.steps.Add(1)
	case ev.Type == classify.EventFailure:
		g.cur.failedAt.CompareAndSwap(0, time.Now().UnixNano())
		if isMemory(ev.Kind) {
			g.oom(a.n, ev, a.grace)
		}
	}
}

// started: a peer's failure stops this node's job.
func (g *groupHook) started(a *attemptRun, p process) {
	c := g.cur
	go g.l.watchGroupStops(g.groupRun, a.n, p, a.grace, c.steps.Load, &c.stoppedForPeer, &c.lost)
}

func (g *groupHook) judged(a *attemptRun) {
	if t := g.cur.failedAt.Load(); t != 0 {
		a.row.failedAt = time.Unix(0, t)
	}
	a.row.stoppedForPeer = g.cur.stoppedForPeer.Load() && !isMemory(a.verdict.Kind)
}

// settle: a member reports the attempt and applies the leader's decision;
// the leader collects every member's report and decides from the first
// failure of the group.
func (g *groupHook) settle(o *outcome) (int, action) {
	l := g.l
	rep := g.report(o)
	if g.isMember() {
		if rs, ok := l.stopperSignal(); ok { // a Slurm requeue: the run ends here
			g.member.Ended(rep)
			return l.endForRequeue(o.n, rs, o.row, o.res.Code), endRun
		}
		next, code := l.memberDecision(g.groupRun, o.n, o.row, rep, o.res.Code)
		if next {
			return 0, relaunch
		}
		return code, endRun
	}
	reports, err := g.leader.Collect(rep, l.job.Signals.TerminatedC())
	if err != nil && !group.IsCancelled(err) {
		o.row.decision = "group lost"
		l.rows = append(l.rows, o.row)
		return l.end(l.groupFailed(o.n, err, g.spec.Timeout)), endRun
	}
	first, failed := group.First(reports)
	o.reports, o.groupFailed = reports, failed
	if failed {
		o.from = &first
		o.v, o.exit, o.block, o.rejections = first.Verdict, first.Exit, first.Block, first.Rejections
		o.peaks, o.starts = first.Peaks, first.Starts
		if o.res.Code == 0 {
			o.res.Code = first.Exit.Code
		}
		if first.Rank != g.spec.Rank {
			o.prefix = fmt.Sprintf("group: rank %d on %s failed first: ", first.Rank, first.Host)
		}
	}
	return 0, goOn
}

// oom tells the group that this node's job printed an out-of-memory line.
func (g *groupRun) oom(n int, ev classify.Event, grace time.Duration) {
	note := group.Notice{Rank: g.spec.Rank, Host: g.spec.Host, Kind: ev.Kind, At: time.Now(), Text: ev.Text, GraceS: grace.Seconds()}
	switch {
	case g.isLeader():
		g.leader.OOM(note)
	case g.isMember():
		g.member.OOM(n, note)
	}
}

func (g *groupRun) stops() <-chan group.Notice {
	switch {
	case g.isLeader():
		return g.leader.Stops()
	case g.isMember():
		return g.member.Stops()
	}
	return nil
}

func (g *groupRun) lost() <-chan struct{} {
	switch {
	case g.isLeader():
		return g.leader.Lost()
	case g.isMember():
		return g.member.Lost()
	}
	return nil
}

// watchGroupStops stops attempt n when a peer failed: the job gets
// oom_grace from the leader's word to exit by itself (its ranks' collective
// breaks), then it is stopped; a job that goes on training (two steps
// since) is left alone, as after its own out-of-memory error. A group lost
// stops the job at once. It returns when the attempt ends.
func (l *loop) watchGroupStops(g *groupRun, n int, a graceAttempt, grace time.Duration, steps func() int64, stoppedForPeer, lost *atomic.Bool) {
	var note group.Notice
	select {
	case note = <-g.stops():
	case <-g.lost():
		lost.Store(true)
		l.job.Status.Printf("group: %v: stopping the job", g.lostErr())
		a.Stop("the group was lost")
		return
	case <-a.Done():
		return
	}
	if note.LeaderEnded {
		l.job.Status.Printf("group: the leader ended its run (%s): stopping the job", note.Text)
		stoppedForPeer.Store(true)
		a.Stop("the group's leader ended its run")
		return
	}
	at := steps()
	l.job.Status.Printf("group: rank %d on %s failed (%s): this node's job gets %s (oom_grace) to exit, then it is stopped",
		note.Rank, note.Host, note.Kind, grace)
	ev := record.GroupStop{Attempt: n, Rank: note.Rank, Host: note.Host, Kind: note.Kind, Text: note.Text, GraceS: grace.Seconds()}
	select {
	case <-l.after(grace):
		if steps()-at >= 2 {
			l.log.Info("training went on after a peer's failure: not stopping the job")
			l.job.RunDir.Write(ev)
			return
		}
		stoppedForPeer.Store(true)
		ev.Stopped = true
		l.job.RunDir.Write(ev)
		l.job.Status.Printf("group: the job did not exit within %s of rank %d's failure: stopping it", grace, note.Rank)
		a.Stop(fmt.Sprintf("rank %d (%s) failed, and the job did not exit within oom_grace (%s)", note.Rank, note.Host, grace))
	case <-g.lost():
		lost.Store(true)
		l.job.RunDir.Write(ev)
		a.Stop("the group was lost")
	case <-a.Done():
		stoppedForPeer.Store(true) // its ranks died with the peer's
		l.job.RunDir.Write(ev)
	}
}

// report is this member's report of the attempt that ended with o.
func (g *groupHook) report(o *outcome) group.Report {
	row := o.row
	return group.Report{
		Rank: g.spec.Rank, Host: g.spec.Host, Attempt: o.n, Verdict: o.v, Exit: o.exit,
		FailedAt: row.failedAt, StoppedForPeer: row.stoppedForPeer, Peaks: row.peaks(), Starts: row.starts(), Block: row.block,
		Rejections: row.rejections, StartStep: o.startStep, Terminated: o.terminated,
	}
}

// memberDecision is a member's end of attempt n: its report to the
// leader, the leader's decision applied. next: go on to the next attempt
// (the leader relaunches); otherwise the run ends with code.
func (l *loop) memberDecision(g *groupRun, n int, row attemptRow, rep group.Report, code int) (next bool, exit int) {
	g.member.Ended(rep)
	d, err := g.member.AwaitDecision(n, l.job.Signals.TerminatedC())
	if err != nil {
		row.decision = "group lost"
		l.rows = append(l.rows, row)
		if group.IsCancelled(err) {
			sig, _ := l.job.Signals.Terminated()
			l.job.Status.Printf("attempt %d stopped by %s: not relaunching", n, signalName(sig))
			return false, l.end(code)
		}
		return false, l.end(l.groupFailed(n, err, g.spec.Timeout))
	}
	l.state.Policies = d.State
	row.decision = d.Label + " (leader)"
	l.rows = append(l.rows, row)
	if d.Policy != nil {
		l.journalDecision(n, *d.Policy, "")
	}
	l.journalGroupDecision(n, record.GroupMember, d, nil)
	from := "the group's leader"
	if d.From != nil {
		from = fmt.Sprintf("rank %d on %s failed first; the group's leader decided", d.From.Rank, d.From.Host)
	}
	switch d.Verb {
	case policy.Relaunch:
		l.job.Status.Printf("%s (%s) → %s", describeFailure(n, pickVerdict(d, rep)), from, d.Line)
		if err := l.saveState(); err != nil {
			l.job.Status.Printf("warning: %v", err)
		}
		if !l.pause(0) { // the GPU memory of this node's attempt released
			sig := l.stopSignal()
			l.job.Status.Printf("%s received while waiting to relaunch: not relaunching", signalName(sig))
			return false, l.end(code)
		}
		return true, 0
	case policy.Done:
		return false, l.end(code)
	}
	l.job.Status.Printf("%s (%s) → giving up: %s", describeFailure(n, pickVerdict(d, rep)), from, d.Reason)
	if d.Policy != nil {
		l.noteGiveUp(pickVerdict(d, rep), d.Policy)
	}
	if code == 0 && d.From != nil {
		code = d.From.Exit.Code
	}
	return false, l.end(code)
}

func pickVerdict(d group.Decision, own group.Report) classify.Verdict {
	if d.From != nil {
		return d.From.Verdict
	}
	return own.Verdict
}

// decided sends the leader's decision on attempt n to every member and
// journals it.
func (g *groupHook) decided(o *outcome, d policy.Decision, line string) {
	if !g.isLeader() {
		return
	}
	n, from, reports := o.n, o.from, o.reports
	gd := group.Decision{Attempt: n, Verb: d.Verb, Label: decisionLabel(d), Line: line, Reason: d.Reason, State: d.State, From: from, Policy: &d}
	g.leader.Decide(gd)
	if d.Verb != policy.Relaunch {
		g.final = n
	}
	g.l.journalGroupDecision(n, record.GroupLeader, gd, reports)
}

// finish is the leader's word to the members when the run ends without a
// decision sent for its last attempt (a signal, a lost checkpoint, an
// error): they end too.
func (g *groupHook) finish(code, _ int) {
	l := g.l
	if !g.isLeader() || g.final == l.state.Attempt && g.final != 0 {
		return
	}
	g.final = l.state.Attempt
	g.leader.Decide(group.Decision{Attempt: l.state.Attempt, Verb: policy.GiveUp, Label: "leader ended",
		Reason: fmt.Sprintf("the group's leader ended its run (exit status %d)", code), State: l.state.Policies})
}

func (l *loop) journalGroupDecision(n int, role string, d group.Decision, reports []group.Report) {
	ev := record.GroupDecision{Attempt: n, Role: role, Verb: string(d.Verb), Knobs: rundir.Knobs(d.State.Values), Reason: d.Reason}
	if f := d.From; f != nil {
		r := f.Rank
		ev.FromRank, ev.FromHost, ev.Kind = &r, f.Host, f.Verdict.Kind
		if !f.FailedAt.IsZero() {
			ev.FailedAt = f.FailedAt.UTC().Format(time.RFC3339Nano)
		}
	}
	for _, r := range reports {
		mr := record.GroupMemberReport{Rank: r.Rank, Host: r.Host, ExitCode: r.Exit.Code, Kind: r.Verdict.Kind, StoppedForPeer: r.StoppedForPeer}
		if !r.FailedAt.IsZero() {
			mr.FailedAt = r.FailedAt.UTC().Format(time.RFC3339Nano)
		}
		ev.Reports = append(ev.Reports, mr)
	}
	l.job.RunDir.Write(ev)
}
