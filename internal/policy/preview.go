package policy

import (
	"fmt"
	"strings"
)

// previewRepeats bounds how many firings of one step Preview simulates.
const previewRepeats = 64

// Preview says, for a dry run, what each rule step would change starting
// from vals: one line per step, in the order they are tried. Steps are
// simulated in sequence, as repeated failures of the same rule would meet
// them: each step is repeated until it can no longer act, and the next step
// starts from the values that leaves.
func (p *Policy) Preview(vals Values) []string {
	var lines []string
	for _, r := range p.rules {
		cur := vals.clone()
		for i, s := range r.steps {
			head := fmt.Sprintf("rule %s step %d [%s]: ", r.name, i+1, r.when)
			next, changes, why := p.applyStep(s, cur, nil)
			if why != "" {
				if d := describeRaises(s); d != "" {
					// The request is known only in the job: say what the
					// step does with it.
					lines = append(lines, head+d)
					continue
				}
				lines = append(lines, head+"cannot act: "+why)
				continue
			}
			first := describeChanges(changes)
			n := 1
			for limit := previewRepeats; limit > 0 && (s.times == 0 || n < s.times); limit-- {
				again, _, why := p.applyStep(s, next, nil)
				if why != "" {
					break
				}
				next = again
				n++
			}
			line := head + first
			if n > 1 {
				line += fmt.Sprintf("; repeats on later failures, %d firings in all", n)
				if touched := p.showTouched(s, next); touched != "" {
					line += ", ending at " + touched
				}
			}
			for _, a := range s.actions {
				if f, ok := a.(*fitAction); ok {
					line += fmt.Sprintf(" (fit sets %s from the OOM message's figures; shown: halving, what it does without them)", f.knob)
				}
			}
			lines = append(lines, line)
			cur = next
		}
	}
	return lines
}

func describeChanges(cs []Change) string {
	if len(cs) == 0 {
		return "relaunch unchanged"
	}
	var b strings.Builder
	for i, c := range cs {
		switch {
		case c.Compensation:
			fmt.Fprintf(&b, " (%s)", c)
		case i > 0:
			fmt.Fprintf(&b, ", %s", c)
		default:
			b.WriteString(c.String())
		}
	}
	return b.String()
}

// showTouched lists the values of the knobs a step's scaling actions change.
func (p *Policy) showTouched(s step, vals Values) string {
	var parts []string
	for _, a := range s.actions {
		for _, name := range a.numericKnobs() {
			v, ok := vals[name]
			parts = append(parts, name+" "+p.knobByName[name].show(v, ok))
		}
	}
	return strings.Join(parts, ", ")
}

// String is the rule's condition for people: "gpu_oom; phase val".
func (m match) String() string {
	var parts []string
	if m.kinds != nil {
		ks := make([]string, len(m.kinds))
		for i, k := range m.kinds {
			ks[i] = string(k)
		}
		parts = append(parts, strings.Join(ks, "|"))
	} else {
		parts = append(parts, "any failure")
	}
	if m.phases != nil {
		ps := make([]string, len(m.phases))
		for i, ph := range m.phases {
			ps[i] = string(ph)
			if ph == "" {
				ps[i] = "unknown"
			}
		}
		parts = append(parts, "phase "+strings.Join(ps, "|"))
	}
	if m.fragmentation != nil {
		parts = append(parts, fmt.Sprintf("fragmentation %t", *m.fragmentation))
	}
	if m.otherProcesses != nil {
		parts = append(parts, fmt.Sprintf("other_processes %t", *m.otherProcesses))
	}
	if m.build != nil {
		parts = append(parts, fmt.Sprintf("build %t", *m.build))
	}
	if m.ranks != nil {
		parts = append(parts, fmt.Sprintf("rank %v", m.ranks))
	}
	if m.attempt != nil {
		parts = append(parts, m.attempt.String())
	}
	for _, pk := range m.peaks {
		parts = append(parts, fmt.Sprintf("%s peak > %g", pk.phase, pk.over))
	}
	return strings.Join(parts, "; ")
}
