package supervisor

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuguard/gpuguard/internal/group"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// The stall watchdog (policy key hang). A job is hung when it prints no
// training step for longer than its own rhythm allows: the usual interval
// between its steps in the phase it is in (the median of the last
// stallWindow intervals), times hang.factor, held within hang.min and
// hang.max. Where it has no rhythm (start-up before its second step, a
// phase whose steps are not yet known, validation without steps, a
// checkpoint being saved) hang.max applies: those stretches have no steps to
// measure them by. On a hang the attempt is stopped (its Stop: the whole
// tree), the evidence is journalled, and the verdict's kind becomes hang, so
// the policy's rules decide as for any failure.

// stallWindow is how many recent intervals per phase the usual interval is
// the median of: enough to ride over one slow step (a checkpoint save, a
// log flush), few enough to follow a job whose steps slow down.
const stallWindow = 16

// stallBurst: steps arriving closer together than this came in one write
// (a block-buffered stdout flushing many steps at once). They are one
// arrival: their near-zero intervals would make the rhythm look much faster
// than it is.
const stallBurst = 20 * time.Millisecond

// stallWatch follows one attempt's rhythm. The scanner goroutine feeds it
// (line, step, phase); the watchdog goroutine reads it. Safe for concurrent
// use.
type stallWatch struct {
	h   policy.Hang
	now func() time.Time

	mu        sync.Mutex
	phase     classify.Phase
	saving    bool
	last      time.Time // the last progress: a step, a phase change, the start
	prevStep  time.Time // the last step in this phase (zero: none yet)
	intervals map[classify.Phase][]time.Duration
	lineText  string // the line being scanned
	step      *int64
	stepLine  int
	stepText  string

	kick  chan struct{} // progress was made: the deadline moved
	hung  atomic.Bool
	stall record.HangActivity // what the processes did (set before hung)
}

// setStall records the activity verdict of the hang and marks it hung.
func (w *stallWatch) setStall(v record.HangActivity) {
	w.mu.Lock()
	w.stall = v
	w.mu.Unlock()
	w.hung.Store(true)
}

func newStallWatch(h policy.Hang, now func() time.Time) *stallWatch {
	return &stallWatch{h: h, now: now, last: now(), intervals: map[classify.Phase][]time.Duration{}, kick: make(chan struct{}, 1)}
}

func (w *stallWatch) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// line is called for each line before the classifier sees it.
func (w *stallWatch) line(ln lines.Line) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lineText = string(ln.Text)
	if !w.saving && checkpoint.SavingLine(ln.Text) {
		w.saving = true
		w.poke()
	}
}

