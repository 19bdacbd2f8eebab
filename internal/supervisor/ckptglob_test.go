package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestGlobsMatchAndSuggest(t *testing.T) {
	wd := "/w"
	for _, tc := range []struct {
		globs []string
		path  string
		want  bool
	}{
		{[]string{"ckpt/*.pt"}, "ckpt/step_50.pt", true},
		{[]string{"ckpt/*.pt"}, "/w/ckpt/step_50.pt", true},
		{[]string{"out/checkpoint-*"}, "out/checkpoint-500/model.safetensors", true},
		{[]string{"ckpt/*.pt"}, "checkpoints/step_50.pt", false},
		{nil, "ckpt/step_50.pt", false},
	} {
		if got := globsMatch(tc.globs, wd, tc.path); got != tc.want {
			t.Errorf("globsMatch(%q, %q) = %v", tc.globs, tc.path, got)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"/w/lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt", "lightning_logs/version_*/checkpoints/epoch=*-step=*.ckpt"},
		{"checkpoints/step_50.pt", "checkpoints/step_*.pt"},
		{"/elsewhere/ck[1].pt", `/elsewhere/ck\[*].pt`},
	} {
		g := globFor(wd, tc.path)
		if g != tc.want {
			t.Errorf("globFor(%q) = %q, want %q", tc.path, g, tc.want)
		}
		if !globsMatch([]string{g}, wd, tc.path) {
			t.Errorf("the suggested glob %q does not match %q", g, tc.path)
		}
	}
}

func TestUnmatchedGlobs(t *testing.T) {
	wd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(wd, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "ckpt", "step_1.pt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// One glob matching is enough: the others are alternatives.
	if got := UnmatchedGlobs([]string{"ckpt/*.pt", "out/checkpoint-*"}, wd); got != nil {
		t.Errorf("unmatched %q, want none: ckpt/*.pt matches", got)
	}
	got := UnmatchedGlobs([]string{"ckpt/*.pth", "out/checkpoint-*"}, wd)
	if !slices.Equal(got, []string{"ckpt/*.pth", "out/checkpoint-*"}) {
		t.Errorf("unmatched %q", got)
	}
	if w := UnmatchedGlobWarning(got); w != "warning: none of the checkpoint globs (ckpt/*.pth, out/checkpoint-*) matches anything in the job's directory now: fine before the job's first save; otherwise no relaunch will find a checkpoint to resume from" {
		t.Errorf("warning %q", w)
	}
}
