package checkpoint

import (
	"fmt"
	"slices"
	"time"
)

// ClockSlack allows for file systems whose timestamps are coarse or come
// from another machine's clock (NFS) when a checkpoint's modification time
// is compared with the start of a run. It is also the last resort of the
// resume choice once the job is gone: a checkpoint that nothing else shows
// complete (see Resume.WritersGone) and that had stopped changing this
// long before the end.
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
	// ended (zero: some may still run). From then on nothing changes, and
	// waiting tells nothing more (Selection.Pending stays false): a
	// checkpoint still inside its quiet period is complete on evidence
	// (Resume.Judge), and passed over, with the reason, without it.
	WritersGone time.Time
	// FailedLoads: checkpoints an attempt died loading. Each is passed over
	// unless it was written again after the failure.
	FailedLoads []FailedLoad
}

// FailedLoad is a checkpoint an attempt died while loading.
type FailedLoad struct {
	Path    string
	Attempt int
	At      time.Time // when that attempt ended
	Failure LoadFailure
}

// Judge says whether c may be resumed from as far as its content goes,
// and why, in words. Evidence, strongest first:
//
//   - an attempt died loading it (FailedLoads): passed over;
//   - its format says it is cut short (Structure): passed over, whatever
//     the other rules said;
//   - complete by the scan's or the watcher's rules (marker, rename,
//     quiet);
//   - while writers may run, nothing more: a checkpoint settling is
//     waited for (Select's Pending);
//   - once the writers are gone: renamed into place after its last write
//     (MovedAfterWrite), its format's end present (Structure), the job
//     printed its save and went on (SavedWentOn), and, only where none of
//     these can speak, no change in the last ClockSlack before the end.
func (r Resume) Judge(c Checkpoint) (ok bool, why string) {
	for _, f := range r.FailedLoads {
		if f.Path == c.Path && !c.ModTime.After(f.At) {
			return false, fmt.Sprintf("attempt %d died loading it (%s)", f.Attempt, f.Failure)
		}
	}
	if c.Structure == StructureTruncated {
		return false, "cut short: " + c.StructureWhy
	}
	if c.Complete {
		return true, c.Why
	}
	if !c.Settling {
		return false, c.Why
	}
	if r.WritersGone.IsZero() {
		if c.Structure == StructureComplete {
			return true, c.StructureWhy
		}
		return false, "still being written (" + c.Why + ")"
	}
	switch {
	case c.MovedAfterWrite:
		return true, "renamed into place after its last write"
	case c.Structure == StructureComplete:
		return true, c.StructureWhy
	case c.SavedWentOn != "":
		return true, c.SavedWentOn
	}
	before := r.WritersGone.Sub(c.ModTime)
	if before >= ClockSlack {
		return true, fmt.Sprintf("unchanged for %s before the job ended (no format end to check, no save line)", roundAge(before))
	}
	return false, fmt.Sprintf("still being written %s before the job died, and nothing shows it complete: "+
		"its format has no end gpuguard can check, it was not renamed into place, and the job printed no save of it followed by more output",
		roundAge(before))
}

// roundAge prints a short duration for people: "0.4s", "12s".
func roundAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < 10*time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
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
	// Passed: the checkpoints of this run that would have beaten Best (or
	// all of them, when none was found) but were passed over, each with
	// why (Judge), in Choose order. Pending ones are not among them.
	Passed []Passed
}

// Passed is a checkpoint that was not resumed from, and why.
type Passed struct {
	Checkpoint
	Reason string
}

// Select chooses the checkpoint to resume from among candidates (what a
// watcher and a scan saw; the same checkpoint may appear twice, and a
// candidate's Complete may differ between them: complete in either counts),
// in Better's order.
func Select(r Resume, candidates []Checkpoint) Selection {
	var s Selection
	var earlier Checkpoint
	hasEarlier := false
	usable := map[string]bool{}
	for _, c := range candidates {
		ok, why := r.Judge(c)
		if !ok {
			continue
		}
		usable[c.Path] = true
		if !c.Complete {
			c.Complete = true
			c.Why = why
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
		if ok, _ := r.Judge(c); !r.WritersGone.IsZero() || ok || usable[c.Path] || c.Size == 0 || !r.OfThisRun(c) || c.Structure == StructureTruncated || failedLoad(r, c) {
			continue
		}
		// Compare as if it were complete: would it be chosen once it is?
		done := c
		done.Complete = true
		if (!s.Found || Better(r.Choose, done, s.Best)) && (!s.Pending || Better(r.Choose, c, s.PendingOne)) {
			s.Pending, s.PendingOne = true, c
		}
	}
	seen := map[string]bool{}
	for _, c := range candidates {
		if usable[c.Path] || seen[c.Path] || !r.OfThisRun(c) || (s.Pending && c.Path == s.PendingOne.Path) {
			continue
		}
		done := c
		done.Complete = true
		if s.Found && !Better(r.Choose, done, s.Best) {
			continue
		}
		if !r.WritersGone.IsZero() || c.Structure == StructureTruncated || failedLoad(r, c) {
			seen[c.Path] = true
			_, why := r.Judge(c)
			s.Passed = append(s.Passed, Passed{Checkpoint: c, Reason: why})
		}
	}
	sortPassed(r.Choose, s.Passed)
	if hasEarlier {
		s.Earlier = &earlier
	}
	return s
}

func failedLoad(r Resume, c Checkpoint) bool {
	for _, f := range r.FailedLoads {
		if f.Path == c.Path && !c.ModTime.After(f.At) {
			return true
		}
	}
	return false
}

func sortPassed(choose string, ps []Passed) {
	slices.SortStableFunc(ps, func(a, b Passed) int { return rank(choose, a.Checkpoint, b.Checkpoint) })
}

// rank orders a before b when it would be chosen first, were both complete.
func rank(choose string, a, b Checkpoint) int {
	switch {
	case Better(choose, withComplete(a), withComplete(b)):
		return -1
	case Better(choose, withComplete(b), withComplete(a)):
		return 1
	}
	return 0
}

func withComplete(c Checkpoint) Checkpoint {
	c.Complete = true
	return c
}

// Annotate reads the structure (CheckStructure) of candidates and, with
// out, whether the job printed its save and went on: in r.Choose's order,
// up to the first that Select would take under r, since nothing ranked
// below it is chosen or named. Each path is read once. It only reads.
func Annotate(r Resume, cs []Checkpoint, out *Output) {
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return rank(r.Choose, cs[a], cs[b]) })
	done := map[string]Checkpoint{}
	for _, i := range order {
		c := &cs[i]
		if d, ok := done[c.Path]; ok {
			c.Structure, c.StructureWhy, c.SavedWentOn = d.Structure, d.StructureWhy, d.SavedWentOn
			continue
		}
		if c.Size > 0 {
			c.Structure, c.StructureWhy = CheckStructure(c.Path)
		}
		if out != nil {
			if save, next, ok := out.SavedAndWentOn(c.Path); ok {
				c.SavedWentOn = fmt.Sprintf("the job printed %q and went on (%q)", clip(save), clip(next))
			}
		}
		done[c.Path] = *c
		if ok, _ := r.Judge(*c); ok && r.OfThisRun(*c) {
			// Copies of this path further down get the same marks.
			for _, k := range order {
				if cs[k].Path == c.Path {
					cs[k].Structure, cs[k].StructureWhy, cs[k].SavedWentOn = c.Structure, c.StructureWhy, c.SavedWentOn
				}
			}
			return
		}
	}
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
