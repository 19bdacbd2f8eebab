package policy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestActionTable checks that every entry of the actions table has all its
// parts: a parse function, options that optionParsers can read, cases in
// actionCases that exercise it, and a row in docs/policy.md.
func TestActionTable(t *testing.T) {
	verbRE := regexp.MustCompile(`^[a-z][a-z_]*$`)
	seen := map[string]bool{}
	usedOptions := map[string]bool{}
	for _, d := range actions {
		if !verbRE.MatchString(d.verb) {
			t.Errorf("verb %q: want lower-case letters and _", d.verb)
		}
		if seen[d.verb] {
			t.Errorf("verb %s: in the table twice", d.verb)
		}
		seen[d.verb] = true
		if d.parse == nil {
			t.Errorf("verb %s: no parse", d.verb)
		}
		for i, o := range d.options {
			if _, ok := optionParsers[o]; !ok {
				t.Errorf("verb %s: option %s has no entry in optionParsers", d.verb, o)
			}
			if slices.Contains(d.options[:i], o) {
				t.Errorf("verb %s: option %s listed twice", d.verb, o)
			}
			usedOptions[o] = true
		}
	}
	for o := range optionParsers {
		if !usedOptions[o] {
			t.Errorf("option %s: no action takes it", o)
		}
		if seen[o] {
			t.Errorf("option %s: also a verb, so a step could not tell them apart", o)
		}
	}

	// Every verb is exercised by actionCases; the verb its parse returns is
	// the one it is filed under.
	tested := map[string]bool{}
	for _, tc := range actionCases {
		for _, a := range actionPolicy(t, tc.step).rules[0].steps[0].actions {
			tested[a.verb()] = true
		}
	}
	for _, d := range actions {
		if !tested[d.verb] {
			t.Errorf("verb %s: no case in actionCases (decide_test.go) parses to it", d.verb)
		}
	}

	// The user reference lists exactly the actions of the table.
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n### Actions\n")
	section, _, _ = strings.Cut(section, "\n#")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+):").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	for _, d := range actions {
		if !slices.Contains(documented, d.verb) {
			t.Errorf("verb %s: no row in the Actions table of docs/policy.md", d.verb)
		}
	}
	for _, v := range documented {
		if !seen[v] {
			t.Errorf("docs/policy.md documents action %s, which the table does not have", v)
		}
	}
}
