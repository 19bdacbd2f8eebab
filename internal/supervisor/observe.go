package supervisor

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// runOne runs attempt n as planned and returns its summary row, the
// classifier's verdict and how the process ended. A non-nil error means the
// command could not be started (or gpuguard was told to stop before it
// started). While the job runs its output goes through the classifier and
// its memory is sampled (faster in validation); the hooks (hooks.go) watch
// the rest: the OOM grace, the stall watchdog, the torch probe, the group.
func (l *loop) runOne(n int, p launchPlan) (attemptRow, classify.Verdict, attemptResult, error) {
	row := attemptRow{n: n, ckpt: p.ckpt}
	a := &attemptRun{n: n, plan: p, row: &row, grace: l.grace(), epoch: -1}
	cls, err := l.newClassifier(a)
	if err != nil {
		l.job.Status.Printf("policy phase patterns: %v", err)
		return row, classify.Verdict{}, attemptResult{}, &Error{Code: ExitConfig, Msg: err.Error()}
	}
	timeline := l.openTimeline()
	a.sampler = l.newSampler(n, timeline)
	for _, h := range l.hooks.attemptStarting {
		h.attemptStarting(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := l.job.Spec(p.argv, p.env)
	spec.Scan = func(s int, ln lines.Line) {
		a.stream = streamName(spec, s)
		for _, h := range l.hooks.line {
			h.line(a, ln)
		}
		cls.Line(ln)
	}
	var sampled sync.WaitGroup
	res, err := l.start(n, spec, attemptHooks{
		Started: func(pr process) {
			sampled.Add(1)
			go func() { defer sampled.Done(); a.sampler.RunJob(ctx, pr) }()
			for _, h := range l.hooks.started {
				h.started(a, pr)
			}
		},
		Ended: func(r attemptResult, end *record.AttemptEnd) {
			cancel()
			sampled.Wait()
			a.exit, a.end = classify.Exit{Code: r.Code, Signal: r.Signal, StoppedByUs: r.StoppedByUs}, end
			for _, h := range l.hooks.stopped {
				h.stopped(a)
			}
			cls.Exit(a.exit)
			a.verdict = cls.Verdict()
			for _, h := range l.hooks.judged {
				h.judged(a)
			}
			l.recordAttempt(a, r)
		},
	})
	if timeline != nil {
		timeline.Close()
	}
	if err != nil {
		for _, h := range l.hooks.startFailed {
			h.startFailed(a)
		}
		return row, a.verdict, res, err
	}
	row.code, row.verdict, row.duration = res.Code, a.verdict, res.End.Sub(res.Start)
	return row, a.verdict, res, nil
}

// grace is the policy's oom_grace (30s without a policy).
func (l *loop) grace() time.Duration {
	if l.pol == nil {
		return 30 * time.Second
	}
	return l.pol.OOMGrace()
}

// newClassifier is attempt a's classifier. Its events (on the output
// pump's scanner goroutine) set the sampler's phase and go to the journal
// and to the event hooks.
func (l *loop) newClassifier(a *attemptRun) (*classify.Classifier, error) {
	var patterns []classify.PhasePattern
	if l.pol != nil {
		patterns = l.pol.PhasePatterns()
	}
	rd := l.job.RunDir
	return classify.NewClassifier(classify.ClassifierOptions{
		PhasePatterns: patterns,
		AllocConf:     allocConf(a.plan.env),
		OnEvent: func(ev classify.Event) {
			switch ev.Type {
			case classify.EventStep:
				if ev.Epoch >= 0 && ev.Epoch != a.epoch && !a.probePhase.Load() {
					a.sampler.SetPhase(a.sampler.Phase(), ev.Epoch) // a new epoch is a new run of the phase
				}
				if ev.Epoch >= 0 {
					a.epoch = ev.Epoch
				}
			case classify.EventPhase:
				if !a.probePhase.Load() { // the torch probe's phase, when it has one, drives the sampler
					a.sampler.SetPhase(ev.Phase, a.epoch)
				}
				rd.Write(record.Phase{Attempt: a.n, Phase: ev.Phase, Line: ev.Line, Stream: a.stream})
			case classify.EventFailure:
				rd.Write(record.Failure{Attempt: a.n, Kind: ev.Kind, Line: ev.Line, Stream: a.stream, Text: ev.Text})
			}
			for _, h := range l.hooks.event {
				h.event(a, ev)
			}
		},
	})
}

// openTimeline opens the run's memory timeline; nil (said) when it cannot.
func (l *loop) openTimeline() *os.File {
	timeline, err := memory.OpenTimeline(filepath.Join(l.job.RunDir.Path(), timelineFile))
	if err != nil {
		l.job.Status.Printf("warning: no memory timeline: %v", err)
		return nil
	}
	return timeline
}

// newSampler is attempt n's memory sampler, writing to timeline.
func (l *loop) newSampler(n int, timeline *os.File) *memory.Sampler {
	sampling := policy.Sampling{BaseHz: 1, ValHz: 20, FastWindow: 5 * time.Second}
	if l.pol != nil {
		sampling = l.pol.Sampling()
	}
	var tl io.Writer // stays a nil interface without a timeline
	if timeline != nil {
		tl = timeline
	}
	rd, status := l.job.RunDir, l.job.Status
	return memory.NewSampler(memory.SamplerConfig{
		GPU: l.gpu, BaseHz: sampling.BaseHz, FastHz: sampling.ValHz, FastFor: sampling.FastWindow,
		Timeline: tl, Attempt: n, Logger: l.log, Origin: l.origin, SlurmMemBytes: l.slurmMemBytes(),
		OnWarning: func(w memory.Warning) {
			status.Printf("warning: %s", w.Message)
			rd.Write(record.Warning{Attempt: n, Kind: w.Kind, Message: w.Message, Warning: w})
		},
	})
}

// recordAttempt puts attempt a's memory summary and verdict into its row,
// the run's history and its attempt_end event.
func (l *loop) recordAttempt(a *attemptRun, r attemptResult) {
	summary := a.sampler.Summary()
	l.job.RunDir.Write(record.Memory{Attempt: a.n, Summary: summary})
	row, v := a.row, a.verdict
	row.peakTrain, row.peakVal = summary.PeakFraction(classify.PhaseTrain), summary.PeakFraction(classify.PhaseVal)
	row.startTrain, row.startVal = summary.StartFraction(classify.PhaseTrain), summary.StartFraction(classify.PhaseVal)
	l.state.History = append(l.state.History, rundir.AttemptState{
		Attempt: a.n, ExitCode: r.Code, Kind: v.Kind, Phase: v.Phase, LastStep: v.Step, Memory: summary,
	})
	if len(l.state.History) > maxHistory {
		l.state.History = l.state.History[len(l.state.History)-maxHistory:]
	}
	a.end.Verdict, a.end.Checkpoint, a.end.LastStep = &a.verdict, a.plan.ckpt, v.Step
}

// streamName is the stream a line of an attempt started with spec came
// from (s: 1 stdout, 2 stderr), as the journal names it.
func streamName(spec attemptSpec, s int) string {
	switch {
	case spec.PTY:
		return "pty"
	case spec.OnePipe:
		return "stdout+stderr"
	case s == 2:
		return "stderr"
	}
	return "stdout"
}
