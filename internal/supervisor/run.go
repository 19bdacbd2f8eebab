package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/envinject"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/redact"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Run runs the job described by cfg and returns gpuguard's exit status: the
// job's own (its code, or 128+N when signal N killed it), or one of the
// Exit* codes for gpuguard's own failures.
func Run(cfg Config) int {
	// An attempt's watchdog is gpuguard re-executed: see watchdog.go.
	if IsWatchdogInvocation(cfg.Argv) {
		return watchdogMain()
	}
	// As PID 1 (a container's entrypoint), a small init runs gpuguard
	// proper as its child: see pid1.go.
	if code, ok := runAsInit(cfg.Grace); ok {
		return code
	}
	return runLoop(cfg)
}

// Job is what a run sets up once and every attempt uses: the resolved launch
// mode, the environment after injection, the run directory, the status
// writer and the signal forwarder.
type Job struct {
	Cfg     Config
	PTY     bool
	Env     []string // the job's environment, allocator settings merged in
	RunDir  *rundir.Dir
	Status  *Status
	Signals *Signals
	Logger  *zap.Logger
	Term    *os.File // the terminal the pty's size follows, if any

	stopSinks func()      // notifications and metrics (sinks.go)
	quiet     atomic.Bool // a group member: its leader sends the job's notifications (sinks.go)
}

// prepare resolves cfg's launch mode, creates (or opens) the run directory
// in wd, prints the start lines and starts forwarding signals. env is
// gpuguard's environment and merged what the allocator defaults change in
// it (the loop merged them once; the command is checked there too). It
// returns a nil Job and the exit status when the run cannot go on (a bad
// --pty value: 64; the run directory: 73).
func prepare(cfg Config, wd string, env []string, merged envinject.Result) (*Job, int) {
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	status := newStatus(cfg.Stdout, cfg.Stderr)
	usePTY, err := resolvePTY(cfg.PTY, cfg.Stdout)
	if err != nil {
		fmt.Fprintln(cfg.Stderr, err)
		return nil, exitCodeOf(err)
	}
	if cfg.NoEnv {
		merged = envinject.Result{}
	} else {
		env = merged.Env
	}
	var rd *rundir.Dir
	if cfg.ResumeRun != "" {
		// The loop has read state.json already (loop.go).
		rd, err = openRunDir(cfg.ResumeRun)
	} else {
		rd, err = createRunDir(cfg.RunDir, wd)
	}
	if err != nil {
		status.Printf("%v", err)
		return nil, exitCodeOf(err)
	}
	rd.OnWriteError(func(msg string) { status.Printf("%s", msg) })
	j := &Job{Cfg: cfg, PTY: usePTY, Env: env, RunDir: rd, Status: status, Logger: rd.Logger()}
	j.quiet.Store(cfg.groupMember) // the leader notifies for the whole job
	j.stopSinks = startSinks(cfg, rd, status, &j.quiet)
	for _, f := range []*os.File{cfg.Stdout, fileOf(cfg.Stderr), cfg.Stdin} {
		if isTerminal(f) {
			j.Term = f
			break
		}
	}
	if !cfg.Quiet {
		status.Printf("run directory %s", displayPath(rd.Path(), wd))
		status.Printf("%s", containmentLine()) // which containment the attempts get
	}
	printEnv(status, cfg.NoEnv, cfg.Quiet, merged)

	j.Signals = notifySignals()
	j.Signals.OnSignal(func(ev signalEvent) {
		name := signalName(ev.Signal)
		rd.Write(record.Signal{Signal: name, Action: ev.Action, PID: ev.Pid})
		switch {
		case ev.Action == "killed":
			status.Printf("second %s: killing the job and all its processes", name)
		case ev.Action == "no job" && terminating(ev.Signal):
			status.Printf("%s: no job running; none will be started", name)
		case ev.Action == "forwarded" && (ev.Signal == syscall.SIGINT || ev.Signal == syscall.SIGTERM):
			status.Printf("%s passed to the job; send it again to kill the job", name)
		}
	})

	changes := make([]string, 0, len(merged.Changes))
	for _, c := range merged.Changes {
		changes = append(changes, c.String())
	}
	rd.Write(record.RunStart{
		Argv:        cfg.Argv,
		PTY:         usePTY,
		RunDir:      rd.Path(),
		Workdir:     wd,
		PID:         os.Getpid(),
		EnvChanges:  changes,
		EnvWarnings: merged.Warnings,
		Grace:       cfg.Grace.String(),
	})
	j.Logger.Info("run started", zap.Strings("argv", redact.Argv(cfg.Argv)), zap.Bool("pty", usePTY), zap.String("run_dir", rd.Path()))
	return j, 0
}

// Spec returns the attemptSpec of one attempt of this job with argv and env.
func (j *Job) Spec(argv, env []string) attemptSpec {
	return attemptSpec{
		Argv:    argv,
		Env:     env,
		PTY:     j.PTY,
		OnePipe: j.Cfg.Stdout != nil && sameFile(j.Cfg.Stdout, j.Cfg.Stderr),
		Stdin:   j.Cfg.Stdin,
		Stdout:  j.Status.Stdout(),
		Stderr:  j.Status.Stderr(),
		Term:    j.Term,
		Log:     j.RunDir.Log(),
		Scan:    func(int, lines.Line) {}, // the attempt counts the lines
		Grace:   j.Cfg.Grace,
		Logger:  j.Logger,
	}
}

