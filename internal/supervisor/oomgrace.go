package supervisor

import (
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// graceAttempt is what the OOM grace watch asks of a running attempt.
type graceAttempt interface {
	Done() <-chan struct{}
	Stop(reason string)
}

// watchOOMGrace gives the job oom_grace to exit by itself after each
// out-of-memory error (one value on failed per error) and stops the whole
// tree when it does not: other ranks may hang in a collective until NCCL's
// timeout, tens of minutes. A job that went on after the error survived it,
// as a framework that catches the OOM and retries with a smaller batch does,
// and is left alone: wentOn says so (two steps printed since, or the job
// said it recovered). It returns when the attempt ends or has been stopped.
func (l *loop) watchOOMGrace(a graceAttempt, failed <-chan struct{}, grace time.Duration, wentOn func() bool) {
	for {
		select {
		case <-failed:
		case <-a.Done():
			return
		}
		wait := grace
		if grace > time.Second {
			// Most jobs exit at once after the error; one that does not
			// is told about, so the wait is not a silent one.
			select {
			case <-l.after(time.Second):
			case <-a.Done():
				return
			}
			wait = grace - time.Second
			if !wentOn() {
				l.job.Status.Printf("the job has not exited 1s after its out-of-memory error: waiting up to %s more (oom_grace), then stopping it", wait)
			}
		}
		select {
		case <-l.after(wait):
			if wentOn() {
				l.log.Info("the job went on after an out-of-memory error: not stopping it")
				continue
			}
			l.job.Status.Printf("the job did not exit within %s of its out-of-memory error: stopping it", grace)
			a.Stop(fmt.Sprintf("no exit within oom_grace (%s) after an out-of-memory error", grace))
			return
		case <-a.Done():
			return
		}
	}
}

// wentOn says whether a job went on after its last out-of-memory error: it
// printed two steps since (one may be a step it finished before the error),
// or it said it recovered from it.
func wentOn(stepsSince int64, recovered bool) bool {
	return recovered || stepsSince >= 2
}

// stepProgress tells a step printed after an out-of-memory error that the
// job took after it from one it took before, printed late: after the
// error, a step counts only when it is past the furthest step of its kind
// (or its epoch past the furthest epoch) printed before the error.
type stepProgress struct {
	most, atFail           map[classify.StepKind]int64
	mostEpoch, epochAtFail int64
	sinceFail              bool
}

// step notes ev (an EventStep) and reports whether it is past where the
// job was at the last error (true before any error).
func (p *stepProgress) step(ev classify.Event) bool {
	if p.most == nil {
		p.most, p.mostEpoch, p.epochAtFail = map[classify.StepKind]int64{}, -1, -1
	}
	if ev.Step >= 0 {
		if m, ok := p.most[ev.StepKind]; !ok || ev.Step > m {
			p.most[ev.StepKind] = ev.Step
		}
	}
	p.mostEpoch = max(p.mostEpoch, ev.Epoch)
	if !p.sinceFail {
		return true
	}
	if ev.Epoch > p.epochAtFail {
		return true
	}
	at, ok := p.atFail[ev.StepKind]
	return ev.Step >= 0 && (!ok || ev.Step > at)
}

// failed marks an out-of-memory error: later steps are measured against
// the furthest ones printed so far.
func (p *stepProgress) failed() {
	if p.most == nil {
		p.most, p.mostEpoch = map[classify.StepKind]int64{}, -1
	}
	p.atFail = maps.Clone(p.most)
	p.epochAtFail = p.mostEpoch
	p.sinceFail = true
}

// oomGraceHook gives the job oom_grace to exit after each out-of-memory
// error (watchOOMGrace). It counts the steps printed since the error, on
// the failing rank, past where the job was (stepProgress); a framework
// that caught the OOM goes on printing steps and is not stopped.
type oomGraceHook struct {
	l   *loop
	cur *oomGraceAttempt // the attempt running
}

// oomGraceAttempt is the hook's state for one attempt.
type oomGraceAttempt struct {
	failed     chan struct{} // one value per out-of-memory error
	stepsSince atomic.Int64
	recovered  atomic.Bool // the job said it recovered from its last error
	failRank   atomic.Int64
	progress   stepProgress // scanner goroutine only
}

func (h *oomGraceHook) attemptStarting(*attemptRun) {
	h.cur = &oomGraceAttempt{failed: make(chan struct{}, 1)}
	h.cur.failRank.Store(-1)
}

func (h *oomGraceHook) event(_ *attemptRun, ev classify.Event) {
	c := h.cur
	switch ev.Type {
	case classify.EventStep:
		beyond := c.progress.step(ev)
		if fr := c.failRank.Load(); beyond && (fr < 0 || ev.Rank < 0 || int64(ev.Rank) == fr) {
			c.stepsSince.Add(1)
		}
	case classify.EventRecovered:
		c.recovered.Store(true)
	case classify.EventFailure:
		if !isMemory(ev.Kind) {
			return
		}
		c.failRank.Store(int64(ev.Rank))
		c.stepsSince.Store(0)
		c.progress.failed()
		c.recovered.Store(false)
		select {
		case c.failed <- struct{}{}:
		default:
		}
	}
}

func (h *oomGraceHook) started(a *attemptRun, p process) {
	c := h.cur
	go h.l.watchOOMGrace(p, c.failed, a.grace, func() bool { return wentOn(c.stepsSince.Load(), c.recovered.Load()) })
}
