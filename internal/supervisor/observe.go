package supervisor

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// maxRejections bounds the rejection lines kept of one attempt.
const maxRejections = 8

// runOne runs attempt n as planned and returns its summary row, the
// classifier's verdict and how the process ended. A non-nil error means the
// command could not be started (or gpuguard was told to stop before it
// started). While the job runs it watches it: its output goes through the
// classifier, its memory is sampled (faster in validation), and after an
// out-of-memory error it gets oom_grace to exit by itself.
func (l *loop) runOne(n int, p launchPlan) (attemptRow, classify.Verdict, attemptResult, error) {
	rd, status := l.job.RunDir, l.job.Status
	argv, env, ckpt := p.argv, p.env, p.ckpt
	row := attemptRow{n: n, ckpt: ckpt}

	sampling := policy.Sampling{BaseHz: 1, ValHz: 20, FastWindow: 5 * time.Second}
	var patterns []classify.PhasePattern
	grace := 30 * time.Second
	if l.pol != nil {
		sampling, patterns, grace = l.pol.Sampling(), l.pol.PhasePatterns(), l.pol.OOMGrace()
	}
	var tl io.Writer // stays a nil interface when the file cannot be opened
	timeline, err := memory.OpenTimeline(filepath.Join(rd.Path(), timelineFile))
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
			rd.Write(record.Warning{Attempt: n, Kind: w.Kind, Message: w.Message, Warning: w})
		},
	})

	// --probe torch: the probe's records, followed during the attempt
	// (torchprobe.go).
	probe := startProbe(n, p, rd, status, sampler)
	defer probe.stop()

	// The classifier runs on the output pump's scanner goroutine; its events
	// reach the sampler (faster sampling in validation), the journal, and the
	// OOM grace timer below.
	failed := make(chan struct{}, 1)
	// stepsSince counts step prints after the last out-of-memory line: a
	// framework that caught the OOM (and retried with a smaller batch) goes
	// on printing steps, and must not be stopped.
	// Only the failing rank's steps (or steps naming no rank) count: other
	// ranks may print steps they took before they hung in a collective.
	// Only steps past the furthest one printed before the error count: a
	// launcher that copies its workers' logs to the console a moment late
	// (torchrun's --tee) prints steps taken before the error after it.
	var stepsSince atomic.Int64
	var progress stepProgress // scanner goroutine only
	// recovered: the job said it recovered from its last out-of-memory
	// error (classify.EventRecovered); reset by the next one.
	var recovered atomic.Bool
	var failRank atomic.Int64
	failRank.Store(-1)
	// Group hook (supervisor/group.go): every step printed, when the first
	// failure line came, whether the job was stopped for a peer's failure.
	var steps, failedAt atomic.Int64
	var stoppedForPeer, groupLost atomic.Bool
	var epoch int64 = -1
	// The stream of the line being scanned, journalled with each phase and
	// failure. Set and read on the scanner goroutine only.
	stream := "stdout"
	stall := l.newStall() // nil without a hang: section (hang.go)
	cls, err := classify.NewClassifier(classify.ClassifierOptions{
		PhasePatterns: patterns,
		AllocConf:     allocConf(env),
		OnEvent: func(ev classify.Event) {
			if stall != nil {
				stall.event(ev)
			}
			switch ev.Type {
			case classify.EventStep:
				steps.Add(1)
				if ev.Epoch >= 0 {
					epoch = ev.Epoch
				}
				beyond := progress.step(ev)
				if fr := failRank.Load(); beyond && (fr < 0 || ev.Rank < 0 || int64(ev.Rank) == fr) {
					stepsSince.Add(1)
				}
			case classify.EventPhase:
				if !probe.drivesPhase() { // the torch probe's phase, when it has one, drives the sampler
					sampler.SetPhase(ev.Phase, epoch)
				}
				rd.Write(record.Phase{Attempt: n, Phase: ev.Phase, Line: ev.Line, Stream: stream})
			case classify.EventRecovered:
				recovered.Store(true)
			case classify.EventFailure:
				rd.Write(record.Failure{Attempt: n, Kind: ev.Kind, Line: ev.Line, Stream: stream, Text: ev.Text})
				failedAt.CompareAndSwap(0, time.Now().UnixNano())
				if isMemory(ev.Kind) {
					l.grp.oom(n, ev, grace) // Group hook: the leader stops the other nodes' jobs
					failRank.Store(int64(ev.Rank))
					stepsSince.Store(0)
					progress.failed()
					recovered.Store(false)
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
		return row, classify.Verdict{}, attemptResult{}, &Error{Code: ExitConfig, Msg: err.Error()}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	baseline, _ := l.gpu.Sample(ctx, nil)
	kills0, killsOK := procfs.CgroupOOMKills("/proc", os.Getpid())

	// Lines in which the job refuses an argument or a config key: the
	// policy checks them against what the last relaunch changed.
	var rejMu sync.Mutex
	var rejections []string
	spec := l.job.Spec(argv, env)
	spec.Scan = func(s int, ln lines.Line) {
		l.checkSaved(ln.Text)
		if policy.RejectionLine(ln.Text) {
			rejMu.Lock()
			if len(rejections) < maxRejections {
				rejections = append(rejections, string(ln.Text))
			}
			rejMu.Unlock()
		}
		switch {
		case spec.PTY:
			stream = "pty"
		case spec.OnePipe:
			stream = "stdout+stderr"
		case s == 2:
			stream = "stderr"
		default:
			stream = "stdout"
		}
		if stall != nil {
			stall.line(ln)
		}
		cls.Line(ln)
	}
	var sampled sync.WaitGroup
	var verdict classify.Verdict
	l.slurm.launch(true) // Slurm hook (supervisor/slurm.go)
	res, err := l.job.RunAttempt(n, spec, attemptHooks{
		Started: func(a *Attempt) {
			l.slurm.attach(a) // Slurm hook (supervisor/slurm.go)
			sampled.Add(1)
			go func() { defer sampled.Done(); sampler.RunJob(ctx, a) }()
			// After an out-of-memory line the job gets oom_grace to exit by
			// itself (oomgrace.go).
			go l.watchOOMGrace(a, failed, grace, func() bool { return wentOn(stepsSince.Load(), recovered.Load()) })
			if stall != nil {
				go l.watchStall(n, a, stall) // hang.go
			}
			if l.grp != nil { // Group hook: a peer's failure stops this node's job (group.go)
				go l.watchGroupStops(n, a, grace, steps.Load, &stoppedForPeer, &groupLost)
			}
		},
		Ended: func(r attemptResult, end *record.AttemptEnd) {
			cancel()
			sampled.Wait()
			probe.stop()
			end.Site = probe.oomSite()
			exit := classify.Exit{Code: r.Code, Signal: r.Signal, StoppedByUs: r.StoppedByUs}
			if kills1, ok := procfs.CgroupOOMKills("/proc", os.Getpid()); ok && killsOK && kills1 > kills0 {
				exit.CgroupOOMKills = int(kills1 - kills0)
			}
			cls.Exit(exit)
			verdict = cls.Verdict()
			stall.mark(&verdict) // a hang the watchdog stopped (hang.go)
			summary := sampler.Summary()
			rd.Write(record.Memory{Attempt: n, Summary: summary})
			row.peakTrain, row.peakVal = summary.PeakFraction(classify.PhaseTrain), summary.PeakFraction(classify.PhaseVal)
			row.startTrain, row.startVal = summary.StartFraction(classify.PhaseTrain), summary.StartFraction(classify.PhaseVal)
			row.block = oomBlock(end.Site, verdict.Phase)
			l.state.History = append(l.state.History, rundir.AttemptState{
				Attempt: n, ExitCode: r.Code, Kind: verdict.Kind, Phase: verdict.Phase, LastStep: verdict.Step, Memory: summary,
			})
			if len(l.state.History) > maxHistory {
				l.state.History = l.state.History[len(l.state.History)-maxHistory:]
			}
			end.Verdict, end.Checkpoint, end.LastStep = &verdict, ckpt, verdict.Step
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
	if t := failedAt.Load(); t != 0 {
		row.failedAt = time.Unix(0, t)
	}
	row.stoppedForPeer = stoppedForPeer.Load() && !isMemory(verdict.Kind)
	rejMu.Lock()
	row.rejections = rejections
	rejMu.Unlock()
	if res.Code != 0 {
		l.releaseBaseline = baseline
	}
	return row, verdict, res, nil
}
