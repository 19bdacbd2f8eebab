package supervisor

import (
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
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
	return checkpoint.Resume{Choose: l.spec.Choose, Since: l.state.Started, EarlierRuns: l.spec.EarlierRuns, WritersGone: l.writersGone}
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
		sel := checkpoint.Select(l.resumeRule(), append(candidates, all...))
		if !sel.Pending || !wait || time.Now().After(deadline) {
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
