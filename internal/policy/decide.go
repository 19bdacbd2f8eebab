package policy

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Verb is what to do after an attempt.
type Verb string

const (
	Done     Verb = "done"     // the job succeeded: nothing to do
	Relaunch Verb = "relaunch" // start the job again with Decision.State.Values, after Decision.Backoff
	GiveUp   Verb = "give_up"  // stop and exit with the job's own status
)

// Outcome is what the supervisor knows about an attempt that ended.
type Outcome struct {
	Verdict classify.Verdict // the classifier's verdict on the attempt's output and exit
	Exit    classify.Exit
	Attempt int // 1-based number of the attempt that ended
	// StartStep is the training step of the checkpoint the attempt resumed
	// from (nil: started from scratch or unknown). How far the attempt got
	// is the verdict's (Verdict.Position: the step, its kind, the line it
	// was read from).
	StartStep *int64
	// Peaks is the highest fraction of GPU memory in use per phase during
	// the attempt; a missing phase or 0 means unknown.
	Peaks map[classify.Phase]float64
	// Starts is the fraction of GPU memory in use at each phase's first
	// sample, about the phase's fixed part (weights, CUDA context, optimizer
	// states once made); a missing phase or 0 means unknown. fit reads it.
	Starts map[classify.Phase]float64
	// Block is where in the model the out-of-memory error struck, as the
	// torch probe saw it (nil: unknown, or no probe). fit reads it.
	Block *OOMBlock
	// seen: the run's earlier figures (State.Seen), for fit; Decide sets it.
	seen []FitSeen
	// Terminated: gpuguard itself received a terminating signal (Slurm
	// preemption, scancel, Ctrl-C). Such a job is never relaunched.
	Terminated bool
	// Rejections are the lines of the attempt's output in which the job
	// refused an argument or a configuration key (RejectionLine), in order,
	// at most a few. When one names a knob the last relaunch changed, the
	// run gives up and says which knob, and where the policy defines it.
	Rejections []string
	// Host is what the supervisor measured of the job's host memory: the
	// ceiling that applies, the phases' use of it, and what held the
	// memory when the job died (nil: nothing measured). After a host OOM
	// the rules follow what held the memory (see Decide); fit reads the
	// ceiling and the phases' figures after a host or CPU-allocator OOM.
	Host *HostMemory
	// SlurmMem is the Slurm job's memory request (nil outside Slurm, or
	// when the job has none): raise_slurm_mem raises it.
	SlurmMem *SlurmMem
	// Unapplied: changes of the last relaunch that the attempt did not run
	// with (verify.go); the attempt is then no evidence about them.
	Unapplied []Unapplied
	// Rand is a uniform random number in [0,1) for the backoff's jitter.
	// The supervisor draws it; the policy reads no randomness of its own.
	Rand float64
}

// OOMBlock is the failing module's place among the model's repeated blocks
// (model.layers.17 of 32; torchvision's stages counted as one sequence):
// block Index (0-based) of Of, in the backward pass (activation
// checkpointing's recomputation included) or the forward, and whether that
// forward ran without grad (validation: no activations kept for backward).
type OOMBlock struct {
	Index, Of int
	Backward  bool
	NoGrad    bool
}

// State is what a run remembers between attempts, and what state.json
// keeps so that a requeued run continues with the settings that fit. It is
// JSON-serialisable. Decide never changes the State it is given.
type State struct {
	Relaunches int                   `json:"relaunches"`        // relaunches so far, all causes
	ByKind     map[classify.Kind]int `json:"by_kind,omitempty"` // relaunches per failure kind
	NoProgress int                   `json:"no_progress"`       // relaunches after attempts that made no progress
	Rules      map[string]RuleState  `json:"rules,omitempty"`   // escalation position per rule name
	Values     Values                `json:"values"`            // current knob values (and EnvKey variables)
	// Last is what the last relaunch changed, and the failure it answered.
	Last *Relaunched `json:"last,omitempty"`
	// Seen is what the run's failed attempts' memory figures said (the
	// last few), for fit to combine.
	Seen []FitSeen `json:"seen,omitempty"`
	// Prevented: the run's restarts before a crash (prevent.go).
	Prevented *PreventState `json:"prevented,omitempty"`
}

