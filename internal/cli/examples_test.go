package cli

import (
	"strings"
	"testing"
)

// Every command's help ends with examples, and every example names a
// command gpuguard has.
func TestHelpExamples(t *testing.T) {
	for _, name := range []string{"run", "explain", "report", "doctor", "policy", "policy check", "policy init", "policy list", "completion", "version"} {
		r := gpuguard(t, append([]string{"help"}, strings.Fields(name)...)...)
		if r.code != 0 {
			t.Fatalf("help %s: %+v", name, r)
		}
		_, ex, ok := strings.Cut(r.stdout, "\nEXAMPLES:\n")
		if !ok {
			t.Errorf("help %s has no EXAMPLES section:\n%s", name, r.stdout)
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(ex), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "gpuguard ") {
				if norm := gpuguard(t, "help", strings.Fields(line)[1]); norm.code != 0 {
					t.Errorf("help %s: example %q names no command", name, line)
				}
			}
		}
	}
}
