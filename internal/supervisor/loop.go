package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/envinject"
	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/presets"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/rundir"
)

// StateFile is the run directory's record of where the run stands, written
// atomically after every decision, so that `gpuguard run --resume-run DIR`
// (or a Slurm requeue) continues with the settings that fit rather than
// starting again at those that failed.
const StateFile = rundir.State

// DerivedDir is the run directory's folder for derived config copies.
const DerivedDir = rundir.Derived

// TimelineFile is the run directory's memory timeline.
const TimelineFile = rundir.Timeline

// runState is the content of state.json.
type runState struct {
	Version    int      `json:"version"`
	Argv       []string `json:"argv"`   // the user's command
	Policy     string   `json:"policy"` // the policy file it ran with ("" for none)
	Attempt    int      `json:"attempt"`
	Checkpoint string   `json:"checkpoint,omitempty"` // last checkpoint resumed from
	// Started is when the run began (kept across --resume-run and Slurm
	// requeues): checkpoints older than that belong to earlier runs.
	Started  time.Time    `json:"started,omitzero"`
	Policies policy.State `json:"state"`
	Done     bool         `json:"done"`      // the run ended (success or give-up)
	ExitCode int          `json:"exit_code"` // when Done
	// History is what each attempt died of and how high its memory went,
	// so that a person (or the next decision) sees the peaks.
	History []attemptState `json:"history,omitempty"`
}

// attemptState is one attempt in state.json.
type attemptState struct {
	Attempt  int            `json:"attempt"`
	ExitCode int            `json:"exit_code"`
	Kind     classify.Kind  `json:"kind"`
	Phase    classify.Phase `json:"phase,omitempty"`
	LastStep *int64         `json:"last_step,omitempty"`
	Memory   memory.Summary `json:"memory"`
}

// maxHistory bounds state.json on runs with many relaunches.
const maxHistory = 20

// Environment variables gpuguard sets in every attempt's environment, so that
// `gpuguard doctor` can tell which run a GPU-holding process belongs to.
const (
	EnvRunDir  = "GPUGUARD_RUN_DIR"
	EnvPID     = "GPUGUARD_PID"
	EnvAttempt = "GPUGUARD_ATTEMPT"
)

// loop is one `gpuguard run`: attempts until the job succeeds, the policy gives
// up, or gpuguard is told to stop.
type loop struct {
	cfg   Config
	wd    string
	pol   *policy.Policy // nil: no policy; the job runs once
	pjob  policy.Job
	state runState

	job    *Job
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
	// releaseBaseline: GPU memory in use before the last failed attempt
	// started; the next attempt waits until use is back near it.
	releaseBaseline []gpu.Sample
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
}

func (r attemptRow) peaks() map[classify.Phase]float64 {
	return map[classify.Phase]float64{classify.PhaseTrain: r.peakTrain, classify.PhaseVal: r.peakVal}
}

