package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// writeText prints the report for people.
func writeText(w io.Writer, run *Run) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("Run %s", run.RunDir)
	if len(run.Argv) > 0 {
		p("  command:  %s", shellJoin(run.Argv))
	}
	if run.Policy != "" || run.Version != "" {
		line := "  policy:   " + orDash(run.Policy)
		if run.Version != "" {
			line += "    gpuguard " + run.Version
		}
		p("%s", line)
	}
	var when []string
	if run.Start != nil {
		when = append(when, "started "+run.Start.Local().Format("2006-01-02 15:04:05"))
	}
	if run.End != nil {
		e := "ended " + run.End.Local().Format("2006-01-02 15:04:05")
		if run.Start != nil {
			e += " (" + fmtDuration(run.End.Sub(*run.Start)) + ")"
		}
		when = append(when, e)
	}
	if len(when) > 0 {
		p("  %s", strings.Join(when, ", "))
	}
	outcome := fmt.Sprintf("%d attempt(s)", len(run.Attempts))
	if run.ExitCode != nil {
		p("  exit status %d after %s", *run.ExitCode, outcome)
	} else {
		p("  no run_end event: the run is still going, or gpuguard itself was killed (%s so far)", outcome)
	}
	for _, s := range run.Signals {
		p("  signal %s at %s%s", s.Signal, s.Time.Local().Format("15:04:05"), signalAction(s))
	}
	// Why the GPU was not sampled is said once, for the run, not once per
	// attempt; an attempt whose reason differs says its own.
	gpuNote := ""
	for _, a := range run.Attempts {
		if a.Memory != nil && a.Memory.GPUUnavailable != "" {
			gpuNote = a.Memory.GPUUnavailable
			p("  GPU not sampled: %s", gpuNote)
			break
		}
	}
	for _, a := range run.Attempts {
		p("")
		writeAttempt(w, a, gpuNote)
	}
}

// writeAttempt writes attempt a; gpuNote is why the GPU was not sampled,
// as the run's header already said.
func writeAttempt(w io.Writer, a *Attempt, gpuNote string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	head := fmt.Sprintf("Attempt %d", a.N)
	if a.Start != nil {
		head += "  " + a.Start.Local().Format("15:04:05")
		if a.End != nil {
			head += " → " + a.End.Local().Format("15:04:05")
		}
	}
	switch {
	case a.DurationS != nil:
		head += fmt.Sprintf("  (%s)", fmtDuration(time.Duration(*a.DurationS*float64(time.Second))))
	case a.Start != nil && a.End != nil:
		head += fmt.Sprintf("  (%s)", fmtDuration(a.End.Sub(*a.Start)))
	}
	switch {
	case a.Signal != "":
		head += "  killed by " + a.Signal
		if a.ExitCode != nil {
			head += fmt.Sprintf(" (exit %d)", *a.ExitCode)
		}
	case a.ExitCode != nil:
		head += fmt.Sprintf("  exit %d", *a.ExitCode)
	case a.End == nil:
		head += "  (no end recorded)"
	}
	p("%s", head)
	if len(a.Knobs) > 0 {
		p("  settings:   %s", knobsText(a.Knobs))
	}
	if len(a.EnvChanges) > 0 {
		p("  env:        %s", strings.Join(a.EnvChanges, " "))
	}
	if len(a.Argv) > 0 {
		p("  command:    %s", shellJoin(a.Argv))
	}
	if a.Checkpoint != "" {
		p("  resumed:    from %s", a.Checkpoint)
	}
	if a.LastStep != nil {
		p("  last step:  %d", *a.LastStep)
	}
	if a.Site != nil {
		p("  oom site:   %s", a.Site.Describe())
	}
	if v := a.Verdict; v != nil {
		p("  verdict:    %s", verdictText(v))
		if v.Diagnosis != "" {
			p("              %s", v.Diagnosis)
		}
	} else {
		for _, f := range a.Failures {
			p("  failure:    %s at line %d: %s", f.Kind, f.Line, shorten(f.Text, 160))
		}
	}
	if a.Memory != nil {
		writeMemory(w, a.Memory, a.MemoryFrom, gpuNote)
	}
	for _, n := range a.Warnings {
		p("  warning:    %s", n.Message)
	}
	if d := a.Decision; d != nil {
		p("  decision:   %s", decisionText(d))
	}
}

