package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// configDoc is a YAML config file of the job, parsed for reading and for
// deriving a changed copy.
type configDoc struct {
	src  []byte
	doc  *yaml.Node // the document node of the first document
	more bool       // the file holds more than one document
}

func parseConfig(data []byte) (*configDoc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &configDoc{src: data}, nil // empty file: every key is missing
		}
		return nil, fmt.Errorf("not valid YAML: %s", trimYAMLPrefix(err.Error()))
	}
	var next yaml.Node
	more := dec.Decode(&next) == nil
	return &configDoc{src: data, doc: &doc, more: more}, nil
}

func (d *configDoc) root() *yaml.Node {
	if d.doc == nil || len(d.doc.Content) == 0 {
		return nil
	}
	return resolve(d.doc.Content[0])
}

func joinKey(path []string) string { return strings.Join(path, ".") }

// lookup finds the node at a dotted key path: mapping keys by name,
// sequence items by index. key is the mapping key node holding the value
// (nil for a sequence item). A path through something that is not a
// mapping or sequence is an error; a missing key is not (found is false).
func (d *configDoc) lookup(path []string) (key, val *yaml.Node, found bool, err error) {
	n := d.root()
	if n == nil {
		return nil, nil, false, nil
	}
	for i, part := range path {
		n = resolve(n)
		switch n.Kind {
		case yaml.MappingNode:
			key, val = nil, nil
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == part {
					key, val = n.Content[j], n.Content[j+1]
				}
			}
			if val == nil {
				return nil, nil, false, nil
			}
		case yaml.SequenceNode:
			idx, convErr := strconv.Atoi(part)
			if convErr != nil || idx < 0 {
				return nil, nil, false, fmt.Errorf("%s is a list; %q is not an index", joinKey(path[:i]), part)
			}
			if idx >= len(n.Content) {
				return nil, nil, false, nil
			}
			key, val = nil, n.Content[idx]
		default:
			return nil, nil, false, fmt.Errorf("%s is %s, not a mapping, so it has no key %q", joinKey(path[:i]), kindName(n), part)
		}
		n = val
	}
	return key, val, true, nil
}

// value returns the value at path: a scalar's text or null. A mapping or a
// list there is an error: a knob is one value.
func (d *configDoc) value(path []string) (Value, bool, error) {
	_, n, found, err := d.lookup(path)
	if err != nil || !found {
		return Value{}, false, err
	}
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return Value{}, false, fmt.Errorf("%s is %s; a knob must be a single value", joinKey(path), kindName(n))
	}
	return nodeValue(n), true, nil
}

// configEdit sets the value at a key path.
type configEdit struct {
	path  []string
	value Value
}

// splice replaces src[start:end] with text.
type splice struct {
	start, end int
	text       string
}

