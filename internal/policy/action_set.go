package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// setAction is `set: {knob: value, ...}`: it gives knobs fixed values, and
// acts unless every knob already has its value.
//
// A value that names another knob in braces, `{val_crop_size:
// "{train_crop_size}"}`, seeds the knob from that knob's current value: it
// acts only while the knob is unset (or null), so that it never overrides a
// value the command gives, and only when the other knob has a value. A
// starter policy uses it for a validation crop the command leaves unset,
// seeded from the training crop the command does give.
type setAction struct {
	sets []setting
	from map[string]string // knob → the knob it is seeded from
}

func parseSet(w *walker, in actionInput) action {
	a := &setAction{}
	for _, f := range w.mapping(in.verb.val, in.what+": set", nil...) {
		name := w.knobRef(f.key, in.what+": set", in.p)
		if f.val.Kind != yaml.ScalarNode {
			w.at(f.val, "%s: set %s to a single value, not %s", in.what, f.name, kindName(f.val))
		}
		v := nodeValue(f.val)
		if ref, ok := knobReference(v); ok {
			if _, defined := in.p.knobByName[ref]; !defined {
				w.at(f.val, "%s: set %s from unknown knob %q%s; knobs: %s", in.what, f.name, ref, didYouMean(ref, in.p.Knobs()), orNone(in.p.Knobs()))
			} else if ref == name {
				w.at(f.val, "%s: set %s from itself", in.what, f.name)
			}
			if a.from == nil {
				a.from = map[string]string{}
			}
			a.from[name] = ref
		}
		a.sets = append(a.sets, setting{name: name, value: v})
	}
	return a
}

// knobReference reads "{name}", a value that names a knob.
func knobReference(v Value) (string, bool) {
	if v.Null || len(v.Text) < 3 || v.Text[0] != '{' || v.Text[len(v.Text)-1] != '}' {
		return "", false
	}
	name := v.Text[1 : len(v.Text)-1]
	if strings.ContainsAny(name, "{} ") {
		return "", false
	}
	return name, true
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
		if ref, ok := a.from[s.name]; ok {
			if had && !cur.Null {
				same = append(same, fmt.Sprintf("%s is already %s (it is seeded from %s only while unset)", s.name, k.show(cur, true), ref))
				continue
			}
			src, ok := vals[ref]
			if !ok || src.Null {
				same = append(same, fmt.Sprintf("%s has no value to seed %s from (put it on the command, or give %s a value with a set step)", ref, s.name, s.name))
				continue
			}
			vals[s.name] = Value{Text: src.Text}
			out = append(out, Change{Knob: s.name, Old: k.show(cur, had), New: src.Text, Note: fmt.Sprintf("%s seeded from %s", s.name, ref)})
			continue
		}
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