func writeMemory(w io.Writer, s *record.MemorySummary, from, gpuNote string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	src := ""
	if from == "timeline" {
		src = " (from timeline.csv)"
	}
	p("  memory peaks%s, %d samples:", src, s.Samples)
	if s.GPUUnavailable != "" && s.GPUUnavailable != gpuNote {
		p("    GPU not sampled: %s", s.GPUUnavailable)
	}
	for _, ps := range s.Phases {
		// Samples taken before the job named a phase (or in a job that
		// names none): the whole attempt when they are all there is.
		name := string(ps.Phase)
		if name == "" {
			name = "other"
			if len(s.Phases) == 1 {
				name = "attempt"
			}
		}
		for _, g := range ps.GPU {
			line := fmt.Sprintf("    %-7s %-10s %s of %s  %5.1f%%", name, g.ID, humanize.Bytes(g.PeakBytes),
				humanize.Bytes(g.CapacityBytes), pct(g.PeakBytes, g.CapacityBytes))
			line += "  headroom " + humanize.Bytes(g.HeadroomBytes)
			if g.PeakJobBytes > 0 {
				line += "  (job's processes " + humanize.Bytes(g.PeakJobBytes) + ")"
			}
			p("%s", line)
		}
		if ps.HostPeakBytes > 0 {
			line := fmt.Sprintf("    %-7s %-10s %s of %s  %5.1f%%", name, "host", humanize.Bytes(ps.HostPeakBytes),
				humanize.Bytes(ps.HostLimitBytes), pct(ps.HostPeakBytes, ps.HostLimitBytes))
			if ps.MaxWorkers > 0 {
				line += fmt.Sprintf("  (%d DataLoader-like workers)", ps.MaxWorkers)
			}
			p("%s", line)
		}
		if c := ps.HostCeiling; c != "" && ps.HostCeilingBytes > 0 {
			p("    %-7s %-10s %s of %s  %5.1f%%  (the job's ceiling: %s)", name, "ceiling", humanize.Bytes(ps.HostCeilingPeakBytes),
				humanize.Bytes(ps.HostCeilingBytes), pct(ps.HostCeilingPeakBytes, ps.HostCeilingBytes), c)
		}
		if ps.CgroupLimitBytes > 0 {
			p("    %-7s %-10s %s of %s  %5.1f%%", name, "cgroup", humanize.Bytes(ps.CgroupPeakBytes),
				humanize.Bytes(ps.CgroupLimitBytes), pct(ps.CgroupPeakBytes, ps.CgroupLimitBytes))
		}
	}
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func verdictText(v *classify.Verdict) string {
	if v.Kind == classify.KindNone || v.Kind == "" {
		return "no failure"
	}
	s := string(v.Kind)
	if v.Phase != "" {
		s += " in " + string(v.Phase)
	}
	if v.Reason != "" {
		s += ": " + v.Reason
	}
	if v.Rank != nil {
		s += fmt.Sprintf(" (rank %d)", *v.Rank)
	}
	if v.Line > 0 {
		s += fmt.Sprintf(" at line %d", v.Line)
	}
	if v.OOM != nil && v.OOM.RequestedBytes != nil {
		s += ", tried to allocate " + humanize.Size(*v.OOM.RequestedBytes)
		if v.OOM.FreeBytes != nil {
			s += " with " + humanize.Size(*v.OOM.FreeBytes) + " free"
		}
	}
	if v.Fragmentation {
		s += "; fragmented"
	}
	return s
}

func decisionText(d *Decision) string {
	s := d.Verb
	if d.Rule != "" {
		s += " (rule " + d.Rule
		if d.Step != nil {
			s += fmt.Sprintf(", step %d", *d.Step)
		}
		s += ")"
	}
	var ch []string
	for _, c := range d.Changes {
		ch = append(ch, fmt.Sprintf("%s %v → %v", c.Name, valueText(c.Old), valueText(c.New)))
	}
	if len(ch) > 0 {
		s += ": " + strings.Join(ch, ", ")
	}
	if d.Reason != "" {
		s += "; " + d.Reason
	}
	if d.BackoffS != nil && *d.BackoffS > 0 {
		s += fmt.Sprintf("; after %s", fmtDuration(time.Duration(*d.BackoffS*float64(time.Second))))
	}
	if d.Checkpoint != "" {
		s += "; from " + d.Checkpoint
	}
	return s
}

func valueText(v any) string {
	switch x := v.(type) {
	case nil:
		return "(unset)"
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprintf("%d", int64(x))
		}
		return fmt.Sprintf("%g", x)
	case string:
		return x
	}
	return fmt.Sprintf("%v", v)
}

func knobsText(k map[string]any) string {
	names := make([]string, 0, len(k))
	for n := range k {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + valueText(k[n])
	}
	return strings.Join(parts, " ")
}

// signalAction says what became of a signal.
func signalAction(s Signal) string {
	switch s.Action {
	case "":
		return ""
	case record.SignalForwarded:
		return " (forwarded to the job)"
	case record.SignalKilled:
		return " (second signal: the job was killed)"
	case record.SignalNoJob:
		return " (no job was running)"
	}
	return " (" + s.Action + ")"
}

// shellJoin quotes words that need it, for display.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`!*?[]{}();<>|&~#") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
