package supervisor

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/envinject"
	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/group"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// loop is one `gpuguard run`: attempts until the job succeeds, the policy gives
// up, or gpuguard is told to stop. Every concern beside the lifecycle is a
// hook (hooks.go), registered once in register.
type loop struct {
	cfg  Config
	wd   string
	pol  *policy.Policy // nil: no policy; the job runs once
	pjob policy.Job     // the job as the policy sees it: the environment it gets
	// userEnv is gpuguard's own environment, before its allocator settings;
	// alloc is what the allocator defaults change in it (merged once).
	userEnv  []string
	alloc    envinject.Result
	allocErr error // the merge failed (a bug)
	state    runState
	hooks    hooks

	job    *Job
	status *Status // the job's, once prepared; a dry run's own
	log    *zap.Logger
	gpu    gpu.Probe
	ckpts  *checkpoint.Watcher
	spec   policy.CheckpointSpec
	origin time.Time

	rows []attemptRow
	// ignoredOld: a checkpoint of an earlier run was passed over (said once).
	ignoredOld bool
	ck         ckptEvidence // what the output said of checkpoints (checkpoints.go)
	// unmatchedSaid: the job saved a checkpoint that no glob matches, and
	// the user was told (once per run; checkSaved, on the scanner goroutine).
	unmatchedSaid atomic.Bool
	// memoFrom: the command's own knob values, before a memo (policy key
	// memo) replaced them; nil when the policy keeps no memo.
	memoFrom policy.Values
	// memoKey, memoDev: this run's memo key and the device it names (memo.go).
	memoKey, memoDev string
	// releaseBaseline: GPU memory in use before the last failed attempt
	// started; the next attempt waits until use is back near it.
	releaseBaseline []gpu.Sample

	// runAttempt runs one attempt to its end: runOne (the job's processes,
	// the memory sampler and the classifier), or a test's script.
	runAttempt func(n int, p launchPlan) (attemptRow, classify.Verdict, attemptResult, error)
	// start starts attempt n's processes and waits for them: Job.RunAttempt,
	// or a test's fake attempt.
	start func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error)
	// writersGone: when the last attempt's processes had all ended (zero
	// while some survive): no checkpoint can change after it.
	writersGone time.Time
	// after is time.After; a test's records the waits.
	after func(time.Duration) <-chan time.Time
	// getpid is os.Getpid, for the plan's GPUGUARD_PID.
	getpid func() int
	// now is time.Now; rand is rand.Float64, for the policy's jitter.
	now  func() time.Time
	rand func() float64
	// gaveUp: why the run gave up, for --exit-codes scheduler (exitcodes.go).
	gaveUp giveUp
}

// newLoop returns the loop of one `gpuguard run` started at origin in wd,
// with the environment env, running attempts for real.
func newLoop(cfg Config, wd string, env []string, origin time.Time) *loop {
	l := &loop{cfg: cfg, wd: wd, origin: origin, userEnv: env, after: time.After, getpid: os.Getpid,
		now: time.Now, rand: rand.Float64}
	// The policy reads the knobs' values from the environment the job
	// really gets, gpuguard's allocator settings included: a step that sets
	// what is already set does not act (a relaunch that changes nothing
	// wastes the job's start-up and its work since the last checkpoint).
	jobEnv := env
	l.alloc, l.allocErr = mergeAlloc(env)
	if l.allocErr == nil && !cfg.NoEnv {
		jobEnv = l.alloc.Env
	}
	l.pjob = policy.Job{Argv: cfg.Argv, Env: jobEnv, Dir: wd, Exists: exists}
	l.runAttempt = l.runOne
	l.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
		return l.job.RunAttempt(n, spec, h)
	}
	return l
}

// attemptRow is one line of the summary table printed at the end.
type attemptRow struct {
	n        int
	code     int
	verdict  classify.Verdict
	duration time.Duration
	ckpt     string
	decision string
	// Peak fraction of GPU capacity in use, per phase (0: unknown).
	peakTrain, peakVal float64
	// Fraction in use at each phase's first sample (0: unknown).
	startTrain, startVal float64
	// block: where in the model the OOM struck, from the torch probe (nil:
	// unknown).
	block *policy.OOMBlock
	// stoppedBy is the stop signal gpuguard received while the attempt ran
	// (Ctrl-C, kill, Slurm's end of the time limit), 0 if none.
	stoppedBy syscall.Signal
	// rejections: output lines in which the job refused an argument or a
	// config key (policy.RejectionLine).
	rejections []string
	// failedAt: when the attempt's first failure line was read (zero: none).
	failedAt time.Time
	// stoppedForPeer: in a group, the job was stopped (or died) after a
	// peer's failure (group.go).
	stoppedForPeer bool
}