// RuleState is a rule's progress through its steps.
type RuleState struct {
	Step  int   `json:"step"`           // 0-based index of the step tried first at the next firing
	Fired int   `json:"fired"`          // how often the rule fired
	Acts  []int `json:"acts,omitempty"` // how often each step acted, for times:
}

// NewState returns the state of a run before its first attempt, holding a
// copy of the starting values (from Start).
func NewState(vals Values) State {
	return State{Values: vals.clone(), ByKind: map[classify.Kind]int{}, Rules: map[string]RuleState{}}
}

func (st State) clone() State {
	out := st
	out.Values = st.Values.clone()
	out.Last = st.Last.clone()
	out.ByKind = maps.Clone(st.ByKind)
	if out.ByKind == nil {
		out.ByKind = map[classify.Kind]int{}
	}
	out.Seen = slices.Clone(st.Seen)
	if st.Prevented != nil {
		pv := *st.Prevented
		out.Prevented = &pv
	}
	out.Rules = make(map[string]RuleState, len(st.Rules))
	for k, r := range st.Rules {
		r.Acts = slices.Clone(r.Acts)
		out.Rules[k] = r
	}
	return out
}

// Change is one setting a decision changes.
type Change struct {
	Knob string `json:"knob,omitempty"` // the knob changed, or
	Env  string `json:"env,omitempty"`  // the environment variable changed by an env action, or
	// Slurm is the Slurm job's option raise_slurm_mem changes (mem,
	// mem-per-cpu), SlurmField its `scontrol update` field (MinMemoryNode,
	// MinMemoryCPU) and MiB the new request: the job is requeued with it.
	Slurm      string `json:"slurm,omitempty"`
	SlurmField string `json:"slurm_field,omitempty"`
	MiB        int64  `json:"mib,omitempty"`
	Old        string `json:"old"` // as shown to people: "unset", the null label, or the text
	New        string `json:"new"`
	// Compensation: this change keeps the product with the previous change's
	// knob (the effective batch size) as it was.
	Compensation bool   `json:"compensation,omitempty"`
	Note         string `json:"note,omitempty"` // e.g. why a product could not be kept exactly
}

func (c Change) String() string {
	return c.Name() + " " + c.Old + "→" + c.New
}

// Name is what the change changes: the knob, the environment variable, or
// the Slurm option.
func (c Change) Name() string {
	switch {
	case c.Knob != "":
		return c.Knob
	case c.Env != "":
		return c.Env
	}
	return c.Slurm
}

// Decision is what to do after an attempt, and why.
type Decision struct {
	Verb    Verb          `json:"verb"`
	Rule    string        `json:"rule,omitempty"` // Relaunch: the rule that fired
	Step    int           `json:"step,omitempty"` // Relaunch: its 1-based step
	Changes []Change      `json:"changes,omitempty"`
	Backoff time.Duration `json:"backoff,omitempty"` // Relaunch: wait this long first
	Reason  string        `json:"reason"`
	// Note: why the rule skipped a step (its change was not the cause of
	// the failure), shown with the changes.
	Note string `json:"note,omitempty"`
	// Rejected: GiveUp because the job refused this knob, which the last
	// relaunch changed (the Reason says where the policy defines it).
	Rejected string `json:"rejected,omitempty"`
	// FromScratch: Relaunch without a checkpoint, with the same values: the
	// last change did not take hold, the checkpoint pinned the old value
	// (verify.go; Note says which).
	FromScratch bool  `json:"from_scratch,omitempty"`
	State       State `json:"state"` // the state after this decision
}

