package supervisor

// preventHook acts before the crash (the policy's prevent: section). While
// an attempt runs it follows the job's checkpoints (the watcher's, and
// save lines followed by more output); when one completes, it asks the
// memory sampler for its projections (memory.Project: a fit over each
// phase's per-epoch peaks against the ceiling that applies), and the
// policy (PreventGrowth) whether the worst of them, which will not fit
// before the job's next checkpoint, is reason to stop the job at this
// boundary. If so it
// stops the attempt as any stop does (SIGTERM to the tree, then SIGKILL
// after the grace), and the settle stage relaunches it at once from that
// checkpoint with the decision's values: a fresh process has its memory
// back. The probes observe, the policy decides, this hook acts.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

type preventHook struct {
	l *loop

	mu      sync.Mutex
	cur     *attemptRun
	since   time.Time    // the attempt's start: older checkpoints are not its boundaries
	st      policy.State // the run's policy state as the attempt started
	stopped bool         // this hook stopped the current attempt, with d, from ckpt
	d       policy.Decision
	ckpt    string
	said    string // the last reason not to act, said once per attempt
	next    string // the checkpoint the next attempt resumes from
	// The job's checkpoint cadence: the epoch of this attempt's last
	// checkpoint (-1: none yet), and the epochs between its last two
	// checkpoints (kept across attempts; 1 until measured). A job that
	// checkpoints every n epochs stops at a checkpoint when any of the
	// next n epochs will not fit.
	ckptEpoch int64
	every     int64
	// The attempt's output as the checkpoint package reads it (scanner
	// goroutine only): a save line followed by more output is a save
	// over, checked at once, before the watcher's quiet period ends.
	out     *checkpoint.Output
	pending string
	saved   chan string
	// savedIn: the epoch each save line was read in (the sampler's, on
	// the scanner goroutine, in the output's order): a checkpoint's epoch
	// for the cadence, whichever goroutine reads it later.
	savedIn map[string]int64
}

// newPreventHook is the hook when the policy asks for prevention and the
// run can act on it (nil, having said why, when it cannot).
func newPreventHook(l *loop, inGroup bool) *preventHook {
	if _, on := l.pol.Prevent(); !on {
		return nil
	}
	switch {
	case inGroup:
		l.job.Status.Printf("prevent: not in a group of ranks (one rank's restart would stop the others); memory growth is only warned about")
		return nil
	case l.ckpts == nil:
		l.job.Status.Printf("prevent: the job's checkpoints cannot be watched; memory growth is only warned about")
		return nil
	}
	return &preventHook{l: l, every: 1}
}

func (h *preventHook) attemptStarting(a *attemptRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur, h.since, h.stopped, h.said, h.ckptEpoch = a, time.Now(), false, "", -1
	h.st = h.l.state.Policies // as the attempt starts: the loop changes it only after the attempt
	h.out, h.pending, h.saved, h.savedIn = checkpoint.NewOutput(h.l.wd), "", make(chan string, 4), map[string]int64{}
}

func (h *preventHook) started(a *attemptRun, p process) { go h.watch(a, p, h.saved) }

// line follows the job's save lines (scanner goroutine): once a save is
// followed by other output, the watch goroutine checks that checkpoint.
func (h *preventHook) line(a *attemptRun, ln lines.Line) {
	h.out.Line(ln.Text)
	if p, ok := checkpoint.SavedPath(ln.Text); ok {
		if !filepath.IsAbs(p) {
			p = filepath.Join(h.l.wd, p)
		}
		h.pending = filepath.Clean(p)
		if e := a.sampler.Epoch(); e >= 0 {
			h.mu.Lock()
			if len(h.savedIn) >= 64 {
				clear(h.savedIn) // bounded: only the latest saves matter
			}
			h.savedIn[h.pending] = e
			h.mu.Unlock()
		}
		return
	}
	if h.pending == "" {
		return
	}
	if _, _, ok := h.out.SavedAndWentOn(h.pending); ok {
		select {
		case h.saved <- h.pending:
		default: // the watch goroutine is behind: the watcher still reports it
		}
		h.pending = ""
	}
}

