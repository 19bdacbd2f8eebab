package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// The resume choice: which checkpoint a relaunch continues from. The choice
// itself (one order, the earlier-runs rule) is checkpoint.Select; the loop
// gathers the candidates and waits for one still being written.

// expandSpec sets l.spec from the policy's checkpoint section with the knob
// values the run has now (globs may name knobs: "{output_dir}/ckpt-*"). It
// reports false, having said why, when the section cannot be expanded.
func (l *loop) expandSpec() bool {
	spec, err := l.pol.Checkpoint().Expand(l.state.Policies.Values)
	if err != nil {
		l.status.Printf("warning: checkpoints: %v; relaunches start from scratch", err)
		return false
	}
	l.spec = spec
	return true
}

// startWatcher follows the job's checkpoints for the whole run, so that a
// checkpoint seen renamed into place counts as complete at once.
func (l *loop) startWatcher() {
	if !l.expandSpec() || len(l.spec.Globs) == 0 {
		return
	}
	w, err := checkpoint.Watch(l.wd, checkpoint.Spec(l.spec.CheckpointFiles), l.log)
	if err != nil {
		l.status.Printf("warning: cannot watch checkpoints: %v; relaunches start from scratch", err)
		return
	}
	l.ckpts = w
}

// resumeRule is which checkpoints this run may resume from.
func (l *loop) resumeRule() checkpoint.Resume {
	l.ck.mu.Lock()
	failed := append([]checkpoint.FailedLoad(nil), l.ck.failed...)
	l.ck.mu.Unlock()
	return checkpoint.Resume{Choose: l.spec.Choose, Since: l.state.Started, EarlierRuns: l.spec.EarlierRuns, WritersGone: l.writersGone,
		FailedLoads: failed}
}

// ckptEvidence is what the attempts' output said about their checkpoints,
// and what the last choice passed over.
type ckptEvidence struct {
	mu     sync.Mutex
	out    *checkpoint.Output // the last attempt's output, read by the line hook
	failed []checkpoint.FailedLoad
	// fellBack: attempts in a row that died loading their checkpoint.
	fellBack int
	// said: the checkpoints said to be passed over since the last attempt
	// ended; passed: how many the last choice passed over.
	said   map[string]bool
	passed int
}

// writersGoneAt is when the attempt's last process ended, given that none
// survived: the main child's exit when it left no descendants behind
// (those gpuguard stopped ended later, by now).
func writersGoneAt(res attemptResult, now time.Time) time.Time {
	if res.Leftovers == 0 && !res.End.IsZero() && res.End.Before(now) {
		return res.End
	}
	return now
}

// maxFallbacks bounds the relaunches in a row that fall back from a
// checkpoint the job died loading: past it, the failure goes to the policy
// (every checkpoint failing to load is the job's problem, not theirs).
const maxFallbacks = 3

// attemptStarting starts reading the attempt's output afresh.
func (h ckptSaveHook) attemptStarting(a *attemptRun) {
	l := h.l
	l.ck.mu.Lock()
	defer l.ck.mu.Unlock()
	l.ck.out = checkpoint.NewOutput(l.wd)
	l.ck.said = nil
}

// stopped: the attempt, given a checkpoint, died while loading it (the last
// traceback's frames load a checkpoint, and nothing after it shows the job
// went on). The checkpoint is passed over from now on, unless the job
// writes it again; the settle stage relaunches from the one before it.
func (h ckptSaveHook) stopped(a *attemptRun) {
	l := h.l
	if a.plan.ckpt == "" || (a.exit.Code == 0 && a.exit.Signal == 0) || a.exit.StoppedByUs {
		return
	}
	l.ck.mu.Lock()
	var f checkpoint.LoadFailure
	ok := false
	if l.ck.out != nil {
		f, ok = l.ck.out.LoadFailed()
	}
	if ok {
		l.ck.failed = append(l.ck.failed, checkpoint.FailedLoad{Path: filepath.Clean(a.plan.ckpt), Attempt: a.n, At: time.Now(), Failure: f})
		l.ck.fellBack++
	} else {
		l.ck.fellBack = 0
	}
	l.ck.mu.Unlock()
	if !ok {
		return
	}
	msg := fmt.Sprintf("attempt %d died while loading its checkpoint %s: %s", a.n, displayPath(a.plan.ckpt, l.wd), f)
	l.job.Status.Printf("%s", msg)
	l.job.RunDir.Write(record.Warning{Attempt: a.n, Kind: record.WarnCheckpointLoadFailed, Message: msg})
}

// settle relaunches at once after an attempt died loading its checkpoint:
// the knobs are not the cause, the checkpoint is, and the next attempt
// falls back to the one before it (latestCheckpoint says so).
func (h ckptSaveHook) settle(o *outcome) (int, action) {
	l := h.l
	l.ck.mu.Lock()
	n := l.ck.fellBack
	justFailed := len(l.ck.failed) > 0 && l.ck.failed[len(l.ck.failed)-1].Attempt == o.n
	l.ck.mu.Unlock()
	if !justFailed || o.terminated || o.res.Code == 0 || o.groupFailed {
		return 0, goOn
	}
	if n > maxFallbacks {
		l.job.Status.Printf("attempt %d: %d attempts in a row died loading their checkpoint; not falling back further", o.n, n)
		return 0, goOn
	}
	o.row.decision = "fall back to the previous checkpoint"
	l.rows = append(l.rows, o.row)
	return 0, relaunch
}