func (r attemptRow) peaks() map[classify.Phase]float64 {
	return map[classify.Phase]float64{classify.PhaseTrain: r.peakTrain, classify.PhaseVal: r.peakVal}
}

func (r attemptRow) starts() map[classify.Phase]float64 {
	return map[classify.Phase]float64{classify.PhaseTrain: r.startTrain, classify.PhaseVal: r.startVal}
}

// runLoop is Run with the attempt loop.
func runLoop(cfg Config) int {
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	status := newStatus(cfg.Stdout, cfg.Stderr)
	wd, err := os.Getwd()
	if err != nil {
		status.Printf("cannot read the working directory: %v", err)
		return exitSoftware
	}
	l := newLoop(cfg, wd, os.Environ(), time.Now())
	if code := l.prepare(status); code != 0 || cfg.DryRun {
		return code
	}
	gspec, inGroup, code := l.resolveGroup(status)
	if code != 0 {
		return code
	}
	l.cfg.groupMember = inGroup && !gspec.Leads()

	job, code := prepare(l.cfg, wd, l.userEnv, l.alloc)
	if job == nil {
		return code
	}
	defer job.Close()
	l.job, l.status, l.log = job, job.Status, job.Logger
	if l.pol != nil {
		job.RunDir.Write(record.Policy{File: l.pol.File(), Knobs: rundir.Knobs(l.state.Policies.Values), Rules: l.pol.Rules()})
	}
	defer l.hooks.closeAll()
	l.gpu = gpu.Open(job.Env, l.log)
	if code := l.register(gspec, inGroup); code != 0 {
		job.Finish(code)
		return code
	}
	code = l.attempts()
	job.Finish(code)
	return code
}

// prepare is what a run and a dry run share: the policy, the run
// directory's state, the memo, and the command's check. A dry run answers
// here (0) or with the error the run would give.
func (l *loop) prepare(status *Status) int {
	if code := l.loadPolicy(status); code != 0 {
		return code
	}
	if code := l.resolveRunDir(status); code != 0 {
		return code
	}
	l.applyMemo(status)
	if l.allocErr != nil && !l.cfg.NoEnv {
		status.Printf("internal error: %v", l.allocErr)
		return exitSoftware
	}
	// A command that cannot run is reported before anything is created.
	pathEnv, _ := envlist.Lookup(l.pjob.Env, "PATH")
	if _, err := lookPathIn(l.cfg.Argv[0], pathEnv, ""); err != nil {
		status.Printf("%v", err)
		return exitCodeOf(err)
	}
	if l.cfg.DryRun {
		return l.dryRun(status)
	}
	return 0
}

// register starts what the run watches (the checkpoints, the Slurm
// signals) and registers its hooks, from its configuration: a concern that is off is
// not registered. The stages run the hooks in this order. It returns an
// exit status when the run cannot go on (the group cannot be formed).
func (l *loop) register(gspec group.Spec, inGroup bool) int {
	hs := &l.hooks
	if s := l.startSlurm(); s != nil {
		hs.add(s)
	}
	hs.add(closer(l.gpu.Close))
	l.keepCompileCaches()
	if ok, why := l.gpu.Available(); ok {
		hs.add(&gpuReleaseHook{l: l})
	} else {
		l.log.Info("GPU memory not sampled", zap.String("why", why))
	}
	if l.pol != nil {
		if l.startWatcher(); l.ckpts != nil {
			hs.add(closer(l.ckpts.Close))
		}
		hs.add(ckptSaveHook{l})
		hs.add(noRestartHook{})
		if h, ok := l.pol.Hang(); ok {
			hs.add(&stallHook{l: l, h: h, where: groupWhere(gspec, inGroup)})
		}
		if sc := slurmenv.FromEnv(l.pjob.Env); sc.InSlurm() {
			hs.add(slurmMemHook{l})
			if l.pol.Slurm().ExcludeFailedNodes > 0 {
				hs.add(slurmNodeHook{l}) // slurm.exclude_failed_nodes (slurmnode.go)
			}
		}
		hs.add(budgetHook{l}) // preemptions counted apart (budgets.go)
		if l.memoOn() {
			hs.add(memoHook{l})
		}
		hs.add(newVerifyHook(l))
		hs.add(&hostMemHook{l: l}) // policy.Outcome.Host (hostmem.go)
		if h := newPreventHook(l, inGroup); h != nil {
			hs.add(h) // prevent: (prevent.go)
		}
	}
	hs.add(&rejectionHook{})
	hs.add(&oomGraceHook{l: l})
	hs.add(newCgroupOOMHook())
	if l.cfg.Probe != "" {
		hs.add(&probeHook{l: l})
	}
	if !inGroup {
		if !l.cfg.NoEnv {
			hs.add(allocRetryHook{l})
		}
		return 0
	}
	grp, code := l.startGroup(gspec) // the group forms before the first attempt
	if grp == nil {
		return code
	}
	hs.add(&groupHook{groupRun: grp, l: l})
	return 0
}

