package policy

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuguard/gpuguard/internal/allocconf"
	"github.com/gpuguard/gpuguard/internal/envinject"
	"github.com/gpuguard/gpuguard/internal/envlist"
)

// Job is the command as the user gave it.
type Job struct {
	Argv []string // the command and its arguments; Argv[0] is the program
	Env  []string // its environment, KEY=VALUE
	// Dir is the job's working directory. Relative config paths in Argv are
	// read relative to it. It should be absolute: relative paths inside a
	// derived config are only rewritten when it is.
	Dir string
	// Exists reports whether a file or directory exists at an absolute path.
	// Render uses it to decide which relative paths inside a derived config
	// to make absolute (see relocator). When nil, none are rewritten and
	// Render says so in Launch.Notes.
	Exists func(path string) bool
}

// FileReader returns a file's contents, like os.ReadFile. The policy reads
// the job's YAML config files through it and never writes them.
type FileReader func(path string) ([]byte, error)

// Launch is one attempt's command, as Render computed it.
type Launch struct {
	Argv  []string      // the command, with knob flags and words rewritten or appended
	Env   []string      // the child's complete environment: Job.Env with knob variables and env actions applied
	Files []DerivedFile // derived configs the supervisor must write before starting the command
	Notes []string      // human lines: how this command differs from the user's
}

// DerivedFile is a copy of one of the job's config files with knob values
// changed. The user's file (Source) is never written: the command is
// pointed at Path instead.
type DerivedFile struct {
	Path   string // inside the derivedDir given to Render
	Data   []byte
	Source string // the user's file it was derived from
}

// knobRead is what reading one knob found.
type knobRead struct {
	val     Value
	found   bool   // the command (or config, or env) sets it
	has     bool   // found, or a default applies
	cfgPath string // whereYAML: the config file, as resolved against Job.Dir
	cfgOcc  *occurrence
	err     error
}

// read finds each knob's value where it lives in job, falling back on the
// policy's default.
func (p *Policy) read(job Job, readFile FileReader) map[string]knobRead {
	out := make(map[string]knobRead, len(p.knobs))
	docs := map[string]*configDoc{}
	docErr := map[string]error{}
	for _, k := range p.knobs {
		var r knobRead
		switch k.where {
		case whereFlag:
			if occ := findFlag(job.Argv, k.flags); len(occ) > 0 {
				r.val, r.found = Value{Text: occ[len(occ)-1].value}, true
			}
		case whereArg:
			if occ := findArg(job.Argv, k.arg); len(occ) > 0 {
				r.val, r.found = Value{Text: occ[len(occ)-1].value}, true
			}
		case whereEnv:
			if v, ok := envlist.Lookup(job.Env, k.env); ok {
				r.val, r.found = Value{Text: v}, true
			}
		case whereYAML:
			occ := configOccurrence(job.Argv, k)
			if occ == nil {
				// No config file in the command: nothing can be changed, so a
				// default would be a value the job does not see.
				out[k.name] = r
				continue
			}
			r.cfgOcc = occ
			r.cfgPath = occ.value
			if !filepath.IsAbs(r.cfgPath) && job.Dir != "" {
				r.cfgPath = filepath.Join(job.Dir, r.cfgPath)
			}
			d, seen := docs[r.cfgPath]
			if !seen && docErr[r.cfgPath] == nil {
				data, err := readFile(r.cfgPath)
				if err == nil {
					d, err = parseConfig(data)
				}
				if err != nil {
					docErr[r.cfgPath] = fmt.Errorf("reading config %s (named by %s): %v", r.cfgPath, k.configWhere(), err)
				}
				docs[r.cfgPath] = d
			}
			if err := docErr[r.cfgPath]; err != nil {
				r.err = err
				break
			}
			v, found, err := d.value(k.yamlKey)
			if err != nil {
				r.err = fmt.Errorf("in %s: %v", r.cfgPath, err)
			}
			r.val, r.found = v, found
		}
		if r.found {
			r.has = true
		} else if k.def != nil && r.err == nil {
			r.val, r.has = *k.def, true
		}
		out[k.name] = r
	}
	return out
}

