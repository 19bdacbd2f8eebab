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
	"github.com/gpuguard/gpuguard/internal/group"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// loop is one `gpuguard run`: attempts until the job succeeds, the policy gives
// up, or gpuguard is told to stop.
type loop struct {
	cfg  Config
	wd   string
	pol  *policy.Policy // nil: no policy; the job runs once
	pjob policy.Job     // the job as the policy sees it: the environment it gets
	// userEnv is gpuguard's own environment, before its allocator settings.
	userEnv []string
	state   runState

	job    *Job
	status *Status // the job's, once prepared; a dry run's own
	log    *zap.Logger
	gpu    gpu.Probe
	ckpts  *checkpoint.Watcher
	spec   policy.CheckpointSpec
	origin time.Time

	rows []attemptRow
	// slurm: requeue on the policy's slurm.requeue_on signals; nil outside
	// Slurm (Slurm hook, supervisor/slurm.go).
	slurm *slurmRun
	// ignoredOld: a checkpoint of an earlier run was passed over (said once).
	ignoredOld bool
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
	// writersGone: when the last attempt's processes had all ended (zero
	// while some survive): no checkpoint can change after it.
	writersGone time.Time
	// after is time.After; a test's records the waits.
	after func(time.Duration) <-chan time.Time
	// getpid is os.Getpid, for the plan's GPUGUARD_PID.
	getpid func() int
	// gaveUp: why the run gave up, for --exit-codes scheduler (exitcodes.go).
	gaveUp giveUp
	// grp: this gpuguard's part in a group of gpuguards that decide as one
	// (group.go); nil when it runs alone.
	grp *groupRun
}

// newLoop returns the loop of one `gpuguard run` started at origin in wd,
// with the environment env, running attempts for real.
func newLoop(cfg Config, wd string, env []string, origin time.Time) *loop {
	l := &loop{cfg: cfg, wd: wd, origin: origin, userEnv: env, after: time.After, getpid: os.Getpid}
	// The policy reads the knobs' values from the environment the job
	// really gets, gpuguard's allocator settings included: a step that sets
	// what is already set does not act (a relaunch that changes nothing
	// wastes the job's start-up and its work since the last checkpoint).
	jobEnv := env
	if !cfg.NoEnv {
		if m, err := envinject.Merge(env, envinject.Defaults(), false); err == nil {
			jobEnv = m.Env
		}
	}
	l.pjob = policy.Job{Argv: cfg.Argv, Env: jobEnv, Dir: wd, Exists: exists}
	l.runAttempt = l.runOne
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

	if code := l.loadPolicy(status); code != 0 {
		return code
	}
	if code := l.resolveRunDir(status); code != 0 {
		return code
	}
	l.applyMemo(status)
	if cfg.DryRun {
		return l.dryRun(status)
	}
	gspec, inGroup, code := l.resolveGroup(status) // Group hook (supervisor/group.go)
	if code != 0 {
		return code
	}
	l.cfg.groupMember = inGroup && !gspec.Leads()

	job, code := prepare(l.cfg)
	if job == nil {
		return code
	}
	defer job.Close()
	l.job, l.status = job, job.Status
	l.log = job.Logger
	if l.pol != nil {
		job.RunDir.Write(record.Policy{File: l.pol.File(), Knobs: rundir.Knobs(l.state.Policies.Values), Rules: l.pol.Rules()})
	}
	l.slurm = l.startSlurm() // Slurm hook (supervisor/slurm.go)
	defer l.slurm.close()

	l.gpu = gpu.Open(job.Env, l.log)
	defer l.gpu.Close()
	if ok, why := l.gpu.Available(); !ok {
		l.log.Info("GPU memory not sampled", zap.String("why", why))
	}
	if l.pol != nil {
		l.startWatcher()
		defer func() {
			if l.ckpts != nil {
				l.ckpts.Close()
			}
		}()
	}

	if inGroup { // Group hook: form the group before the first attempt
		grp, code := l.startGroup(gspec)
		if grp == nil {
			job.Finish(code)
			return code
		}
		l.grp = grp
		defer grp.close()
	}

	code = l.attempts()
	job.Finish(code)
	return code
}