// attemptHooks let the attempt loop act while an attempt runs.
type attemptHooks struct {
	// Started is called once the child runs, before RunAttempt waits for it
	// (to start sampling its memory, to arm a timer that stops it).
	Started func(a process)
	// Ended is called once the attempt is over and its output scanned; it
	// adds to the attempt_end event (the verdict) before it is written.
	Ended func(res attemptResult, end *record.AttemptEnd)
}

// RunAttempt runs attempt number n to its end: it refuses to start after a
// terminating signal (an *Error with 128+signal), records attempt_start and
// attempt_end events, forwards signals to the attempt while it runs, and
// prints a status line when the job failed or left processes behind. A start
// failure (127, 126) is printed and returned as an *Error.
func (j *Job) RunAttempt(n int, spec attemptSpec, hooks attemptHooks) (attemptResult, error) {
	// Signals arriving while the child starts are kept for it.
	j.Signals.Arm()
	if sig, ok := j.Signals.Terminated(); ok {
		j.Signals.Attach(nil)
		return attemptResult{}, &Error{Code: 128 + int(sig), Msg: signalName(sig) + " received: not starting the job again"}
	}
	logOffset := j.RunDir.LogOffset() // before the child can write
	a, err := startAttempt(spec)
	if err != nil {
		j.Signals.Attach(nil)
		j.Status.Printf("%v", err)
		j.RunDir.Write(record.AttemptStartFailed{Attempt: n, Error: err.Error(), ExitCode: exitCodeOf(err)})
		return attemptResult{}, err
	}
	j.Signals.Attach(a)
	j.RunDir.Write(record.AttemptStart{Attempt: n, PID: a.PID(), Argv: spec.Argv, LogOffset: &logOffset})
	if hooks.Started != nil {
		hooks.Started(a)
	}
	<-a.Done()
	j.Signals.Attach(nil)
	res := a.Result()
	end := record.AttemptEnd{
		Attempt:          n,
		PID:              res.Pid,
		ExitCode:         res.Code,
		DurationS:        res.End.Sub(res.Start).Seconds(),
		Lines:            res.ScannedLines,
		DroppedScanBytes: res.DroppedScanBytes,
		StoppedByUs:      res.StoppedByUs,
		Killed:           res.Killed,
		Leftovers:        res.Leftovers,
		StopReason:       res.StopReason,
	}
	if res.Signal != 0 {
		end.Signal = signalName(res.Signal)
	}
	if sig := a.TypedInterrupt(); sig != 0 {
		end.TypedInterrupt = signalName(sig)
	}
	if hooks.Ended != nil {
		hooks.Ended(res, &end)
	}
	j.RunDir.Write(end)
	if res.Leftovers > 0 {
		j.Status.Printf("stopped %d process(es) the job left running", res.Leftovers)
	}
	if res.Survivors > 0 {
		j.Status.Printf("%d process(es) of the job did not die after SIGKILL (stuck in the kernel?); see %s", res.Survivors, gpuguardLog)
	}
	switch {
	case res.Signal != 0:
		j.Status.Printf("the job was killed by %s (exit status %d)", signalName(res.Signal), res.Code)
	case res.Code != 0:
		j.Status.Printf("the job exited with status %d", res.Code)
	}
	return res, nil
}

// Finish records the end of the run.
func (j *Job) Finish(code int) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	j.RunDir.Write(record.RunEnd{
		ExitCode:  code,
		PeakRSSKB: ru.Maxrss,
		// gpuguard's own CPU time, its jobs' not included.
		CPUUserS: time.Duration(ru.Utime.Nano()).Seconds(),
		CPUSysS:  time.Duration(ru.Stime.Nano()).Seconds(),
	})
	j.Logger.Info("run ended", zap.Int("exit_code", code), zap.Int64("peak_rss_kb", ru.Maxrss))
}

// Close stops signal forwarding and closes the run directory.
func (j *Job) Close() {
	j.Signals.Stop()
	if j.stopSinks != nil {
		j.stopSinks()
	}
	if err := j.RunDir.Close(); err != nil {
		j.Status.Printf("%s is incomplete: %v", filepath.Join(j.RunDir.Path(), OutputLogName), err)
	}
}

func printEnv(status *Status, noEnv, quiet bool, merged envinject.Result) {
	if noEnv {
		if !quiet {
			status.Printf("environment passed unchanged (--no-env)")
		}
		return
	}
	var parts []string
	for _, c := range merged.Changes {
		parts = append(parts, c.String())
	}
	for _, c := range merged.Kept {
		parts = append(parts, c.String())
	}
	if len(parts) > 0 && !quiet {
		status.Printf("allocator settings: %s", strings.Join(parts, "; "))
	}
	for _, w := range merged.Warnings {
		status.Printf("warning: %s", w)
	}
}

func launchName(pty bool) string {
	if pty {
		return "under a pseudo-terminal"
	}
	return "with pipes"
}

func quoteArgv(argv []string) string {
	q := redact.Argv(argv) // status lines never show a secret (docs/secrets.md)
	for i, a := range q {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;!#~") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

// displayPath shows p relative to wd when it lies below it.
func displayPath(p, wd string) string {
	if rel, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return p
}

func fileOf(w any) *os.File {
	f, _ := w.(*os.File)
	return f
}
