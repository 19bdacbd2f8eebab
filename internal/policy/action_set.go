package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// setAction is `set: {knob: value, ...}`: it gives knobs fixed values, and
// acts unless every knob already has its value.
type setAction struct {
	sets []setting
}

func parseSet(w *walker, in actionInput) action {
	a := &setAction{}
	for _, f := range w.mapping(in.verb.val, in.what+": set", nil...) {
		name := w.knobRef(f.key, in.what+": set", in.p)
		if f.val.Kind != yaml.ScalarNode {
			w.at(f.val, "%s: set %s to a single value, not %s", in.what, f.name, kindName(f.val))
		}
		a.sets = append(a.sets, setting{name: name, value: nodeValue(f.val)})
	}
	return a
}

func (a *setAction) verb() string           { return "set" }
func (a *setAction) numericKnobs() []string { return nil }
func (a *setAction) envVars() []string      { return nil }

func (a *setAction) apply(p *Policy, vals Values, _ *Outcome) ([]Change, string) {
	var out []Change
	var same []string
	for _, s := range a.sets {
		k := p.knobByName[s.name]
		cur, had := vals[s.name]
		if had && cur == s.value {
			same = append(same, fmt.Sprintf("%s is already %s", s.name, k.show(cur, true)))
			continue
		}
		vals[s.name] = s.value
		out = append(out, Change{Knob: s.name, Old: k.show(cur, had), New: k.show(s.value, true)})
	}
	if len(out) == 0 {
		return nil, strings.Join(same, ", ")
	}
	return out, ""
}
