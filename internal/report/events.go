package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
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
}

// Attempt is one launch of the job.
type Attempt struct {
	N          int               `json:"attempt"`
	Start      *time.Time        `json:"start,omitempty"`
	End        *time.Time        `json:"end,omitempty"`
	PID        int               `json:"pid,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	EnvChanges []string          `json:"env_changes,omitempty"`
	Knobs      map[string]any    `json:"knobs,omitempty"`
	Checkpoint string            `json:"checkpoint,omitempty"` // what it resumed from
	ExitCode   *int              `json:"exit_code"`
	Signal     string            `json:"signal,omitempty"`
	DurationS  *float64          `json:"duration_s,omitempty"`
	LastStep   *int64            `json:"last_step,omitempty"`
	Verdict    *classify.Verdict `json:"verdict,omitempty"`
	Phases     []PhaseMark       `json:"phases,omitempty"`
	Failures   []Failure         `json:"failures,omitempty"`
	Warnings   []Note            `json:"warnings,omitempty"`
	Memory     *memory.Summary   `json:"memory,omitempty"`
	MemoryFrom string            `json:"memory_from,omitempty"` // "events" or "timeline"
	Decision   *Decision         `json:"decision,omitempty"`
	Extra      map[string]string `json:"-"`
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

// Signal is a signal gpuguard received.
type Signal struct {
	Time      time.Time `json:"time"`
	Signal    string    `json:"signal"`
	Forwarded any       `json:"forwarded,omitempty"`
}

// readEvents parses events.jsonl. Unknown types and fields are ignored; a
// line that is not a JSON object is listed in Problems.
func readEvents(r io.Reader, runDir string) (*Run, error) {
	run := &Run{RunDir: runDir}
	byN := map[int]*Attempt{}
	attempt := func(n int) *Attempt {
		if a := byN[n]; a != nil {
			return a
		}
		a := &Attempt{N: n}
		byN[n] = a
		run.Attempts = append(run.Attempts, a)
		return a
	}
	br := bufio.NewReaderSize(r, 64<<10)
	lineNo, good := 0, 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			lineNo++
			if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
				if perr := applyEvent(run, trimmed, attempt); perr != nil {
					run.Problems = append(run.Problems, fmt.Sprintf("events.jsonl line %d: %v", lineNo, perr))
				} else {
					good++
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return run, fmt.Errorf("reading events.jsonl: %w", err)
		}
	}
	if good == 0 {
		return run, fmt.Errorf("events.jsonl holds no event (%d lines)", lineNo)
	}
	sort.SliceStable(run.Attempts, func(i, j int) bool { return run.Attempts[i].N < run.Attempts[j].N })
	return run, nil
}

// applyEvent folds one event line into the run.
func applyEvent(run *Run, line []byte, attempt func(int) *Attempt) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Errorf("not a JSON object (%v)", shorten(err.Error(), 80))
	}
	typ := jsonString(m["type"])
	if typ == "" {
		return fmt.Errorf("no \"type\" field")
	}
	var t time.Time
	if s := jsonString(m["time"]); s != "" {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return fmt.Errorf("time %q is not RFC 3339", s)
		}
	}
	tp := func() *time.Time {
		if t.IsZero() {
			return nil
		}
		tt := t
		return &tt
	}
	n, hasN := jsonInt(m["attempt"])
	switch typ {
	case "run_start":
		run.Start = tp()
		run.Argv = jsonStrings(m["argv"])
		run.Policy = jsonText(m["policy"])
		run.Version = jsonString(m["version"])
		if d := jsonString(m["run_dir"]); d != "" && run.RunDir == "" {
			run.RunDir = d
		}
	case "run_end":
		run.End = tp()
		if c, ok := jsonInt(m["exit_code"]); ok {
			c := int(c)
			run.ExitCode = &c
		}
	case "signal":
		run.Signals = append(run.Signals, Signal{Time: t, Signal: jsonText(m["signal"]), Forwarded: jsonAny(m["forwarded"])})
	case "attempt_start":
		if !hasN {
			return fmt.Errorf("attempt_start without an attempt number")
		}
		a := attempt(int(n))
		a.Start = tp()
		a.Argv = jsonStrings(m["argv"])
		a.EnvChanges = jsonStrings(m["env_changes"])
		if k, ok := jsonAny(m["knobs"]).(map[string]any); ok {
			a.Knobs = k
		}
		a.Checkpoint = jsonText(m["checkpoint"])
		if p, ok := jsonInt(m["pid"]); ok {
			a.PID = int(p)
		}
	case "attempt_end":
		if !hasN {
			return fmt.Errorf("attempt_end without an attempt number")
		}
		a := attempt(int(n))
		a.End = tp()
		if c, ok := jsonInt(m["exit_code"]); ok {
			c := int(c)
			a.ExitCode = &c
		}
		a.Signal = jsonText(m["signal"])
		if d, ok := jsonFloat(m["duration_s"]); ok {
			a.DurationS = &d
		}
		if s, ok := jsonInt(m["last_step"]); ok {
			a.LastStep = &s
		}
		if raw, ok := m["verdict"]; ok && string(raw) != "null" {
			var v classify.Verdict
			if err := json.Unmarshal(raw, &v); err == nil {
				a.Verdict = &v
			}
		}
	case "phase":
		if hasN {
			pm := PhaseMark{Time: t, Phase: jsonString(m["phase"])}
			if l, ok := jsonInt(m["line"]); ok {
				pm.Line = int(l)
			}
			if s, ok := jsonInt(m["step"]); ok {
				pm.Step = &s
			}
			attempt(int(n)).Phases = append(attempt(int(n)).Phases, pm)
		}
	case "failure":
		if hasN {
			f := Failure{Time: t, Kind: jsonString(m["kind"]), Text: jsonString(m["text"])}
			if l, ok := jsonInt(m["line"]); ok {
				f.Line = int(l)
			}
			attempt(int(n)).Failures = append(attempt(int(n)).Failures, f)
		}
	case "warning":
		if hasN {
			attempt(int(n)).Warnings = append(attempt(int(n)).Warnings, Note{Time: t, Message: jsonText(m["message"])})
		}
	case "memory":
		if hasN {
			var s memory.Summary
			if err := json.Unmarshal(m["summary"], &s); err != nil {
				return fmt.Errorf("memory summary: %v", shorten(err.Error(), 80))
			}
			a := attempt(int(n))
			a.Memory, a.MemoryFrom = &s, "events"
			if run.origin.IsZero() && !s.Origin.IsZero() {
				run.origin = s.Origin
			}
		}
	case "decision":
		if hasN {
			d := &Decision{Time: t, Verb: jsonString(m["verb"]), Rule: jsonText(m["rule"]), Reason: jsonString(m["reason"]),
				Checkpoint: jsonText(m["checkpoint"])}
			if s, ok := jsonInt(m["step"]); ok {
				d.Step = &s
			}
			if b, ok := jsonFloat(m["backoff_s"]); ok {
				d.BackoffS = &b
			}
			if cs, ok := jsonAny(m["changes"]).([]any); ok {
				for _, c := range cs {
					if cm, ok := c.(map[string]any); ok {
						name, _ := cm["name"].(string)
						d.Changes = append(d.Changes, Change{Name: name, Old: cm["old"], New: cm["new"]})
					}
				}
			}
			attempt(int(n)).Decision = d
		}
	}
	return nil
}

// Lenient field readers: a field of an unexpected type reads as absent.

func jsonString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// jsonText renders a string as itself and anything else as compact JSON
// ("" for absent or null).
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if s := jsonString(raw); s != "" {
		return s
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return ""
	}
	if b.String() == `""` {
		return ""
	}
	return b.String()
}

func jsonInt(raw json.RawMessage) (int64, bool) {
	f, ok := jsonFloat(raw)
	if !ok || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

func jsonFloat(raw json.RawMessage) (float64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return f, true
	}
	// A number written as a string ("42").
	if s := jsonString(raw); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			return v, true
		}
	}
	return 0, false
}

func jsonStrings(raw json.RawMessage) []string {
	var ss []string
	if json.Unmarshal(raw, &ss) != nil {
		return nil
	}
	return ss
}

func jsonAny(raw json.RawMessage) any {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return v
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
