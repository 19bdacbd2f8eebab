package explain

import (
	"bufio"
	"os"
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
		if out != ex.want {
			t.Errorf("%s:%d: the quoted output of gpuguard explain %s is not what it prints:\n--- prints\n%s--- quoted\n%s", doc, ex.line, ex.path, out, ex.want)
		}
	}
}
