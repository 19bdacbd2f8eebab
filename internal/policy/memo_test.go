package policy

import (
	"slices"
	"strings"
	"testing"
)

// The memo's key masks what changes from run to run: output and log
// directories, run names, seeds, paths inside the checkpoints' directory,
// the knobs the checkpoint globs name, and the policy's memo: {ignore}.
func TestMemoCommand(t *testing.T) {
	p := mustParse(t, `version: 1
memo: {ignore: [--tag]}
knobs:
  bs: {flag: --bs}
  out: {flag: --out-root, optional: true}
rules:
  - name: r
    steps: [{halve: bs}]
checkpoints:
  globs: [ckpts/*/last.pt, "{out}/checkpoint-*"]
  pass: {flag: --resume}
`)
	if !p.Memo() {
		t.Fatalf("memo: {ignore} does not turn the memo on")
	}
	a := []string{"python", "train.py", "--bs", "64", "--output_dir", "runs/123", "--seed=7", "name=exp-123",
		"--init", "ckpts/123/last.pt", "--tag", "t123", "--out-root", "/scratch/123", "--resume", "ckpts/123/last.pt"}
	b := []string{"python", "train.py", "--bs", "64", "--output_dir", "runs/456", "--seed=9", "name=exp-456",
		"--init", "ckpts/456/last.pt", "--tag", "t456", "--out-root", "/scratch/456"}
	ka, masked := p.MemoCommand(a)
	kb, _ := p.MemoCommand(b)
	if !slices.Equal(ka, kb) {
		t.Errorf("two runs of one command key differently:\n%q\n%q", ka, kb)
	}
	if got := strings.Join(masked, ", "); got != "--output_dir runs/123, --seed=7, name=exp-123, ckpts/123/last.pt, --tag t123, --out-root /scratch/123" {
		t.Errorf("masked %q", got)
	}
	// What does change what fits still keys apart.
	c := slices.Clone(b)
	c[3] = "32"
	if kc, _ := p.MemoCommand(c); slices.Equal(kc, kb) {
		t.Errorf("--bs 32 and --bs 64 key alike: %q", kc)
	}
	// A bare switch named like a volatile flag masks nothing after it.
	if k, _ := p.MemoCommand([]string{"x", "--log", "--bs", "8"}); !slices.Equal(k, []string{"x", "--log", "--bs", "8"}) {
		t.Errorf("bare --log: %q", k)
	}
}
