package redact

import (
	"os"
	"strings"
	"testing"
)

// The examples of docs/secrets.md are what Argv records.
func TestDocExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/secrets.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "<!-- redact examples -->\n")
	if !ok {
		t.Fatal("docs/secrets.md has no <!-- redact examples --> table")
	}
	n := 0
	for _, row := range strings.Split(table, "\n") {
		if !strings.HasPrefix(row, "| `") {
			if n > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(row, "| "), "|")
		if len(cells) != 2 {
			t.Fatalf("row %q has %d cells", row, len(cells))
		}
		given := strings.Trim(strings.TrimSpace(cells[0]), "`")
		want := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if got := strings.Join(Argv(strings.Fields(given)), " "); got != want {
			t.Errorf("docs/secrets.md: %s\n records %s\n    doc %s", given, got, want)
		}
		n++
	}
	if n < 5 {
		t.Errorf("docs/secrets.md: %d examples read", n)
	}
}
