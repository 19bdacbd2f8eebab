// Package allocconf reads and writes option lists in the syntax of
// PyTorch's caching-allocator variables (PYTORCH_CUDA_ALLOC_CONF and its
// siblings): comma-separated key:value options, where a value may be a
// bracketed list whose commas belong to it, as in
// "expandable_segments:True,roundup_power2_divisions:[256:1,>:4]".
//
// A value is first cut into options at the commas outside brackets. There
// are then two readings of each option:
//
//   - Parse reads the value as PyTorch does: whitespace is dropped even
//     inside words, one trailing comma is accepted, and anything PyTorch
//     would reject (an option without ':value', "a:b:c", an empty key or
//     value, ",,", an unclosed or nested '[') is an error. envinject uses it
//     for the values it merges into, and Set edits such a value in place,
//     keeping the rest of the user's text.
//   - Split never fails: it trims spaces around keys and values, skips empty
//     options and keeps the ones PyTorch would reject. The policy's merge_env
//     uses it, as it may merge into any variable holding such a list.
//
// The package is pure: it works on strings only.
package allocconf

import (
	"fmt"
	"slices"
	"strings"
)

// Option is one key:value option.
type Option struct {
	Key   string
	Value string
	// NoValue: the option has no ':' at all ("expandable_segments"). Only
	// Split returns such options; String writes them back as the bare key.
	NoValue bool
}

// String writes the option as key:value, or key alone when it has no value.
func (o Option) String() string {
	if o.NoValue {
		return o.Key
	}
	return o.Key + ":" + o.Value
}

// Check reports whether o can be written into a value unambiguously: its key
// is one word, and its value one word or a [bracketed,list] with no
// brackets inside.
func (o Option) Check() error {
	if o.Key == "" || strings.ContainsAny(o.Key, ",:[] \t\n\r") {
		return fmt.Errorf("invalid allocator option key %q: it must be non-empty and contain none of , : [ ] or spaces", o.Key)
	}
	v := o.Value
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		inner := v[1 : len(v)-1]
		if inner != "" && !strings.ContainsAny(inner, "[]") {
			return nil
		}
	}
	if v == "" || strings.ContainsAny(v, ",:[] \t\n\r") {
		return fmt.Errorf("invalid value %q for allocator option %q: give one word, or a [bracketed,list]", v, o.Key)
	}
	return nil
}

// List is a value's options, in order.
type List []Option

// String writes the options as one value, "key:value,key:value".
func (l List) String() string {
	parts := make([]string, len(l))
	for i, o := range l {
		parts[i] = o.String()
	}
	return strings.Join(parts, ",")
}

// Get returns the value of key. PyTorch applies options in order, so when
// key is given more than once the last one wins.
func (l List) Get(key string) (string, bool) {
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].Key == key {
			return l[i].Value, true
		}
	}
	return "", false
}

// Has reports whether l holds o, with the same value.
func (l List) Has(o Option) bool { return slices.Contains(l, o) }

// Merge returns base with the options of override applied: an option whose
// key base already has replaces every option of that key where it stands,
// and the others are appended in order. base is not modified.
func Merge(base, override List) List {
	out := slices.Clone(base)
	for _, o := range override {
		found := false
		for i := range out {
			if out[i].Key == o.Key {
				out[i] = o
				found = true
			}
		}
		if !found {
			out = append(out, o)
		}
	}
	return out
}

// Split cuts s into its options without judging them, for values gpuguard
// merges into whatever they hold: spaces around keys and values are
// trimmed, empty options are skipped, the key is what comes before the
// first ':' and the value all after it ("a:b:c" is key a, value "b:c").
func Split(s string) List {
	var out List
	for _, p := range parts(s) {
		text := strings.TrimSpace(s[p.start:p.end])
		if text == "" {
			continue
		}
		k, v, ok := strings.Cut(text, ":")
		out = append(out, Option{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v), NoValue: !ok})
	}
	return out
}

// Parse reads s as PyTorch does and returns its options, with whitespace
// removed from keys and values. An empty value has no options. The error
// says what PyTorch would reject and where.
func Parse(s string) (List, error) {
	items, err := parse(s)
	if err != nil {
		return nil, err
	}
	out := make(List, len(items))
	for i, it := range items {
		out[i] = it.Option
	}
	return out, nil
}