// deriveConfig returns a copy of the config with edits applied and with
// relative path strings rewritten by relocate (which returns the new text
// and true for a string to rewrite; nil rewrites nothing). It also returns
// how many strings relocate rewrote.
//
// The copy keeps the file as it was, byte for byte, except where a value
// changes: each changed scalar is replaced in place in the source text, so
// comments, key order, indentation, quoting and blank lines all stay. When
// an edit cannot be made in place (the key is missing and must be added, the
// value is an alias, a block scalar or spans lines), the whole document is
// re-encoded from its node tree instead: comments and key order are still
// kept, but indentation is normalised to the file's first indentation step.
// A missing key is added (creating missing parent mappings); a path through
// a scalar is an error, and so is adding a key to a file of several YAML
// documents, and a value that is not valid UTF-8.
func deriveConfig(src []byte, edits []configEdit, relocate func(string) (string, bool)) ([]byte, int, error) {
	for _, e := range edits {
		if !utf8.ValidString(e.value.Text) || !utf8.ValidString(joinKey(e.path)) {
			return nil, 0, fmt.Errorf("the key %q or its value is not valid UTF-8 text, which a YAML file cannot hold as a string", joinKey(e.path))
		}
	}
	d, err := parseConfig(src)
	if err != nil {
		return nil, 0, err
	}
	lines := lineStarts(src)
	var splices []splice
	inPlace := true
	for _, e := range edits {
		key, val, found, err := d.lookup(e.path)
		if err != nil {
			return nil, 0, err
		}
		if !found {
			inPlace = false
			continue
		}
		if s, ok := scalarSplice(src, lines, key, val, e.value); ok {
			splices = append(splices, s)
		} else {
			inPlace = false
		}
	}
	moved := 0
	var relocs []func()
	if relocate != nil && d.root() != nil {
		walkStrings(d.root(), func(n *yaml.Node) {
			abs, ok := relocate(n.Value)
			if !ok {
				return
			}
			moved++
			nv := Value{Text: abs}
			if s, ok := scalarSplice(src, lines, nil, n, nv); ok {
				splices = append(splices, s)
			} else {
				inPlace = false
			}
			relocs = append(relocs, func() { setScalar(n, nv) })
		})
	}
	if inPlace && !overlapping(splices) {
		// A splice that leaves the file unreadable (a value beside a tag
		// the splice did not see, found by FuzzDeriveConfig: "0: !" became
		// `0: "" !`) falls back to re-encoding.
		if out := applySplices(src, splices); readsBack(out, edits, relocate) {
			return out, moved, nil
		}
	}
	// Re-encode from the node tree.
	if d.more {
		return nil, 0, errors.New("the file holds several YAML documents; gpuguard can only change such a file where the key already has a single-line value")
	}
	if d.doc == nil {
		d.doc = &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	for _, e := range edits {
		if err := setPath(d.root(), e.path, e.value); err != nil {
			return nil, 0, err
		}
	}
	for _, f := range relocs {
		f()
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(detectIndent(src))
	if err := enc.Encode(d.doc); err != nil {
		return nil, 0, fmt.Errorf("writing the changed config: %v", err)
	}
	if err := enc.Close(); err != nil {
		return nil, 0, fmt.Errorf("writing the changed config: %v", err)
	}
	// The encoder can write what its decoder refuses (a key of tabs and
	// newlines as a block scalar, found by FuzzDeriveConfig): a derived
	// config must never be one the job cannot read.
	var check yaml.Node
	if err := yaml.Unmarshal(buf.Bytes(), &check); err != nil {
		return nil, 0, fmt.Errorf("the changed config would not be valid YAML (%v); change the key or the value in the policy", err)
	}
	return buf.Bytes(), moved, nil
}

// readsBack reports whether b parses as YAML and every edit's key reads
// back as the value written (text that YAML reads as null, such as "~",
// counts as written, and so does a value relocate moved).
func readsBack(b []byte, edits []configEdit, relocate func(string) (string, bool)) bool {
	d, err := parseConfig(b)
	if err != nil {
		return false
	}
	for _, e := range edits {
		got, ok, err := d.value(e.path)
		if err != nil || !ok {
			return false
		}
		nullText := got.Null && (e.value.Text == "~" || strings.EqualFold(e.value.Text, "null"))
		moved := false
		if relocate != nil {
			abs, ok := relocate(e.value.Text)
			moved = ok && got.Text == abs
		}
		if got != e.value && !nullText && !moved {
			return false
		}
	}
	return true
}

// walkStrings calls f for every string scalar that is a value (not a
// mapping key), skipping aliases so that shared values are seen once.
func walkStrings(n *yaml.Node, f func(*yaml.Node)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			walkStrings(n.Content[i], f)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			walkStrings(c, f)
		}
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			f(n)
		}
	}
}