// Describe is the decision in one line for people, e.g.
// "rule val-oom step 1: val_crop_size full→256, batch_size 64→32
// (grad_accum 1→2); relaunching in 7.2s".
func (d Decision) Describe() string {
	switch d.Verb {
	case Relaunch:
		var b strings.Builder
		if d.FromScratch {
			b.WriteString(d.Note)
			if d.Backoff > 0 {
				fmt.Fprintf(&b, "; relaunching in %s", d.Backoff.Round(100*time.Millisecond))
			}
			return b.String()
		}
		fmt.Fprintf(&b, "rule %s step %d: %s", d.Rule, d.Step, describeChanges(d.Changes))
		for _, c := range d.Changes {
			if c.Note != "" {
				fmt.Fprintf(&b, "; %s", c.Note)
			}
		}
		if d.Note != "" {
			fmt.Fprintf(&b, "; %s", d.Note)
		}
		if d.Backoff > 0 {
			fmt.Fprintf(&b, "; relaunching in %s", d.Backoff.Round(100*time.Millisecond))
		}
		return b.String()
	case Done:
		return "done: " + d.Reason
	}
	return "giving up: " + d.Reason
}

// Decide says what to do after an attempt ended with out, given the run's
// state st. It is a pure function of its arguments.
//
// In order: an attempt that exited 0 is Done (even if it printed an OOM it
// recovered from). A run whose supervisor was told to stop (out.Terminated)
// gives up: preemption never relaunches. A failure the classifier did not
// recognise counts as a crash. Budgets are checked next: relaunches overall,
// per failure kind (budget.per_kind), crashes (budget.crash, 0 by default:
// crashes are not retried), and the no-progress guard (an attempt that
// resumed from step S and printed no step beyond S counts against
// budget.no_progress). Then the rules are tried in order: the first that
// matches and has a step, from its current position, that can still act
// fires; the first such step's actions are applied to the values. A step
// stays the rule's position while it can act again (halving repeats until
// its floor), and the rule moves on when it cannot. When no rule fires the
// decision is GiveUp, and the Reason says whether nothing matched or every
// matching rule was at its floors.
//
// Relaunch decisions carry the backoff: backoff.initial × factor^n for the
// n-th relaunch (from 0), at most backoff.max, spread by ±jitter using
// out.Rand, and never above max.
func (p *Policy) Decide(st State, out Outcome) (d Decision) {
	st = st.clone()
	d = Decision{State: st}
	defer func() {
		if ev, ok := evidenceOf(out.Verdict.Kind, out); ok && d.Verb == GiveUp {
			d.Reason += "; " + ev.words
		}
		if d.Verb == GiveUp && out.Verdict.SharedMemory {
			d.Reason += "; /dev/shm is too small for the job as it is: give it a larger one (docker run --shm-size, or --ipc=host; on Kubernetes an emptyDir with medium: Memory mounted at /dev/shm), which gpuguard cannot do"
		}
	}()
	kind := out.Verdict.Kind
	if out.Exit.Code == 0 && out.Exit.Signal == 0 {
		d.Verb, d.Reason = Done, "the job exited with status 0"
		return d
	}
	d.Verb = GiveUp
	if out.Terminated {
		d.Reason = fmt.Sprintf("gpuguard was told to stop (preemption, cancel or Ctrl-C): the job is not relaunched; its status %d is passed on", out.Exit.Code)
		return d
	}
	if kind == "" || kind == classify.KindNone {
		kind = classify.KindCrash
	}
	what := describeFailure(kind, out)
	if c, line, ok := p.rejected(st.Last, out.Rejections); ok {
		d.Reason = p.rejectedReason(what, st.Last, c, line)
		d.Rejected = c.Knob
		return d
	}
	b, spent := p.budgets(st, out, kind, what)
	if spent != "" {
		d.Reason = spent
		return d
	}
	if len(out.Unapplied) > 0 {
		return p.unappliedDecision(st, out, kind, what, d)
	}
	out.seen = st.Seen
	if s, ok := p.fitSeen(st.Values, &out); ok {
		st.Seen = append(st.Seen, s)
		if len(st.Seen) > maxFitSeen {
			st.Seen = st.Seen[len(st.Seen)-maxFitSeen:]
		}
	}
	return p.tryRules(st, out, kind, what, b, d)
}

// budgetView is what the budgets say of a failure that may be relaunched:
// the limit of its kind, if it has one, and whether the attempt got no
// further than the step it resumed from.
type budgetView struct {
	limit      int
	limited    bool
	noProgress bool
}

