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
	// WritersGone is when every process that could write a checkpoint had
	// ended (zero: some may still run). From then on nothing changes: a
	// checkpoint that had stopped changing ClockSlack before it, or that was
	// moved into place after it was written (MovedAfterWrite), is complete
	// whatever its quiet period says; one written in place up to the end was
	// being written when its writer died and is passed over; and waiting
	// tells nothing more (Selection.Pending stays false).
	WritersGone time.Time
}

// complete reports whether c may be resumed from as far as its writing
// goes (see WritersGone).
func (r Resume) complete(c Checkpoint) bool {
	if c.Complete {
		return true
	}
	if !c.Settling || r.WritersGone.IsZero() {
		return false
	}
	return c.MovedAfterWrite || !c.ModTime.After(r.WritersGone.Add(-ClockSlack))
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
	// written (not complete yet, and not empty): PendingOne, the best such.
	// The caller may wait for it.
	Pending    bool
	PendingOne Checkpoint
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
		if !r.complete(c) {
			continue
		}
		if !c.Complete {
			c.Complete = true
			c.Why = "unchanged since before the job ended (" + c.Why + ")"
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
		if !r.WritersGone.IsZero() || r.complete(c) || c.Size == 0 || !r.OfThisRun(c) {
			continue
		}
		// Compare as if it were complete: would it be chosen once it is?
		done := c
		done.Complete = true
		if (!s.Found || Better(r.Choose, done, s.Best)) && (!s.Pending || Better(r.Choose, c, s.PendingOne)) {
			s.Pending, s.PendingOne = true, c
		}
	}
	if hasEarlier {
		s.Earlier = &earlier
	}
	return s
}
