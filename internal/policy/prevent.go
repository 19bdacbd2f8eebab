package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Prevention (policy key prevent): act before the crash. When the memory
// sampler's projection (memory.Project) says the next run of a phase will
// not fit under the ceiling that applies, and the job has just completed a
// checkpoint, the supervisor stops the job at that boundary and relaunches
// it from that checkpoint: a fresh process has its memory back (a leak, a
// cache, fragmentation are gone). Where a rule names the cause in its
// when: (fragmentation: true, worker: true), its step is applied at the
// same time. The decision is PreventGrowth's, a pure function like Decide.

// Prevent is the policy's prevent: section.
type Prevent struct {
	// MemoryGrowth is what to do about a growth that will not fit:
	// "restart" (the only action).
	MemoryGrowth string
	// Budget is how many such restarts a run may make (prevent.budget,
	// default DefaultPreventBudget); they do not count against
	// budget.relaunches.
	Budget int
}

// DefaultPreventBudget is prevent.budget's default.
const DefaultPreventBudget = 3

// PreventRestart is Prevent.MemoryGrowth's one value.
const PreventRestart = "restart"

// Prevent returns the prevent: section; false when the policy has none
// (prevention is opt-in).
func (p *Policy) Prevent() (Prevent, bool) {
	if p.prevent == nil {
		return Prevent{}, false
	}
	return *p.prevent, true
}

// The causes of a growth, as the supervisor reads them from its figures.
const (
	GrowthLeak          = "growth"        // memory grows run after run
	GrowthFragmentation = "fragmentation" // the allocator holds more than it hands out, more each run
	GrowthWorkers       = "workers"       // the DataLoader workers hold the growth
)

// Growth is a projection the supervisor asks PreventGrowth about: the
// memory sampler's fit over a phase's per-run peaks on one device, against
// the ceiling that applies, as the attempt reached a completed checkpoint.
type Growth struct {
	Attempt int
	Phase   classify.Phase
	Device  string // a GPU's id, or "host"
	// Ceiling names what the memory meets ("the GPU's capacity",
	// "RLIMIT_DATA", ...); CeilingBytes is it.
	Ceiling      string
	CeilingBytes uint64
	// The fit: runs From..To (Runs of them; epochs when Epochs), growth
	// per run, margin, the last run's peak; NextLabel's projected peak
	// (margin included) and whether it reaches the ceiling.
	From, To    int64
	Runs        int
	Epochs      bool
	SlopeBytes  uint64
	MarginBytes uint64
	LastBytes   uint64
	NextLabel   int64
	NextBytes   uint64
	NextWontFit bool
	// Cause is GrowthLeak, GrowthFragmentation or GrowthWorkers.
	Cause string
	// Checkpoint is the checkpoint the job has just completed ("": none).
	Checkpoint string
}

// Words is the projection in one line: what was projected, against which
// ceiling, from which figures.
func (g Growth) Words() string {
	unit := "epoch"
	if !g.Epochs {
		unit = string(g.Phase) + " run"
	}
	what := "host memory"
	if g.Device != "host" {
		what = "memory on " + g.Device
	}
	phase := g.Phase.Words()
	if phase == "" {
		phase = "(no phase)"
	}
	cause := ""
	switch g.Cause {
	case GrowthFragmentation:
		cause = " (fragmentation: reserved but unallocated memory grows)"
	case GrowthWorkers:
		cause = " (held by the DataLoader workers)"
	}
	return fmt.Sprintf("%s %s%s projected at %s in %s %d, over %s's %s (fit over %ss %d-%d: %s per %s, margin %s, last peak %s)",
		phase, what, cause, humanize.Bytes(g.NextBytes), unit, g.NextLabel, g.Ceiling, humanize.Bytes(g.CeilingBytes),
		unit, g.From, g.To, humanize.Bytes(g.SlopeBytes), unit, humanize.Bytes(g.MarginBytes), humanize.Bytes(g.LastBytes))
}

// PreventState is what a run remembers of its preventive restarts.
type PreventState struct {
	Restarts int `json:"restarts"`
	// The projection the last restart acted on.
	Attempt int            `json:"attempt"`
	Phase   classify.Phase `json:"phase"`
	Device  string         `json:"device"`
	To      int64          `json:"to"`
	Epochs  bool           `json:"epochs"`
}

