package policy

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a policy file, or a knob that cannot be read from
// the command, located at the policy file's line and column (1-based). Col is
// 0 when only the line is known (YAML syntax errors), and Line is 0 when not
// even that is known. Parse and Start return several of them joined with
// errors.Join; use errors.As to get the first, or Unwrap() []error for all.
type Error struct {
	File string
	Line int
	Col  int
	Msg  string
}

// Error formats the problem as "file:line:col: message", the form editors
// and compilers use, dropping the parts that are not known.
func (e *Error) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Col == 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// errs collects located errors for one file.
type errs struct {
	file string
	list []error
}

func (e *errs) at(n *yaml.Node, format string, args ...any) {
	line, col := 0, 0
	if n != nil {
		line, col = n.Line, n.Column
	}
	e.list = append(e.list, &Error{File: e.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a go-yaml syntax error ("yaml: line 3: did not find
// expected key") into an *Error. go-yaml reports no column for these, and its
// line can point past the real mistake (an unclosed bracket is reported at
// the end of the file), so the message says to look above as well.
func syntaxError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Msg: "YAML syntax error: " + m[2] + " (the mistake may be on an earlier line: an unclosed bracket or quote, or a tab used for indentation)"}
	}
	return &Error{File: file, Msg: "YAML syntax error: " + trimYAMLPrefix(msg)}
}

func trimYAMLPrefix(s string) string {
	if len(s) > 6 && s[:6] == "yaml: " {
		return s[6:]
	}
	return s
}

// DidYouMean returns ` (did you mean "x"?)` for the candidate closest to
// got, or "" when none is close enough to be a plausible typo (more than a
// third of got's length, and at least 2 edits, away).
func DidYouMean(got string, candidates []string) string { return didYouMean(got, candidates) }

func didYouMean(got string, candidates []string) string {
	best, bestD := "", 1<<30
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		if c == got {
			return ""
		}
		d := editDistance(got, c)
		if len(got) >= 3 && len(c) >= 3 && (strings.Contains(got, c) || strings.Contains(c, got)) {
			d = min(d, 1) // one is part of the other: "outdir" for "out"
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(2, len(got)/3)
	if best == "" || bestD > limit {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes, with
// an adjacent transposition counted as one edit.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
