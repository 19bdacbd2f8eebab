package policy

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// MaxFileBytes is the most a policy file may hold (4 MiB): the readers of
// policy files (presets.Load) read no more, so that a device such as
// /dev/zero or a runaway file is refused at once rather than read until
// memory runs out.
const MaxFileBytes = 4 << 20

// Parse reads and validates a policy file. filename is used only in
// messages. Every problem found is reported, not just the first: the error
// is an *Error, or several joined with errors.Join, each formatted as
// "file:line:col: message" with a "did you mean" for near misses. An empty
// file, an unknown or missing version:, unknown keys, values of the wrong
// type, rules naming knobs that are not defined and unknown actions are all
// errors. A nil error means the policy is complete and consistent; whether
// its knobs can be read from a given command is checked later, by Start.
func Parse(filename string, data []byte) (*Policy, error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{File: filename, Line: 1, Col: 1, Msg: fmt.Sprintf("policy file is %d bytes, over the %d (4 MiB) a policy may hold", len(data), MaxFileBytes)}
	}
	w := &walker{errs: errs{file: filename}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(filename, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &Error{File: filename, Line: 1, Col: 1, Msg: "policy file is empty; start from `gpuguard policy init -- COMMAND` or a preset (`gpuguard policy list`)"}
	}
	p := w.policy(doc.Content[0])
	if len(w.list) > 0 {
		return nil, errors.Join(w.list...)
	}
	p.file = filename
	return p, nil
}

type walker struct {
	errs
}

// field is one key of a mapping and its value.
type field struct {
	name string
	key  *yaml.Node
	val  *yaml.Node
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

// mapping returns the fields of a mapping in order, reporting keys not in
// allowed (with a suggestion) and keys given twice. what names the mapping
// in messages ("knob batch_size").
func (w *walker) mapping(n *yaml.Node, what string, allowed ...string) []field {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		w.at(n, "%s must be a mapping (key: value lines), not %s", what, kindName(n))
		return nil
	}
	var out []field
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			w.at(k, "%s: keys must be plain names", what)
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			w.at(k, "%s: key %q is given twice (first at line %d)", what, k.Value, prev.Line)
			continue
		}
		seen[k.Value] = k
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			w.at(k, "%s: unknown key %q%s; allowed: %s", what, k.Value, didYouMean(k.Value, allowed), strings.Join(allowed, ", "))
			continue
		}
		out = append(out, field{name: k.Value, key: k, val: v})
	}
	return out
}