// PreventGrowth says whether to stop the job now and relaunch it from
// g.Checkpoint. ok is false, with the Reason, when it must not: the policy
// has no prevent:, the next run fits, there is no checkpoint to resume
// from, prevent.budget is spent, or the projection is the one the last
// restart acted on (no epoch beyond it: no new evidence). When a rule's
// when: names the cause (fragmentation: true for fragmentation, worker:
// true for the workers' growth) and matches the phase and the memory, its
// step is applied at the same time, and counts as the rule's firing. The
// decision is a Relaunch with no backoff (the job is healthy). Pure: st is
// not changed.
func (p *Policy) PreventGrowth(st State, g Growth) (d Decision, ok bool) {
	st = st.clone()
	d = Decision{Verb: GiveUp, State: st}
	pv, on := p.Prevent()
	switch {
	case !on:
		d.Reason = "the policy has no prevent: section"
		return d, false
	case !g.NextWontFit:
		d.Reason = "the projection fits: " + g.Words()
		return d, false
	case g.Checkpoint == "":
		d.Reason = "no completed checkpoint to resume from: the job goes on (" + g.Words() + ")"
		return d, false
	}
	last := st.Prevented
	if last != nil && last.Restarts >= pv.Budget {
		d.Reason = fmt.Sprintf("prevent budget exhausted (%d/%d): the job goes on (%s)", last.Restarts, pv.Budget, g.Words())
		return d, false
	}
	if last != nil && last.Phase == g.Phase && last.Device == g.Device &&
		(last.Attempt == g.Attempt && last.To == g.To || last.Epochs && g.Epochs && g.To <= last.To) {
		d.Reason = fmt.Sprintf("restart %d acted on this projection already (up to %s %d), and there is no new evidence: the job goes on", last.Restarts, unitOf(g), last.To)
		return d, false
	}
	next := PreventState{Restarts: 1, Attempt: g.Attempt, Phase: g.Phase, Device: g.Device, To: g.To, Epochs: g.Epochs}
	if last != nil {
		next.Restarts = last.Restarts + 1
	}
	st.Prevented = &next
	d.Verb, d.State = Relaunch, st
	d.Reason = fmt.Sprintf("%s; checkpoint %s is complete: restarting from it (prevent %d of %d)", g.Words(), g.Checkpoint, next.Restarts, pv.Budget)
	if r, i, vals, changes, ok := p.causeStep(st, g); ok {
		rs := st.Rules[r.name]
		for len(rs.Acts) <= i {
			rs.Acts = append(rs.Acts, 0)
		}
		rs.Step, rs.Fired = i, rs.Fired+1
		rs.Acts[i]++
		st.Rules[r.name] = rs
		st.Values = vals
		d.Rule, d.Step, d.Changes = r.name, i+1, changes
		d.Reason += fmt.Sprintf("; rule %s step %d names the cause: %s", r.name, i+1, describeChanges(changes))
	}
	d.State = st
	return d, true
}

func unitOf(g Growth) string {
	if g.Epochs {
		return "epoch"
	}
	return "run"
}

// causeStep finds the first rule whose when: names g's cause and matches
// its phase and memory, and the first step from the rule's position that
// acts.
func (p *Policy) causeStep(st State, g Growth) (*rule, int, Values, []Change, bool) {
	if g.Cause != GrowthFragmentation && g.Cause != GrowthWorkers {
		return nil, 0, nil, nil, false
	}
	kind := classify.KindGPUOOM
	if g.Device == "host" {
		kind = classify.KindHostOOM
	}
	out := Outcome{Verdict: classify.Verdict{Kind: kind, Phase: g.Phase, Fragmentation: g.Cause == GrowthFragmentation}, Attempt: g.Attempt}
	if g.Cause == GrowthWorkers {
		out.Verdict.Requester = classify.RequesterDataLoaderWorker
	}
	for _, r := range p.rules {
		names := g.Cause == GrowthFragmentation && r.when.fragmentation != nil && *r.when.fragmentation ||
			g.Cause == GrowthWorkers && r.when.worker != nil && *r.when.worker
		if !names || !r.when.matches(kind, out) {
			continue
		}
		rs := st.Rules[r.name]
		for i := rs.Step; i < len(r.steps); i++ {
			s := r.steps[i]
			if s.times > 0 && i < len(rs.Acts) && rs.Acts[i] >= s.times {
				continue
			}
			if vals, changes, why := p.applyStep(s, st.Values, &out); why == "" {
				return r, i, vals, changes, true
			}
		}
	}
	return nil, 0, nil, nil, false
}

// preventSpec reads prevent: {memory_growth: restart, budget: N}. A
// restart needs a checkpoint to resume from, and a way to pass it: the
// checkpoints: section must say both.
func (w *walker) preventSpec(n *yaml.Node, p *Policy) *Prevent {
	pv := &Prevent{Budget: DefaultPreventBudget}
	given := false
	for _, f := range w.mapping(n, "prevent", "memory_growth", "budget") {
		switch f.name {
		case "memory_growth":
			given = true
			if s, ok := w.scalar(f.val, "prevent memory_growth"); ok && s != PreventRestart {
				w.at(f.val, "prevent memory_growth: unknown action %q%s; allowed: %s (stop the job at a completed checkpoint and relaunch it from there)",
					s, didYouMean(s, []string{PreventRestart}), PreventRestart)
			} else {
				pv.MemoryGrowth = s
			}
		case "budget":
			pv.Budget = w.integer(f.val, "prevent budget", 1)
		}
	}
	if !given {
		w.at(n, "prevent: say what to do, e.g. `prevent: {memory_growth: restart}`")
	}
	if len(p.ckpt.Globs) == 0 || p.ckpt.Pass == "" {
		missing := []string{}
		if len(p.ckpt.Globs) == 0 {
			missing = append(missing, "where the checkpoints are (checkpoints: {globs: [...]})")
		}
		if p.ckpt.Pass == "" {
			missing = append(missing, "how to resume from one (checkpoints: {pass: ...})")
		}
		w.at(n, "prevent: needs the checkpoints: section to say %s: gpuguard never stops a job it cannot resume", strings.Join(missing, " and "))
	}
	return pv
}
