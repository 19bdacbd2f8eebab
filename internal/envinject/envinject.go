// Package envinject composes a training job's environment: it merges
// allocator options into the user's own PYTORCH_CUDA_ALLOC_CONF (and its
// sibling variables) without ever overwriting what the user chose, and it
// offers an "override" merge for policy actions, where the policy's values win
// and every replaced value is reported as old→new.
//
// The value syntax is PyTorch's: comma-separated key:value options, a value
// may be a bracketed list ("roundup_power2_divisions:[256:1,>:4]"),
// whitespace is ignored, and one trailing comma is accepted. A value PyTorch
// would reject (an option without ':value', "a:b:c", an empty key or value,
// ",," or an unclosed '[') is malformed: Merge leaves such a variable exactly
// as the user wrote it and says so in Result.Warnings.
package envinject

import (
	"fmt"
	"strings"
)

// The variables PyTorch reads its caching-allocator options from.
const (
	// VarCUDA is read by every PyTorch version with CUDA; since 2.9 it is a
	// deprecated alias of VarGeneric that is read only when VarGeneric is
	// unset.
	VarCUDA = "PYTORCH_CUDA_ALLOC_CONF"
	// VarGeneric is the device-generic name (PyTorch 2.9+); when set it takes
	// precedence over VarCUDA. Older versions ignore it.
	VarGeneric = "PYTORCH_ALLOC_CONF"
	// VarHIP is read by ROCm builds.
	VarHIP = "PYTORCH_HIP_ALLOC_CONF"
)

// Option is one allocator option, key:value.
type Option struct {
	Key   string
	Value string
}

func (o Option) String() string { return o.Key + ":" + o.Value }

// Defaults returns the options gpuguard adds when the user has not set them:
// expandable_segments:True, which lets the allocator grow segments instead of
// fragmenting memory into many fixed-size blocks.
func Defaults() []Option {
	return []Option{{Key: "expandable_segments", Value: "True"}}
}

// Change is one option Merge added, replaced or kept in one variable.
type Change struct {
	Var    string // the environment variable
	Option string // the option key
	Old    string // the value before; "" when the option was added
	New    string // the value after
	// From names the other variable whose user-set value was copied, when
	// the user set the option there but not in Var (keeps the variables
	// consistent whichever one PyTorch reads).
	From string
}

func (c Change) String() string {
	switch {
	case c.Old == "" && c.From != "":
		return fmt.Sprintf("%s: added %s:%s (as set in %s)", c.Var, c.Option, c.New, c.From)
	case c.Old == "":
		return fmt.Sprintf("%s: added %s:%s", c.Var, c.Option, c.New)
	case c.Old == c.New:
		return fmt.Sprintf("%s: kept %s:%s", c.Var, c.Option, c.Old)
	default:
		return fmt.Sprintf("%s: %s %s→%s", c.Var, c.Option, c.Old, c.New)
	}
}

// Result is the outcome of Merge.
type Result struct {
	// Env is the complete new environment (KEY=VALUE), in the input's order
	// with new variables appended. The input slice is never modified.
	Env []string
	// Changes lists every option added or replaced.
	Changes []Change
	// Kept lists the options the user had already set, which a non-override
	// merge left alone (Old == New).
	Kept []Change
	// Warnings are user-facing sentences about values left untouched because
	// they are malformed.
	Warnings []string
}