// savedCheckpoint is the checkpoint the job said it saved at path, when the
// policy's globs match it and it is complete by the watcher's rules or by
// its format's end (the evidence that holds while its writer may still
// run, as for a resume: checkpoint.Resume.Judge).
func (h *preventHook) savedCheckpoint(path string) (checkpoint.Checkpoint, bool) {
	all, err := checkpoint.Scan(h.l.wd, checkpoint.Spec(h.l.spec.CheckpointFiles), time.Now())
	if err != nil {
		return checkpoint.Checkpoint{}, false
	}
	sep := string(filepath.Separator)
	for _, c := range all {
		if c.Path != path && !strings.HasPrefix(path, c.Path+sep) && !strings.HasPrefix(c.Path, path+sep) {
			continue
		}
		if !c.Complete && c.Size > 0 {
			if st, _ := checkpoint.CheckStructure(c.Path); st == checkpoint.StructureComplete {
				c.Complete = true
			}
		}
		return c, c.Complete
	}
	return checkpoint.Checkpoint{}, false
}

// watch looks at each checkpoint completed while attempt a runs, until it
// ends or this hook stops it.
func (h *preventHook) watch(a *attemptRun, p process, saved <-chan string) {
	updates := h.l.ckpts.Updates()
	seen := map[string]bool{} // considered already (a save line, then the watcher)
	for {
		var c checkpoint.Checkpoint
		select {
		case <-p.Done():
			return
		case path := <-saved:
			var ok bool
			if c, ok = h.savedCheckpoint(path); !ok {
				continue
			}
		case u, ok := <-updates:
			if !ok {
				return
			}
			c = u
		}
		key := c.Path + "\x00" + c.ModTime.String()
		if seen[key] {
			continue
		}
		seen[key] = true
		if h.consider(a, p, c) {
			return
		}
	}
}

// consider asks the policy about the worst projection at checkpoint c, and
// stops the attempt when it says so.
func (h *preventHook) consider(a *attemptRun, p process, c checkpoint.Checkpoint) bool {
	h.mu.Lock()
	since := h.since
	h.mu.Unlock()
	if !c.Complete || c.ModTime.Before(since) || a.plan.ckpt != "" && filepath.Clean(c.Path) == filepath.Clean(a.plan.ckpt) {
		return false
	}
	h.mu.Lock()
	e, said := h.savedIn[filepath.Clean(c.Path)]
	if !said {
		// No save line: the epoch now (as late as the watcher's rules are,
		// alike at every checkpoint).
		e = a.sampler.Epoch()
	}
	if e >= 0 {
		if h.ckptEpoch >= 0 && e > h.ckptEpoch {
			h.every = e - h.ckptEpoch
		}
		h.ckptEpoch = e
	}
	every := h.every
	h.mu.Unlock()
	var worst *memory.Projection
	var label int64
	var bytes uint64
	for _, pr := range a.sampler.Projections() {
		n := int64(1)
		if pr.Epochs {
			n = every
		}
		if l, b, wont := pr.Within(n); wont {
			worst, label, bytes = &pr, l, b
			break
		}
	}
	if worst == nil {
		return false
	}
	g := policy.Growth{Attempt: a.n, Phase: classify.Phase(worst.Phase), Device: worst.Device, Ceiling: worst.Ceiling,
		CeilingBytes: worst.CeilingBytes, From: worst.From, To: worst.To, Runs: worst.Runs, Epochs: worst.Epochs,
		SlopeBytes: worst.SlopeBytes, MarginBytes: worst.MarginBytes, LastBytes: worst.LastBytes,
		NextLabel: label, NextBytes: bytes, NextWontFit: true, Cause: policy.GrowthLeak,
		Checkpoint: displayPath(c.Path, h.l.wd)}
	if hs := a.sampler.LastHost(); worst.Device == "host" && hs.WorkerBytes > hs.MainBytes {
		g.Cause = policy.GrowthWorkers
	} else if worst.Fragmentation {
		g.Cause = policy.GrowthFragmentation
	}
	h.mu.Lock()
	st := h.st
	h.mu.Unlock()
	d, ok := h.l.pol.PreventGrowth(st, g)
	if !ok {
		h.mu.Lock()
		say := d.Reason != h.said
		h.said = d.Reason
		h.mu.Unlock()
		if say {
			h.l.job.Status.Printf("attempt %d: memory growth, not stopping the job: %s", a.n, d.Reason)
		}
		return false
	}
	h.mu.Lock()
	h.stopped, h.d, h.ckpt = true, d, c.Path
	h.mu.Unlock()
	h.l.job.Status.Printf("attempt %d: %s: stopping the job at checkpoint %s, before the memory runs out", a.n, g.Words(), g.Checkpoint)
	p.Stop("memory growth will not fit (prevent:); relaunching from " + displayPath(c.Path, h.l.wd))
	return true
}