// event is called with each classifier event.
func (w *stallWatch) event(ev classify.Event) {
	switch ev.Type {
	case classify.EventStep, classify.EventPhase:
	default:
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.now()
	w.last, w.saving = t, false
	if ev.Type == classify.EventPhase {
		// An interval across a phase change measures the other phase.
		w.phase, w.prevStep = ev.Phase, time.Time{}
		w.poke()
		return
	}
	if !w.prevStep.IsZero() {
		if d := t.Sub(w.prevStep); d >= stallBurst {
			iv := append(w.intervals[w.phase], d)
			if len(iv) > stallWindow {
				iv = iv[len(iv)-stallWindow:]
			}
			w.intervals[w.phase] = iv
		} else {
			// One burst: the arrival is the burst's first step.
			t = w.prevStep
		}
	}
	w.prevStep = t
	if ev.Step >= 0 {
		s := ev.Step
		w.step = &s
	}
	w.stepLine, w.stepText = ev.Line, w.lineText
	w.poke()
}

// usual is the phase's usual interval between steps (0: none known).
// Called with w.mu held.
func (w *stallWatch) usual() time.Duration {
	if w.saving {
		return 0
	}
	iv := w.intervals[w.phase]
	if len(iv) < 2 {
		return 0
	}
	s := slices.Clone(iv)
	slices.Sort(s)
	return s[len(s)/2]
}

// deadline is when the job counts as hung if it makes no progress before.
func (w *stallWatch) deadline() (at time.Time, limit, usual time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	usual = w.usual()
	limit = w.h.Limit(usual)
	return w.last.Add(limit), limit, usual
}

// lastProgress is the time of the last step, phase change or start.
func (w *stallWatch) lastProgress() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// evidence is the journal's record of the stall, at now.
func (w *stallWatch) evidence(attempt int) record.Hang {
	w.mu.Lock()
	defer w.mu.Unlock()
	usual := w.usual()
	return record.Hang{
		Attempt: attempt, Phase: w.phase, SinceS: w.now().Sub(w.last).Seconds(),
		LimitS: w.h.Limit(usual).Seconds(), UsualS: usual.Seconds(),
		Step: w.step, StepLine: w.stepLine, StepText: w.stepText,
	}
}

// mark makes a stopped attempt's verdict a hang, even when the job printed
// an error earlier (a worker's MemoryError, then workers that never
// return): the watchdog stopped it, so a hang rule decides; the error is
// kept in the reason.
func (w *stallWatch) mark(v *classify.Verdict) {
	if !w.hung.Load() {
		return
	}
	if v.Kind != classify.KindNone && v.Kind != "" && v.Kind != classify.KindHang {
		v.Reason = "no progress within the job's rhythm (hang:), after " + string(v.Kind) + " printed earlier"
	} else {
		v.Reason = "no progress within the job's rhythm (hang:)"
	}
	v.Kind = classify.KindHang
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stall.Verdict != "" {
		v.Stall = w.stall.Verdict
		v.Reason += "; " + w.stall.Detail
	}
}

// trackEvery is how often the watchdog looks for the job's loader
// workers (from the tree's latest scan: it reads only the command lines
// of processes it has not seen).
const trackEvery = time.Second

// watchStall stops attempt n when it is hung: no step for the rhythm's
// limit, confirmed by what its processes do (hang_activity.go); a job that
// is silent but working gets hang max. It returns when the attempt ends or
// has been stopped.
func (l *loop) watchStall(n int, a process, w *stallWatch, act *activityWatch) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	tick := time.NewTicker(trackEvery)
	defer tick.Stop()
	act.track(a)
	var silence time.Time // the last progress of the silence judged busy
	var next time.Time    // when to look at it again
	noted := ""           // the verdict announced for this silence
	for {
		at, limit, _ := w.deadline()
		last := w.lastProgress()
		if !last.Equal(silence) {
			silence, next, noted = time.Time{}, time.Time{}, ""
		}
		if !next.IsZero() {
			at = next
		}
		if wait := at.Sub(w.now()); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-w.kick:
			case <-tick.C:
				act.track(a)
			case <-a.Done():
				return
			}
			continue
		}
		// The rhythm's limit passed: watch the tree over a window, and
		// ask NCCL's RAS meanwhile (once per silence).
		s0 := act.snap(a)
		var ras *rasProbe
		if noted == "" {
			ras = startNCCLRAS(act.ras)
		}
		timer.Reset(activityWindow(limit))
		progressed := false
	window:
		for {
			select {
			case <-timer.C:
				break window
			case <-w.kick:
				if !w.lastProgress().Equal(last) {
					progressed = true
					break window
				}
			case <-tick.C:
				act.track(a)
			case <-a.Done():
				if ras != nil {
					ras.cancel()
				}
				return
			}
		}
		if progressed {
			timer.Stop()
			if ras != nil {
				ras.cancel()
			}
			continue
		}
		v := judge(s0, act.snap(a), act.workers)
		confirmed, stacks, stacksErr, report := confirmSpin(a, &v, ras, act.where)
		hardAt := last.Add(w.h.Max)
		if !idleVerdict(v.Verdict) && !confirmed && w.now().Before(hardAt) {
			// Silent but working (or spinning without stacks to show the
			// wait): it gets hang max; look again after another limit.
			if noted != v.Verdict {
				noted = v.Verdict
				ev := w.evidence(n)
				l.job.Status.Printf("the job is silent (no training step for %s in %s, limit %s) but %s; it gets hang max (%s, until %s more)",
					fmtSeconds(ev.SinceS), stallPhase(ev.Phase), fmtSeconds(ev.LimitS), strings.TrimPrefix(v.Detail, "silent but "),
					fmtSeconds(w.h.Max.Seconds()), fmtSeconds(hardAt.Sub(w.now()).Seconds()))
				l.job.RunDir.Write(record.Silent{Attempt: n, Phase: ev.Phase, SinceS: ev.SinceS, LimitS: ev.LimitS, MaxS: w.h.Max.Seconds(), Activity: v})
			}
			silence, next = last, w.now().Add(limit)
			if next.After(hardAt) {
				next = hardAt
			}
			continue
		}
		select {
		case <-a.Done():
			return // it ended as the limit passed: not a hang
		default:
		}
		l.stopHung(n, a, w, v, confirmed, stacks, stacksErr, report)
		return
	}
}