// sayPassed says, and journals, each checkpoint the choice passed over,
// why, and what the relaunch takes instead: once per attempt's end.
func (l *loop) sayPassed(sel checkpoint.Selection) {
	then := "; no checkpoint left to fall back to: starting over"
	if sel.Found {
		then = "; falling back to " + displayPath(sel.Best.Path, l.wd)
	}
	l.ck.mu.Lock()
	l.ck.passed = len(sel.Passed)
	var say []string
	for _, p := range sel.Passed {
		if l.ck.said[p.Path] {
			continue
		}
		if l.ck.said == nil {
			l.ck.said = map[string]bool{}
		}
		l.ck.said[p.Path] = true
		say = append(say, fmt.Sprintf("checkpoint %s passed over: %s%s", displayPath(p.Path, l.wd), p.Reason, then))
	}
	l.ck.mu.Unlock()
	ended := l.state.Attempt // the attempt after whose end the choice is made
	if len(l.rows) > 0 {
		ended = l.rows[len(l.rows)-1].n
	}
	for _, msg := range say {
		if l.job == nil { // a dry run
			l.status.Printf("%s", msg)
			continue
		}
		l.job.Status.Printf("%s", msg)
		l.job.RunDir.Write(record.Warning{Attempt: ended, Kind: record.WarnCheckpointPassedOver, Message: msg})
	}
}

// noCheckpoint says why a relaunch starts over: no checkpoint yet, or
// none usable (the ones passed over were named before).
func (l *loop) noCheckpoint() string {
	l.ck.mu.Lock()
	defer l.ck.mu.Unlock()
	switch l.ck.passed {
	case 0:
		return "no checkpoint yet"
	case 1:
		return "no usable checkpoint (1 passed over)"
	}
	return fmt.Sprintf("no usable checkpoint (%d passed over)", l.ck.passed)
}

// latestCheckpoint is the checkpoint to resume from, or "": the best of what
// the watcher saw (a rename into place is complete at once) and of a fresh
// scan (a file that has been quiet long enough). Once the job's processes
// are all gone (writersGone), nothing can still be writing, and the choice
// is made at once (checkpoint.Resume.WritersGone). Otherwise a checkpoint the
// job wrote just before it died may still be inside its quiet period: with
// wait, it waits for it, at most the quiet period and one poll, and says so.
func (l *loop) latestCheckpoint(wait bool) string {
	if len(l.spec.Globs) == 0 {
		return ""
	}
	bound := l.spec.Quiet + l.spec.Poll
	deadline := time.Now().Add(bound)
	announced := false
	if l.ckpts != nil && !l.writersGone.IsZero() {
		// What the job renamed into place just before it exited may still
		// be in fsnotify's queue: let the watcher reach it first.
		l.ckpts.Sync(2 * time.Second)
	}
	for {
		var candidates []checkpoint.Checkpoint
		if l.ckpts != nil {
			if c, ok := l.ckpts.Latest(); ok {
				if _, err := os.Stat(c.Path); err == nil { // not deleted since
					candidates = append(candidates, c)
				}
			}
		}
		all, err := checkpoint.Scan(l.wd, checkpoint.Spec(l.spec.CheckpointFiles), time.Now())
		if err != nil && l.log != nil {
			l.log.Warn("checkpoint scan failed", zap.Error(err))
		}
		if l.ckpts != nil && !l.writersGone.IsZero() {
			l.ckpts.MarkPlaced(all)
		}
		candidates = append(candidates, all...)
		rule := l.resumeRule()
		l.ck.mu.Lock()
		checkpoint.Annotate(rule, candidates, l.ck.out)
		l.ck.mu.Unlock()
		sel := checkpoint.Select(rule, candidates)
		if !sel.Pending || !wait || time.Now().After(deadline) {
			l.sayPassed(sel)
			if sel.Found {
				return sel.Best.Path
			}
			if sel.Earlier != nil && !l.ignoredOld {
				l.ignoredOld = true
				l.status.Printf("not resuming from %s: it was written before this run started (%s); "+
					"set checkpoints: {earlier_runs: true} in the policy to resume from earlier runs' checkpoints",
					displayPath(sel.Earlier.Path, l.wd), l.state.Started.Format(time.DateTime))
			}
			return ""
		}
		if !announced {
			announced = true
			l.status.Printf("waiting up to %s for %s to be complete (%s; processes of the job may still be writing it)",
				bound.Round(time.Second), displayPath(sel.PendingOne.Path, l.wd), sel.PendingOne.Why)
		}
		var updates <-chan checkpoint.Checkpoint
		if l.ckpts != nil {
			updates = l.ckpts.Updates()
		}
		select {
		case <-updates:
		case <-l.after(200 * time.Millisecond):
		}
	}
}
