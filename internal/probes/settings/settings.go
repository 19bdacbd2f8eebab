// Package settings reads, from a job's output, the value the job says it
// really uses for a knob: the echo of its settings that most trainers print
// as they start (an argparse Namespace(batch_size=16, ...), key=value and
// key: value lines, YAML, JSON and Python dict dumps of a config,
// Ultralytics' "engine/trainer: ... batch=16, ..." banner, the Hugging Face
// Trainer's "Instantaneous batch size per device = 32", "Restoring
// train_batch_size=32 from the checkpoint").
//
// A knob is found by the spellings of its key: its name and the policy's
// flag, environment variable or config key for it, compared word by word
// with "_", "-", "." and spaces alike (--batch-size, batch_size, BATCH_SIZE
// and "batch size" are one key). The words around a key decide whether it is
// the knob or another setting: a key qualified by another setting's word
// (val_batch_size, "effective batch size", "Total train batch size") is not
// the knob; the per-device words ("per_device_train_batch_size", "batch size
// per device") are. A key inside a path (runs/batch_size=32/ckpt.pt) is not
// a setting.
//
// The package is pure: it reads lines it is given. A line that names no
// knob costs no allocation.
package settings

import (
	"bytes"
	"strconv"
	"strings"
)

// Key is one knob to look for: its name and the other spellings of its
// key (flags, environment variables, config keys), as the policy gives
// them.
type Key struct {
	Knob      string
	Spellings []string
}

// Seen is a value a line says the job uses for a knob.
type Seen struct {
	Knob  string
	Value string // as the line writes it, quotes removed
	Col   int    // byte offset of the key in the line
}

// Reader finds knob values in lines. It is safe for concurrent use (it
// keeps no state between lines).
type Reader struct {
	keys []spelling
}

// spelling is one way of writing a knob's key: its words, lower case.
type spelling struct {
	knob  string
	words [][]byte
}

// New returns a Reader of the knobs keys. Spellings shorter than three
// letters (-b, -j) are left out: they name nothing reliably in a log.
func New(keys []Key) *Reader {
	r := &Reader{}
	seen := map[string]bool{}
	for _, k := range keys {
		for _, s := range append([]string{k.Knob}, k.Spellings...) {
			w := words(s)
			for _, ws := range [][]string{w, core(w)} {
				id := k.Knob + "\x00" + strings.Join(ws, " ")
				if len(ws) == 0 || len(strings.Join(ws, "")) < 3 || seen[id] {
					continue
				}
				seen[id] = true
				sp := spelling{knob: k.Knob}
				for _, x := range ws {
					sp.words = append(sp.words, []byte(x))
				}
				r.keys = append(r.keys, sp)
			}
		}
	}
	return r
}

// words splits a key's spelling into its lower-case words: "--batch-size",
// "BATCH_SIZE", "train.batch_size" and "batch size" are all [batch size]
// (a config path's last element only).
func words(s string) []string {
	s = strings.TrimLeft(s, "-+")
	if i := strings.LastIndexByte(s, '.'); i >= 0 && i+1 < len(s) {
		s = s[i+1:]
	}
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !isWordRune(r) })
}

func isWordRune(r rune) bool { return r < 0x80 && isAlnum(byte(r)) }

// core is a spelling without the per-device words around it
// (per_device_train_batch_size: batch size), so that a knob named by the
// Trainer's long flag is found in its shorter echoes too; nil when nothing
// is left out.
func core(w []string) []string {
	i, j := 0, len(w)
	for i < j-1 && qualifier(w[i]) {
		i++
	}
	for j > i+1 && suffixWord(w[j-1]) {
		j--
	}
	if i == 0 && j == len(w) {
		return nil
	}
	return w[i:j]
}

// qualifier: a word before a key that keeps it the knob (the training
// batch, per device). Any other word joined to the key by _ or - makes
// another setting of it (val_batch_size).
func qualifier(w string) bool {
	switch w {
	case "train", "training", "per", "device", "gpu", "instantaneous", "local", "micro":
		return true
	}
	return false
}

// suffixWord: a word after a key that keeps it the knob (batch size per
// device).
func suffixWord(w string) bool {
	switch w {
	case "per", "device", "gpu":
		return true
	}
	return false
}

// other: a word before a key, even set apart by a space, that makes it
// another setting ("effective batch size", "Total train batch size").
func other(w string) bool {
	switch w {
	case "effective", "total", "global", "eval", "evaluation", "val", "valid", "validation", "test", "testing",
		"max", "min", "maximum", "minimum", "accumulated", "mean", "avg", "average", "predict", "inference":
		return true
	}
	return false
}

// Append appends to dst what line says of the knobs, at most one value per
// knob (the first the line gives), and returns it. A line that names no
// knob leaves dst as it was and allocates nothing.
func (r *Reader) Append(dst []Seen, line []byte) []Seen {
	start := len(dst)
keys:
	for _, k := range r.keys {
		for _, s := range dst[start:] {
			if s.Knob == k.knob {
				continue keys
			}
		}
		for from := 0; from < len(line); {
			i := indexFold(line, k.words[0], from)
			if i < 0 {
				break
			}
			from = i + 1
			if v, ok := k.at(line, i); ok {
				dst = append(dst, Seen{Knob: k.knob, Value: v, Col: i})
				break
			}
		}
	}
	return dst
}

