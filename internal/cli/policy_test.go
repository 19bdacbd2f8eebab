package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/presets"
)

var allPresets = []string{"argparse", "huggingface", "hydra", "lightning", "ultralytics"}

// initCases are commands each preset is meant for.
var initCases = []struct {
	preset string
	argv   []string
}{
	{"argparse", []string{"python", "train.py", "--batch-size", "64", "--grad-accum", "1", "--val-batch-size", "32", "--num-workers", "8"}},
	{"lightning", []string{"python", "main.py", "fit", "--config", "c.yaml", "--data.batch_size", "64", "--data.num_workers", "8"}},
	{"huggingface", []string{"torchrun", "--nproc_per_node", "2", "run_clm.py", "--model_name_or_path", "gpt2", "--output_dir", "out", "--per_device_train_batch_size", "16"}},
	{"ultralytics", []string{"yolo", "train", "model=yolo11n.pt", "data=coco8.yaml", "batch=32", "workers=8"}},
	{"hydra", []string{"python", "src/train.py", "data.batch_size=64", "trainer=gpu"}},
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every preset passes `policy check`.
func TestPresetsCheck(t *testing.T) {
	for _, name := range presets.Names() {
		r := gpuguard(t, "policy", "check", name)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("policy check %s: exit %d\n%s", name, r.code, r.stderr)
		}
		if !strings.HasPrefix(r.stdout, "preset:"+name+": valid (policy version 1): ") {
			t.Errorf("policy check %s: %q", name, r.stdout)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	write(t, bad, "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    when: {kind: cuda_oom}\n    steps: [{halve: bz}]\n")
	r := gpuguard(t, "policy", "check", bad)
	if r.code != 78 {
		t.Errorf("exit %d, want 78", r.code)
	}
	want := bad + `:6:18: rule r: when: unknown failure kind "cuda_oom" (did you mean "gpu_oom"?); kinds: gpu_oom, cpu_alloc_oom, host_oom, crash, hang` + "\n" +
		bad + `:7:21: rule r step 1: halve: unknown knob "bz" (did you mean "bs"?); knobs: bs` + "\n"
	if r.stderr != want || r.stdout != "" {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
	}
	r = gpuguard(t, "policy", "check", filepath.Join(dir, "none.yaml"))
	if r.code != 66 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing file: %d %q", r.code, r.stderr)
	}
	want = "gpuguard policy check: reading policy file: open " + filepath.Join(dir, "none.yaml") + ": no such file or directory\n"
	if r.stderr != want {
		t.Errorf("missing file: stderr %q, want %q", r.stderr, want)
	}
	r = gpuguard(t, "policy", "check", "a.yaml", "b.yaml")
	if r.code != 64 || r.stderr != "gpuguard policy check: give one policy file; usage: gpuguard policy check [FILE|PRESET]\n" {
		t.Errorf("two files: %+v", r)
	}
	// No file named: ./gpuguard.yaml.
	t.Chdir(dir)
	r = gpuguard(t, "policy", "check")
	if r.code != 66 || r.stderr != "gpuguard policy check: no policy file named, and no gpuguard.yaml here; usage: gpuguard policy check [FILE|PRESET] (presets: argparse, huggingface, hydra, lightning, ultralytics); gpuguard.yaml is looked for from here up to the repository's root\n" {
		t.Errorf("no file: %+v", r)
	}
	write(t, filepath.Join(dir, "gpuguard.yaml"), "version: 1\nknobs:\n  bs: {flag: --bs}\nrules:\n  - name: r\n    when: {kind: gpu_oom}\n    steps: [{halve: bs}]\n")
	r = gpuguard(t, "policy", "check")
	if r.code != 0 || !strings.HasPrefix(r.stdout, filepath.Join(dir, "gpuguard.yaml")+": valid") {
		t.Errorf("./gpuguard.yaml: %+v", r)
	}
	// A name that is neither a file nor a preset cannot be read either.
	if r = gpuguard(t, "policy", "check", "lightnin"); r.code != 66 || !strings.Contains(r.stderr, `(did you mean "lightning"?)`) {
		t.Errorf("neither file nor preset: %+v", r)
	}
}

func TestList(t *testing.T) {
	r := gpuguard(t, "policy", "list")
	if r.code != 0 {
		t.Fatal(r.code)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != len(allPresets) {
		t.Fatalf("List:\n%s", r.stdout)
	}
	for i, l := range lines {
		if f := strings.Fields(l); len(f) < 2 || f[0] != allPresets[i] {
			t.Errorf("line %q: want preset %s and its description", l, allPresets[i])
		}
	}
}

func TestInit(t *testing.T) {
	for _, tc := range initCases {
		r := gpuguard(t, append([]string{"policy", "init", "--"}, tc.argv...)...)
		if r.code != 0 {
			t.Fatalf("Init %v: exit %d %s", tc.argv, r.code, r.stderr)
		}
		text := r.stdout
		// The starter is a valid policy, and `policy check` accepts it.
		path := filepath.Join(t.TempDir(), "gpuguard.yaml")
		write(t, path, text)
		if c := gpuguard(t, "policy", "check", path); c.code != 0 {
			t.Errorf("starter for %v fails check:\n%s\n%s", tc.argv, c.stderr, text)
		}
		for _, want := range []string{
			"#   " + strings.Join(tc.argv, " ") + "\n",
			"# Framework guessed: " + tc.preset + " (",
			"# Read from this command:\n",
			"# What each rule would do, in order, on repeated failures:\n#   rule gpu-shared step 1",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("starter for %s lacks %q:\n%s", tc.preset, want, text)
			}
		}
	}
	// A command the preset cannot read says what to fix, and still checks.
	r := gpuguard(t, "policy", "init", "python", "train.py")
	if r.code != 0 {
		t.Fatal(r.code)
	}
	if !strings.Contains(r.stdout, "# Before running, fix (gpuguard run would stop with these):\n#   preset:argparse:") ||
		!strings.Contains(r.stdout, "the command has no --batch-size") {
		t.Errorf("starter without --batch-size:\n%s", r.stdout)
	}
	if _, err := policy.Parse("x", []byte(r.stdout)); err != nil {
		t.Errorf("starter does not parse: %v", err)
	}
	r = gpuguard(t, "policy", "init")
	if r.code != 64 || !strings.Contains(r.stderr, "give the training command after --") {
		t.Errorf("Init without a command: %d %q", r.code, r.stderr)
	}
	if r := gpuguard(t, "policy", "init", "--"); r.code != 64 {
		t.Errorf("Init with nothing after --: %+v", r)
	}
}