func (w *walker) scalar(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		w.at(n, "%s must be a single value, not %s", what, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (w *walker) str(n *yaml.Node, what string) string {
	s, ok := w.scalar(n, what)
	if ok && strings.TrimSpace(s) == "" {
		w.at(n, "%s must not be empty", what)
	}
	return s
}

func (w *walker) strList(n *yaml.Node, what string) []string {
	if n.Kind == yaml.SequenceNode {
		if len(n.Content) == 0 {
			w.at(n, "%s: the list is empty", what)
		}
		var out []string
		for _, c := range n.Content {
			out = append(out, w.str(resolve(c), what))
		}
		return out
	}
	return []string{w.str(n, what)}
}

func (w *walker) integer(n *yaml.Node, what string, lo int) int {
	s, ok := w.scalar(n, what)
	if !ok {
		return 0
	}
	i, err := strconv.Atoi(s)
	if err != nil || n.Tag != "!!int" {
		w.at(n, "%s must be a whole number, not %q", what, s)
		return 0
	}
	if i < lo {
		w.at(n, "%s must be at least %d, not %d", what, lo, i)
	}
	return i
}

func (w *walker) float(n *yaml.Node, what string) float64 {
	s, ok := w.scalar(n, what)
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || (n.Tag != "!!int" && n.Tag != "!!float") || math.IsNaN(f) || math.IsInf(f, 0) {
		w.at(n, "%s must be a number, not %q", what, s)
		return 0
	}
	return f
}

func (w *walker) boolean(n *yaml.Node, what string) bool {
	s, ok := w.scalar(n, what)
	if !ok {
		return false
	}
	if n.Tag != "!!bool" {
		w.at(n, "%s must be true or false, not %q", what, s)
		return false
	}
	b, _ := strconv.ParseBool(strings.ToLower(s))
	return b
}

func (w *walker) duration(n *yaml.Node, what string) time.Duration {
	s, ok := w.scalar(n, what)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		hint := ""
		if n.Tag == "!!int" || n.Tag == "!!float" {
			hint = fmt.Sprintf(`; write it with a unit, e.g. "%ss"`, s)
		}
		w.at(n, "%s must be a duration such as \"30s\" or \"2m\", not %q%s", what, s, hint)
		return 0
	}
	if d < 0 {
		w.at(n, "%s must not be negative", what)
	}
	return d
}

// fraction reads 0.95 or "95%".
func (w *walker) fraction(n *yaml.Node, what string) float64 {
	s, ok := w.scalar(n, what)
	if !ok {
		return 0
	}
	var f float64
	var err error
	if pct, isPct := strings.CutSuffix(strings.TrimSpace(s), "%"); isPct {
		f, err = strconv.ParseFloat(strings.TrimSpace(pct), 64)
		f /= 100
	} else if n.Tag == "!!int" || n.Tag == "!!float" {
		f, err = strconv.ParseFloat(s, 64)
	} else {
		err = errors.New("not a number")
	}
	if err != nil || !(f > 0 && f <= 1) {
		w.at(n, "%s must be a fraction of GPU memory between 0 and 1, such as 0.95 or \"95%%\", not %q", what, s)
		return 0
	}
	return f
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

var topKeys = []string{"version", "description", "knobs", "rules", "budget", "backoff", "oom_grace", "sampling", "phases", "checkpoints", "slurm", "notify", "hang", "exit_codes", "memo", "verify", "prevent"}

func (w *walker) policy(root *yaml.Node) *Policy {
	p := &Policy{
		knobByName: map[string]*knob{},
		budget:     budget{relaunches: 5, noProgress: 2, perKind: map[classify.Kind]int{}},
		backoff:    backoff{initial: 5 * time.Second, factor: 2, max: 5 * time.Minute, jitter: 0.2},
		oomGrace:   30 * time.Second,
		sampling:   Sampling{BaseHz: 1, ValHz: 20, FastWindow: 5 * time.Second},
		slurm:      DefaultSlurm,
	}
	p.ckpt.Choose = "newest"
	p.ckpt.Quiet = 10 * time.Second
	p.ckpt.Poll = 10 * time.Second

	fields := w.mapping(root, "the policy", topKeys...)
	if root.Kind != yaml.MappingNode {
		return p
	}
	byName := map[string]field{}
	for _, f := range fields {
		if f.val.Kind == yaml.ScalarNode && f.val.Tag == "!!null" && f.name != "version" && f.name != "slurm" {
			continue // "rules:" with nothing under it: the default
		}
		byName[f.name] = f
	}
	if f, ok := byName["version"]; !ok {
		w.at(root, "missing version: add `version: %d` as the first line", Version)
	} else if s, ok := w.scalar(f.val, "version"); ok && s != strconv.Itoa(Version) {
		w.at(f.val, "unsupported policy version %q: this gpuguard reads version %d", s, Version)
	}
	if f, ok := byName["description"]; ok {
		p.description, _ = w.scalar(f.val, "description")
	}
	// Knobs first: rules refer to them.
	if f, ok := byName["knobs"]; ok {
		for _, kf := range w.mapping(f.val, "knobs", nil...) {
			if k := w.knob(kf); k != nil {
				p.knobs = append(p.knobs, k)
				p.knobByName[k.name] = k
			}
		}
	}
	if f, ok := byName["rules"]; ok {
		p.rules = w.rules(f.val, p)
		p.envVars = envVars(p.rules)
	}
	if f, ok := byName["budget"]; ok {
		w.budget(f.val, &p.budget)
	}
	if f, ok := byName["backoff"]; ok {
		w.backoffSpec(f.val, &p.backoff)
	}
	if f, ok := byName["oom_grace"]; ok {
		p.oomGrace = w.duration(f.val, "oom_grace")
	}
	if f, ok := byName["sampling"]; ok {
		w.samplingSpec(f.val, &p.sampling)
	}
	if f, ok := byName["phases"]; ok {
		p.phases = w.phasePatterns(f.val)
	}
	if f, ok := byName["checkpoints"]; ok {
		w.checkpoints(f.val, &p.ckpt, p)
	}
	if f, ok := byName["prevent"]; ok { // after checkpoints: it needs them
		p.prevent = w.preventSpec(f.val, p)
	}
	if f, ok := byName["verify"]; ok {
		w.verifySpec(f.val, p)
	}
	if f, ok := byName["memo"]; ok {
		w.memoSpec(f.val, p)
	}
	if f, ok := byName["slurm"]; ok {
		w.slurmSpec(f.val, &p.slurm)
	}
	if f, ok := byName["notify"]; ok {
		w.notifySpec(f.val, &p.notify)
	}
	if f, ok := byName["hang"]; ok {
		p.hang = w.hangSpec(f.val)
	}
	if f, ok := byName["exit_codes"]; ok {
		p.exitCodes = w.exitCodesSpec(f.val)
	}
	w.crossCheck(p)
	return p
}

var knobKeys = []string{"flag", "arg", "add_prefix", "env", "yaml", "default", "optional", "null_label"}

func (w *walker) knob(f field) *knob {
	what := "knob " + f.name
	if !nameRE.MatchString(f.name) {
		w.at(f.key, "knob name %q: use letters, digits, _, - and . (starting with a letter or _)", f.name)
		return nil
	}
	k := &knob{name: f.name, node: f.key, nullLabel: "null"}
	var places []string
	for _, kf := range w.mapping(f.val, what, knobKeys...) {
		switch kf.name {
		case "flag":
			k.where = whereFlag
			places = append(places, kf.name)
			k.flags = w.strList(kf.val, what+": flag")
			for _, fl := range k.flags {
				if fl != "" && (!strings.HasPrefix(fl, "-") || strings.ContainsAny(fl, "= \t")) {
					w.at(kf.val, "%s: flag %q must start with - and contain no = or spaces (both --x 1 and --x=1 are recognised)", what, fl)
				}
			}
		case "arg":
			k.where = whereArg
			places = append(places, kf.name)
			k.arg = w.str(kf.val, what+": arg")
			if strings.HasPrefix(k.arg, "+") || strings.Contains(k.arg, "=") {
				w.at(kf.val, "%s: arg is the bare key (%q); words with +, ++ or = are all recognised", what, strings.TrimLeft(strings.SplitN(k.arg, "=", 2)[0], "+"))
			}
		case "add_prefix":
			k.addPrefix, _ = w.scalar(kf.val, what+": add_prefix")
			if k.addPrefix != "+" && k.addPrefix != "++" {
				w.at(kf.val, "%s: add_prefix must be \"+\" or \"++\" (Hydra's add and force-add), not %q", what, k.addPrefix)
			}
		case "env":
			k.where = whereEnv
			places = append(places, kf.name)
			k.env = w.str(kf.val, what+": env")
			if strings.ContainsAny(k.env, "= \t") {
				w.at(kf.val, "%s: env must be a variable name, not %q", what, k.env)
			}
		case "yaml":
			k.where = whereYAML
			places = append(places, kf.name)
			w.yamlKnob(kf.val, k, what)
		case "default":
			v := nodeValue(kf.val)
			if kf.val.Kind != yaml.ScalarNode {
				w.at(kf.val, "%s: default must be a single value, not %s", what, kindName(kf.val))
			}
			k.def = &v
		case "optional":
			k.optional = w.boolean(kf.val, what+": optional")
		case "null_label":
			k.nullLabel = w.str(kf.val, what+": null_label")
		}
	}
	switch {
	case len(places) == 0 && f.val.Kind == yaml.MappingNode:
		w.at(f.key, "%s: say where it lives with one of flag, arg, env or yaml", what)
		return nil
	case len(places) > 1:
		w.at(f.key, "%s: give only one of flag, arg, env, yaml (got %s)", what, strings.Join(places, " and "))
		return nil
	case len(places) == 0:
		return nil
	}
	if k.addPrefix != "" && k.where != whereArg {
		w.at(f.key, "%s: add_prefix applies only to arg knobs", what)
	}
	return k
}

// nodeValue is the Value a scalar node holds: its text exactly as written,
// or null.
func nodeValue(n *yaml.Node) Value {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return null
	}
	return Value{Text: n.Value}
}

func (w *walker) yamlKnob(n *yaml.Node, k *knob, what string) {
	var haveKey, haveFile bool
	for _, f := range w.mapping(n, what+": yaml", "key", "flag", "arg") {
		switch f.name {
		case "key":
			haveKey = true
			s := w.str(f.val, what+": yaml key")
			k.yamlKey = strings.Split(s, ".")
			if slices.Contains(k.yamlKey, "") {
				w.at(f.val, "%s: yaml key %q has an empty part; write a dotted path such as DATA.VAL_CROP_SIZE", what, s)
			}
		case "flag":
			haveFile = true
			k.yamlFlags = w.strList(f.val, what+": yaml flag")
		case "arg":
			haveFile = true
			k.yamlArg = w.str(f.val, what+": yaml arg")
		}
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	if !haveKey {
		w.at(n, "%s: yaml needs key: (the dotted key path, e.g. DATA.VAL_CROP_SIZE)", what)
	}
	if !haveFile {
		w.at(n, "%s: yaml needs flag: (e.g. --config) or arg: naming the config file in the command", what)
	}
	if len(k.yamlFlags) > 0 && k.yamlArg != "" {
		w.at(n, "%s: yaml takes flag: or arg:, not both", what)
	}
}

func (w *walker) rules(n *yaml.Node, p *Policy) []*rule {
	if n.Kind != yaml.SequenceNode {
		w.at(n, "rules must be a list (lines starting with -), not %s", kindName(n))
		return nil
	}
	var out []*rule
	names := map[string]*yaml.Node{}
	for i, c := range n.Content {
		c = resolve(c)
		r := &rule{node: c, name: fmt.Sprintf("rule%d", i+1)}
		what := fmt.Sprintf("rule %d", i+1)
		var haveSteps bool
		for _, f := range w.mapping(c, what, "name", "when", "steps") {
			switch f.name {
			case "name":
				r.name = w.str(f.val, what+": name")
				what = "rule " + r.name
			case "when":
				r.when = w.match(f.val, what)
			case "steps":
				haveSteps = true
				r.steps = w.steps(f.val, what, p)
			}
		}
		if prev, dup := names[r.name]; dup {
			w.at(c, "%s: another rule has this name (line %d); names must be unique, they key the rule's progress in state.json", what, prev.Line)
		}
		names[r.name] = c
		if c.Kind == yaml.MappingNode && !haveSteps {
			w.at(c, "%s: needs steps: (a list of actions, tried in order across repeated failures)", what)
		}
		out = append(out, r)
	}
	return out
}

// envVars lists the environment variables the rules' actions set, first
// use first.
func envVars(rules []*rule) []string {
	var out []string
	for _, r := range rules {
		for _, st := range r.steps {
			for _, a := range st.actions {
				for _, name := range a.envVars() {
					if !slices.Contains(out, name) {
						out = append(out, name)
					}
				}
			}
		}
	}
	return out
}

var kindNames = []string{string(classify.KindGPUOOM), string(classify.KindCPUAllocOOM), string(classify.KindHostOOM), string(classify.KindCrash), string(classify.KindHang)}

// kindAliases are names people use for the failure kinds.
var kindAliases = map[string]string{
	"oom": "gpu_oom", "cuda_oom": "gpu_oom", "cuda": "gpu_oom", "gpu": "gpu_oom", "outofmemoryerror": "gpu_oom",
	"resource_exhausted": "gpu_oom", "hip_oom": "gpu_oom", "mps_oom": "gpu_oom",
	"cpu_oom": "cpu_alloc_oom", "cpu": "cpu_alloc_oom",
	"ram_oom": "host_oom", "oom_kill": "host_oom", "oomkill": "host_oom", "host": "host_oom", "killed": "host_oom",
	"error": "crash", "failure": "crash",
}

func (w *walker) match(n *yaml.Node, what string) match {
	var m match
	var buildKey, shmKey *yaml.Node
	what += ": when"
	for _, f := range w.mapping(n, what, "kind", "phase", "fragmentation", "other_processes", "build", "shared_memory", "worker", "rank", "attempt", "peak", "stall") {
		switch f.name {
		case "kind":
			for _, s := range w.strList(f.val, what+" kind") {
				if !slices.Contains(kindNames, s) {
					hint := didYouMean(s, kindNames)
					if alias, ok := kindAliases[strings.ToLower(s)]; ok {
						hint = fmt.Sprintf(" (did you mean %q?)", alias)
					}
					w.at(f.val, "%s: unknown failure kind %q%s; kinds: %s", what, s, hint, strings.Join(kindNames, ", "))
				}
				m.kinds = append(m.kinds, classify.Kind(s))
			}
		case "phase":
			for _, s := range w.strList(f.val, what+" phase") {
				switch s {
				case "train":
					m.phases = append(m.phases, classify.PhaseTrain)
				case "val":
					m.phases = append(m.phases, classify.PhaseVal)
				case "unknown":
					m.phases = append(m.phases, classify.PhaseNone)
				default:
					w.at(f.val, "%s: unknown phase %q%s; phases: train, val, unknown (no marker seen)", what, s, didYouMean(s, []string{"train", "val", "unknown"}))
				}
			}
		case "fragmentation":
			b := w.boolean(f.val, what+" fragmentation")
			m.fragmentation = &b
		case "other_processes":
			b := w.boolean(f.val, what+" other_processes")
			m.otherProcesses = &b
		case "build":
			b := w.boolean(f.val, what+" build")
			m.build = &b
			buildKey = f.key
		case "shared_memory":
			b := w.boolean(f.val, what+" shared_memory")
			m.sharedMemory = &b
			shmKey = f.key
		case "worker":
			b := w.boolean(f.val, what+" worker")
			m.worker = &b
		case "rank":
			if f.val.Kind == yaml.SequenceNode {
				for _, c := range f.val.Content {
					m.ranks = append(m.ranks, w.integer(resolve(c), what+" rank", 0))
				}
			} else {
				m.ranks = append(m.ranks, w.integer(f.val, what+" rank", 0))
			}
		case "attempt":
			m.attempt = w.comparison(f.val, what+" attempt")
		case "stall":
			m.stalls = w.stallCond(f.val, what+" stall")
		case "peak":
			for _, pf := range w.mapping(f.val, what+" peak", "train", "val") {
				m.peaks = append(m.peaks, peakCond{phase: classify.Phase(pf.name), over: w.fraction(pf.val, what+" peak "+pf.name)})
			}
		}
	}
	// build and shared_memory are kinds of host_oom: beside kinds without
	// it, the rule could never fire.
	w.onlyHostOOM(m, buildKey, m.build, "build", "a compiler killed while building an extension", what)
	w.onlyHostOOM(m, shmKey, m.sharedMemory, "shared_memory", "the shared memory of /dev/shm", what)
	return m
}

// onlyHostOOM reports a condition that holds only for a host_oom
// (key: true) in a rule whose kinds exclude host_oom.
func (w *walker) onlyHostOOM(m match, key *yaml.Node, cond *bool, name, means, what string) {
	if key == nil || cond == nil || !*cond || m.kinds == nil || slices.Contains(m.kinds, classify.KindHostOOM) {
		return
	}
	w.at(key, "%s: %s: true matches only host_oom (%s), and kind is %s: add host_oom to kind or drop %s", what, name, means, kindList(m.kinds), name)
}

// kindList is kinds as a policy file writes them: "gpu_oom" or "[gpu_oom, crash]".
func kindList(kinds []classify.Kind) string {
	if len(kinds) == 1 {
		return string(kinds[0])
	}
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

var comparisonRE = regexp.MustCompile(`^\s*(>=|<=|>|<|==)?\s*(\d+)\s*$`)

func (w *walker) comparison(n *yaml.Node, what string) *comparison {
	s, ok := w.scalar(n, what)
	if !ok {
		return nil
	}
	m := comparisonRE.FindStringSubmatch(s)
	if m == nil {
		w.at(n, "%s must be a number or a comparison such as \">=2\" or \"<3\", not %q", what, s)
		return nil
	}
	c := &comparison{op: m[1], n: atoi(m[2])}
	if c.op == "" {
		c.op = "=="
	}
	return c
}

func (w *walker) steps(n *yaml.Node, what string, p *Policy) []step {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		w.at(n, "%s: steps must be a non-empty list of actions, not %s", what, kindName(n))
		return nil
	}
	var out []step
	for i, c := range n.Content {
		c = resolve(c)
		swhat := fmt.Sprintf("%s step %d", what, i+1)
		st := step{node: c}
		if c.Kind != yaml.MappingNode {
			w.at(c, "%s must be an action such as `halve: batch_size`, not %s", swhat, kindName(c))
			continue
		}
		var doNode *yaml.Node
		var rest []field
		for _, f := range w.mapping(c, swhat, nil...) {
			switch f.name {
			case "times":
				st.times = w.integer(f.val, swhat+": times", 1)
			case "do":
				doNode = f.val
			default:
				rest = append(rest, f)
			}
		}
		if doNode != nil {
			for _, f := range rest {
				w.at(f.key, "%s: with do:, put %q inside one of the listed actions", swhat, f.name)
			}
			if doNode.Kind != yaml.SequenceNode || len(doNode.Content) == 0 {
				w.at(doNode, "%s: do must be a non-empty list of actions", swhat)
			} else {
				for j, a := range doNode.Content {
					a = resolve(a)
					if act, ok := w.action(w.mapping(a, swhat, nil...), a, fmt.Sprintf("%s action %d", swhat, j+1), p); ok {
						st.actions = append(st.actions, act)
					}
				}
			}
		} else if act, ok := w.action(rest, c, swhat, p); ok {
			st.actions = append(st.actions, act)
		}
		out = append(out, st)
	}
	return out
}

// knobRef reads a knob name and checks that the policy defines it.
func (w *walker) knobRef(n *yaml.Node, what string, p *Policy) string {
	s, ok := w.scalar(n, what)
	if !ok {
		return ""
	}
	if _, defined := p.knobByName[s]; !defined {
		w.at(n, "%s: unknown knob %q%s; knobs: %s", what, s, didYouMean(s, p.Knobs()), orNone(p.Knobs()))
	}
	return s
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none defined (add them under knobs:)"
	}
	return strings.Join(names, ", ")
}

func (w *walker) budget(n *yaml.Node, b *budget) {
	for _, f := range w.mapping(n, "budget", "relaunches", "per_kind", "no_progress", "crash") {
		switch f.name {
		case "relaunches":
			b.relaunches = w.integer(f.val, "budget relaunches", 0)
		case "no_progress":
			b.noProgress = w.integer(f.val, "budget no_progress", 0)
		case "crash":
			b.crash = w.integer(f.val, "budget crash", 0)
		case "per_kind":
			for _, kf := range w.mapping(f.val, "budget per_kind", kindNames...) {
				b.perKind[classify.Kind(kf.name)] = w.integer(kf.val, "budget per_kind "+kf.name, 0)
			}
		}
	}
}

func (w *walker) backoffSpec(n *yaml.Node, b *backoff) {
	for _, f := range w.mapping(n, "backoff", "initial", "factor", "max", "jitter") {
		switch f.name {
		case "initial":
			b.initial = w.duration(f.val, "backoff initial")
		case "max":
			b.max = w.duration(f.val, "backoff max")
		case "factor":
			if b.factor = w.float(f.val, "backoff factor"); b.factor < 1 {
				w.at(f.val, "backoff factor must be at least 1 (1 waits the same each time)")
			}
		case "jitter":
			if b.jitter = w.float(f.val, "backoff jitter"); b.jitter < 0 || b.jitter > 1 {
				w.at(f.val, "backoff jitter must be between 0 and 1 (0.2 spreads each wait over ±20%%)")
			}
		}
	}
	if b.max < b.initial {
		w.at(n, "backoff max (%s) is below initial (%s)", b.max, b.initial)
	}
}

func (w *walker) samplingSpec(n *yaml.Node, s *Sampling) {
	for _, f := range w.mapping(n, "sampling", "base_hz", "val_hz", "fast_window") {
		switch f.name {
		case "base_hz":
			s.BaseHz = w.float(f.val, "sampling base_hz")
		case "val_hz":
			s.ValHz = w.float(f.val, "sampling val_hz")
		case "fast_window":
			s.FastWindow = w.duration(f.val, "sampling fast_window")
		}
		if (f.name == "base_hz" || f.name == "val_hz") && (s.BaseHz <= 0 || s.BaseHz > 1000 || s.ValHz <= 0 || s.ValHz > 1000) {
			w.at(f.val, "sampling %s must be above 0 and at most 1000 samples a second", f.name)
		}
	}
}

func (w *walker) phasePatterns(n *yaml.Node) []classify.PhasePattern {
	if n.Kind != yaml.SequenceNode {
		w.at(n, "phases must be a list of {phase: val, regexp: '...'}, not %s", kindName(n))
		return nil
	}
	var out []classify.PhasePattern
	for i, c := range n.Content {
		what := fmt.Sprintf("phases entry %d", i+1)
		var pp classify.PhasePattern
		var havePhase, haveRE bool
		for _, f := range w.mapping(c, what, "phase", "regexp") {
			switch f.name {
			case "phase":
				havePhase = true
				s := w.str(f.val, what+": phase")
				if s != "train" && s != "val" {
					w.at(f.val, "%s: phase must be train or val, not %q%s", what, s, didYouMean(s, []string{"train", "val"}))
				}
				pp.Phase = classify.Phase(s)
			case "regexp":
				haveRE = true
				pp.Regexp = w.str(f.val, what+": regexp")
				if _, err := regexp.Compile(pp.Regexp); err != nil {
					w.at(f.val, "%s: regexp does not compile: %v (Go RE2 syntax; no lookaround or backreferences)", what, err)
				}
			}
		}
		if resolve(c).Kind == yaml.MappingNode && (!havePhase || !haveRE) {
			w.at(c, "%s needs both phase: and regexp:", what)
		}
		out = append(out, pp)
	}
	return out
}

func (w *walker) checkpoints(n *yaml.Node, c *CheckpointSpec, p *Policy) {
	for _, f := range w.mapping(n, "checkpoints", "globs", "choose", "marker", "quiet", "poll", "pass", "required", "earlier_runs") {
		switch f.name {
		case "globs":
			c.Globs = w.strList(f.val, "checkpoints globs")
			for _, g := range c.Globs {
				if strings.Contains(g, "**") {
					w.at(f.val, "checkpoints globs: %q: ** is not supported; globs use Go's path/filepath.Match (* ? [a-z] within one directory level), so write one * per level", g)
				} else if _, err := filepath.Match(placeholderRE.ReplaceAllString(g, "x"), ""); err != nil {
					w.at(f.val, "checkpoints globs: %q: %v (the syntax is Go's path/filepath.Match: * ? [a-z])", g, err)
				}
				for _, ref := range placeholders(g) {
					if _, ok := p.knobByName[ref]; !ok {
						w.at(f.val, "checkpoints globs: %q names unknown knob {%s}%s", g, ref, didYouMean(ref, p.Knobs()))
					}
				}
			}
		case "choose":
			c.Choose = w.str(f.val, "checkpoints choose")
			if c.Choose != "newest" && c.Choose != "highest_step" {
				w.at(f.val, "checkpoints choose must be newest or highest_step, not %q%s", c.Choose, didYouMean(c.Choose, []string{"newest", "highest_step"}))
			}
		case "marker":
			c.Marker = w.str(f.val, "checkpoints marker")
		case "quiet":
			c.Quiet = w.duration(f.val, "checkpoints quiet")
		case "poll":
			c.Poll = w.duration(f.val, "checkpoints poll")
		case "required":
			c.Required = w.boolean(f.val, "checkpoints required")
		case "earlier_runs":
			c.EarlierRuns = w.boolean(f.val, "checkpoints earlier_runs")
		case "pass":
			p.ckptPass = w.pass(f.val)
			c.Pass = p.ckptPass.describe()
		}
	}
	if c.Required && p.ckptPass.how == "" {
		w.at(n, "checkpoints: required is true but pass: does not say how to give the job its checkpoint")
	}
}

// pass is how a checkpoint path reaches the job.
type pass struct {
	how       string   // flag, arg, env, template
	name      string   // the flag, key or variable
	addPrefix string   // arg: "+" or "++" when appended
	template  []string // template: argv words, {checkpoint} replaced
}

func (ps pass) describe() string {
	switch ps.how {
	case "flag":
		return ps.name + " PATH"
	case "arg":
		return ps.addPrefix + ps.name + "=PATH"
	case "env":
		return "environment variable " + ps.name
	case "template":
		return strings.Join(ps.template, " ")
	}
	return ""
}

func (w *walker) pass(n *yaml.Node) pass {
	var ps pass
	fields := w.mapping(n, "checkpoints pass", "flag", "arg", "add_prefix", "env", "template")
	for _, f := range fields {
		switch f.name {
		case "flag", "arg", "env":
			if ps.how != "" {
				w.at(f.key, "checkpoints pass: give one of flag, arg, env or template")
			}
			ps.how, ps.name = f.name, w.str(f.val, "checkpoints pass "+f.name)
		case "template":
			if ps.how != "" {
				w.at(f.key, "checkpoints pass: give one of flag, arg, env or template")
			}
			ps.how = "template"
			s := w.str(f.val, "checkpoints pass template")
			ps.template = strings.Fields(s)
			if !strings.Contains(s, "{checkpoint}") {
				w.at(f.val, "checkpoints pass template %q must contain {checkpoint}", s)
			}
		case "add_prefix":
			ps.addPrefix, _ = w.scalar(f.val, "checkpoints pass add_prefix")
			if ps.addPrefix != "+" && ps.addPrefix != "++" {
				w.at(f.val, "checkpoints pass add_prefix must be \"+\" or \"++\", not %q", ps.addPrefix)
			}
		}
	}
	if ps.how == "" && n.Kind == yaml.MappingNode {
		w.at(n, "checkpoints pass: say how with flag, arg, env or template")
	}
	if ps.addPrefix != "" && ps.how != "arg" {
		w.at(n, "checkpoints pass: add_prefix applies only to arg")
	}
	return ps
}

var placeholderRE = regexp.MustCompile(`\{([^{}]+)\}`)

func placeholders(s string) []string {
	var out []string
	for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// crossCheck validates what needs the whole file: knobs that arithmetic
// actions use.
func (w *walker) crossCheck(p *Policy) {
	for _, r := range p.rules {
		for _, st := range r.steps {
			for _, a := range st.actions {
				for _, name := range a.numericKnobs() {
					k := p.knobByName[name]
					if k == nil || k.def == nil {
						continue
					}
					if _, ok := parseNumber(*k.def); !ok && !k.def.Null {
						w.at(k.node, "knob %s: %s in rule %s needs a number, but the default is %q", k.name, a.verb(), r.name, k.def.Text)
					}
				}
			}
		}
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
func itoa(n int) string { return strconv.Itoa(n) }