// confirmSpin looks for the evidence that a spin is a wait on a peer:
// py-spy's stacks of its busiest process in a wait or a collective, and
// NCCL's RAS (ras, started with the window; nil: none) reporting a rank
// missing. It adds what it found to v, and where is this node's place in
// its group. confirmed: the spin is a hang.
func confirmSpin(a process, v *record.HangActivity, ras *rasProbe, where string) (confirmed bool, stacks, stacksErr, report string) {
	if v.Verdict == "spinning" {
		pid := a.PID()
		if len(v.Busy) > 0 {
			pid = v.Busy[0]
		}
		if stacks, stacksErr = pyspyDump(pid); stacks != "" && waitStacks.MatchString(stacks) {
			confirmed = true
			if m := collectiveStacks.FindString(stacks); m != "" {
				v.Detail = inCollective(v.Detail) + "; its stacks are in a collective (py-spy: " + m + ")"
			} else {
				v.Detail += "; its stacks are in a wait (py-spy)"
			}
		} else {
			stacks = ""
		}
	}
	if r, ok := ras.wait(a.Done()); ok {
		report = r.report
		if r.note(v) {
			v.Detail = inCollective(v.Detail)
			confirmed = true
		}
	}
	if v.Verdict == "spinning" && where != "" {
		v.Detail += "; " + where
	}
	return confirmed, stacks, stacksErr, report
}

// stopHung journals the evidence of a hang and stops the attempt.
// confirmed: the spin was shown to be a wait on a peer (stacks, NCCL's
// RAS), so the rhythm's limit applied.
func (l *loop) stopHung(n int, a process, w *stallWatch, v record.HangActivity, confirmed bool, stacks, stacksErr, rasReport string) {
	ev := w.evidence(n)
	last := "no training step"
	if ev.Step != nil {
		last = fmt.Sprintf("no training step since step %d (line %d)", *ev.Step, ev.StepLine)
	} else if ev.StepLine > 0 {
		last = fmt.Sprintf("no training step since line %d", ev.StepLine)
	}
	rhythm := "no step rhythm known here, so hang max"
	if ev.UsualS > 0 {
		rhythm = "usual interval " + fmtSeconds(ev.UsualS)
	}
	limit := ev.LimitS
	if !idleVerdict(v.Verdict) && !confirmed {
		limit = w.h.Max.Seconds() // busy: it had hang max
	}
	l.job.Status.Printf("the job looks hung: %s for %s in %s (%s: limit %s); %s: stopping it",
		last, fmtSeconds(ev.SinceS), stallPhase(ev.Phase), rhythm, fmtSeconds(limit), v.Detail)
	if stacks == "" && stacksErr == "" {
		stacks, stacksErr = pyspyDump(a.PID())
	}
	ev.Stacks, ev.StacksError, ev.NCCLRASReport = stacks, stacksErr, rasReport
	ev.Activity = &v
	w.setStall(v)
	l.job.RunDir.Write(ev)
	a.Stop(fmt.Sprintf("hung: %s for %s (limit %s; %s)", last, fmtSeconds(ev.SinceS), fmtSeconds(limit), v.Verdict))
}

