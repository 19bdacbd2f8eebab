package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpuguard/gpuguard/internal/allocconf"
)

// envAction is `set_env: {VAR: value}` or `merge_env: {VAR: "key:value"}`.
//
// set_env gives variables fixed values (null unsets one), and acts unless
// every variable already has its value. merge_env merges comma-separated
// key:value options into a variable, as PyTorch reads
// PYTORCH_CUDA_ALLOC_CONF: the user's options keep their order, an option of
// the same key is replaced where it stands, new ones are appended; it acts
// unless every option is already there with its value. The values live in
// Values under EnvKey(VAR); Render applies them, and keeps the other
// allocator variables in step (syncAllocatorVars).
type envAction struct {
	merge bool
	sets  []setting
}

func parseSetEnv(w *walker, in actionInput) action   { return parseEnv(w, in, false) }
func parseMergeEnv(w *walker, in actionInput) action { return parseEnv(w, in, true) }

func parseEnv(w *walker, in actionInput, merge bool) action {
	a := &envAction{merge: merge}
	what, verb := in.what, a.verb()
	for _, f := range w.mapping(in.verb.val, what+": "+verb, nil...) {
		if strings.ContainsAny(f.name, "= \t") || f.name == "" {
			w.at(f.key, "%s: %q is not an environment variable name", what, f.name)
		}
		if k := knobByEnv(in.p, f.name); k != nil {
			w.at(f.key, "%s: %s is knob %s's variable; change it with `set: {%s: VALUE}` so its value is tracked once", what, f.name, k.name, k.name)
		}
		val := nodeValue(f.val)
		if f.val.Kind != yaml.ScalarNode {
			w.at(f.val, "%s: %s must be a single value, not %s", what, f.name, kindName(f.val))
		} else if merge {
			w.checkMergeOptions(f, val, what)
		}
		a.sets = append(a.sets, setting{name: f.name, value: val})
	}
	return a
}

// checkMergeOptions checks the options merge_env gives a variable.
func (w *walker) checkMergeOptions(f field, val Value, what string) {
	opts := allocconf.Split(val.Text)
	if val.Null || len(opts) == 0 {
		w.at(f.val, "%s: merge_env %s needs options such as \"expandable_segments:True\"", what, f.name)
	}
	bad := false
	for _, o := range opts {
		if o.Key == "" || o.NoValue {
			w.at(f.val, "%s: merge_env %s: option %q is not key:value", what, f.name, o)
			bad = true
		}
	}
	if bad || !isAllocatorVar(f.name) {
		return
	}
	// The options are written as they are: PyTorch must read them the same
	// way.
	for _, o := range opts {
		if err := o.Check(); err != nil {
			w.at(f.val, "%s: merge_env %s: %s", what, f.name, err)
			return
		}
	}
}

func knobByEnv(p *Policy, name string) *knob {
	for _, k := range p.knobs {
		if k.where == whereEnv && k.env == name {
			return k
		}
	}
	return nil
}

func (a *envAction) verb() string {
	if a.merge {
		return "merge_env"
	}
	return "set_env"
}

func (a *envAction) numericKnobs() []string { return nil }

func (a *envAction) envVars() []string {
	out := make([]string, len(a.sets))
	for i, s := range a.sets {
		out[i] = s.name
	}
	return out
}

func (a *envAction) apply(p *Policy, vals Values, _ *Outcome) ([]Change, string) {
	var out []Change
	var same []string
	for _, s := range a.sets {
		cur, had := vals[EnvKey(s.name)]
		had = had && !cur.Null
		next := s.value
		if a.merge {
			have, add := allocconf.Split(cur.Text), allocconf.Split(s.value.Text)
			if had && hasAll(have, add) {
				same = append(same, fmt.Sprintf("%s already has %s", s.name, s.value.Text))
				continue
			}
			next = Value{Text: allocconf.Merge(have, add).String()}
		} else if (had && !next.Null && cur.Text == next.Text) || (!had && next.Null) {
			same = append(same, fmt.Sprintf("%s is already %s", s.name, showEnv(next, !next.Null)))
			continue
		}
		vals[EnvKey(s.name)] = next
		out = append(out, Change{Env: s.name, Old: showEnv(cur, had), New: showEnv(next, !next.Null)})
	}
	if len(out) == 0 {
		return nil, strings.Join(same, ", ")
	}
	return out, ""
}

// hasAll reports whether every option of add is in have, with its value.
func hasAll(have, add allocconf.List) bool {
	for _, o := range add {
		if !have.Has(o) {
			return false
		}
	}
	return true
}

func showEnv(v Value, had bool) string {
	if !had {
		return "unset"
	}
	return v.Text
}