// budgets checks the relaunch, crash, per-kind and no-progress budgets in
// that order; spent is the reason to give up when one is exhausted.
func (p *Policy) budgets(st State, out Outcome, kind classify.Kind, what string) (b budgetView, spent string) {
	if st.Relaunches >= p.budget.relaunches {
		return b, fmt.Sprintf("%s; relaunch budget exhausted (%d/%d)", what, st.Relaunches, p.budget.relaunches)
	}
	if kind == classify.KindCrash && p.budget.crash == 0 {
		return b, fmt.Sprintf("%s: not a memory failure, and the policy does not retry crashes (budget.crash is 0); status %d is passed on", what, out.Exit.Code)
	}
	b.limit, b.limited = p.budget.perKind[kind]
	if kind == classify.KindCrash {
		b.limit, b.limited = p.budget.crash, true
	}
	if b.limited && st.ByKind[kind] >= b.limit {
		return b, fmt.Sprintf("%s; budget for %s exhausted (%d/%d)", what, kind, st.ByKind[kind], b.limit)
	}
	// Progress compares like with like: a checkpoint's step is a training
	// step, comparable with a training step the job printed, never with a
	// progress bar's position within an epoch (Cmp says it cannot tell).
	v := out.Verdict
	if out.StartStep != nil && v.Step != nil {
		c, ok := v.Position().Cmp(classify.GlobalStep(*out.StartStep))
		b.noProgress = ok && c <= 0
	}
	if b.noProgress && st.NoProgress >= p.budget.noProgress {
		return b, fmt.Sprintf("%s; attempt %d resumed from step %d and got no further (step %d, read at line %d: %q), and the no-progress budget is exhausted (%d/%d)",
			what, out.Attempt, *out.StartStep, *v.Step, v.StepLine, v.StepText, st.NoProgress, p.budget.noProgress)
	}
	return b, ""
}

// rulesFor is the order the rules are tried in. Evidence over labels: after
// a host OOM, the rules that agree with what held the memory (the sampler's
// attribution by role) come first, whatever their when: says of the phase.
func (p *Policy) rulesFor(ev hostEvidence, haveEv bool) []*rule {
	if !haveEv {
		return p.rules
	}
	rules := make([]*rule, 0, len(p.rules))
	for _, r := range p.rules {
		if ev.fits(r) {
			rules = append(rules, r)
		}
	}
	for _, r := range p.rules {
		if !ev.fits(r) {
			rules = append(rules, r)
		}
	}
	return rules
}

// tryRules fires the first step, of the first matching rule, that can
// still act; with none, the decision gives up and says whether no rule
// matched or every matching one was at its floors.
func (p *Policy) tryRules(st State, out Outcome, kind classify.Kind, what string, b budgetView, d Decision) Decision {
	var floors []string
	var causes []string // steps passed over: their change was not the cause
	matched := 0
	ev, haveEv := evidenceOf(kind, out)
	for _, r := range p.rulesFor(ev, haveEv) {
		if !r.when.matches(kind, out) {
			continue
		}
		matched++
		rs := st.Rules[r.name]
		start := rs.Step
		if why, ok := notTheCause(st.Last, r.name, rs.Step, kind, out); ok && !out.unappliedKnob(st.Last) {
			// The step the last relaunch took did not move the failure:
			// repeating it (halving to its floor) would waste relaunches.
			// The rule moves on for good.
			start++
			rs.Step = start
			st.Rules[r.name] = rs
			floors = append(floors, fmt.Sprintf("rule %s step %d: %s", r.name, start, why))
			if start < len(r.steps) {
				why += fmt.Sprintf("; rule %s goes on to step %d", r.name, start+1)
			}
			causes = append(causes, why)
		}
		for i := start; i < len(r.steps); i++ {
			s := r.steps[i]
			if s.times > 0 && i < len(rs.Acts) && rs.Acts[i] >= s.times {
				floors = append(floors, fmt.Sprintf("rule %s step %d acted its %d time(s)", r.name, i+1, s.times))
				continue
			}
			vals, changes, why := p.applyStep(s, st.Values, &out)
			if why != "" {
				floors = append(floors, fmt.Sprintf("rule %s step %d: %s", r.name, i+1, why))
				continue
			}
			if haveEv {
				causes = append([]string{p.evidenceNote(ev, r, kind, out)}, causes...)
			}
			f := firing{rule: r, rs: rs, step: i, vals: vals, changes: changes, note: strings.Join(causes, "; ")}
			return p.relaunch(st, out, kind, what, b, f, d)
		}
	}
	d.State = st
	if matched == 0 {
		d.Reason = fmt.Sprintf("no rule matches %s; status %d is passed on", what, out.Exit.Code)
	} else {
		d.Reason = fmt.Sprintf("%s: every matching rule is at its floors (%s); status %d is passed on", what, strings.Join(floors, "; "), out.Exit.Code)
	}
	return d
}