// hangDetail is "; " and what the hung job's processes did, for the
// decision line ("" when the watchdog did not look).
func hangDetail(v classify.Verdict) string {
	if v.Stall == "" {
		return ""
	}
	if _, d, ok := strings.Cut(v.Reason, "; "); ok {
		return "; " + d
	}
	return "; " + v.Stall
}

// pyspyDump returns `py-spy dump --pid pid` (the Python stacks of the
// job's main process) when py-spy is on PATH, or why there is none. It is
// evidence only: it never delays the stop by more than pyspyTimeout.
func pyspyDump(pid int) (stacks, errText string) {
	bin, err := exec.LookPath("py-spy")
	if err != nil {
		return "", ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), pyspyTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "dump", "--pid", strconv.Itoa(pid))
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := out.String()
	if len(text) > pyspyMax {
		text = text[:pyspyMax] + "\n[truncated]"
	}
	if err != nil {
		return "", fmt.Sprintf("py-spy dump --pid %d: %v: %s", pid, err, text)
	}
	return text, ""
}

const (
	pyspyTimeout = 20 * time.Second
	pyspyMax     = 256 << 10
)

// stallPhase names a phase in the watchdog's message.
func stallPhase(p classify.Phase) string { return cmp.Or(p.Words(), "start-up (no phase seen)") }

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}

// inCollective names a spin for what it is: a wait in a collective.
func inCollective(detail string) string {
	if strings.HasPrefix(detail, "spinning in a collective") {
		return detail
	}
	return strings.Replace(detail, "spinning:", "spinning in a collective:", 1)
}

// groupWhere is this gpuguard's place in its group, for a spin's verdict:
// the other ranks of a collective are on the group's other nodes.
func groupWhere(g group.Spec, inGroup bool) string {
	if !inGroup {
		return ""
	}
	host := g.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	return fmt.Sprintf("this node: group rank %d of %d on host %s", g.Rank, g.Size, host)
}

// stallHook is the stall and hang watchdog (the policy's hang: section):
// each attempt gets a stallWatch that follows its output, and watchStall
// stops the attempt when it is hung.
type stallHook struct {
	l   *loop
	h   policy.Hang
	cur *stallWatch // the attempt running
	act *activityWatch
	// where: this gpuguard's place in its group ("group rank 1 of 2 on
	// host n1"; "" outside a group), named in a spin's verdict.
	where string
	// ras: NCCL's RAS client (ncclras) on PATH, looked up at the first
	// attempt ("": none, said once in gpuguard.log).
	ras      string
	rasKnown bool
}

func (s *stallHook) attemptStarting(*attemptRun) {
	s.cur = newStallWatch(s.h, time.Now)
	s.act = newActivityWatch(s.l.gpu, time.Now)
	if !s.rasKnown {
		s.rasKnown = true
		if bin, err := exec.LookPath("ncclras"); err == nil {
			s.ras = bin
		} else {
			s.l.log.Info("NCCL's RAS client (ncclras, NCCL 2.24 and later) is not on PATH: the hang watchdog's evidence has no report of the job's NCCL communicators")
		}
	}
	s.act.ras, s.act.where = s.ras, s.where
}
func (s *stallHook) line(_ *attemptRun, ln lines.Line)      { s.cur.line(ln) }
func (s *stallHook) event(_ *attemptRun, ev classify.Event) { s.cur.event(ev) }
func (s *stallHook) started(a *attemptRun, p process) {
	go s.l.watchStall(a.n, p, s.cur, s.act)
}

// judged makes a hang the watchdog stopped the attempt's verdict.
func (s *stallHook) judged(a *attemptRun) { s.cur.mark(&a.verdict) }