// configOccurrence finds the word naming a yaml knob's config file (the
// last one, as argument parsers take the last).
func configOccurrence(argv []string, k *knob) *occurrence {
	var occ []occurrence
	if k.yamlArg != "" {
		occ = findArg(argv, k.yamlArg)
	} else {
		for _, o := range findFlag(argv, k.yamlFlags) {
			if !o.bare {
				occ = append(occ, o)
			}
		}
	}
	if len(occ) == 0 {
		return nil
	}
	return &occ[len(occ)-1]
}

// use says why a knob is needed: the first action that reads its value.
type use struct {
	rule, verb string
	number     bool
}

// uses maps each knob whose value some action or checkpoint glob reads to
// the first such use.
func (p *Policy) uses() map[string]use {
	out := map[string]use{}
	for _, r := range p.rules {
		for _, st := range r.steps {
			for _, a := range st.actions {
				for _, name := range a.numericKnobs() {
					if _, seen := out[name]; !seen {
						out[name] = use{rule: r.name, verb: a.verb(), number: true}
					}
				}
			}
		}
	}
	for _, g := range p.ckpt.Globs {
		for _, name := range placeholders(g) {
			if _, seen := out[name]; !seen {
				out[name] = use{verb: "checkpoints globs"}
			}
		}
	}
	return out
}

// Start returns the starting value of every knob that has one: read from
// where the knob lives in job, else the policy's default. It also returns,
// under EnvKey(name), the job's own value of each variable the policy's env
// actions change. Knobs only ever set (never read) may have no value.
//
// Start fails, naming the knob and what to do, when a knob that an action
// needs (halve, scale, cut_workers, compensate, a checkpoint glob) has no
// value and is not optional, when the value an arithmetic action needs is
// not a number (a bare switch such as --fp16 reads as "true"), or when a
// config file cannot be read or parsed. Better now than at the first OOM,
// hours in. Errors are *Error values located at the knob in the policy
// file, joined with errors.Join.
func (p *Policy) Start(job Job, readFile FileReader) (Values, error) {
	reads := p.read(job, readFile)
	uses := p.uses()
	vals := Values{}
	var list []error
	fail := func(k *knob, format string, args ...any) {
		list = append(list, &Error{File: p.file, Line: k.node.Line, Col: k.node.Column, Msg: "knob " + k.name + ": " + fmt.Sprintf(format, args...)})
	}
	for _, k := range p.knobs {
		r := reads[k.name]
		u, needed := uses[k.name]
		switch {
		case r.err != nil:
			fail(k, "%v", r.err)
			continue
		case r.has:
			vals[k.name] = r.val
		case needed && !k.optional:
			fail(k, "%s", missingHint(k, u))
			continue
		}
		if needed && u.number && r.has && !r.val.Null {
			if _, ok := parseNumber(r.val); !ok {
				fail(k, "%s in rule %s needs a number, but the %s is %q", u.verb, u.rule, sourceWord(r), r.val.Text)
			}
		}
	}
	for _, name := range p.envVars {
		if v, ok := envlist.Lookup(job.Env, name); ok {
			vals[EnvKey(name)] = Value{Text: v}
		}
	}
	if len(list) > 0 {
		return nil, errors.Join(list...)
	}
	return vals, nil
}

func sourceWord(r knobRead) string {
	if r.found {
		return "value in the command"
	}
	return "default"
}

func missingHint(k *knob, u use) string {
	why := u.verb
	if u.rule != "" {
		why = fmt.Sprintf("rule %s (%s) needs its value", u.rule, u.verb)
	} else {
		why += " names it"
	}
	switch k.where {
	case whereFlag:
		return fmt.Sprintf("%s, but the command has no %s and the knob has no default; add %s N to the command, or default: (or optional: true) to the knob", why, k.flags[0], k.flags[0])
	case whereArg:
		return fmt.Sprintf("%s, but the command has no %s=VALUE word and the knob has no default; add one to the command, or default: (or optional: true) to the knob", why, k.arg)
	case whereEnv:
		return fmt.Sprintf("%s, but %s is not set and the knob has no default; export it, or add default: (or optional: true) to the knob", why, k.env)
	}
	return fmt.Sprintf("%s, but the command names no config file with %s, so its key %s cannot be read or changed; add %s FILE to the command, or optional: true to the knob", why, k.configWhere(), joinKey(k.yamlKey), k.configWhere())
}