// firing is the step of a rule that acts: the rule's position before it,
// the values after it, and the note on steps passed over and evidence.
type firing struct {
	rule    *rule
	rs      RuleState
	step    int // index in rule.steps
	vals    Values
	changes []Change
	note    string
}

// relaunch is the decision to relaunch with f's step: the rule's position
// and counts, the budgets spent, the backoff, and the reason in full.
func (p *Policy) relaunch(st State, out Outcome, kind classify.Kind, what string, b budgetView, f firing, d Decision) Decision {
	r, rs, i, v := f.rule, f.rs, f.step, out.Verdict
	for len(rs.Acts) <= i {
		rs.Acts = append(rs.Acts, 0)
	}
	rs.Step, rs.Fired = i, rs.Fired+1
	rs.Acts[i]++
	st.Rules[r.name] = rs
	st.Values = f.vals
	st.ByKind[kind]++
	if b.noProgress {
		st.NoProgress++
	}
	d.Verb, d.Rule, d.Step, d.Changes = Relaunch, r.name, i+1, f.changes
	d.Note = f.note
	d.Backoff = p.backoff.wait(st.Relaunches, out.Rand)
	st.Relaunches++
	st.Last = &Relaunched{Attempt: out.Attempt, Rule: r.name, Step: i + 1, Changes: f.changes, Kind: string(kind), Phase: string(v.Phase), Site: v.Site}
	if v.OOM != nil && v.OOM.RequestedBytes != nil {
		st.Last.RequestedBytes = ptrTo(*v.OOM.RequestedBytes)
	}
	d.Reason = fmt.Sprintf("%s matched rule %s (step %d of %d); relaunch %d of %d", what, r.name, i+1, len(r.steps), st.Relaunches, p.budget.relaunches)
	if b.limited {
		d.Reason += fmt.Sprintf(", %s %d of %d", kind, st.ByKind[kind], b.limit)
	}
	if b.noProgress {
		d.Reason += fmt.Sprintf(", no progress %d of %d", st.NoProgress, p.budget.noProgress)
	}
	if d.Note != "" {
		d.Reason += "; " + d.Note
	}
	d.State = st
	return d
}

func ptrTo[T any](v T) *T { return &v }

// notTheCause reports whether the step at index pos of rule, which the last
// relaunch took, changed a knob without touching the failure: the attempt
// after it failed the same way (an out-of-memory error of the same kind, in
// the same phase, asking for the same number of bytes, at the same place in
// the code where both tracebacks show one: Verdict.Site). The allocation then
// does not depend on the knob (it is made inside a DataLoader worker, or
// against a per-process limit), and repeating the step only wastes
// relaunches until the knob reaches its floor. why says so, for the
// decision.
func notTheCause(last *Relaunched, rule string, pos int, kind classify.Kind, out Outcome) (string, bool) {
	v := out.Verdict
	if last == nil || last.Rule != rule || last.Step != pos+1 || last.Kind != string(kind) || !isOOM(kind) ||
		last.Phase != string(v.Phase) || last.RequestedBytes == nil || v.OOM == nil || v.OOM.RequestedBytes == nil ||
		*last.RequestedBytes != *v.OOM.RequestedBytes || last.Site != "" && v.Site != "" && last.Site != v.Site {
		return "", false
	}
	var knobs, changes []string
	for _, c := range last.Changes {
		if c.Knob != "" && !c.Compensation {
			knobs = append(knobs, c.Knob)
			changes = append(changes, c.String())
		}
	}
	if len(knobs) == 0 {
		return "", false
	}
	phase := string(v.Phase)
	if phase == "" {
		phase = "an unknown phase"
	}
	is := "is"
	if len(knobs) > 1 {
		is = "are"
	}
	at := ""
	if v.Site != "" && last.Site == v.Site {
		at = " at " + v.Site
	}
	return fmt.Sprintf("%s %s not the cause: after %s, attempt %d failed asking for the same %s in %s%s",
		strings.Join(knobs, " and "), is, strings.Join(changes, ", "), out.Attempt, humanize.Size(*v.OOM.RequestedBytes), phase, at), true
}

