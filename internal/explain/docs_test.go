package explain

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// docExample is a "$ gpuguard explain LOG" block of a doc and the output it
// quotes.
type docExample struct {
	line int // of the "$" line
	path string
	want string
}

// docExamples reads the "$ gpuguard explain PATH" blocks of a Markdown file:
// the command line, then the output up to the closing fence, with the
// command's indentation (a block inside a list item) removed.
func docExamples(t *testing.T, doc string) []docExample {
	t.Helper()
	f, err := os.Open(doc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docExample
	var cur *docExample
	indent := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "$ gpuguard explain "):
			indent = l[:len(l)-len(trimmed)]
			cur = &docExample{line: n, path: strings.TrimPrefix(trimmed, "$ gpuguard explain ")}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.want += strings.TrimPrefix(l, indent) + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: the example has no closing fence", doc, cur.line)
	}
	return out
}

// quoteMatches says whether a doc's quote is the output, where a quoted line
// "..." (indented as the output's lines are) stands for lines left out: the
// parts between elisions must appear in order, each as whole lines, the
// first at the start and the last at the end.
func quoteMatches(out, quote string) bool {
	var parts [][]string
	cur := []string{}
	for _, l := range strings.Split(strings.TrimSuffix(quote, "\n"), "\n") {
		if strings.TrimSpace(l) == "..." {
			parts = append(parts, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, l)
	}
	parts = append(parts, cur)
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(parts) == 1 {
		return slices.Equal(got, parts[0])
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(got) < len(first)+len(last) || !slices.Equal(got[:len(first)], first) || !slices.Equal(got[len(got)-len(last):], last) {
		return false
	}
	rest := got[len(first) : len(got)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := indexLines(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// indexLines is where sub starts in lines as consecutive lines, or -1.
func indexLines(lines, sub []string) int {
	for i := 0; i+len(sub) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// The elision of quotes works as the docs use it, and does not hide a
// wrong quote.
func TestQuoteMatches(t *testing.T) {
	out := "a\n  b\n  c\n  d\n  e\n"
	for _, tc := range []struct {
		quote string
		want  bool
	}{
		{out, true},
		{"a\n  ...\n  e\n", true},
		{"a\n  ...\n  c\n  ...\n  e\n", true},
		{"a\n  b\n  ...\n", true},
		{"a\n  ...\n  d\n", false},        // the last part must end the output
		{"a\n  ...\n  x\n  ...\n", false}, // a quoted line it does not print
		{"a\n  c\n  ...\n", false},        // lines before an elision are consecutive
		{"a\n  b\n", false},               // no elision: the whole output
	} {
		if got := quoteMatches(out, tc.quote); got != tc.want {
			t.Errorf("quoteMatches(%q) = %v, want %v", tc.quote, got, tc.want)
		}
	}
}

// The explain output docs/classifier.md quotes is what explain prints today
// for the same log, run from the repository's root as the doc shows.
func TestClassifierDocExamples(t *testing.T) {
	const doc = "docs/classifier.md"
	t.Chdir("../..")
	examples := docExamples(t, doc)
	if len(examples) < 4 {
		t.Fatalf("%s has %d explain examples, want at least 4 (the first-failure rule, a recovered OOM, the two host-memory requesters)", doc, len(examples))
	}
	for _, ex := range examples {
		code, out, errs := run(t, "", false, ex.path)
		if errs != "" || code != 0 {
			t.Errorf("%s:%d: gpuguard explain %s: status %d, %s", doc, ex.line, ex.path, code, errs)
			continue
		}
		if !quoteMatches(out, ex.want) {
			t.Errorf("%s:%d: the quoted output of gpuguard explain %s is not what it prints:\n--- prints\n%s--- quoted\n%s", doc, ex.line, ex.path, out, ex.want)
		}
	}
}