// Render computes the command, environment and derived config files for
// one attempt with the knob values vals (from Start, or from a Decision's
// State). Only knobs whose value differs from what the command would give
// them by itself are written, so that with Start's values the command is
// exactly the user's: a flag or key=value word is rewritten where it is
// (every occurrence), or appended when absent; an env knob is set (null
// unsets it); YAML knobs are written into a derived copy of their config
// file, placed in derivedDir, and the command's config argument is pointed
// at the copy. Variables changed by env actions are set in Env.
//
// checkpoint, when not "", is passed as the policy's checkpoints pass: says
// (an existing flag or word is replaced; otherwise it is appended). When the
// policy does not say how, a Note says so and the job starts without it.
//
// Render fails when the command cannot carry a value (a config knob without
// its config file in the command), when a config file cannot be read, or
// when a derived file would overwrite the user's own. Vals may hold knobs
// that are no longer in the policy (from an older state.json): they are
// ignored.
func (p *Policy) Render(job Job, vals Values, checkpoint, derivedDir string, readFile FileReader) (Launch, error) {
	l := Launch{Argv: slices.Clone(job.Argv), Env: slices.Clone(job.Env)}
	cfgs, list := p.renderKnobs(&l, vals, p.read(job, readFile))
	p.renderEnvVars(&l, job, vals)
	list = append(list, deriveConfigs(&l, job, cfgs, derivedDir, readFile)...)
	if checkpoint != "" {
		p.passCheckpoint(&l, checkpoint)
	}
	if len(list) > 0 {
		return Launch{}, errors.Join(list...)
	}
	return l, nil
}

// configEdits are the knobs set in one config file the command names: its
// derived copy gets them.
type configEdits struct {
	occ    *occurrence
	path   string
	edits  []configEdit
	labels []string
}

// renderKnobs sets each knob whose value differs from what the command has
// where the knob lives: a flag or argument of the command, a variable of its
// environment, or a key of a config file (gathered per file, for its
// derived copy).
func (p *Policy) renderKnobs(l *Launch, vals Values, reads map[string]knobRead) (cfgs []*configEdits, list []error) {
	for _, k := range p.knobs {
		v, ok := vals[k.name]
		r := reads[k.name]
		if !ok || (r.has && r.val == v) {
			continue
		}
		if r.err != nil {
			list = append(list, fmt.Errorf("knob %s: %v", k.name, r.err))
			continue
		}
		old := k.show(r.val, r.has)
		switch k.where {
		case whereFlag:
			if occ := findFlag(l.Argv, k.flags); len(occ) > 0 {
				setOccurrences(l.Argv, occ, v.String())
				// In the command's own spelling: -b where it said -b.
				l.Notes = append(l.Notes, fmt.Sprintf("%s: %s %s → %s", k.name, occ[len(occ)-1].flag, old, k.show(v, true)))
			} else {
				l.Argv = append(l.Argv, k.flags[0], v.String())
				l.Notes = append(l.Notes, fmt.Sprintf("%s: appended %s %s (the command did not set it; it was %s)", k.name, k.flags[0], v.String(), old))
			}
		case whereArg:
			if occ := findArg(l.Argv, k.arg); len(occ) > 0 {
				setOccurrences(l.Argv, occ, v.String())
				l.Notes = append(l.Notes, fmt.Sprintf("%s: %s=%s → %s", k.name, k.arg, old, k.show(v, true)))
			} else {
				l.Argv = append(l.Argv, k.addPrefix+k.arg+"="+v.String())
				l.Notes = append(l.Notes, fmt.Sprintf("%s: appended %s%s=%s (the command did not set it; it was %s)", k.name, k.addPrefix, k.arg, v.String(), old))
			}
		case whereEnv:
			if v.Null {
				l.Env = envlist.Unset(l.Env, k.env)
			} else {
				l.Env = envlist.Set(l.Env, k.env, v.Text)
			}
			l.Notes = append(l.Notes, fmt.Sprintf("%s: %s=%s → %s", k.name, k.env, old, k.show(v, true)))
		case whereYAML:
			if r.cfgOcc == nil {
				list = append(list, fmt.Errorf("knob %s: cannot set %s to %s: the command names no config file with %s", k.name, joinKey(k.yamlKey), v, k.configWhere()))
				continue
			}
			i := slices.IndexFunc(cfgs, func(c *configEdits) bool { return c.occ.idx == r.cfgOcc.idx })
			if i < 0 {
				cfgs, i = append(cfgs, &configEdits{occ: r.cfgOcc, path: r.cfgPath}), len(cfgs)
			}
			c := cfgs[i]
			c.edits = append(c.edits, configEdit{path: k.yamlKey, value: v})
			c.labels = append(c.labels, fmt.Sprintf("%s %s → %s", joinKey(k.yamlKey), old, k.show(v, true)))
		}
	}
	return cfgs, list
}