// attempts runs the attempt loop and returns the exit status.
func (l *loop) attempts() int {
	rd := l.job.RunDir
	for {
		l.state.Attempt++
		n := l.state.Attempt

		// The first attempt of a new run is the user's command as given;
		// every later one (and a resumed run's) continues from a checkpoint.
		ckpt := ""
		if l.grp.isMember() {
			// Group hook (supervisor/group.go): a member starts when the
			// leader says, with the leader's knob values and checkpoint.
			g, code, ok := l.awaitGo()
			if !ok {
				return code
			}
			n, l.state.Attempt, l.state.Policies, ckpt = g.Attempt, g.Attempt, g.State, g.Checkpoint
		} else if n > 1 {
			ckpt = l.latestCheckpoint(true)
			if ckpt == "" && l.spec.Required {
				l.job.Status.Printf("no complete checkpoint to resume from, and the policy requires one: not relaunching")
				return l.end(l.lastCode())
			}
		}

		plan, err := l.plan(n, ckpt, rd.Path())
		if err == nil {
			err = plan.writeFiles()
		}
		if err != nil {
			l.job.Status.Printf("attempt %d: %v", n, err)
			rd.Write(record.Error{Attempt: n, Error: err.Error()})
			return l.end(ExitConfig)
		}
		for _, note := range plan.notes {
			l.job.Status.Printf("%s", note)
		}
		if n > 1 || ckpt != "" {
			l.job.Status.Printf("attempt %d: %s", n, quoteArgv(plan.argv))
		}

		l.grp.begin(n, l.state.Policies, ckpt) // Group hook: the leader's go to every member
		row, v, res, startErr := l.runAttempt(n, plan)
		if startErr != nil {
			if l.grp.isMember() {
				l.grp.member.Ended(l.groupReport(n, row, v, attemptResult{Code: exitCodeOf(startErr)}, false, nil))
			}
			return l.end(exitCodeOf(startErr))
		}
		l.writersGone = time.Time{}
		if res.Survivors == 0 {
			l.writersGone = time.Now()
		}
		sig, terminated := l.job.Signals.Terminated()
		if terminated {
			row.stoppedBy = sig
		}
		var startStep *int64
		if ckpt != "" {
			if s, ok := checkpoint.StepOf(filepath.Base(ckpt)); ok {
				startStep = &s
			}
		}
		// gpuguard's own allocator settings refused by an older PyTorch
		// (allocopt.go): the attempt again without them, once.
		if l.grp == nil && !terminated && res.Code != 0 && l.dropRefusedDefaults(n, v) {
			row.decision = "relaunch without gpuguard's allocator settings"
			l.rows = append(l.rows, row)
			continue
		}
		// Group hook (supervisor/group.go): a member applies the leader's
		// decision; the leader decides from the first failure of the group.
		exit := classify.Exit{Code: res.Code, Signal: res.Signal, StoppedByUs: res.StoppedByUs}
		peaks, starts, rejections, block := row.peaks(), row.starts(), row.rejections, row.block
		groupFailed := false
		var from *group.Report
		var reports []group.Report
		if l.grp != nil {
			rep := l.groupReport(n, row, v, res, terminated, startStep)
			if l.grp.isMember() {
				if rs, ok := l.slurm.requeueSignal(); ok {
					l.grp.member.Ended(rep)
					return l.endForRequeue(n, rs, row, res.Code)
				}
				next, code := l.memberDecision(n, row, rep, res.Code)
				if next {
					continue
				}
				return code
			}
			first, failed, reps, code, ok := l.leaderCollect(n, row, rep, res.Code)
			if !ok {
				return code
			}
			groupFailed, reports = failed, reps
			if failed {
				from = &first
				v, exit, peaks, starts, rejections, block = first.Verdict, first.Exit, first.Peaks, first.Starts, first.Rejections, first.Block
				if res.Code == 0 {
					res.Code = first.Exit.Code
				}
			}
		}
		if res.Code == 0 && !groupFailed {
			row.decision = "done"
			l.rows = append(l.rows, row)
			l.decided(n, policy.Decision{Verb: policy.Done, State: l.state.Policies}, "done", nil, reports)
			return l.end(0)
		}
		// Slurm hook (supervisor/slurm.go): after a requeue signal nothing
		// is relaunched here; end() requeues the job.
		if rs, ok := l.slurm.requeueSignal(); ok {
			return l.endForRequeue(n, rs, row, res.Code)
		}
		if l.pol == nil {
			row.decision = "no policy"
			l.rows = append(l.rows, row)
			if isMemory(v.Kind) && !terminated {
				l.job.Status.Printf("%s; no policy file, so not relaunching (write one with: gpuguard policy init -- %s)", describeFailure(n, v), quoteArgv(l.cfg.Argv))
			}
			if !terminated {
				l.noteGiveUp(v, nil)
			}
			return l.end(res.Code)
		}

		out := policy.Outcome{
			Verdict:    v,
			Exit:       exit,
			Attempt:    n,
			StartStep:  startStep,
			Peaks:      peaks,
			Starts:     starts,
			Block:      block,
			Rejections: rejections,
			Terminated: terminated,
			SlurmMem:   l.slurmMem(),
			Rand:       rand.Float64(),
		}
		d := l.decide(n, out)
		// Slurm hook (supervisor/slurmmem.go): raise_slurm_mem requeues the
		// job with a larger memory request; when it cannot, the policy is
		// asked again with what Slurm said, and the rule goes on.
		for range 4 {
			c, ok := d.SlurmMemChange()
			if !ok || d.Verb != policy.Relaunch || terminated {
				break
			}
			shown := d
			shown.Backoff = 0 // no wait: the job goes back to Slurm's queue
			l.job.Status.Printf("%s → %s; requeueing the Slurm job with it", describeFailure(n, v), shown.Describe())
			ev, why, requeued := l.requeueWithMem(n, d, c)
			if requeued {
				row.decision = decisionLabel(d) + ", requeued"
				l.rows = append(l.rows, row)
				l.journalDecision(n, d, "")
				l.job.RunDir.Write(ev)
				return l.end(res.Code)
			}
			l.job.Status.Printf("rule %s step %d (%s) cannot act: %s", d.Rule, d.Step, c, why)
			l.job.RunDir.Write(ev)
			mem := *out.SlurmMem
			mem.Refused = why
			out.SlurmMem = &mem
			d = l.decide(n, out)
		}
		l.state.Policies = d.State
		row.decision = decisionLabel(d)
		l.rows = append(l.rows, row)
		next := ""
		if d.Verb == policy.Relaunch && !terminated {
			next = l.latestCheckpoint(true)
		}
		l.journalDecision(n, d, next)

		switch {
		case terminated:
			l.job.Status.Printf("attempt %d stopped by %s: not relaunching", n, signalName(sig))
			return l.end(res.Code)
		case d.Verb != policy.Relaunch:
			l.job.Status.Printf("%s%s → giving up: %s", firstOf(from, l.grp), describeFailure(n, v), d.Reason)
			l.noteGiveUp(v, &d)
			l.decided(n, d, "giving up: "+d.Reason, from, reports)
			return l.end(res.Code)
		}
		l.decided(n, d, d.Describe(), from, reports)
		line := fmt.Sprintf("%s%s → %s", firstOf(from, l.grp), describeFailure(n, v), d.Describe())
		if next != "" {
			line += "; resuming from " + displayPath(next, l.wd)
		} else if l.spec.Pass != "" {
			line += "; no checkpoint yet, starting over"
		}
		l.job.Status.Printf("%s", line)
		if err := l.saveState(); err != nil {
			l.job.Status.Printf("warning: %v", err)
		}
		if !l.pause(d.Backoff) {
			sig := l.stopSignal() // Slurm hook: a terminating or a requeue signal
			l.job.Status.Printf("%s received while waiting to relaunch: not relaunching", signalName(sig))
			return l.end(res.Code)
		}
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
func (l *loop) end(code int) int {
	l.groupFinish(code)       // Group hook: the members end with the leader
	code = l.exitStatus(code) // --exit-codes scheduler (exitcodes.go)
	l.state.Done, l.state.ExitCode = true, code
	if code == 0 {
		l.saveMemo()
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
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.n, endedLabel(r), phaseLabel(r.verdict.Phase), step,
				r.duration.Round(10*time.Millisecond), ckpt, r.decision)
		}
		tw.Flush()
		for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
			l.job.Status.Printf("  %s", line)
		}
	}
	l.requeueAtEnd(code) // Slurm hook (supervisor/slurm.go): last, once state.json is saved
	return code
}

// lastCode is the exit status of the last attempt, or 1 when none ran.
func (l *loop) lastCode() int {
	if len(l.rows) == 0 {
		return 1
	}
	return l.rows[len(l.rows)-1].code
}
