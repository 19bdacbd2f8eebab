package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestComplete(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, ".gpuguard/runs/20261125-091500-aaaaaa/events.jsonl"), "{}\n")
	write(t, filepath.Join(dir, "p.yaml"), "version: 1\n")
	write(t, filepath.Join(dir, "train.log"), "x\n")
	const run = ".gpuguard/runs/20261125-091500-aaaaaa"
	app := newApp(Streams{}, "v", newRunCmd(Streams{}, nil), newExplainCmd(Streams{}, nil), newReportCmd(Streams{}, nil),
		newDoctorCmd(Streams{}, nil), newPolicyCmd(Streams{}), newVersionCmd(Streams{}, "v"), newCompletionCmd(Streams{}))
	for _, tc := range []struct{ words, want string }{
		{"", "completion doctor explain help policy report run version"},
		{"r", "report run"},
		{"-", "--help --version"},
		{"help r", "report run"},
		{"report ", run + " latest"},
		{"report l", "latest"},
		{"report --j", "--json"},
		{"report --plot ", ""},
		{"report --plot m.png ", run + " latest"},
		{"report " + run + " ", ""},
		{"explain ", run + " latest p.yaml train.log"},
		{"run --policy ", "argparse huggingface hydra lightning p.yaml ultralytics"},
		{"run --policy=light", ""}, // the shell splits at "="
		{"run --pty a", "always auto"},
		{"run --resume-run ", run},
		{"run --d", "--dry-run"},
		{"run python ", ""},
		{"run -- --", ""},
		{"policy ", "check init list"},
		{"policy check hy", "hydra"},
		{"policy init -- ", ""},
		{"completion ", "bash fish zsh"},
		{"rnu ", ""},
	} {
		words := strings.Split(tc.words, " ")
		if got := strings.Join(complete(words, app.Commands, dir), " "); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.words, got, tc.want)
		}
	}
}