// judged says, in the verdict, why the attempt ended.
func (h *preventHook) judged(a *attemptRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped && h.cur == a && !isMemory(a.verdict.Kind) && a.exit.StoppedByUs {
		a.verdict.Reason = "stopped by gpuguard before its memory growth ran out (prevent:)"
	}
}

// settle relaunches the attempt this hook stopped from the checkpoint it
// stopped at, with the decision's values, before the policy's rules are
// asked: the job did not fail. An attempt that ended otherwise (it
// finished, ran out of memory before the stop, or gpuguard was told to
// stop) goes on as any other.
func (h *preventHook) settle(o *outcome) (int, action) {
	h.mu.Lock()
	stopped, d, ckpt := h.stopped && h.cur != nil && h.cur.n == o.n, h.d, h.ckpt
	h.stopped = false
	h.mu.Unlock()
	if !stopped || o.terminated || o.groupFailed || o.res.Code == 0 && o.res.Signal == 0 {
		return 0, goOn
	}
	l := h.l
	if isMemory(o.v.Kind) || !o.res.StoppedByUs {
		l.job.Status.Printf("attempt %d ended before gpuguard could stop it at its checkpoint; the policy decides", o.n)
		return 0, goOn
	}
	l.state.Policies = d.State
	o.row.decision = "prevent: restart"
	if d.Rule != "" {
		o.row.decision = fmt.Sprintf("prevent: restart, rule %s step %d: %s", d.Rule, d.Step, describeChangesShort(d.Changes))
	}
	l.rows = append(l.rows, o.row)
	l.job.RunDir.Write(record.Decision{Attempt: o.n, Verb: "prevent", Rule: d.Rule, Step: d.Step, Changes: recordChanges(d.Changes),
		Reason: d.Reason, Checkpoint: ckpt, Knobs: rundir.Knobs(d.State.Values)})
	line := fmt.Sprintf("attempt %d stopped before its memory ran out → %s; resuming from %s", o.n, d.Reason, displayPath(ckpt, l.wd))
	l.decided(o, d, line)
	l.job.Status.Printf("%s", line)
	if err := l.saveState(); err != nil {
		l.job.Status.Printf("warning: %v", err)
	}
	// No backoff (the job did not fail), but the stopped processes' GPU
	// memory must be released first, as after any attempt.
	if !l.pause(0) {
		l.job.Status.Printf("%s received while waiting to relaunch: not relaunching", signalName(l.stopSignal()))
		return l.end(o.res.Code), endRun
	}
	h.mu.Lock()
	h.next = ckpt
	h.mu.Unlock()
	return 0, relaunch
}

// beforeAttempt resumes the attempt after a preventive stop from the
// checkpoint it stopped at (when it is still there).
func (h *preventHook) beforeAttempt(at *attemptStart) (int, action) {
	h.mu.Lock()
	next := h.next
	h.next = ""
	h.mu.Unlock()
	if next != "" && !at.given {
		if _, err := os.Stat(next); err == nil {
			at.ckpt, at.given = next, true
		}
	}
	return 0, goOn
}

// slurmMemBytes is the Slurm job's memory request per node in bytes (0:
// none, per CPU, or outside Slurm), for naming the host ceiling.
func (l *loop) slurmMemBytes() uint64 {
	if m := l.slurmMem(); m != nil && !m.PerCPU {
		return uint64(m.MiB) << 20
	}
	return 0
}

func recordChanges(cs []policy.Change) []record.Change {
	out := make([]record.Change, 0, len(cs))
	for _, c := range cs {
		out = append(out, record.Change{Name: c.Name(), Old: record.Text(c.Old), New: record.Text(c.New)})
	}
	return out
}

func describeChangesShort(cs []policy.Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ", ")
}