// renderEnvVars sets or unsets the environment variables the policy's
// steps change (env:), keeping the allocator's variables in step.
func (p *Policy) renderEnvVars(l *Launch, job Job, vals Values) {
	for _, name := range p.envVars {
		v, ok := vals[EnvKey(name)]
		old, had := envlist.Lookup(job.Env, name)
		if !ok || (had && !v.Null && old == v.Text) || (!had && v.Null) {
			continue
		}
		if !had {
			old = "unset"
		}
		if v.Null {
			l.Env = envlist.Unset(l.Env, name)
			l.Notes = append(l.Notes, fmt.Sprintf("env %s unset (was %s)", name, old))
			continue
		}
		l.Env = envlist.Set(l.Env, name, v.Text)
		l.Notes = append(l.Notes, fmt.Sprintf("env %s=%s (was %s)", name, v.Text, old))
		if isAllocatorVar(name) {
			p.syncAllocatorVars(l, name, old, had, v.Text)
		}
	}
}

// deriveConfigs writes, into the launch, a derived copy of each config file
// with its edits (the original is never touched), and points the command at
// the copy.
func deriveConfigs(l *Launch, job Job, cfgs []*configEdits, derivedDir string, readFile FileReader) (list []error) {
	usedNames := map[string]bool{}
	for _, c := range cfgs {
		data, err := readFile(c.path)
		if err != nil {
			list = append(list, fmt.Errorf("reading config %s: %v", c.path, err))
			continue
		}
		reloc := relocator(filepath.Dir(c.path), job.Dir, job.Exists)
		derived, moved, err := deriveConfig(data, c.edits, reloc)
		if err != nil {
			list = append(list, fmt.Errorf("deriving a copy of %s: %v", c.path, err))
			continue
		}
		name := filepath.Base(c.path)
		for i := 2; usedNames[name]; i++ {
			name = fmt.Sprintf("%d-%s", i, filepath.Base(c.path))
		}
		usedNames[name] = true
		out := filepath.Join(derivedDir, name)
		if filepath.Clean(out) == filepath.Clean(c.path) {
			list = append(list, fmt.Errorf("the derived copy of %s would overwrite it: give a derived directory other than the config's own", c.path))
			continue
		}
		l.Files = append(l.Files, DerivedFile{Path: out, Data: derived, Source: c.path})
		l.Argv[c.occ.idx] = c.occ.prefix + out
		note := fmt.Sprintf("config %s → %s: %s", c.occ.value, out, strings.Join(c.labels, ", "))
		switch {
		case reloc == nil:
			note += " (relative paths in it were left as they are: they resolve against the copy's directory if the program reads them relative to the file)"
		case moved > 0:
			note += fmt.Sprintf(" (%d relative path(s) naming files beside the original made absolute)", moved)
		}
		l.Notes = append(l.Notes, note)
	}
	return list
}

// isAllocatorVar reports whether name is one of the variables PyTorch reads
// its caching-allocator options from.
func isAllocatorVar(name string) bool {
	return name == envinject.VarCUDA || name == envinject.VarGeneric || name == envinject.VarHIP
}