// at reads the value of the key whose first word is at line[i], if the
// words around it make it this knob's setting.
func (k spelling) at(line []byte, i int) (string, bool) {
	j := i + len(k.words[0])
	for _, w := range k.words[1:] {
		if j >= len(line) || !isSep(line[j]) || !hasFold(line[j+1:], w) {
			return "", false
		}
		j += 1 + len(w)
	}
	if !leftOK(line, i) {
		return "", false
	}
	// Words after the key: per-device ones are part of it; any other
	// joined by _ - or . makes another setting (batch_size_total).
	for j < len(line) && isSep(line[j]) {
		e := j + 1
		for e < len(line) && isAlnum(line[e]) {
			e++
		}
		if e > j+1 && suffixWord(lower(line[j+1:e])) {
			j = e
			continue
		}
		if line[j] != ' ' && e > j+1 {
			return "", false
		}
		break
	}
	if j < len(line) && isAlnum(line[j]) {
		return "", false // the key is the start of a longer word
	}
	if j < len(line) && (line[j] == '\'' || line[j] == '"') {
		j++ // a dict's or JSON's quoted key
	}
	for j < len(line) && line[j] == ' ' {
		j++
	}
	if j >= len(line) || (line[j] != '=' && line[j] != ':') {
		return "", false
	}
	if j+1 < len(line) && (line[j+1] == '=' || line[j+1] == ':') {
		return "", false // a comparison or a C++ scope, not a setting
	}
	j++
	for j < len(line) && line[j] == ' ' {
		j++
	}
	quote := byte(0)
	if j < len(line) && (line[j] == '\'' || line[j] == '"') {
		quote = line[j]
		j++
	}
	e := j
	for e < len(line) && !endsValue(line[e], quote) {
		if line[e] == '/' || line[e] == '\\' {
			return "", false // a path
		}
		e++
	}
	if quote == 0 {
		for e > j && line[e-1] == '.' {
			e-- // the end of a sentence
		}
	}
	if e == j {
		return "", false
	}
	return string(line[j:e]), true
}

// leftOK reports whether what comes before the key at line[i] leaves it the
// knob: the start of the line or of a word, the qualifiers only joined to
// it, and no other setting's word before it.
func leftOK(line []byte, i int) bool {
	p := i
	for p > 0 {
		c := line[p-1]
		if isAlnum(c) || c == '/' || c == '\\' {
			return false
		}
		if !isSep(c) {
			return true
		}
		b := p - 1
		for b > 0 && isAlnum(line[b-1]) {
			b--
		}
		if b == p-1 {
			return true // --batch-size, "  batch size"
		}
		w := lower(line[b : p-1])
		switch {
		case other(w):
			return false
		case qualifier(w):
			p = b
		case c == ' ' || c == '.':
			// A word of the sentence (Restoring train_batch_size), or a
			// namespace (config.batch_size).
			if c == ' ' {
				return true
			}
			p = b
		default:
			return false // my_batch_size, 1e-4_batch_size
		}
	}
	return true
}

// lower returns w in lower case, without allocating for the few words
// qualifier, suffixWord and other compare with (longer words are not
// among them).
func lower(w []byte) string {
	var buf [16]byte
	if len(w) > len(buf) {
		return ""
	}
	for i, c := range w {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return lowerWords(buf[:len(w)])
}

// lowerWords returns the constant equal to w among the words the package
// compares with, or "" (so that lower does not allocate).
func lowerWords(w []byte) string {
	for _, s := range knownWords {
		if string(w) == s {
			return s
		}
	}
	return ""
}

var knownWords = []string{
	"train", "training", "per", "device", "gpu", "instantaneous", "local", "micro",
	"effective", "total", "global", "eval", "evaluation", "val", "valid", "validation", "test", "testing",
	"max", "min", "maximum", "minimum", "accumulated", "mean", "avg", "average", "predict", "inference",
}

// An unknown word reads as "", which is neither qualifier, suffix nor
// other: the callers treat it as a word of its own.

func endsValue(c, quote byte) bool {
	if quote != 0 {
		return c == quote
	}
	switch c {
	case ',', ')', '}', ']', ' ', '\t', '\'', '"', ';', '|', '>':
		return true
	}
	return false
}

func isSep(c byte) bool { return c == '_' || c == '-' || c == '.' || c == ' ' }

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// indexFold is the index of w (lower case) in s from from on, ignoring
// ASCII case, or -1.
func indexFold(s, w []byte, from int) int {
	lo, up := w[0], w[0]
	if 'a' <= lo && lo <= 'z' {
		up = lo - ('a' - 'A')
	}
	for i := from; i+len(w) <= len(s); {
		j := bytes.IndexByte(s[i:], lo)
		if up != lo {
			if k := bytes.IndexByte(s[i:], up); k >= 0 && (j < 0 || k < j) {
				j = k
			}
		}
		if j < 0 {
			return -1
		}
		i += j
		if hasFold(s[i:], w) {
			return i
		}
		i++
	}
	return -1
}

func hasFold(s, w []byte) bool {
	if len(s) < len(w) {
		return false
	}
	for i, c := range w {
		d := s[i]
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if d != c {
			return false
		}
	}
	return true
}

// Compare says whether the value a job uses (used, as Seen gives it) is
// the value set (a knob's text), and whether the two can be compared at
// all: numbers with numbers (16 and 16.0 are one value), null with None,
// null or ~, true and false with their spellings, other text with text.
// A value of another kind (a number set, a word read) is not evidence.
func Compare(set, used string) (same, comparable bool) {
	a, aerr := strconv.ParseFloat(set, 64)
	b, berr := strconv.ParseFloat(used, 64)
	switch {
	case aerr == nil && berr == nil:
		return a == b, true
	case aerr == nil || berr == nil:
		return false, false
	}
	norm := func(s string) string {
		switch strings.ToLower(s) {
		case "none", "null", "~", "":
			return "null"
		case "true", "yes", "on":
			return "true"
		case "false", "no", "off":
			return "false"
		}
		return s
	}
	return strings.EqualFold(norm(set), norm(used)), true
}
