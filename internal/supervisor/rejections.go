package supervisor

import (
	"sync"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
)

// maxRejections bounds the rejection lines kept of one attempt.
const maxRejections = 8

// rejectionHook keeps the output lines in which the job refuses an argument
// or a config key (policy.RejectionLine): the policy checks them against
// what the last relaunch changed.
type rejectionHook struct {
	mu    sync.Mutex
	lines []string // the attempt running's
}

func (h *rejectionHook) attemptStarting(*attemptRun) {
	h.mu.Lock()
	h.lines = nil
	h.mu.Unlock()
}

func (h *rejectionHook) line(_ *attemptRun, ln lines.Line) {
	if !policy.RejectionLine(ln.Text) {
		return
	}
	h.mu.Lock()
	if len(h.lines) < maxRejections {
		h.lines = append(h.lines, string(ln.Text))
	}
	h.mu.Unlock()
}

func (h *rejectionHook) judged(a *attemptRun) {
	h.mu.Lock()
	a.row.rejections = h.lines
	h.mu.Unlock()
}
