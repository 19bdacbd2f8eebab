package policy

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// actionDef is one kind of action: what the policy file's reader needs to
// know about its verb.
//
// An action is one change a rule's step makes to the job's settings:
// `halve: batch_size`, `set_env: {NCCL_DEBUG: INFO}`. Each is defined in one
// place, its entry in the actions table below, whose parse function and
// action type sit in the action's own file (action_scale.go holds halve,
// scale and cut_workers, which share their arithmetic). An entry says:
//
//   - verb: the action's key in a step. The table's order is the order in
//     which messages list the actions ("actions: set, halve, …").
//   - options: the keys the action takes beside its verb ({halve: bs, min:
//     8}). optionParsers reads each one; the rest of the package never looks
//     at option names.
//   - parse: reads the verb's value, reports problems with w.at (located at
//     file:line:col), and returns the action. It runs once every knob is
//     known.
//
// The action it returns says the rest, as the methods of the action
// interface: what applying it changes (or why it cannot act), which knobs it
// reads as numbers and which environment variables it sets. Decide, Preview,
// Start and Render, and Parse's checks across the whole file, ask those
// methods and never the verb.
//
// To add an action:
//
//  1. write its type (the action methods) and its parse function in a new
//     action_VERB.go;
//  2. add its entry to actions, with the options it takes (a new option is
//     one more entry in optionParsers and a field of actionOptions);
//  3. add cases to actionCases in decide_test.go: what it changes, and why
//     it cannot act; its error messages go in TestParseErrors;
//  4. add its row to the Actions table of docs/policy.md, for users.
//
// TestActionTable fails when an entry lacks its parse, names an option that
// optionParsers cannot read, has no case in actionCases, or no row in
// docs/policy.md.
type actionDef struct {
	verb    string
	options []string // keys allowed beside the verb, in the order messages list them
	parse   func(w *walker, in actionInput) action
}

// actions is every action a step can take.
var actions = []actionDef{
	{verb: "set", parse: parseSet},
	{verb: "halve", options: []string{"min", "max", "round", "multiple_of", "compensate"}, parse: parseHalve},
	{verb: "scale", options: []string{"by", "min", "max", "round", "multiple_of", "compensate"}, parse: parseScale},
	{verb: "cut_workers", options: []string{"min"}, parse: parseCutWorkers},
	{verb: "fit", options: []string{"min", "max", "multiple_of", "compensate", "headroom", "scaling"}, parse: parseFit},
	{verb: "set_env", parse: parseSetEnv},
	{verb: "merge_env", parse: parseMergeEnv},
	{verb: "retry", parse: parseRetry},
	{verb: "raise_slurm_mem", parse: parseRaiseSlurmMem},
}

// action is one action of a step, as its actionDef's parse read it.
type action interface {
	// verb is the action's key in the policy file, for messages.
	verb() string
	// apply applies the action to vals, changing them in place, and returns
	// what it changed; or, when it cannot act (a knob at its floor, a value
	// that is already what it would write), why, with vals unchanged. out
	// is the attempt that failed (nil for a dry run's preview): fit reads
	// its OOM figures and peaks.
	apply(p *Policy, vals Values, out *Outcome) ([]Change, string)
	// numericKnobs are the knobs whose values the action reads as numbers.
	// Start requires each to have a value (unless it is optional) that is a
	// number, Parse requires a default to be a number, and Preview shows
	// where repeating the action leaves them.
	numericKnobs() []string
	// envVars are the environment variables the action sets. Start reads
	// their values from the job; Render writes them.
	envVars() []string
}

// actionInput is one action's mapping in the policy file, as an actionDef's
// parse gets it.
type actionInput struct {
	what   string        // the step, to begin messages with: "rule r step 2"
	verb   field         // the verb's key and value: {halve: batch_size}
	fields []field       // every key of the mapping, the verb's included
	opts   actionOptions // the options given, read by optionParsers
	p      *Policy       // every knob is defined by now
}

// has reports whether the mapping gives option.
func (in actionInput) has(option string) bool {
	return slices.ContainsFunc(in.fields, func(f field) bool { return f.name == option })
}

