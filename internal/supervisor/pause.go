package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
)

// pause waits, before a relaunch, for the failed attempt's GPU memory to be
// released (so the next attempt does not run out of memory on a ghost) and
// then for the policy's backoff. It returns false when a terminating signal
// arrives meanwhile.
func (l *loop) pause(backoff time.Duration) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := l.job.Signals.TerminatedC()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, s := range l.hooks.stopper { // a Slurm requeue signal, say
		go func() {
			select {
			case <-s.stopC():
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if l.releaseBaseline != nil {
		start := time.Now()
		announce := func(held []gpu.Holding, timeout time.Duration) {
			var parts []string
			for _, h := range held {
				if h.Lost {
					parts = append(parts, h.ID+" lost")
					continue
				}
				parts = append(parts, fmt.Sprintf("%s: %s in use, %s before the attempt",
					h.ID, humanize.Bytes(h.UsedBytes), humanize.Bytes(h.BaselineBytes)))
			}
			l.job.Status.Printf("waiting up to %s for the GPU memory of the last attempt to be released (%s)", timeout, strings.Join(parts, "; "))
		}
		if err := gpu.WaitRelease(ctx, l.gpu, nil, l.releaseBaseline, 0, 0, announce); err != nil && ctx.Err() == nil {
			l.job.Status.Printf("warning: %v", err)
		} else if waited := time.Since(start); waited > time.Second {
			l.job.Status.Printf("waited %s for the GPU memory of the last attempt to be released", waited.Round(100*time.Millisecond))
		}
		l.releaseBaseline = nil
	}
	if backoff > 0 {
		select {
		case <-l.after(backoff):
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// gpuReleaseHook samples the GPU memory in use before each attempt: after
// a failed one, pause waits until use is back near it.
type gpuReleaseHook struct {
	l        *loop
	baseline []gpu.Sample
}

func (h *gpuReleaseHook) attemptStarting(*attemptRun) {
	h.baseline, _ = h.l.gpu.Sample(context.Background(), nil)
}

func (h *gpuReleaseHook) judged(a *attemptRun) {
	if a.exit.Code != 0 {
		h.l.releaseBaseline = h.baseline
	}
}