// runLoop is Run with the attempt loop.
func runLoop(cfg Config) int {
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	status := NewStatus(cfg.Stdout, cfg.Stderr)
	wd, err := os.Getwd()
	if err != nil {
		status.Printf("cannot read the working directory: %v", err)
		return ExitSoftware
	}
	l := &loop{cfg: cfg, wd: wd, origin: time.Now()}
	l.pjob = policy.Job{Argv: cfg.Argv, Env: os.Environ(), Dir: wd, Exists: exists}

	if code := l.loadPolicy(status); code != 0 {
		return code
	}
	if code := l.resolveRunDir(status); code != 0 {
		return code
	}
	if cfg.DryRun {
		return l.dryRun(status)
	}

	job, code := Prepare(l.cfg)
	if job == nil {
		return code
	}
	defer job.Close()
	l.job = job
	l.log = job.Logger
	if l.pol != nil {
		job.RunDir.Event("policy", map[string]any{"file": l.pol.File(), "knobs": l.state.Policies.Values, "rules": l.pol.Rules()})
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

	code = l.attempts()
	job.Finish(code)
	return code
}

// loadPolicy finds and parses the policy (--policy, a preset, or
// gpuguard.yaml up to the repository root) and reads the knobs' starting
// values from the command. No policy file is fine: the job runs once.
func (l *loop) loadPolicy(status *Status) int {
	name, data, err := presets.Load(l.cfg.Policy, l.wd)
	if err != nil {
		status.Printf("%v", err)
		return ExitConfig
	}
	if data == nil {
		return 0
	}
	pol, err := policy.Parse(name, data)
	if err != nil {
		printErrors(status, err)
		return ExitConfig
	}
	vals, err := pol.Start(l.pjob, os.ReadFile)
	if err != nil {
		printErrors(status, err)
		return ExitConfig
	}
	l.pol = pol
	l.state = runState{Version: 1, Argv: l.cfg.Argv, Policy: pol.File(), Policies: policy.NewState(vals), Started: l.origin}
	return 0
}

// resolveRunDir decides whether this run continues an earlier one: with
// --resume-run, or under Slurm after a requeue (SLURM_RESTART_COUNT > 0),
// where the run directory is keyed by the job id so that the requeued job
// finds it again.
func (l *loop) resolveRunDir(status *Status) int {
	explicit := l.cfg.ResumeRun != ""
	if l.cfg.ResumeRun == "" && l.cfg.RunDir == "" {
		if id := slurmRunID(l.pjob.Env); id != "" {
			l.cfg.RunDir = filepath.Join(l.wd, ".gpuguard", "runs", "slurm-"+id)
			if restarts, _ := strconv.Atoi(getenv(l.pjob.Env, "SLURM_RESTART_COUNT")); restarts > 0 {
				if _, err := os.Stat(filepath.Join(l.cfg.RunDir, StateFile)); err == nil {
					l.cfg.ResumeRun, l.cfg.RunDir = l.cfg.RunDir, ""
				}
			}
		}
	}
	if l.cfg.ResumeRun == "" {
		return 0
	}
	data, err := os.ReadFile(filepath.Join(l.cfg.ResumeRun, StateFile))
	if err != nil {
		status.Printf("cannot resume: %v (give the directory of an earlier gpuguard run)", err)
		return ExitCantCreate
	}
	var st runState
	if err := json.Unmarshal(data, &st); err != nil || st.Version != 1 {
		status.Printf("cannot resume: %s is not a gpuguard state file (%v); start a new run instead", filepath.Join(l.cfg.ResumeRun, StateFile), err)
		return ExitConfig
	}
	if l.pol == nil {
		status.Printf("cannot resume %s without its policy: pass --policy %s", l.cfg.ResumeRun, st.Policy)
		return ExitConfig
	}
	// The knobs the run learned replace the command's own; knobs the policy
	// no longer has are dropped by Render.
	start := l.state.Policies.Values
	l.state = st
	l.state.Argv = l.cfg.Argv
	l.state.Policy = l.pol.File()
	l.state.Done = false
	for k, v := range start {
		if _, ok := l.state.Policies.Values[k]; !ok {
			l.state.Policies.Values[k] = v
		}
	}
	how := "budgets carried over (Slurm requeue)"
	if explicit {
		// A person chose to continue: the relaunch budgets start afresh;
		// the settings and each rule's position are kept. A requeue by Slurm
		// keeps its counters, so a failure that recurs cannot loop for ever.
		l.state.Policies.Relaunches, l.state.Policies.ByKind, l.state.Policies.NoProgress = 0, nil, 0
		how = "relaunch budgets start afresh"
	}
	with := describeValues(l.state.Policies.Values)
	if with == "" {
		with = "no knobs"
	}
	status.Printf("resuming run %s at attempt %d with %s (%s)", l.cfg.ResumeRun, st.Attempt+1, with, how)
	return 0
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
		if n > 1 {
			ckpt = l.latestCheckpoint()
			if ckpt == "" && l.spec.Required {
				l.job.Status.Printf("no complete checkpoint to resume from, and the policy requires one: not relaunching")
				return l.end(l.lastCode())
			}
		}

		argv, env, notes, err := l.render(n, ckpt)
		if err != nil {
			l.job.Status.Printf("attempt %d: %v", n, err)
			rd.Event("error", map[string]any{"attempt": n, "error": err.Error()})
			return l.end(ExitConfig)
		}
		for _, note := range notes {
			l.job.Status.Printf("%s", note)
		}
		if n > 1 || ckpt != "" {
			l.job.Status.Printf("attempt %d: %s", n, quoteArgv(argv))
		}

		row, v, res, startErr := l.runOne(n, argv, env, ckpt)
		if startErr != nil {
			return l.end(ExitCodeOf(startErr))
		}
		if res.Code == 0 {
			row.decision = "done"
			l.rows = append(l.rows, row)
			return l.end(0)
		}
		sig, terminated := l.job.Signals.Terminated()
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
			return l.end(res.Code)
		}

		var startStep *int64
		if ckpt != "" {
			if s, ok := checkpoint.StepOf(filepath.Base(ckpt)); ok {
				startStep = &s
			}
		}
		out := policy.Outcome{
			Verdict:    v,
			Exit:       classify.Exit{Code: res.Code, Signal: res.Signal, StoppedByUs: res.StoppedByUs},
			Attempt:    n,
			StartStep:  startStep,
			LastStep:   v.Step,
			Peaks:      row.peaks(),
			Terminated: terminated,
			Rand:       rand.Float64(),
		}
		d := l.pol.Decide(l.state.Policies, out)
		l.state.Policies = d.State
		row.decision = decisionLabel(d)
		l.rows = append(l.rows, row)
		next := ""
		if d.Verb == policy.Relaunch && !terminated {
			next = l.latestCheckpoint()
		}
		l.journalDecision(n, d, next)

		switch {
		case terminated:
			l.job.Status.Printf("attempt %d stopped by %s: not relaunching", n, signalName(sig))
			return l.end(res.Code)
		case d.Verb != policy.Relaunch:
			l.job.Status.Printf("%s → giving up: %s", describeFailure(n, v), d.Reason)
			return l.end(res.Code)
		}
		line := fmt.Sprintf("%s → %s", describeFailure(n, v), d.Describe())
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

// runOne runs attempt n and returns its summary row, the classifier's
// verdict and how the process ended. A non-nil error means the command could
// not be started (or gpuguard was told to stop before it started).
func (l *loop) runOne(n int, argv, env []string, ckpt string) (attemptRow, classify.Verdict, AttemptResult, error) {
	rd, status := l.job.RunDir, l.job.Status
	row := attemptRow{n: n, ckpt: ckpt}

	sampling := policy.Sampling{BaseHz: 1, ValHz: 20, FastWindow: 5 * time.Second}
	var patterns []classify.PhasePattern
	grace := 30 * time.Second
	if l.pol != nil {
		sampling, patterns, grace = l.pol.Sampling(), l.pol.PhasePatterns(), l.pol.OOMGrace()
	}
	var tl io.Writer // stays a nil interface when the file cannot be opened
	timeline, err := memory.OpenTimeline(filepath.Join(rd.Path(), TimelineFile))
	if err != nil {
		status.Printf("warning: no memory timeline: %v", err)
	} else {
		tl = timeline
	}
	sampler := memory.NewSampler(memory.SamplerConfig{
		GPU: l.gpu, BaseHz: sampling.BaseHz, FastHz: sampling.ValHz, FastFor: sampling.FastWindow,
		Timeline: tl, Attempt: n, Logger: l.log, Origin: l.origin,
		OnWarning: func(w memory.Warning) {
			status.Printf("warning: %s", w.Message)
			rd.Event("warning", map[string]any{"attempt": n, "kind": w.Kind, "message": w.Message, "warning": w})
		},
	})

	// The classifier runs on the output pump's scanner goroutine; its events
	// reach the sampler (faster sampling in validation), the journal, and the
	// OOM grace timer below.
	failed := make(chan struct{}, 1)
	// stepsSince counts step prints after the last out-of-memory line: a
	// framework that caught the OOM (and retried with a smaller batch) goes
	// on printing steps, and must not be stopped.
	// Only the failing rank's steps (or steps naming no rank) count: other
	// ranks may print steps they took before they hung in a collective.
	var stepsSince atomic.Int64
	var failRank atomic.Int64
	failRank.Store(-1)
	var epoch int64 = -1
	// The stream of the line being scanned, journalled with each phase and
	// failure. Set and read on the scanner goroutine only.
	stream := "stdout"
	cls, err := classify.NewClassifier(classify.ClassifierOptions{
		PhasePatterns: patterns,
		AllocConf:     allocConf(env),
		OnEvent: func(ev classify.Event) {
			switch ev.Type {
			case classify.EventStep:
				if ev.Epoch >= 0 {
					epoch = ev.Epoch
				}
				if fr := failRank.Load(); fr < 0 || ev.Rank < 0 || int64(ev.Rank) == fr {
					stepsSince.Add(1)
				}
			case classify.EventPhase:
				sampler.SetPhase(ev.Phase, epoch)
				rd.Event("phase", map[string]any{"attempt": n, "phase": ev.Phase, "line": ev.Line, "stream": stream})
			case classify.EventFailure:
				rd.Event("failure", map[string]any{"attempt": n, "kind": ev.Kind, "line": ev.Line, "stream": stream, "text": ev.Text})
				if isMemory(ev.Kind) {
					failRank.Store(int64(ev.Rank))
					stepsSince.Store(0)
					select {
					case failed <- struct{}{}:
					default:
					}
				}
			}
		},
	})
	if err != nil {
		status.Printf("policy phase patterns: %v", err)
		return row, classify.Verdict{}, AttemptResult{}, &Error{Code: ExitConfig, Msg: err.Error()}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	baseline, _ := l.gpu.Sample(ctx, nil)
	kills0, killsOK := procfs.CgroupOOMKills("/proc", os.Getpid())

	spec := l.job.Spec(argv, env)
	spec.Scan = func(s int, ln lines.Line) {
		switch {
		case spec.PTY:
			stream = "pty"
		case s == 2:
			stream = "stderr"
		default:
			stream = "stdout"
		}
		cls.Line(ln)
	}
	var sampled sync.WaitGroup
	var verdict classify.Verdict
	l.slurm.launch(true) // Slurm hook (supervisor/slurm.go)
	res, err := l.job.RunAttempt(n, spec, AttemptHooks{
		Started: func(a *Attempt) {
			l.slurm.attach(a) // Slurm hook (supervisor/slurm.go)
			sampled.Add(1)
			go func() { defer sampled.Done(); sampler.RunJob(ctx, a) }()
			// After an out-of-memory line the job gets oom_grace to exit by
			// itself; other ranks may hang in a collective until NCCL's
			// timeout, tens of minutes, so then the whole tree is stopped.
			// A job that trains on after the error (two steps printed since)
			// survived it and is left alone.
			go func() {
				for {
					select {
					case <-failed:
					case <-a.Done():
						return
					}
					t := time.NewTimer(grace)
					select {
					case <-t.C:
						if stepsSince.Load() >= 2 {
							l.log.Info("training went on after an out-of-memory error: not stopping the job")
							continue
						}
						status.Printf("the job did not exit within %s of its out-of-memory error: stopping it", grace)
						a.Stop(fmt.Sprintf("no exit within oom_grace (%s) after an out-of-memory error", grace))
						return
					case <-a.Done():
						t.Stop()
						return
					}
				}
			}()
		},
		Ended: func(r AttemptResult) map[string]any {
			cancel()
			sampled.Wait()
			exit := classify.Exit{Code: r.Code, Signal: r.Signal, StoppedByUs: r.StoppedByUs}
			if kills1, ok := procfs.CgroupOOMKills("/proc", os.Getpid()); ok && killsOK && kills1 > kills0 {
				exit.CgroupOOMKills = int(kills1 - kills0)
			}
			cls.Exit(exit)
			verdict = cls.Verdict()
			summary := sampler.Summary()
			rd.Event("memory", map[string]any{"attempt": n, "summary": summary})
			row.peakTrain, row.peakVal = summary.PeakFraction(classify.PhaseTrain), summary.PeakFraction(classify.PhaseVal)
			l.state.History = append(l.state.History, attemptState{
				Attempt: n, ExitCode: r.Code, Kind: verdict.Kind, Phase: verdict.Phase, LastStep: verdict.Step, Memory: summary,
			})
			if len(l.state.History) > maxHistory {
				l.state.History = l.state.History[len(l.state.History)-maxHistory:]
			}
			fields := map[string]any{"verdict": verdict, "checkpoint": ckpt}
			if verdict.Step != nil {
				fields["last_step"] = *verdict.Step
			}
			return fields
		},
	})
	l.slurm.launch(false) // a start that failed never attached
	if timeline != nil {
		timeline.Close()
	}
	if err != nil {
		return row, verdict, res, err
	}
	row.code, row.verdict, row.duration = res.Code, verdict, res.End.Sub(res.Start)
	if res.Code != 0 {
		l.releaseBaseline = baseline
	}
	return row, verdict, res, nil
}

// render computes attempt n's command and environment: the policy's knob
// values (derived config copies written into the run directory), the
// checkpoint to resume from, the allocator defaults, and gpuguard's own
// variables.
func (l *loop) render(n int, ckpt string) (argv, env, notes []string, err error) {
	rd := l.job.RunDir
	argv, env = l.cfg.Argv, l.pjob.Env
	if l.pol != nil {
		dir := filepath.Join(rd.Path(), DerivedDir, fmt.Sprintf("attempt-%d", n))
		launch, err := l.pol.Render(l.pjob, l.state.Policies.Values, ckpt, dir, os.ReadFile)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, f := range launch.Files {
			if err := writeDerived(f); err != nil {
				return nil, nil, nil, err
			}
		}
		argv, env, notes = launch.Argv, launch.Env, launch.Notes
	}
	if !l.cfg.NoEnv {
		merged, err := envinject.Merge(env, envinject.Defaults(), false)
		if err != nil {
			return nil, nil, nil, err
		}
		env = merged.Env
	}
	env = setEnv(env, EnvRunDir, rd.Path())
	env = setEnv(env, EnvPID, strconv.Itoa(os.Getpid()))
	env = setEnv(env, EnvAttempt, strconv.Itoa(n))
	return argv, env, notes, nil
}

// writeDerived writes a derived config copy. It refuses to write over the
// user's own file whatever the policy computed.
func writeDerived(f policy.DerivedFile) error {
	if f.Source != "" && sameFilePath(f.Path, f.Source) {
		return fmt.Errorf("derived config %s would overwrite the user's file %s", f.Path, f.Source)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("cannot write the derived config: %w", err)
	}
	if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
		return fmt.Errorf("cannot write the derived config: %w", err)
	}
	return nil
}

// startWatcher follows the job's checkpoints for the whole run, so that a
// checkpoint seen renamed into place counts as complete at once.
func (l *loop) startWatcher() {
	spec, err := l.pol.Checkpoint().Expand(l.state.Policies.Values)
	if err != nil {
		l.job.Status.Printf("warning: checkpoints: %v; relaunches start from scratch", err)
		return
	}
	l.spec = spec
	if len(spec.Globs) == 0 {
		return
	}
	w, err := checkpoint.Watch(l.wd, checkpoint.Spec(spec.CheckpointFiles), l.log)
	if err != nil {
		l.job.Status.Printf("warning: cannot watch checkpoints: %v; relaunches start from scratch", err)
		return
	}
	l.ckpts = w
}

// latestCheckpoint is the newest complete checkpoint, or "": the best of
// what the watcher saw (a rename into place is complete at once) and of a
// fresh scan (a file that has been quiet long enough). A checkpoint the job
// wrote just before it died may still be inside its quiet period: then it
// waits for it, at most the quiet period and one poll (the job is gone, so
// the file cannot still be growing, unless another node writes it).
func (l *loop) latestCheckpoint() string {
	if l.ckpts == nil {
		return ""
	}
	deadline := time.Now().Add(l.spec.Quiet + l.spec.Poll)
	var old *checkpoint.Checkpoint
	for {
		best, ok := l.ckpts.Latest()
		if ok {
			if _, err := os.Stat(best.Path); err != nil {
				ok = false // deleted since the watcher saw it complete
			} else if !l.ofThisRun(best) {
				old, ok = &best, false
			}
		}
		all, err := checkpoint.Scan(l.wd, checkpoint.Spec(l.spec.CheckpointFiles), time.Now())
		if err != nil {
			l.log.Warn("checkpoint scan failed", zap.Error(err))
		}
		for _, c := range all {
			if !l.ofThisRun(c) {
				if c.Complete && (old == nil || l.newer(c, *old)) {
					old = &c
				}
				continue
			}
			if c.Complete && (!ok || l.newer(c, best)) {
				best, ok = c, true
			}
		}
		pending := false
		for _, c := range all {
			if !c.Complete && c.Size > 0 && l.ofThisRun(c) && (!ok || l.newer(c, best)) {
				pending = true
			}
		}
		if !pending || time.Now().After(deadline) {
			if ok {
				return best.Path
			}
			if old != nil && !l.ignoredOld {
				l.ignoredOld = true
				l.job.Status.Printf("not resuming from %s: it was written before this run started (%s); "+
					"set checkpoints: {earlier_runs: true} in the policy to resume from earlier runs' checkpoints",
					displayPath(old.Path, l.wd), l.state.Started.Format(time.DateTime))
			}
			return ""
		}
		select {
		case <-l.ckpts.Updates():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkpointClockSlack allows for file systems whose timestamps are coarse
// or come from another machine's clock (NFS).
const checkpointClockSlack = 2 * time.Second

// ofThisRun reports whether c may be resumed from: written since the run
// started, unless the policy allows earlier runs' checkpoints. A job whose
// output directory still holds a finished run's checkpoints must not be
// relaunched from them: they may come from other settings, or another job.
func (l *loop) ofThisRun(c checkpoint.Checkpoint) bool {
	return l.spec.EarlierRuns || l.state.Started.IsZero() || !c.ModTime.Before(l.state.Started.Add(-checkpointClockSlack))
}

// newer orders checkpoints the way the policy chooses them: by the step in
// the name (highest_step), else by modification time.
func (l *loop) newer(a, b checkpoint.Checkpoint) bool {
	if l.spec.Choose == "highest_step" && a.Step != nil && b.Step != nil {
		return *a.Step > *b.Step
	}
	return a.ModTime.After(b.ModTime)
}

// pause waits, before a relaunch, for the failed attempt's GPU memory to be
// released (so the next attempt does not run out of memory on a ghost) and
// then for the policy's backoff. It returns false when a terminating signal
// arrives meanwhile.
func (l *loop) pause(backoff time.Duration) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := l.job.Signals.TerminatedC()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-l.slurm.requeueC(): // Slurm hook (supervisor/slurm.go)
			cancel()
		case <-ctx.Done():
		}
	}()
	if l.releaseBaseline != nil {
		start := time.Now()
		if err := gpu.WaitRelease(ctx, l.gpu, nil, l.releaseBaseline, 0, 0); err != nil && ctx.Err() == nil {
			l.job.Status.Printf("warning: %v", err)
		} else if waited := time.Since(start); waited > time.Second {
			l.job.Status.Printf("waited %s for the GPU memory of the last attempt to be released", waited.Round(100*time.Millisecond))
		}
		l.releaseBaseline = nil
	}
	if backoff > 0 {
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// journalDecision records a decision in events.jsonl.
func (l *loop) journalDecision(n int, d policy.Decision, ckpt string) {
	changes := make([]map[string]string, 0, len(d.Changes))
	for _, c := range d.Changes {
		name := c.Knob
		if name == "" {
			name = c.Env
		}
		changes = append(changes, map[string]string{"name": name, "old": c.Old, "new": c.New})
	}
	l.job.RunDir.Event("decision", map[string]any{
		"attempt": n, "verb": d.Verb, "rule": d.Rule, "step": d.Step, "changes": changes,
		"backoff_s": d.Backoff.Seconds(), "reason": d.Reason, "checkpoint": ckpt,
		"knobs": d.State.Values,
	})
}

// saveState writes state.json atomically.
func (l *loop) saveState() error {
	if l.pol == nil {
		return nil
	}
	data, err := json.MarshalIndent(l.state, "", "  ")
	if err != nil {
		return err
	}
	if err := l.job.RunDir.WriteFileAtomic(StateFile, append(data, '\n')); err != nil {
		return fmt.Errorf("cannot save %s (a later --resume-run would start from the first settings): %w", StateFile, err)
	}
	return nil
}

// end records the run's end and prints the summary table of attempts.
func (l *loop) end(code int) int {
	l.state.Done, l.state.ExitCode = true, code
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

// dryRun prints what the first attempt would get: the command, the
// environment changes, the derived config files, and what each rule would
// change. It starts nothing and writes nothing.
func (l *loop) dryRun(status *Status) int {
	argv, env := l.cfg.Argv, l.pjob.Env
	var files []policy.DerivedFile
	var notes []string
	if l.pol != nil {
		dir := filepath.Join(l.wd, ".gpuguard", "runs", "<run>", DerivedDir, "attempt-1")
		launch, err := l.pol.Render(l.pjob, l.state.Policies.Values, "", dir, os.ReadFile)
		if err != nil {
			status.Printf("%v", err)
			return ExitConfig
		}
		argv, env, files, notes = launch.Argv, launch.Env, launch.Files, launch.Notes
	}
	var merged envinject.Result
	if !l.cfg.NoEnv {
		var err error
		if merged, err = envinject.Merge(env, envinject.Defaults(), false); err != nil {
			status.Printf("%v", err)
			return ExitSoftware
		}
		env = merged.Env
	}
	usePTY, err := ResolvePTY(l.cfg.PTY, l.cfg.Stdout)
	if err != nil {
		status.Printf("%v", err)
		return ExitCodeOf(err)
	}
	w := l.cfg.Stdout
	fmt.Fprintf(w, "dry run: nothing is started\n")
	fmt.Fprintf(w, "command: %s (%s)\n", quoteArgv(argv), launchName(usePTY))
	if l.pol != nil {
		fmt.Fprintf(w, "policy: %s\n", l.pol.File())
		fmt.Fprintf(w, "knobs: %s\n", describeValues(l.state.Policies.Values))
	} else {
		fmt.Fprintln(w, "policy: none (the job runs once; gpuguard policy init -- COMMAND writes a starter)")
	}
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, d := range envDiff(l.pjob.Env, env) {
		fmt.Fprintf(w, "env: %s\n", d)
	}
	for _, warn := range merged.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	for _, f := range files {
		fmt.Fprintf(w, "derived config %s (from %s):\n", f.Path, f.Source)
		for _, line := range strings.Split(strings.TrimRight(string(f.Data), "\n"), "\n") {
			fmt.Fprintf(w, "  | %s\n", line)
		}
	}
	if l.pol != nil {
		fmt.Fprintln(w, "on failure, the rules would change:")
		for _, p := range l.pol.Preview(l.state.Policies.Values) {
			fmt.Fprintf(w, "  %s\n", p)
		}
		if spec := l.pol.Checkpoint(); len(spec.Globs) > 0 {
			fmt.Fprintf(w, "checkpoints: %s (pass: %s)\n", strings.Join(spec.Globs, ", "), orNone(spec.Pass))
		}
	}
	return 0
}

// describeFailure says how attempt n ended, e.g. "attempt 2 died of GPU OOM
// in validation (asked 15.82 GiB, 6.17 free of 47.40)".
func describeFailure(n int, v classify.Verdict) string {
	var what string
	switch v.Kind {
	case classify.KindGPUOOM:
		what = "GPU OOM"
	case classify.KindCPUAllocOOM:
		what = "CPU allocator OOM"
	case classify.KindHostOOM:
		what = "host OOM"
	case classify.KindCrash:
		what = "a crash that is not memory"
		if v.Reason != "" {
			what += " (" + v.Reason + ")"
		}
	default:
		what = "an unrecognised failure"
	}
	s := fmt.Sprintf("attempt %d died of %s", n, what)
	switch v.Phase {
	case classify.PhaseVal:
		s += " in validation"
	case classify.PhaseTrain:
		s += " in training"
	}
	if v.Rank != nil {
		s += fmt.Sprintf(" on rank %d", *v.Rank)
	}
	if o := v.OOM; o != nil && o.RequestedBytes != nil {
		s += " (asked " + humanize.GiBFigure(*o.RequestedBytes) + " GiB"
		if o.FreeBytes != nil && o.TotalBytes != nil {
			s += ", " + humanize.GiBFigure(*o.FreeBytes) + " free of " + humanize.GiBFigure(*o.TotalBytes)
		}
		if v.Fragmentation && o.ReservedUnallocatedBytes != nil {
			s += ", " + humanize.GiBFigure(*o.ReservedUnallocatedBytes) + " reserved but unallocated"
		}
		s += ")"
	}
	return s
}

func isMemory(k classify.Kind) bool {
	return k == classify.KindGPUOOM || k == classify.KindCPUAllocOOM || k == classify.KindHostOOM
}

func decisionLabel(d policy.Decision) string {
	switch d.Verb {
	case policy.Relaunch:
		s := fmt.Sprintf("%s step %d", d.Rule, d.Step)
		if len(d.Changes) > 0 {
			parts := make([]string, len(d.Changes))
			for i, c := range d.Changes {
				parts[i] = c.String()
			}
			s += ": " + strings.Join(parts, ", ")
		}
		return s
	case policy.GiveUp:
		return "gave up: " + d.Reason
	}
	return string(d.Verb)
}

func endedLabel(r attemptRow) string {
	if r.code == 0 {
		return "ok"
	}
	kind := string(r.verdict.Kind)
	if r.verdict.Kind == classify.KindNone || kind == "" {
		kind = "failed"
	}
	return fmt.Sprintf("%s (exit %d)", kind, r.code)
}

func phaseLabel(p classify.Phase) string {
	if p == classify.PhaseNone {
		return "-"
	}
	return string(p)
}

func describeValues(vals policy.Values) string {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + vals[k].String()
	}
	return strings.Join(parts, " ")
}

// envDiff lists the variables that differ between two environments.
func envDiff(before, after []string) []string {
	old := map[string]string{}
	for _, kv := range before {
		if k, v, ok := strings.Cut(kv, "="); ok {
			old[k] = v
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range after {
		k, v, _ := strings.Cut(kv, "=")
		seen[k] = true
		if ov, ok := old[k]; !ok {
			out = append(out, fmt.Sprintf("%s=%s (added)", k, v))
		} else if ov != v {
			out = append(out, fmt.Sprintf("%s=%s (was %s)", k, v, ov))
		}
	}
	for k := range old {
		if !seen[k] {
			out = append(out, k+" (removed)")
		}
	}
	sort.Strings(out)
	return out
}

func setEnv(env []string, key, val string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+val)
}

func getenv(env []string, key string) string {
	v, _ := lookupEnv(env, key)
	return v
}

// allocConf is the allocator configuration the job runs with.
func allocConf(env []string) string {
	if v := getenv(env, "PYTORCH_CUDA_ALLOC_CONF"); v != "" {
		return v
	}
	return getenv(env, "PYTORCH_ALLOC_CONF")
}

// slurmRunID keys a run directory by Slurm job (and array task, and task
// rank when several tasks run gpuguard), so that a requeued job finds it.
func slurmRunID(env []string) string {
	id := getenv(env, "SLURM_JOB_ID")
	if id == "" {
		return ""
	}
	if task := getenv(env, "SLURM_ARRAY_TASK_ID"); task != "" {
		id = getenv(env, "SLURM_ARRAY_JOB_ID") + "_" + task
	}
	if n, _ := strconv.Atoi(getenv(env, "SLURM_NTASKS")); n > 1 && getenv(env, "SLURM_STEP_ID") != "" {
		id += "-task" + getenv(env, "SLURM_PROCID")
	}
	return id
}

func printErrors(status *Status, err error) {
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range m.Unwrap() {
			status.Printf("%v", e)
		}
		return
	}
	status.Printf("%v", err)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func sameFilePath(a, b string) bool {
	ia, err1 := os.Stat(a)
	ib, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(ia, ib)
}

func orNone(s string) string {
	if s == "" {
		return "not set"
	}
	return s
}