// closer is a hook that only closes something at the end of the run.
type closer func() error

func (c closer) close() { _ = c() }

// attempts runs the attempt loop and returns the exit status: prepare,
// start, observe and end (runAttempt), decide, wait, relaunch.
func (l *loop) attempts() int {
	for {
		// Prepare: where the attempt starts (a group member's leader says),
		// its plan and derived configs.
		l.state.Attempt++
		at := attemptStart{n: l.state.Attempt}
		if code, act := steer(l.hooks.beforeAttempt, func(h beforeAttemptHook) (int, action) { return h.beforeAttempt(&at) }); act == endRun {
			return code
		}
		plan, code, ok := l.prepareAttempt(&at)
		if !ok {
			return code
		}
		for _, h := range l.hooks.launching {
			h.launching(at.n, plan)
		}
		// Start, observe, end.
		row, v, res, err := l.runAttempt(at.n, plan)
		if err != nil {
			code := exitCodeOf(err)
			o := &outcome{n: at.n, row: row, v: v, res: attemptResult{Code: code}, exit: classify.Exit{Code: code}}
			for _, h := range l.hooks.notStarted {
				h.notStarted(o)
			}
			return l.end(code)
		}
		// Decide: hooks first (a retry, the group), then success, then the
		// policy; wait, and relaunch.
		o := l.outcomeOf(at, row, v, res)
		if code, act := steer(l.hooks.settle, func(h settleHook) (int, action) { return h.settle(o) }); act == relaunch {
			continue
		} else if act == endRun {
			return code
		}
		if o.res.Code == 0 && !o.groupFailed {
			o.row.decision = "done"
			l.rows = append(l.rows, o.row)
			l.decided(o, policy.Decision{Verb: policy.Done, State: l.state.Policies}, "done")
			return l.end(0)
		}
		if code, act := steer(l.hooks.failed, func(h failedHook) (int, action) { return h.failed(o) }); act == endRun {
			return code
		}
		if code, next := l.decideAndWait(o); !next {
			return code
		}
	}
}

// prepareAttempt chooses the checkpoint attempt at resumes from (unless a
// hook did), plans its launch and writes its derived configs. ok is false
// when the run ends instead (code).
func (l *loop) prepareAttempt(at *attemptStart) (p launchPlan, code int, ok bool) {
	n := at.n
	// The first attempt of a new run is the user's command as given;
	// every later one (and a resumed run's) continues from a checkpoint.
	if !at.given && n > 1 {
		at.ckpt = l.latestCheckpoint(true)
		if at.ckpt == "" && l.spec.Required {
			l.job.Status.Printf("no complete checkpoint to resume from, and the policy requires one: not relaunching")
			return p, l.end(l.lastCode()), false
		}
	}
	rd := l.job.RunDir
	p, err := l.plan(n, at.ckpt, rd.Path())
	if err == nil {
		err = p.writeFiles()
	}
	if err != nil {
		l.job.Status.Printf("attempt %d: %v", n, err)
		rd.Write(record.Error{Attempt: n, Error: err.Error()})
		return p, l.end(ExitConfig), false
	}
	for _, note := range p.notes {
		l.job.Status.Printf("%s", note)
	}
	if n > 1 || at.ckpt != "" {
		l.job.Status.Printf("attempt %d: %s", n, quoteArgv(p.argv))
	}
	return p, 0, true
}

