package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's exit-status tables are kept true by running each case: every
// status they name has its case in testdata/script/cli_exit_status.txtar,
// marked "# README: N" (run by the testscript suite at the module's root).
func TestReadmeExitStatuses(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../testdata/script/cli_exit_status.txtar")
	if err != nil {
		t.Fatal(err)
	}
	// Statuses the README names: the rows of its table(s) ("| 73 | ...",
	// "| 128+N |", "| the job's own |") and those its paragraphs give for the
	// other commands.
	want := map[string]bool{"job": true, "128+N": true, "0": true, "65": true, "66": true, "74": true}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+|128\+N|the job's own) \|`).FindAllStringSubmatch(string(readme), -1) {
		if m[1] == "the job's own" {
			continue
		}
		want[m[1]] = true
	}
	// 70 is gpuguard's own bug: no input makes it happen (that would be the
	// bug to fix).
	delete(want, "70")
	have := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# README: (\S+)$`).FindAllStringSubmatch(string(script), -1) {
		have[m[1]] = true
	}
	for s := range want {
		if !have[s] {
			t.Errorf("the README's exit status %s has no case in cli_exit_status.txtar", s)
		}
	}
	for s := range have {
		if !want[s] {
			t.Errorf("cli_exit_status.txtar runs status %s, which the README's tables do not name", s)
		}
	}
	if len(want) < 10 || !strings.Contains(string(readme), "| 127 |") {
		t.Fatalf("the README's table was not found (%d statuses)", len(want))
	}
}
