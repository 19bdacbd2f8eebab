package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func stepEv(n int64, line int) classify.Event {
	return classify.Event{Type: classify.EventStep, Step: n, Line: line, Rank: -1, Epoch: -1}
}

// The limit follows the job's rhythm per phase, within min and max; where
// there is no rhythm (start-up, a phase without steps, a checkpoint being
// saved) max applies.
func TestStallLimitFollowsTheRhythm(t *testing.T) {
	h := policy.Hang{Min: 5 * time.Second, Factor: 10, Max: time.Hour}
	c := &fakeClock{t: time.Unix(1000, 0)}
	w := newStallWatch(h, c.now)
	limit := func() time.Duration { _, l, _ := w.deadline(); return l }

	if got := limit(); got != time.Hour {
		t.Fatalf("start-up: limit %s, want max", got)
	}
	w.event(classify.Event{Type: classify.EventPhase, Phase: classify.PhaseTrain})
	for i := range 5 {
		c.advance(2 * time.Second)
		w.line(lines.Line{Text: []byte("step"), Num: i + 1})
		w.event(stepEv(int64(i), i+1))
	}
	if got := limit(); got != 20*time.Second {
		t.Errorf("2s steps: limit %s, want 20s", got)
	}
	at, _, _ := w.deadline()
	if want := c.t.Add(20 * time.Second); !at.Equal(want) {
		t.Errorf("deadline %s, want %s", at, want)
	}

	// Steps slowing down 3×: the median follows, the job is never late.
	for i := 5; i < 30; i++ {
		c.advance(6 * time.Second)
		if at, _, _ := w.deadline(); !c.t.Before(at) {
			t.Fatalf("step %d after 6s: past the deadline (limit %s)", i, limit())
		}
		w.event(stepEv(int64(i), i+1))
	}
	if got := limit(); got != time.Minute {
		t.Errorf("6s steps: limit %s, want 1m", got)
	}

	// A checkpoint save: max until the next step.
	w.line(lines.Line{Text: []byte("Saving model checkpoint to out/checkpoint-30")})
	if got := limit(); got != time.Hour {
		t.Errorf("saving: limit %s, want max", got)
	}
	c.advance(time.Second)
	w.event(stepEv(30, 40))
	if got := limit(); got != time.Minute {
		t.Errorf("after the save: limit %s, want 1m", got)
	}

	// Validation without steps: max; back in training, the rhythm known there.
	w.event(classify.Event{Type: classify.EventPhase, Phase: classify.PhaseVal})
	if got := limit(); got != time.Hour {
		t.Errorf("validation: limit %s, want max", got)
	}
	w.event(classify.Event{Type: classify.EventPhase, Phase: classify.PhaseTrain})
	if got := limit(); got != time.Minute {
		t.Errorf("training again: limit %s, want 1m", got)
	}

	// Fast steps: the floor.
	for i := range 20 {
		c.advance(100 * time.Millisecond)
		w.event(stepEv(int64(100+i), 100+i))
	}
	if got := limit(); got != 5*time.Second {
		t.Errorf("100ms steps: limit %s, want min", got)
	}
}

// Steps flushed together by a block-buffered stdout are one arrival: the
// rhythm is the interval between flushes, not the microseconds between the
// lines of one.
func TestStallBurstsAreOneArrival(t *testing.T) {
	h := policy.Hang{Min: time.Second, Factor: 10, Max: time.Hour}
	c := &fakeClock{t: time.Unix(1000, 0)}
	w := newStallWatch(h, c.now)
	n := int64(0)
	for range 6 {
		c.advance(30 * time.Second)
		for range 50 {
			c.advance(10 * time.Microsecond)
			n++
			w.event(stepEv(n, int(n)))
		}
	}
	if _, l, u := w.deadline(); u < 29*time.Second || l < 290*time.Second {
		t.Errorf("bursts every 30s: usual %s, limit %s", u, l)
	}
}

func TestStallEvidence(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	w := newStallWatch(policy.Hang{Min: time.Second, Factor: 10, Max: time.Hour}, c.now)
	w.event(classify.Event{Type: classify.EventPhase, Phase: classify.PhaseTrain})
	w.line(lines.Line{Text: []byte("step 7 loss 0.5"), Num: 12})
	w.event(stepEv(7, 12))
	c.advance(90 * time.Second)
	ev := w.evidence(3)
	if ev.Attempt != 3 || ev.Phase != classify.PhaseTrain || ev.SinceS != 90 || ev.Step == nil || *ev.Step != 7 ||
		ev.StepLine != 12 || ev.StepText != "step 7 loss 0.5" || ev.LimitS != 3600 || ev.UsualS != 0 {
		t.Errorf("evidence %+v", ev)
	}
	v := classify.Verdict{Kind: classify.KindCrash}
	w.mark(&v)
	if v.Kind != classify.KindCrash {
		t.Errorf("not hung, but marked %s", v.Kind)
	}
	w.hung.Store(true)
	w.mark(&v)
	if v.Kind != classify.KindHang {
		t.Errorf("hung, but the verdict is %s", v.Kind)
	}
	// An error printed before the watchdog stopped the job does not win:
	// the hang rule decides.
	v = classify.Verdict{Kind: classify.KindCPUAllocOOM, Requester: classify.RequesterDataLoaderWorker}
	w.mark(&v)
	if v.Kind != classify.KindHang || !strings.Contains(v.Reason, "cpu_alloc_oom printed earlier") {
		t.Errorf("an earlier OOM: %s (%s), want hang", v.Kind, v.Reason)
	}
}