// syncAllocatorVars applies the allocator options the policy changed in
// name to the other allocator variables the user set, through envinject's
// override merge: PyTorch 2.9+ reads PYTORCH_ALLOC_CONF before
// PYTORCH_CUDA_ALLOC_CONF, so an option merged into one alone could be
// ignored. A sibling whose value is malformed is left as written.
func (p *Policy) syncAllocatorVars(l *Launch, name, old string, had bool, now string) {
	if !had {
		old = ""
	}
	before := allocconf.Split(old)
	var opts []allocconf.Option
	for _, o := range allocconf.Split(now) {
		if !o.NoValue && !before.Has(o) {
			opts = append(opts, o)
		}
	}
	var siblings []string // the other allocator variables the user set, as KEY=VALUE
	var names []string
	for _, e := range l.Env {
		if k, _, ok := strings.Cut(e, "="); ok && k != name && isAllocatorVar(k) {
			siblings, names = append(siblings, e), append(names, k)
		}
	}
	if len(opts) == 0 || len(siblings) == 0 {
		return
	}
	// Merge always creates PYTORCH_CUDA_ALLOC_CONF; only the siblings'
	// own results are taken.
	res, err := envinject.Merge(siblings, opts, true)
	if err != nil {
		l.Notes = append(l.Notes, fmt.Sprintf("warning: %s's new options were not copied to the other allocator variables: %v", name, err))
		return
	}
	for _, k := range names {
		if v, ok := envlist.Lookup(res.Env, k); ok {
			l.Env = envlist.Set(l.Env, k, v)
		}
	}
	for _, c := range res.Changes {
		if slices.Contains(names, c.Var) {
			l.Notes = append(l.Notes, fmt.Sprintf("env %s (kept in step with %s)", c, name))
		}
	}
	l.Notes = append(l.Notes, res.Warnings...)
}

func (p *Policy) passCheckpoint(l *Launch, ckpt string) {
	ps := p.ckptPass
	switch ps.how {
	case "flag":
		if occ := findFlag(l.Argv, []string{ps.name}); len(occ) > 0 {
			setOccurrences(l.Argv, occ, ckpt)
		} else {
			l.Argv = append(l.Argv, ps.name, ckpt)
		}
		l.Notes = append(l.Notes, fmt.Sprintf("resume: %s %s", ps.name, ckpt))
	case "arg":
		word := ps.addPrefix + ps.name + "=" + ckpt
		if occ := findArg(l.Argv, ps.name); len(occ) > 0 {
			setOccurrences(l.Argv, occ, ckpt)
			word = occ[len(occ)-1].prefix + ckpt
		} else {
			l.Argv = append(l.Argv, word)
		}
		l.Notes = append(l.Notes, "resume: "+word)
	case "env":
		l.Env = envlist.Set(l.Env, ps.name, ckpt)
		l.Notes = append(l.Notes, fmt.Sprintf("resume: env %s=%s", ps.name, ckpt))
	case "template":
		for _, w := range ps.template {
			l.Argv = append(l.Argv, strings.ReplaceAll(w, "{checkpoint}", ckpt))
		}
		l.Notes = append(l.Notes, fmt.Sprintf("resume: appended %s", strings.ReplaceAll(strings.Join(ps.template, " "), "{checkpoint}", ckpt)))
	default:
		l.Notes = append(l.Notes, fmt.Sprintf("checkpoint %s not passed: the policy's checkpoints section has no pass: saying how", ckpt))
	}
}

// Expand replaces {knob} in the globs with the knob's value from vals
// ("{output_dir}/checkpoint-*" → "out/run1/checkpoint-*"). It fails naming
// the knob when vals has no value for it, or a null one.
func (c CheckpointSpec) Expand(vals Values) (CheckpointSpec, error) {
	out := c
	out.Globs = make([]string, len(c.Globs))
	var list []error
	for i, g := range c.Globs {
		out.Globs[i] = placeholderRE.ReplaceAllStringFunc(g, func(m string) string {
			name := m[1 : len(m)-1]
			v, ok := vals[name]
			if !ok || v.Null {
				list = append(list, fmt.Errorf("checkpoint glob %q: knob %s has no value; set it in the command or give it a default", g, name))
				return m
			}
			return v.Text
		})
	}
	return out, errors.Join(list...)
}