// Merge returns env with opts merged into the allocator variables.
//
// VarCUDA is always set (created when absent), because some PyTorch versions
// read only that name; VarGeneric and VarHIP are merged only when the user set
// them. Without override, an option the user already set in a variable is
// kept; when the user set it only in a sibling variable, that value is copied
// rather than the default, so that whichever variable PyTorch reads agrees
// with the user. With override (policy actions), opts replace existing values
// in every variable merged, each replacement reported old→new.
//
// A malformed user value is left exactly as written and reported in Warnings;
// nothing is added to that variable. Merge returns an error only when opts
// themselves are invalid (an empty key or value, or one containing ',', ':'
// or whitespace outside a bracketed list); env is then not changed.
func Merge(env []string, opts []Option, override bool) (Result, error) {
	for _, o := range opts {
		if err := validOption(o); err != nil {
			return Result{Env: append([]string(nil), env...)}, err
		}
	}
	res := Result{Env: append([]string(nil), env...)}
	if len(opts) == 0 {
		return res, nil
	}

	type varState struct {
		name   string
		idx    int // index in res.Env of the effective (last) entry, -1 if unset
		value  string
		parsed *parsed // the value being built; nil when unset or malformed
		user   *parsed // the user's own options, as found
		bad    bool
	}
	vars := []*varState{{name: VarCUDA}, {name: VarGeneric}, {name: VarHIP}}
	for _, v := range vars {
		v.idx = -1
		for i, kv := range res.Env {
			if k, val, ok := strings.Cut(kv, "="); ok && k == v.name {
				v.idx, v.value = i, val
			}
		}
		if v.idx < 0 {
			continue
		}
		p, err := parse(v.value)
		if err != nil {
			v.bad = true
			res.Warnings = append(res.Warnings, fmt.Sprintf(
				"%s=%q is malformed (%v); left as written, no allocator option added to it", v.name, v.value, err))
			continue
		}
		v.parsed, v.user = p, p
	}

	// userValue finds the value the user set for key in any well-formed
	// variable other than skip, preferring the one PyTorch gives precedence.
	userValue := func(key string, skip *varState) (string, string, bool) {
		for _, v := range []*varState{vars[1], vars[0], vars[2]} {
			if v == skip || v.user == nil {
				continue
			}
			if val, ok := v.user.get(key); ok {
				return val, v.name, true
			}
		}
		return "", "", false
	}

	for _, v := range vars {
		if v.bad || (v.idx < 0 && v.name != VarCUDA) {
			continue
		}
		value := v.value
		if v.parsed == nil {
			// VarCUDA unset: start from an empty value.
			v.parsed = &parsed{}
		}
		for _, o := range opts {
			old, has := v.parsed.get(o.Key)
			switch {
			case has && !override:
				res.Kept = append(res.Kept, Change{Var: v.name, Option: o.Key, Old: old, New: old})
			case has && old == o.Value:
				// Override to the value already there: nothing to report.
			case has:
				value = v.parsed.replace(value, o.Key, o.Value)
				res.Changes = append(res.Changes, Change{Var: v.name, Option: o.Key, Old: old, New: o.Value})
			default:
				newValue, from := o.Value, ""
				if !override {
					if uv, name, ok := userValue(o.Key, v); ok {
						newValue, from = uv, name
					}
				}
				value = appendOption(value, o.Key, newValue)
				res.Changes = append(res.Changes, Change{Var: v.name, Option: o.Key, New: newValue, From: from})
			}
			// Re-parse so later options see the offsets of the new value.
			p, err := parse(value)
			if err != nil {
				return Result{Env: append([]string(nil), env...)}, fmt.Errorf("envinject: internal error: merged %s=%q does not parse: %v", v.name, value, err)
			}
			v.parsed = p
		}
		if v.idx >= 0 {
			res.Env[v.idx] = v.name + "=" + value
		} else {
			res.Env = append(res.Env, v.name+"="+value)
		}
	}
	return res, nil
}

// Lookup returns the value of key in env (the last entry wins, as in exec).
func Lookup(env []string, key string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// validOption reports whether o can be written into a value unambiguously.
func validOption(o Option) error {
	if o.Key == "" || strings.ContainsAny(o.Key, ",:[] \t\n\r") {
		return fmt.Errorf("envinject: invalid allocator option key %q: it must be non-empty and contain none of , : [ ] or spaces", o.Key)
	}
	v := o.Value
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		inner := v[1 : len(v)-1]
		if inner != "" && !strings.ContainsAny(inner, "[]") {
			return nil
		}
	}
	if v == "" || strings.ContainsAny(v, ",:[] \t\n\r") {
		return fmt.Errorf("envinject: invalid value %q for allocator option %q: give one word, or a [bracketed,list]", v, o.Key)
	}
	return nil
}

