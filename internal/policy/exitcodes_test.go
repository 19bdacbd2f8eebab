package policy

import (
	"strings"
	"testing"
)

func TestExitCodesKey(t *testing.T) {
	for _, c := range []struct{ yaml, want, err string }{
		{"", "", ""},
		{"exit_codes: scheduler\n", "scheduler", ""},
		{"exit_codes: job\n", "job", ""},
		{"exit_codes: schedular\n", "", `p.yaml:2:13: exit_codes must be job or scheduler, not "schedular" (did you mean "scheduler"?)`},
		{"exit_codes: [job]\n", "", "p.yaml:2:13: exit_codes must be a single value"},
	} {
		p, err := Parse("p.yaml", []byte("version: 1\n"+c.yaml))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.yaml, err, c.err)
			}
			continue
		}
		if err != nil || p.ExitCodes() != c.want {
			t.Errorf("%q: %v, %v; want %q", c.yaml, p, err, c.want)
		}
	}
}

func TestRelaunchBudgetSpent(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\nbudget: {relaunches: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.RelaunchBudgetSpent(State{Relaunches: 1}) || !p.RelaunchBudgetSpent(State{Relaunches: 2}) {
		t.Errorf("budget of 2: spent at 1 or not at 2")
	}
}
