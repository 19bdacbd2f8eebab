package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Run is what a run directory records, as `gpuguard report --json` prints
// it.
type Run struct {
	RunDir   string     `json:"run_dir"`
	Start    *time.Time `json:"start,omitempty"`
	End      *time.Time `json:"end,omitempty"`
	Argv     []string   `json:"argv,omitempty"`
	Policy   string     `json:"policy,omitempty"`
	Version  string     `json:"version,omitempty"`
	ExitCode *int       `json:"exit_code"` // nil: no run_end (the run is going on, or gpuguard was killed)
	Attempts []*Attempt `json:"attempts"`
	Signals  []Signal   `json:"signals,omitempty"`
	// Timeline is the timeline file's name when the run has one.
	Timeline string `json:"timeline,omitempty"`
	// Problems lists lines that could not be read (a truncated last line
	// after a crash, say); the rest of the report stands.
	Problems []string `json:"problems,omitempty"`

	origin time.Time // time zero of the timeline
	// labels: each plotted panel's labels, where the last plot placed
	// them (the tests read the layout there).
	labels []*labelLayer
}

// Attempt is one launch of the job.
type Attempt struct {
	N          int                   `json:"attempt"`
	Start      *time.Time            `json:"start,omitempty"`
	End        *time.Time            `json:"end,omitempty"`
	PID        int                   `json:"pid,omitempty"`
	Argv       []string              `json:"argv,omitempty"`
	EnvChanges []string              `json:"env_changes,omitempty"`
	Knobs      map[string]any        `json:"knobs,omitempty"`
	Checkpoint string                `json:"checkpoint,omitempty"` // what it resumed from
	ExitCode   *int                  `json:"exit_code"`
	Signal     string                `json:"signal,omitempty"`
	DurationS  *float64              `json:"duration_s,omitempty"`
	LastStep   *int64                `json:"last_step,omitempty"`
	Verdict    *classify.Verdict     `json:"verdict,omitempty"`
	Phases     []PhaseMark           `json:"phases,omitempty"`
	Failures   []Failure             `json:"failures,omitempty"`
	Warnings   []Note                `json:"warnings,omitempty"`
	Memory     *record.MemorySummary `json:"memory,omitempty"`
	MemoryFrom string                `json:"memory_from,omitempty"` // "events" or "timeline"
	Decision   *Decision             `json:"decision,omitempty"`
	// Site is where the torch probe saw the attempt's OOM raised.
	Site  *record.ProbeSite `json:"site,omitempty"`
	Extra map[string]string `json:"-"`
}

// PhaseMark is a phase event.
type PhaseMark struct {
	Time  time.Time `json:"time"`
	Phase string    `json:"phase"`
	Line  int       `json:"line,omitempty"`
	Step  *int64    `json:"step,omitempty"`
}

// Failure is a failure event (an OOM or crash line seen live).
type Failure struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	Line int       `json:"line,omitempty"`
	Text string    `json:"text,omitempty"`
}

// Note is a warning event.
type Note struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
}