// lineStarts returns the byte offset at which each line starts (index 0 is
// line 1).
func lineStarts(src []byte) []int {
	starts := []int{0}
	for i, b := range src {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// offset converts go-yaml's 1-based line and column (counted in runes) to a
// byte offset, or -1 when the position is not in src.
func offset(src []byte, lines []int, line, col int) int {
	if line < 1 || line > len(lines) || col < 1 {
		return -1
	}
	off := lines[line-1]
	for c := 1; c < col; c++ {
		if off >= len(src) || src[off] == '\n' {
			return -1
		}
		_, size := utf8.DecodeRune(src[off:])
		off += size
	}
	return off
}

// scalarSplice computes the in-place replacement of the scalar val (whose
// mapping key is key, nil for a list item) by v. ok is false when the
// scalar's source text cannot be found exactly where go-yaml says it is, or
// is not on one line: the caller then re-encodes.
func scalarSplice(src []byte, lines []int, key, val *yaml.Node, v Value) (splice, bool) {
	if val.Kind != yaml.ScalarNode || val.Style&(yaml.TaggedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return splice{}, false
	}
	if val.Tag != "" && !strings.HasPrefix(val.Tag, "!!") {
		return splice{}, false // a local tag ("!", "!x") written beside the value
	}
	text, ok := renderScalar(v, val.Style)
	if !ok {
		return splice{}, false
	}
	if val.Value == "" && val.Tag == "!!null" && val.Style == 0 {
		// An empty value ("key:"): go-yaml's position for it is unreliable,
		// so find the colon after the key and insert after it.
		// Not with an anchor ("key: &a"): the value must go after it, and
		// re-encoding keeps it right.
		if key == nil || key.Style != 0 || val.Anchor != "" {
			return splice{}, false
		}
		k := offset(src, lines, key.Line, key.Column)
		if k < 0 || !bytes.HasPrefix(src[k:], []byte(key.Value)) {
			return splice{}, false
		}
		i := k + len(key.Value)
		for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
			i++
		}
		if i >= len(src) || src[i] != ':' {
			return splice{}, false
		}
		return splice{start: i + 1, end: i + 1, text: " " + text}, true
	}
	start := offset(src, lines, val.Line, val.Column)
	if start < 0 {
		return splice{}, false
	}
	end := -1
	switch val.Style {
	case 0: // plain
		if strings.Contains(val.Value, "\n") || !bytes.HasPrefix(src[start:], []byte(val.Value)) {
			return splice{}, false
		}
		end = start + len(val.Value)
	case yaml.DoubleQuotedStyle:
		end = quotedEnd(src, start, '"')
	case yaml.SingleQuotedStyle:
		end = quotedEnd(src, start, '\'')
	case yaml.FlowStyle:
		return splice{}, false
	}
	if end < 0 {
		return splice{}, false
	}
	return splice{start: start, end: end, text: text}, true
}

// quotedEnd returns the offset just past the closing quote of the quoted
// scalar starting at src[start], or -1 when it does not close on the same
// line.
func quotedEnd(src []byte, start int, q byte) int {
	if start >= len(src) || src[start] != q {
		return -1
	}
	for i := start + 1; i < len(src); i++ {
		switch {
		case src[i] == '\n' || src[i] == '\r':
			return -1
		case q == '"' && src[i] == '\\':
			i++
		case src[i] == q:
			if q == '\'' && i+1 < len(src) && src[i+1] == '\'' {
				i++
				continue
			}
			return i + 1
		}
	}
	return -1
}

// renderScalar writes v as a one-line YAML scalar, quoted the way the old
// value was where it was quoted (so that a string stays a string), and
// otherwise plain when YAML allows it. ok is false when it would not fit on
// one line.
func renderScalar(v Value, style yaml.Style) (string, bool) {
	if v.Null {
		return "null", true
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: v.Text, Style: style & (yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle)}
	if v.Text == "" {
		n.Style = yaml.DoubleQuotedStyle // an empty plain scalar would read as null
	}
	if n.Style != 0 {
		n.Tag = "!!str"
	}
	out, err := yaml.Marshal(n)
	if err != nil {
		return "", false
	}
	s := strings.TrimSuffix(string(out), "\n")
	if strings.ContainsAny(s, "\n\r") {
		return "", false
	}
	return s, true
}

func overlapping(s []splice) bool {
	sort.Slice(s, func(i, j int) bool { return s[i].start < s[j].start })
	for i := 1; i < len(s); i++ {
		if s[i].start < s[i-1].end || s[i].start == s[i-1].start {
			return true
		}
	}
	return false
}

func applySplices(src []byte, s []splice) []byte {
	sort.Slice(s, func(i, j int) bool { return s[i].start < s[j].start })
	var out bytes.Buffer
	prev := 0
	for _, sp := range s {
		out.Write(src[prev:sp.start])
		out.WriteString(sp.text)
		prev = sp.end
	}
	out.Write(src[prev:])
	return out.Bytes()
}

// setScalar makes n a scalar holding v, keeping its quoting where it was
// quoted.
func setScalar(n *yaml.Node, v Value) {
	style := n.Style & (yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle)
	// The anchor stays: aliases of it share the value, as they would had
	// the value been replaced in place in the text.
	*n = yaml.Node{Kind: yaml.ScalarNode, Anchor: n.Anchor, Line: n.Line, Column: n.Column, HeadComment: n.HeadComment, LineComment: n.LineComment, FootComment: n.FootComment}
	if v.Null {
		n.Tag, n.Value = "!!null", "null"
		return
	}
	n.Value, n.Style = v.Text, style
	if v.Text == "" {
		n.Style = yaml.DoubleQuotedStyle // an empty plain scalar would read as null
	}
	if n.Style != 0 {
		n.Tag = "!!str"
	}
}

// setPath sets the value at path in the tree under root, adding missing
// mapping keys.
func setPath(root *yaml.Node, path []string, v Value) error {
	n := root
	for i, part := range path {
		last := i == len(path)-1
		switch n.Kind {
		case yaml.MappingNode:
			var val *yaml.Node
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == part {
					val = n.Content[j+1]
				}
			}
			if val == nil {
				val = &yaml.Node{Kind: yaml.MappingNode}
				if last {
					val = &yaml.Node{Kind: yaml.ScalarNode}
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: part}, val)
			}
			if val.Kind == yaml.AliasNode && last {
				// Replace the alias itself, not the anchored value it shares.
				*val = yaml.Node{Kind: yaml.ScalarNode}
			}
			n = resolve(val)
		case yaml.SequenceNode:
			idx, err := strconv.Atoi(part)
			if err != nil || idx < 0 || idx >= len(n.Content) {
				return fmt.Errorf("%s is a list without an item %q", joinKey(path[:i]), part)
			}
			n = resolve(n.Content[idx])
		default:
			return fmt.Errorf("%s is %s, not a mapping, so key %s cannot be set", joinKey(path[:i]), kindName(n), joinKey(path))
		}
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s is %s; a knob must be a single value", joinKey(path), kindName(n))
	}
	setScalar(n, v)
	return nil
}