// actionOptions are the options an action may take beside its verb.
type actionOptions struct {
	by         float64  // scale's factor
	min, max   *float64 // bounds of a scaled value
	round      string   // down (the default), up or nearest
	multipleOf int64
	compensate string   // the knob whose product with the scaled one is kept
	headroom   *float64 // fit: the fraction of GPU memory kept free (nil: the default)
	scaling    string   // fit: linear (the default) or quadratic
}

// optionParsers read each option an actionDef may list.
var optionParsers = map[string]func(w *walker, f field, what string, p *Policy, o *actionOptions){
	"by": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		o.by = w.float(f.val, what+": by")
		if o.by <= 0 || o.by == 1 {
			w.at(f.val, "%s: by must be a positive factor other than 1 (0.5 halves, 2 doubles)", what)
		}
	},
	"min": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		v := w.float(f.val, what+": min")
		o.min = &v
	},
	"max": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		v := w.float(f.val, what+": max")
		o.max = &v
	},
	"round": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		o.round, _ = w.scalar(f.val, what+": round")
		if !slices.Contains([]string{"down", "up", "nearest"}, o.round) {
			w.at(f.val, "%s: round must be down, up or nearest, not %q", what, o.round)
		}
	},
	"multiple_of": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		o.multipleOf = int64(w.integer(f.val, what+": multiple_of", 1))
	},
	"compensate": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		o.compensate = w.knobRef(f.val, what+": compensate", p)
	},
	"headroom": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		w.readHeadroom(f, what, o)
	},
	"scaling": func(w *walker, f field, what string, p *Policy, o *actionOptions) {
		o.scaling, _ = w.scalar(f.val, what+": scaling")
		if o.scaling != "linear" && o.scaling != "quadratic" {
			w.at(f.val, "%s: scaling must be linear (memory grows with the value: a batch size) or quadratic (with its square: a crop size), not %q", what, o.scaling)
		}
	},
}

func actionVerbs() []string {
	out := make([]string, len(actions))
	for i, d := range actions {
		out[i] = d.verb
	}
	return out
}

func actionByVerb(verb string) *actionDef {
	for i := range actions {
		if actions[i].verb == verb {
			return &actions[i]
		}
	}
	return nil
}

// action reads one action from the fields of its mapping: the one key that
// is a verb, then the options its actionDef allows, then the verb's value
// with the actionDef's parse.
func (w *walker) action(fields []field, n *yaml.Node, what string, p *Policy) (action, bool) {
	var def *actionDef
	var verb field
	for _, f := range fields {
		d := actionByVerb(f.name)
		if d == nil {
			continue
		}
		if def != nil {
			w.at(f.key, "%s: one action per step entry (%s and %s); list several under do:", what, def.verb, f.name)
			return nil, false
		}
		def, verb = d, f
	}
	if def == nil {
		key, name := n, ""
		for _, f := range fields {
			if _, isOption := optionParsers[f.name]; !isOption {
				key, name = f.key, f.name
				break
			}
		}
		verbs := actionVerbs()
		if name != "" {
			w.at(key, "%s: unknown action %q%s; actions: %s", what, name, didYouMean(name, verbs), strings.Join(verbs, ", "))
		} else {
			w.at(key, "%s: no action; actions: %s", what, strings.Join(verbs, ", "))
		}
		return nil, false
	}
	in := actionInput{what: what, verb: verb, fields: fields, p: p}
	for _, f := range fields {
		if f.name == def.verb {
			continue
		}
		if !slices.Contains(def.options, f.name) {
			if len(def.options) == 0 {
				w.at(f.key, "%s: %s takes no options, got %q", what, def.verb, f.name)
			} else {
				w.at(f.key, "%s: %s has no option %q%s; options: %s", what, def.verb, f.name, didYouMean(f.name, def.options), strings.Join(def.options, ", "))
			}
			continue
		}
		optionParsers[f.name](w, f, what, p, &in.opts)
	}
	return def.parse(w, in), true
}

// setting is one name and the value an action gives it: a knob for set, an
// environment variable for set_env and merge_env.
type setting struct {
	name  string
	value Value
}