// appendOption adds key:value at the end of value, keeping the user's text.
func appendOption(value, key, val string) string {
	trimmed := strings.TrimRight(value, " \t")
	if strings.TrimSpace(trimmed) == "" {
		return key + ":" + val
	}
	if strings.HasSuffix(trimmed, ",") {
		return trimmed + key + ":" + val
	}
	return trimmed + "," + key + ":" + val
}

// item is one key:value option of a parsed value, with the byte span of its
// value in the original string.
type item struct {
	key        string
	value      string // whitespace removed, as PyTorch sees it
	valueStart int
	valueEnd   int
}

type parsed struct{ items []item }

// get returns the effective value of key: PyTorch applies options in order,
// so the last one wins.
func (p *parsed) get(key string) (string, bool) {
	for i := len(p.items) - 1; i >= 0; i-- {
		if p.items[i].key == key {
			return p.items[i].value, true
		}
	}
	return "", false
}

// replace rewrites every occurrence of key in s (the string p was parsed
// from) to val, leaving the rest of the user's text as it was.
func (p *parsed) replace(s, key, val string) string {
	var b strings.Builder
	last := 0
	for _, it := range p.items {
		if it.key != key {
			continue
		}
		b.WriteString(s[last:it.valueStart])
		b.WriteString(val)
		last = it.valueEnd
	}
	b.WriteString(s[last:])
	return b.String()
}

type token struct {
	text       string // whitespace removed
	start, end int    // byte span in the source
}

// lex splits s the way PyTorch's ConfigTokenizer does: ',', ':', '[' and ']'
// are tokens of their own, whitespace is dropped, anything else accumulates.
func lex(s string) []token {
	var toks []token
	var cur strings.Builder
	curStart, curEnd := -1, -1
	flush := func() {
		if cur.Len() > 0 {
			toks = append(toks, token{text: cur.String(), start: curStart, end: curEnd})
			cur.Reset()
		}
		curStart = -1
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ',', ':', '[', ']':
			flush()
			toks = append(toks, token{text: string(c), start: i, end: i + 1})
		case ' ', '\t', '\n', '\r', '\v', '\f':
			// ignored, but does not end the word
		default:
			if curStart < 0 {
				curStart = i
			}
			cur.WriteByte(c)
			curEnd = i + 1
		}
	}
	flush()
	return toks
}

func isPunct(t token) bool {
	return t.text == "," || t.text == ":" || t.text == "[" || t.text == "]"
}

// parse checks s against PyTorch's grammar and returns its options.
func parse(s string) (*parsed, error) {
	toks := lex(s)
	p := &parsed{}
	for i := 0; i < len(toks); {
		k := toks[i]
		if isPunct(k) {
			if k.text == "," {
				return nil, fmt.Errorf("empty option before ',' at byte %d", k.start+1)
			}
			return nil, fmt.Errorf("option has an empty key (%q at byte %d)", k.text, k.start+1)
		}
		if i+1 >= len(toks) || toks[i+1].text != ":" {
			return nil, fmt.Errorf("option %q has no ':value'", k.text)
		}
		if i+2 >= len(toks) {
			return nil, fmt.Errorf("option %q has an empty value", k.text)
		}
		v := toks[i+2]
		it := item{key: k.text, valueStart: v.start}
		next := i + 3
		switch {
		case v.text == "[":
			j := i + 3
			var b strings.Builder
			b.WriteString("[")
			for j < len(toks) && toks[j].text != "]" {
				if toks[j].text == "[" {
					return nil, fmt.Errorf("option %q: nested '[' in list", k.text)
				}
				b.WriteString(toks[j].text)
				j++
			}
			if j >= len(toks) {
				return nil, fmt.Errorf("option %q: list has no closing ']'", k.text)
			}
			b.WriteString("]")
			it.value, it.valueEnd = b.String(), toks[j].end
			next = j + 1
		case isPunct(v):
			return nil, fmt.Errorf("option %q has an empty value", k.text)
		default:
			it.value, it.valueEnd = v.text, v.end
		}
		p.items = append(p.items, it)
		if next < len(toks) {
			if toks[next].text != "," {
				return nil, fmt.Errorf("option %q: expected ',' after its value, found %q", k.text, toks[next].text)
			}
			next++
		}
		i = next
	}
	return p, nil
}