// detectIndent returns the indentation of the first indented line of a
// block mapping or list, 2 when none.
func detectIndent(src []byte) int {
	for _, line := range strings.Split(string(src), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if ind := len(line) - len(trimmed); ind > 0 && trimmed != "" && !strings.HasPrefix(trimmed, "#") {
			if ind > 8 {
				return 2
			}
			return ind
		}
	}
	return 2
}

// relocator returns the rule Render uses for relative paths inside a
// derived config (see docs/policy.md, "Derived configs"): a relative string
// that names an existing file or directory beside the original config, and
// does not also name one relative to the job's working directory, is made
// absolute, because the copy lives elsewhere and a program that resolves it
// against the config's directory would miss it. When the config is in the
// job's working directory, the two readings agree and every such string is
// made absolute. Strings that name nothing existing (model hub names, data
// paths made later, URLs) are left alone.
func relocator(configDir, jobDir string, exists func(string) bool) func(string) (string, bool) {
	if exists == nil || !filepath.IsAbs(configDir) || !filepath.IsAbs(jobDir) {
		return nil
	}
	absConfig, sameDir := filepath.Clean(configDir), filepath.Clean(configDir) == filepath.Clean(jobDir)
	return func(s string) (string, bool) {
		if s == "" || filepath.IsAbs(s) || strings.Contains(s, "://") || strings.HasPrefix(s, "~") || strings.ContainsAny(s, "\n\r") || len(s) > 4096 {
			return "", false
		}
		nearConfig := filepath.Join(absConfig, s)
		if !exists(nearConfig) {
			return "", false
		}
		if !sameDir && exists(filepath.Join(jobDir, s)) {
			return "", false
		}
		return nearConfig, true
	}
}
