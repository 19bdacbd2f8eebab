package checkpoint

import "time"

// ClockSlack allows for file systems whose timestamps are coarse or come
// from another machine's clock (NFS) when a checkpoint's modification time
// is compared with the start of a run.
const ClockSlack = 2 * time.Second

// Resume says which checkpoints a relaunch may resume from.
type Resume struct {
	Choose string // Spec.Choose: "newest" or "highest_step"
	// Since is when the run began; checkpoints written before it (less
	// ClockSlack) belong to earlier runs. Zero: no such limit.
	Since time.Time
	// EarlierRuns allows checkpoints written before Since.
	EarlierRuns bool
}

// OfThisRun reports whether c may be resumed from under r: written since the
// run began, unless earlier runs' checkpoints are allowed. A job whose output
// directory still holds a finished run's checkpoints must not be relaunched
// from them: they may come from other settings, or another job.
func (r Resume) OfThisRun(c Checkpoint) bool {
	return r.EarlierRuns || r.Since.IsZero() || !c.ModTime.Before(r.Since.Add(-ClockSlack))
}

// Selection is what Select found.
type Selection struct {
	// Best is the checkpoint to resume from, when Found.
	Best  Checkpoint
	Found bool
	// Earlier is the best complete checkpoint passed over because an
	// earlier run wrote it (nil when none was).
	Earlier *Checkpoint
	// Pending: a checkpoint of this run that would beat Best is still being
	// written (not complete yet, and not empty). The caller may wait for it.
	Pending bool
}

// Select chooses the checkpoint to resume from among candidates (what a
// watcher and a scan saw; the same checkpoint may appear twice, and a
// candidate's Complete may differ between them: complete in either counts),
// in Better's order.
func Select(r Resume, candidates []Checkpoint) Selection {
	var s Selection
	var earlier Checkpoint
	hasEarlier := false
	for _, c := range candidates {
		if !c.Complete {
			continue
		}
		if !r.OfThisRun(c) {
			if !hasEarlier || Better(r.Choose, c, earlier) {
				earlier, hasEarlier = c, true
			}
			continue
		}
		if !s.Found || Better(r.Choose, c, s.Best) {
			s.Best, s.Found = c, true
		}
	}
	for _, c := range candidates {
		if c.Complete || c.Size == 0 || !r.OfThisRun(c) {
			continue
		}
		// Compare as if it were complete: would it be chosen once it is?
		done := c
		done.Complete = true
		if !s.Found || Better(r.Choose, done, s.Best) {
			s.Pending = true
		}
	}
	if hasEarlier {
		s.Earlier = &earlier
	}
	return s
}
