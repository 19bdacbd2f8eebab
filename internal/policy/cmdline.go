package policy

import (
	"strings"
)

// occurrence is one place in argv where a flag or key=value word sets a
// value.
type occurrence struct {
	idx    int    // index of the word holding the value
	prefix string // text before the value in that word ("--bs=", "+batch="), "" when the value is a word of its own
	value  string
	bare   bool // a flag given without a value
	// flag is the flag as the command spells it ("-b" where the knob's
	// first flag is --batch-size), for messages; "" for a key=value word.
	flag string
}

// findFlag returns every place argv sets one of the flags, as "--flag
// VALUE" (two words) or "--flag=VALUE". argv[0], the program, is skipped.
// A flag followed by another flag (a word starting with - that is not a
// number), or ending the command, is a bare switch ("--fp16"): its value
// reads as "true", and writing a value turns it into "--flag=VALUE".
func findFlag(argv []string, flags []string) []occurrence {
	var occ []occurrence
	for i := 1; i < len(argv); i++ {
		w := argv[i]
		for _, f := range flags {
			switch {
			case w == f:
				if i+1 >= len(argv) || isFlagWord(argv[i+1]) {
					occ = append(occ, occurrence{idx: i, prefix: f + "=", value: "true", bare: true, flag: f})
					break
				}
				occ = append(occ, occurrence{idx: i + 1, value: argv[i+1], flag: f})
				i++
			case strings.HasPrefix(w, f+"="):
				occ = append(occ, occurrence{idx: i, prefix: f + "=", value: w[len(f)+1:], flag: f})
			case isShortFlag(f) && len(w) > len(f) && strings.HasPrefix(w, f):
				// argparse's attached short form: -b16 is -b 16.
				occ = append(occ, occurrence{idx: i, prefix: f, value: w[len(f):], flag: f})
			default:
				continue
			}
			break
		}
	}
	return occ
}

// isShortFlag reports whether f is a one-letter flag ("-b"), which argparse
// also takes with its value attached ("-b16").
func isShortFlag(f string) bool {
	return len(f) == 2 && f[0] == '-' && f[1] != '-'
}

// isFlagWord reports whether w looks like a flag rather than a value: it
// starts with - and is not a negative number.
func isFlagWord(w string) bool {
	if len(w) < 2 || w[0] != '-' {
		return false
	}
	_, ok := parseNumber(Value{Text: w})
	return !ok
}

// findArg returns every key=VALUE word in argv, also in Hydra's +key=VALUE
// and ++key=VALUE forms.
func findArg(argv []string, key string) []occurrence {
	var occ []occurrence
	for i := 1; i < len(argv); i++ {
		w := argv[i]
		bare := strings.TrimPrefix(strings.TrimPrefix(w, "+"), "+")
		if strings.HasPrefix(bare, key+"=") {
			n := len(w) - len(bare) + len(key) + 1
			occ = append(occ, occurrence{idx: i, prefix: w[:n], value: w[n:]})
		}
	}
	return occ
}

// setOccurrences writes value at every occurrence (argv is changed in place).
func setOccurrences(argv []string, occ []occurrence, value string) {
	for _, o := range occ {
		argv[o.idx] = o.prefix + value
	}
}

// WithoutResume is argv without the arguments that pass a checkpoint, as
// the policy's checkpoints.pass adds them ("--resume PATH", "ckpt_path=PATH",
// a template's words): the command as the user means it, whichever
// checkpoint it resumes from. The memo keys its entries by it.
func (p *Policy) WithoutResume(argv []string) []string {
	ps := p.ckptPass
	drop := map[int]bool{}
	switch ps.how {
	case "flag":
		for _, o := range findFlag(argv, []string{ps.name}) {
			drop[o.idx] = true
			if o.prefix == "" {
				drop[o.idx-1] = true
			}
		}
	case "arg":
		for _, o := range findArg(argv, ps.name) {
			drop[o.idx] = true
		}
	case "template":
		n := len(ps.template)
		for i := 1; n > 0 && i+n <= len(argv); i++ {
			if templateAt(argv[i:i+n], ps.template) {
				for j := i; j < i+n; j++ {
					drop[j] = true
				}
				i += n - 1
			}
		}
	}
	out := make([]string, 0, len(argv))
	for i, w := range argv {
		if !drop[i] {
			out = append(out, w)
		}
	}
	return out
}

// templateAt reports whether words are the template's, {checkpoint} standing
// for any text.
func templateAt(words, template []string) bool {
	for i, t := range template {
		pre, post, ok := strings.Cut(t, "{checkpoint}")
		if !ok {
			if words[i] != t {
				return false
			}
			continue
		}
		w := words[i]
		if len(w) < len(pre)+len(post) || !strings.HasPrefix(w, pre) || !strings.HasSuffix(w, post) {
			return false
		}
	}
	return true
}
