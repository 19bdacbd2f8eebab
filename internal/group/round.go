package group

import (
	"cmp"
	"slices"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Round is the leader's view of one attempt across the group: the failures
// heard while it runs, the reports of its end. It decides whom to tell to
// stop, and when the attempt is over everywhere. It is pure.
type Round struct {
	Attempt int
	Size    int
	reports map[int]Report
	// stopSent: the stop has gone out (once per attempt); stopFrom is the
	// member whose failure caused it.
	stopSent bool
	stopFrom int
}

// NewRound starts the round of attempt n in a group of size members.
func NewRound(n, size int) *Round {
	return &Round{Attempt: n, Size: size, reports: map[int]Report{}, stopFrom: -1}
}

// Notice takes an out-of-memory line heard from member rank while the
// attempt runs. It returns the members to tell to stop (every other member
// whose attempt is still running), once per attempt; nil after that.
func (r *Round) Notice(rank int) []int {
	if r.stopSent {
		return nil
	}
	r.stopSent, r.stopFrom = true, rank
	return r.running(rank)
}

// Ended takes a member's report. A failed attempt whose peers still run
// stops them too (their ranks cannot go on without it). It returns the
// members to stop, and whether every member has reported.
func (r *Round) Ended(rep Report) (stop []int, complete bool) {
	if _, dup := r.reports[rep.Rank]; !dup {
		r.reports[rep.Rank] = rep
		if rep.Failed() && !rep.StoppedForPeer && !rep.Terminated && !r.stopSent {
			r.stopSent, r.stopFrom = true, rep.Rank
			stop = r.running(rep.Rank)
		}
	}
	return stop, len(r.reports) >= r.Size
}

// Has reports whether member rank has reported.
func (r *Round) Has(rank int) bool { _, ok := r.reports[rank]; return ok }

// Reports returns the reports so far, by rank.
func (r *Round) Reports() []Report {
	out := make([]Report, 0, len(r.reports))
	for _, rep := range r.reports {
		out = append(out, rep)
	}
	slices.SortFunc(out, func(a, b Report) int { return cmp.Compare(a.Rank, b.Rank) })
	return out
}

func (r *Round) running(except int) []int {
	var out []int
	for i := 0; i < r.Size; i++ {
		if _, ended := r.reports[i]; !ended && i != except {
			out = append(out, i)
		}
	}
	return out
}

// First picks the failure the group decides from: the cause, not its
// echoes. An out-of-memory error on any member beats every other failure
// (the broken collectives and timeouts it caused on the other nodes); among
// failures of the same class the earliest first failure line wins, a
// report without one coming after those with one; a member that stopped
// its job because a peer failed is a cause only when no other member
// failed; ties go to the lower rank. ok is false when no attempt failed.
func First(reports []Report) (Report, bool) {
	var best *Report
	for i := range reports {
		r := &reports[i]
		if !r.Failed() && !isMemory(r.Verdict.Kind) {
			continue
		}
		if best == nil || before(*r, *best) {
			best = r
		}
	}
	if best == nil {
		return Report{}, false
	}
	return *best, true
}

// before reports whether a is a likelier cause than b.
func before(a, b Report) bool {
	if x, y := rankClass(a), rankClass(b); x != y {
		return x < y
	}
	if a.FailedAt.IsZero() != b.FailedAt.IsZero() {
		return !a.FailedAt.IsZero()
	}
	if !a.FailedAt.Equal(b.FailedAt) {
		return a.FailedAt.Before(b.FailedAt)
	}
	return a.Rank < b.Rank
}

// rankClass orders failures: memory first, then other failures of the
// member's own, then those of members stopped for a peer or by a signal.
func rankClass(r Report) int {
	switch {
	case isMemory(r.Verdict.Kind):
		return 0
	case r.StoppedForPeer || r.Terminated:
		return 2
	}
	return 1
}

func isMemory(k classify.Kind) bool {
	return k == classify.KindGPUOOM || k == classify.KindCPUAllocOOM || k == classify.KindHostOOM
}