func isOOM(k classify.Kind) bool {
	return k == classify.KindGPUOOM || k == classify.KindCPUAllocOOM || k == classify.KindHostOOM
}

// describeFailure is "gpu_oom in val (rank 1, fragmentation)" for reasons.
func describeFailure(kind classify.Kind, out Outcome) string {
	v := out.Verdict
	phase := string(v.Phase)
	if phase == "" {
		phase = "an unknown phase"
	}
	var extra []string
	if v.Rank != nil {
		extra = append(extra, fmt.Sprintf("rank %d", *v.Rank))
	}
	if v.Fragmentation {
		extra = append(extra, "fragmentation")
	}
	if v.OtherProcesses {
		extra = append(extra, "other processes on the GPU")
	}
	if v.Build {
		extra = append(extra, "a compiler killed while building an extension")
	}
	if v.SharedMemory {
		extra = append(extra, "shared memory")
	}
	s := fmt.Sprintf("attempt %d: %s in %s", out.Attempt, kind, phase)
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

func (m match) matches(kind classify.Kind, out Outcome) bool {
	v := out.Verdict
	switch {
	case m.kinds != nil && !slices.Contains(m.kinds, kind):
		return false
	case m.phases != nil && !slices.Contains(m.phases, v.Phase):
		return false
	case m.fragmentation != nil && *m.fragmentation != v.Fragmentation:
		return false
	case m.otherProcesses != nil && *m.otherProcesses != v.OtherProcesses:
		return false
	case m.build != nil && *m.build != v.Build:
		return false
	case m.sharedMemory != nil && *m.sharedMemory != v.SharedMemory:
		return false
	case m.worker != nil && *m.worker != inWorker(out):
		return false
	case m.ranks != nil && (v.Rank == nil || !slices.Contains(m.ranks, *v.Rank)):
		return false
	case m.attempt != nil && !m.attempt.holds(out.Attempt):
		return false
	case m.stalls != nil && !slices.Contains(m.stalls, v.Stall):
		return false
	}
	for _, pk := range m.peaks {
		if !(out.Peaks[pk.phase] > pk.over) {
			return false
		}
	}
	return true
}

// inWorker reports whether the failure was in a DataLoader worker: the log
// said so (Verdict.Requester), or, after a host OOM, the memory sampler saw
// the workers hold most of the memory.
func inWorker(out Outcome) bool {
	if out.Verdict.Requester == classify.RequesterDataLoaderWorker {
		return true
	}
	ev, ok := evidenceOf(out.Verdict.Kind, out)
	return ok && ev.role == heldWorkers
}

func (b backoff) wait(n int, r float64) time.Duration {
	d := float64(b.initial) * math.Pow(b.factor, float64(n))
	if d > float64(b.max) {
		d = float64(b.max)
	}
	r = min(max(r, 0), 1)
	d *= 1 + b.jitter*(2*r-1)
	d = min(max(d, 0), float64(b.max))
	return time.Duration(d)
}

// applyStep applies a step's actions in order to a copy of vals. The step
// acts when at least one action changes something; why is "" then, and
// otherwise says why each action could not act.
func (p *Policy) applyStep(s step, vals Values, out *Outcome) (Values, []Change, string) {
	vals = vals.clone()
	var changes []Change
	var whys []string
	acted := false
	for _, a := range s.actions {
		c, why := a.apply(p, vals, out)
		if why != "" {
			whys = append(whys, why)
			continue
		}
		acted = true
		changes = append(changes, c...)
	}
	if !acted {
		return nil, nil, strings.Join(whys, "; ")
	}
	return vals, changes, ""
}