// outcomeOf is how attempt at ended, as the loop decides on it.
func (l *loop) outcomeOf(at attemptStart, row attemptRow, v classify.Verdict, res attemptResult) *outcome {
	o := &outcome{n: at.n, row: row, v: v, res: res,
		exit:  classify.Exit{Code: res.Code, Signal: res.Signal, StoppedByUs: res.StoppedByUs},
		peaks: row.peaks(), starts: row.starts(), rejections: row.rejections, block: row.block}
	l.writersGone = time.Time{}
	if res.Survivors == 0 {
		l.writersGone = writersGoneAt(res, l.now())
	}
	if o.sig, o.terminated = l.job.Signals.Terminated(); o.terminated {
		o.row.stoppedBy = o.sig
	}
	if at.ckpt != "" {
		if s, ok := checkpoint.StepOf(filepath.Base(at.ckpt)); ok {
			o.startStep = &s
		}
	}
	return o
}

// decideAndWait asks the policy about the failed attempt o, records and
// says the decision, and waits before the relaunch. next is false when the
// run ends (code).
func (l *loop) decideAndWait(o *outcome) (code int, next bool) {
	n, v := o.n, o.v
	if l.pol == nil {
		o.row.decision = "no policy"
		l.rows = append(l.rows, o.row)
		if isMemory(v.Kind) && !o.terminated {
			l.job.Status.Printf("%s; no policy file, so not relaunching (write one with: gpuguard policy init -- %s)", describeFailure(n, v), quoteArgv(l.cfg.Argv))
		}
		if !o.terminated {
			l.noteGiveUp(v, nil)
		}
		return l.end(o.res.Code), false
	}
	out := policy.Outcome{Verdict: v, Exit: o.exit, Attempt: n, StartStep: o.startStep, Peaks: o.peaks, Starts: o.starts,
		Block: o.block, Rejections: o.rejections, Terminated: o.terminated, Rand: l.rand()}
	for _, h := range l.hooks.decision {
		h.asking(&out)
	}
	d := l.decide(n, out)
	for _, h := range l.hooks.decision {
		var code int
		var act action
		if d, code, act = h.revise(o, &out, d); act == endRun {
			return code, false
		}
	}
	l.state.Policies = d.State
	o.row.decision = decisionLabel(d)
	l.rows = append(l.rows, o.row)
	ckpt := ""
	if d.Verb == policy.Relaunch && !o.terminated && !d.FromScratch {
		ckpt = l.latestCheckpoint(true)
	}
	l.journalDecision(n, d, ckpt)
	switch {
	case o.terminated:
		l.job.Status.Printf("attempt %d stopped by %s: not relaunching", n, signalName(o.sig))
		return l.end(o.res.Code), false
	case d.Verb != policy.Relaunch:
		l.job.Status.Printf("%s%s → giving up: %s", o.prefix, describeFailure(n, v), d.Reason)
		l.noteGiveUp(v, &d)
		l.decided(o, d, "giving up: "+d.Reason)
		return l.end(o.res.Code), false
	}
	l.decided(o, d, d.Describe())
	line := fmt.Sprintf("%s%s → %s", o.prefix, describeFailure(n, v), d.Describe())
	if ckpt != "" {
		line += "; resuming from " + displayPath(ckpt, l.wd)
	} else if l.spec.Pass != "" && !d.FromScratch {
		line += "; " + l.noCheckpoint() + ", starting over"
	}
	l.job.Status.Printf("%s", line)
	if err := l.saveState(); err != nil {
		l.job.Status.Printf("warning: %v", err)
	}
	if !l.pause(d.Backoff) {
		l.job.Status.Printf("%s received while waiting to relaunch: not relaunching", signalName(l.stopSignal()))
		return l.end(o.res.Code), false
	}
	return 0, true
}

// decided tells the decided hooks the decision on o.
func (l *loop) decided(o *outcome, d policy.Decision, line string) {
	for _, h := range l.hooks.decided {
		h.decided(o, d, line)
	}
}

// decide asks the policy what to do after attempt n ended with out. A
// relaunch whose changes leave the next attempt's command, environment and
// derived configs as they were would waste the job's start-up and its work
// since the last checkpoint: the rule goes on to its next step (the policy
// is asked again from the state it left, with the relaunch it counted not
// counted), and the user is told. A retry (a step that changes nothing on
// purpose) is left alone.
func (l *loop) decide(n int, out policy.Outcome) policy.Decision {
	st := l.state.Policies
	d := l.pol.Decide(st, out)
	for range 16 {
		if d.Verb != policy.Relaunch || len(d.Changes) == 0 || l.changesLaunch(n+1, st.Values, d.State.Values) {
			return d
		}
		if _, ok := d.SlurmMemChange(); ok {
			return d // the job is requeued with more memory (slurmmem.go)
		}
		l.status.Printf("rule %s step %d (%s) would relaunch the job unchanged: trying the rule's next step",
			d.Rule, d.Step, strings.TrimPrefix(decisionLabel(d), fmt.Sprintf("%s step %d: ", d.Rule, d.Step)))
		// The step's values are kept: they describe what the job already
		// gets, and with them the rule escalates past the step.
		next := d.State
		next.Relaunches, next.ByKind, next.NoProgress, next.Last = st.Relaunches, st.ByKind, st.NoProgress, st.Last
		d = l.pol.Decide(next, out)
	}
	return d
}