// Decision is what the policy decided after an attempt.
type Decision struct {
	Time       time.Time `json:"time"`
	Verb       string    `json:"verb"` // relaunch | give_up | done
	Rule       string    `json:"rule,omitempty"`
	Step       *int64    `json:"step,omitempty"`
	Changes    []Change  `json:"changes,omitempty"`
	BackoffS   *float64  `json:"backoff_s,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Checkpoint string    `json:"checkpoint,omitempty"`
}

// Change is one knob change of a decision.
type Change struct {
	Name string `json:"name"`
	Old  any    `json:"old"`
	New  any    `json:"new"`
}

// Signal is a signal gpuguard received, and what it did with it.
type Signal struct {
	Time      time.Time `json:"time"`
	Signal    string    `json:"signal"`
	Action    string    `json:"action,omitempty"` // record.SignalForwarded, SignalKilled, SignalNoJob
	Forwarded bool      `json:"forwarded"`        // passed on to the job
}

// readEvents reads events.jsonl. Unknown types and fields are ignored; a
// line that is not an event is listed in Problems.
func readEvents(r io.Reader, runDir string) (*Run, error) {
	run := &Run{RunDir: runDir}
	f := &folder{run: run, byN: map[int]*Attempt{}}
	entries, bad, err := record.Read(r)
	type problem struct {
		line int
		err  error
	}
	var problems []problem
	for _, b := range bad {
		problems = append(problems, problem{b.Line, b.Err})
	}
	good := 0
	for _, e := range entries {
		if perr := f.apply(e); perr != nil {
			problems = append(problems, problem{e.Line, perr})
		} else {
			good++
		}
	}
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].line < problems[j].line })
	for _, p := range problems {
		run.Problems = append(run.Problems, fmt.Sprintf("events.jsonl line %d: %v", p.line, p.err))
	}
	if err != nil {
		return run, fmt.Errorf("reading events.jsonl: %w", err)
	}
	if good == 0 {
		if len(bad) > 0 {
			return run, fmt.Errorf("events.jsonl holds no event (%d unreadable lines)", len(bad))
		}
		return run, fmt.Errorf("events.jsonl holds no event")
	}
	sort.SliceStable(run.Attempts, func(i, j int) bool { return run.Attempts[i].N < run.Attempts[j].N })
	return run, nil
}

// folder folds the events of a journal, in order, into a Run.
type folder struct {
	run *Run
	byN map[int]*Attempt
	// knobs are the values the next attempt gets: the policy event's, then
	// each decision's (attempt_start does not repeat them).
	knobs map[string]record.Value
}

func (f *folder) attempt(n int) *Attempt {
	if a := f.byN[n]; a != nil {
		return a
	}
	a := &Attempt{N: n}
	f.byN[n] = a
	f.run.Attempts = append(f.run.Attempts, a)
	return a
}

// apply folds one event into the run. Fields of an unexpected type read as
// absent, except a memory summary that cannot be read, which is an error.
func (f *folder) apply(e record.Entry) error {
	run, attempt := f.run, f.attempt
	t, at := e.Time, timePtr(e.Time)
	ev, derr := e.Event()
	switch ev := ev.(type) {
	case record.RunStart:
		f.runStart(ev, at)
	case record.RunEnd:
		run.End = at
		run.ExitCode = present(e, "exit_code", ev.ExitCode)
	case record.Policy:
		if run.Policy == "" {
			run.Policy = ev.File
		}
		f.knobs = ev.Knobs
	case record.Signal:
		run.Signals = append(run.Signals, Signal{Time: t, Signal: ev.Signal, Action: ev.Action,
			Forwarded: ev.Action == record.SignalForwarded})
	case record.AttemptStart:
		return f.attemptStart(ev, at)
	case record.AttemptEnd:
		return f.attemptEnd(e, ev, at)
	case record.Phase:
		if ev.Attempt > 0 {
			a := attempt(ev.Attempt)
			a.Phases = append(a.Phases, PhaseMark{Time: t, Phase: string(ev.Phase), Line: ev.Line, Step: ev.Step})
		}
	case record.Failure:
		if ev.Attempt > 0 {
			a := attempt(ev.Attempt)
			a.Failures = append(a.Failures, Failure{Time: t, Kind: string(ev.Kind), Line: ev.Line, Text: ev.Text})
		}
	case record.Warning:
		if ev.Attempt > 0 {
			a := attempt(ev.Attempt)
			a.Warnings = append(a.Warnings, Note{Time: t, Message: ev.Message})
		}
	case record.Memory:
		return f.memory(ev, derr)
	case record.Decision:
		f.decision(e, ev)
	}
	return nil
}

// timePtr is &t, or nil for the zero time (an entry without one).
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (f *folder) runStart(ev record.RunStart, at *time.Time) {
	run := f.run
	run.Start = at
	run.Argv = ev.Argv
	run.Policy = ev.Policy
	run.Version = ev.Version
	if ev.RunDir != "" && run.RunDir == "" {
		run.RunDir = ev.RunDir
	}
}

// attemptStart: the attempt's knobs are its own, or the last ones the
// journal gave (the policy's, a decision's).
func (f *folder) attemptStart(ev record.AttemptStart, at *time.Time) error {
	if ev.Attempt <= 0 {
		return fmt.Errorf("attempt_start without an attempt number")
	}
	a := f.attempt(ev.Attempt)
	a.Start = at
	a.Argv = ev.Argv
	a.EnvChanges = ev.EnvChanges
	knobs := ev.Knobs
	if len(knobs) == 0 {
		knobs = f.knobs
	}
	if len(knobs) > 0 {
		a.Knobs = map[string]any{}
		for k, v := range knobs {
			a.Knobs[k] = valueOf(v)
		}
	}
	a.Checkpoint = ev.Checkpoint
	a.PID = ev.PID
	return nil
}

func (f *folder) attemptEnd(e record.Entry, ev record.AttemptEnd, at *time.Time) error {
	if ev.Attempt <= 0 {
		return fmt.Errorf("attempt_end without an attempt number")
	}
	a := f.attempt(ev.Attempt)
	a.End = at
	a.ExitCode = present(e, "exit_code", ev.ExitCode)
	a.Signal = ev.Signal
	a.DurationS = present(e, "duration_s", ev.DurationS)
	a.LastStep = ev.LastStep
	a.Verdict = ev.Verdict
	a.Site = ev.Site
	if a.Checkpoint == "" {
		a.Checkpoint = ev.Checkpoint
	}
	return nil
}

// memory: the first summary with an origin sets the run's time zero.
func (f *folder) memory(ev record.Memory, derr error) error {
	if ev.Attempt <= 0 {
		return nil
	}
	if derr != nil {
		return fmt.Errorf("memory %v", shorten(derr.Error(), 80))
	}
	s := ev.Summary
	a := f.attempt(ev.Attempt)
	a.Memory, a.MemoryFrom = &s, "events"
	if f.run.origin.IsZero() && !s.Origin.IsZero() {
		f.run.origin = s.Origin
	}
	return nil
}

// decision: a decision taken after an attempt is kept on that attempt; its
// knobs, when it gives them, are those of the attempts after it.
func (f *folder) decision(e record.Entry, ev record.Decision) {
	if ev.Attempt > 0 {
		d := &Decision{Time: e.Time, Verb: ev.Verb, Rule: ev.Rule, Reason: ev.Reason, Checkpoint: ev.Checkpoint,
			Step: present(e, "step", int64(ev.Step)), BackoffS: present(e, "backoff_s", ev.BackoffS)}
		for _, c := range ev.Changes {
			d.Changes = append(d.Changes, Change{Name: c.Name, Old: valueOf(c.Old), New: valueOf(c.New)})
		}
		f.attempt(ev.Attempt).Decision = d
	}
	if ev.Knobs != nil {
		f.knobs = ev.Knobs
	}
}

// present is &v when the entry has the field, nil when it has not: for
// the figures where a missing one is not a zero.
func present[T any](e record.Entry, field string, v T) *T {
	if !e.Has(field) {
		return nil
	}
	return &v
}

// valueOf is a knob value as report's JSON shows it: its text, or nil for
// null.
func valueOf(v record.Value) any {
	if v.Null {
		return nil
	}
	return v.Text
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
