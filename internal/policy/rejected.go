package policy

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// A relaunch that adds or changes a knob the job does not take (a flag its
// argument parser does not know, a key its config has no place for) fails at
// once, before any training, whatever the values: relaunching again cannot
// help, and calling it a crash hides the real mistake, which is in the
// policy. The supervisor passes the output lines in which the job refused
// an argument or a key (RejectionLine says which) as Outcome.Rejections;
// Decide checks them against the knobs the last relaunch changed.

// rejectionRE matches the lines in which a program refuses an argument or a
// configuration key: argparse's "error: unrecognized arguments: --x 2",
// Hydra's "Could not override 'x'" and OmegaConf's "Key 'x' is not in
// struct", Python's "got an unexpected keyword argument 'x'", a KeyError.
var rejectionRE = regexp.MustCompile(`error: unrecognized arguments?:|Could not override '|Key '[^']*' is not in struct|unexpected keyword argument|KeyError: |error: argument [^ ]+: invalid|ConfigAttributeError: `)

// RejectionLine reports whether a line of the job's output says that it
// refused an argument or a configuration key. The supervisor keeps such
// lines for Outcome.Rejections.
// It is called on every line, so it looks for the words all the forms share
// before it runs the expression.
func RejectionLine(text []byte) bool {
	if len(text) > 4096 {
		return false
	}
	for _, w := range rejectionWords {
		if bytes.Contains(text, w) {
			return rejectionRE.Match(text)
		}
	}
	return false
}

var rejectionWords = [][]byte{[]byte("rror"), []byte("override"), []byte("Key '"), []byte("keyword argument")}

// Relaunched is what the last relaunch was for and what it changed: the
// attempt it followed failed with Kind in Phase, asking for RequestedBytes
// (nil: the message did not say). The next decision reads it to tell
// whether the change was refused by the job (a rejected knob) or did not
// touch the failure at all (the same request at the same place).
type Relaunched struct {
	Attempt        int      `json:"attempt"` // the attempt that failed
	Rule           string   `json:"rule"`
	Step           int      `json:"step"` // 1-based
	Changes        []Change `json:"changes,omitempty"`
	Kind           string   `json:"kind"`
	Phase          string   `json:"phase,omitempty"`
	RequestedBytes *int64   `json:"requested_bytes,omitempty"`
	Site           string   `json:"site,omitempty"` // Verdict.Site: where in the code the allocation failed
}

func (r *Relaunched) clone() *Relaunched {
	if r == nil {
		return nil
	}
	out := *r
	out.Changes = append([]Change(nil), r.Changes...)
	if r.RequestedBytes != nil {
		b := *r.RequestedBytes
		out.RequestedBytes = &b
	}
	return &out
}

// KnobAt is where knob name is defined in the policy file, "file:line" (""
// for an unknown knob): what a user edits when the job rejects the knob.
func (p *Policy) KnobAt(name string) string {
	k := p.knobByName[name]
	if k == nil || k.node == nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", p.file, k.node.Line)
}

// spellings are the words by which the job's output may name knob k: its
// flags, its key=value key, its YAML key (whole and last part). An
// environment variable is never rejected by a parser.
func (k *knob) spellings() []string {
	var out []string
	add := func(key string) {
		out = append(out, key)
		if i := strings.LastIndexByte(key, '.'); i >= 0 && i+1 < len(key) {
			out = append(out, key[i+1:])
		}
	}
	switch k.where {
	case whereFlag:
		out = append(out, k.flags...)
	case whereArg:
		add(k.arg)
	case whereYAML:
		add(strings.Join(k.yamlKey, "."))
	}
	return out
}

// names reports whether line names word as a whole word: not as part of a
// longer flag or key (--accum-steps is not named by --accum-steps-x nor
// data.accum by data.accum_steps).
func names(line, word string) bool {
	isWord := func(c byte) bool {
		return c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; ; {
		j := strings.Index(line[i:], word)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(word)
		before := j == 0 || !isWord(line[j-1])
		after := end == len(line) || !isWord(line[end]) || line[end] == '.' && (end+1 == len(line) || line[end+1] == ' ')
		if before && after {
			return true
		}
		i = j + 1
	}
}

// rejected finds a knob that the last relaunch changed and that one of the
// rejection lines names. It returns the knob's change and the line.
func (p *Policy) rejected(last *Relaunched, lines []string) (Change, string, bool) {
	if last == nil {
		return Change{}, "", false
	}
	for _, line := range lines {
		for _, c := range last.Changes {
			k := p.knobByName[c.Knob]
			if k == nil {
				continue
			}
			for _, w := range k.spellings() {
				if names(line, w) {
					return c, line, true
				}
			}
		}
	}
	return Change{}, "", false
}

// rejectedReason is the reason a decision gives up for when the job refused
// the knob of change c, as it said in line.
func (p *Policy) rejectedReason(what string, last *Relaunched, c Change, line string) string {
	k := p.knobByName[c.Knob]
	var hint string
	switch where := k.where; {
	case where == whereFlag && strings.Contains(line, ": invalid "):
		hint = fmt.Sprintf("the job does not take %s as %s: bound the knob (min:, multiple_of:) or use an action that keeps its type", c.New, k.flags[0])
	case where == whereFlag:
		hint = fmt.Sprintf("the job does not take %s: give the knob the flag the job's own --help lists", k.flags[0])
	case where == whereArg:
		hint = fmt.Sprintf("the job's configuration has no key %s: fix the key, or add it with add_prefix: \"++\" (Hydra's add-or-override)", k.arg)
	case where == whereYAML:
		hint = fmt.Sprintf("the job does not read %s from its config: fix the knob's key", strings.Join(k.yamlKey, "."))
	}
	return fmt.Sprintf("%s: the job rejected knob %s, which rule %s step %d had just changed (%s): %q. Relaunching cannot help: %s (knob %s is defined at %s)",
		what, c.Knob, last.Rule, last.Step, c, strings.TrimSpace(line), hint, c.Knob, p.KnobAt(c.Knob))
}