// changesLaunch reports whether attempt n's launch with the knob values
// after differs from its launch with before: its command, its environment or
// a derived config. A plan that cannot be made counts as a change (the
// attempt then says why).
func (l *loop) changesLaunch(n int, before, after policy.Values) bool {
	in := planInput{pol: l.pol, job: l.pjob, attempt: n, noEnv: l.cfg.NoEnv, probe: l.cfg.Probe, runDir: l.job.RunDir.Path(),
		gpuguardPID: l.getpid(), readFile: os.ReadFile}
	in.values = before
	a, err1 := planLaunch(in)
	in.values = after
	b, err2 := planLaunch(in)
	if err1 != nil || err2 != nil {
		return true
	}
	if !slices.Equal(a.argv, b.argv) || !slices.Equal(a.env, b.env) || len(a.files) != len(b.files) {
		return true
	}
	for i := range a.files {
		if a.files[i].Path != b.files[i].Path || !bytes.Equal(a.files[i].Data, b.files[i].Data) {
			return true
		}
	}
	return false
}

// plan is attempt n's launch plan, resuming from ckpt, with the knob values
// the run has now, its derived configs under runDir.
func (l *loop) plan(n int, ckpt, runDir string) (launchPlan, error) {
	return planLaunch(planInput{
		pol: l.pol, job: l.pjob, values: l.state.Policies.Values, ckpt: ckpt, attempt: n,
		noEnv: l.cfg.NoEnv, probe: l.cfg.Probe, runDir: runDir, gpuguardPID: l.getpid(), readFile: os.ReadFile,
	})
}

// journalDecision records a decision in events.jsonl.
func (l *loop) journalDecision(n int, d policy.Decision, ckpt string) {
	changes := make([]record.Change, 0, len(d.Changes))
	for _, c := range d.Changes {
		changes = append(changes, record.Change{Name: c.Name(), Old: record.Text(c.Old), New: record.Text(c.New)})
	}
	l.job.RunDir.Write(record.Decision{
		Attempt: n, Verb: string(d.Verb), Rule: d.Rule, Step: d.Step, Changes: changes,
		BackoffS: d.Backoff.Seconds(), Reason: d.Reason, Checkpoint: ckpt,
		Knobs: rundir.Knobs(d.State.Values),
	})
}

// end records the run's end and prints the summary table of attempts.
func (l *loop) end(raw int) int {
	code := l.exitStatus(raw) // --exit-codes scheduler (exitcodes.go)
	l.state.Done, l.state.ExitCode = true, code
	for _, h := range l.hooks.finish {
		h.finish(raw, code)
	}
	if err := l.saveState(); err != nil {
		l.job.Status.Printf("warning: %v", err)
	}
	if len(l.rows) > 1 || (l.pol != nil && len(l.rows) > 0 && code != 0) {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "attempt\tended\tphase\tstep\tduration\tresumed from\tthen")
		for _, r := range l.rows {
			step := "-"
			if r.verdict.Step != nil {
				step = strconv.FormatInt(*r.verdict.Step, 10)
			}
			ckpt := "-"
			if r.ckpt != "" {
				ckpt = displayPath(r.ckpt, l.wd)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.n, endedLabel(r), r.verdict.Phase.Label(), step,
				r.duration.Round(10*time.Millisecond), ckpt, r.decision)
		}
		tw.Flush()
		for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
			l.job.Status.Printf("  %s", line)
		}
	}
	for _, h := range l.hooks.exiting { // last, once state.json is saved: a Slurm requeue
		h.exiting(code)
	}
	return code
}

// lastCode is the exit status of the last attempt, or 1 when none ran.
func (l *loop) lastCode() int {
	if len(l.rows) == 0 {
		return 1
	}
	return l.rows[len(l.rows)-1].code
}