// Set returns s with key set to value, keeping the rest of the user's text
// (spacing, a trailing comma) as it was: the value of every option key is
// replaced where it stands, or key:value is appended when s has no such
// option. s must be well-formed: the error is Parse's.
func Set(s, key, value string) (string, error) {
	items, err := parse(s)
	if err != nil {
		return s, err
	}
	var b strings.Builder
	last, found := 0, false
	for _, it := range items {
		if it.Key != key {
			continue
		}
		b.WriteString(s[last:it.valueStart])
		b.WriteString(value)
		last, found = it.valueEnd, true
	}
	if !found {
		trimmed := strings.TrimRight(s, " \t\n\r\v\f") // the whitespace PyTorch drops
		switch {
		case strings.TrimSpace(trimmed) == "":
			return key + ":" + value, nil
		case strings.HasSuffix(trimmed, ","):
			return trimmed + key + ":" + value, nil
		}
		return trimmed + "," + key + ":" + value, nil
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// part is one comma-separated part of a value: s[start:end], and whether a
// comma ends it (at s[end]).
type part struct {
	start, end int
	comma      bool
}

// parts cuts s at the commas outside [brackets]. This is the one place
// where options are told apart; Split and Parse read each part.
func parts(s string) []part {
	var out []part
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth = max(0, depth-1)
		case ',':
			if depth == 0 {
				out = append(out, part{start: start, end: i, comma: true})
				start = i + 1
			}
		}
	}
	return append(out, part{start: start, end: len(s)})
}

// item is one option as Parse reads it, with the byte span of its value in
// the text it was read from, for Set.
type item struct {
	Option
	valueStart, valueEnd int
}

func parse(s string) ([]item, error) {
	var out []item
	for _, p := range parts(s) {
		toks := lex(s, p.start, p.end)
		if len(toks) == 0 {
			// Nothing between two commas; after the last one, nothing is
			// the trailing comma PyTorch accepts.
			if p.comma {
				return nil, fmt.Errorf("empty option before ',' at byte %d", p.end+1)
			}
			continue
		}
		it, err := option(toks)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// option reads one option from its tokens: KEY ':' VALUE, where VALUE is a
// word or '[' tokens other than '[' ']'. The messages are PyTorch's
// complaints in words.
func option(toks []token) (item, error) {
	k := toks[0]
	if isPunct(k) {
		return item{}, fmt.Errorf("option has an empty key (%q at byte %d)", k.text, k.start+1)
	}
	if len(toks) < 2 || toks[1].text != ":" {
		return item{}, fmt.Errorf("option %q has no ':value'", k.text)
	}
	if len(toks) < 3 {
		return item{}, fmt.Errorf("option %q has an empty value", k.text)
	}
	v := toks[2]
	it := item{Option: Option{Key: k.text}, valueStart: v.start}
	next := 3
	switch {
	case v.text == "[":
		var b strings.Builder
		b.WriteString("[")
		j := 3
		for ; j < len(toks) && toks[j].text != "]"; j++ {
			if toks[j].text == "[" {
				return item{}, fmt.Errorf("option %q: nested '[' in list", k.text)
			}
			b.WriteString(toks[j].text)
		}
		if j >= len(toks) {
			return item{}, fmt.Errorf("option %q: list has no closing ']'", k.text)
		}
		b.WriteString("]")
		it.Value, it.valueEnd = b.String(), toks[j].end
		next = j + 1
	case isPunct(v):
		return item{}, fmt.Errorf("option %q has an empty value", k.text)
	default:
		it.Value, it.valueEnd = v.text, v.end
	}
	if next < len(toks) {
		return item{}, fmt.Errorf("option %q: expected ',' after its value, found %q", k.text, toks[next].text)
	}
	return it, nil
}

type token struct {
	text       string // whitespace removed
	start, end int    // byte span in the source
}

// lex splits s[from:to] the way PyTorch's ConfigTokenizer does: ',', ':',
// '[' and ']' are tokens of their own, whitespace is dropped, anything else
// accumulates (so whitespace inside a word does not end it).
func lex(s string, from, to int) []token {
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
	for i := from; i < to; i++ {
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
