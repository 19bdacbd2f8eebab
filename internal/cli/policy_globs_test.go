package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
)

// policy init reads the command's output-directory flag and writes globs
// that match what the framework owning the flag saves there: each case
// saves real files in that layout under a temporary directory, and the
// checkpoint scanner must find the newest through the written policy.
func TestInitGuessesGlobsFromOutputDir(t *testing.T) {
	for _, tc := range []struct {
		name  string
		argv  []string
		saved []string // files the framework saves, relative to the job's directory
		from  string
	}{
		{"argparse --save_dir", []string{"python", "train.py", "--batch-size", "8", "--save_dir", "runs/exp1"},
			[]string{"runs/exp1/ckpt_epoch2_step100.pt"}, "--save_dir runs/exp1 (the command's output directory)"},
		{"argparse --checkpoint-dir=", []string{"python", "train.py", "--checkpoint-dir=out/ck"},
			[]string{"out/ck/model_3.pth"}, "--checkpoint-dir out/ck"},
		{"Lightning CLI", []string{"python", "main.py", "fit", "--data.batch_size", "4", "--trainer.default_root_dir", "runs/l1"},
			[]string{"runs/l1/lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt"}, "--trainer.default_root_dir runs/l1 (Lightning's ModelCheckpoint)"},
		{"Hydra run dir", []string{"python", "src/train.py", "data.batch_size=64", "hydra.run.dir=outputs/x"},
			[]string{"outputs/x/checkpoints/epoch_001.ckpt"}, "hydra.run.dir=outputs/x"},
		{"torchtitan", []string{"torchrun", "-m", "torchtitan.train", "--job.dump_folder", "outputs/t"},
			[]string{"outputs/t/checkpoint/step-100/.metadata"}, "--job.dump_folder outputs/t (torchtitan's checkpointer)"},
		{"nanoGPT", []string{"python", "train.py", "config/train_shakespeare_char.py", "--out_dir=out-shakespeare"},
			[]string{"out-shakespeare/ckpt.pt"}, "--out_dir out-shakespeare"},
		{"Megatron-LM", []string{"torchrun", "pretrain_gpt.py", "--micro-batch-size", "4", "--save", "ck/gpt"},
			[]string{"ck/gpt/iter_0000500/mp_rank_00/model_optim_rng.pt"}, "--save ck/gpt (Megatron-LM)"},
		{"mmengine", []string{"python", "tools/train.py", "configs/r50.py", "--work-dir", "work_dirs/r50"},
			[]string{"work_dirs/r50/epoch_3.pth"}, "--work-dir work_dirs/r50 (mmengine's CheckpointHook)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.saved {
				write(t, filepath.Join(dir, f), "x")
			}
			var out bytes.Buffer
			if err := policyInitRun(&policyInitOptions{Argv: tc.argv, Dir: dir, Out: &out}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "# guessed from "+tc.from) {
				t.Fatalf("no guess from %q in:\n%s", tc.from, out.String())
			}
			p, err := policy.Parse("gpuguard.yaml", out.Bytes())
			if err != nil {
				t.Fatalf("the written policy does not parse: %v", err)
			}
			spec := p.Checkpoint()
			spec.Quiet = 0
			found, err := checkpoint.Scan(dir, checkpoint.Spec(spec.CheckpointFiles), time.Now().Add(time.Hour))
			if err != nil || len(found) == 0 {
				t.Fatalf("globs %v find nothing of %v: %v", spec.Globs, tc.saved, err)
			}
			// policy check in that directory has nothing to warn of.
			var stdout, stderr bytes.Buffer
			path := filepath.Join(dir, "gpuguard.yaml")
			write(t, path, out.String())
			if err := policyCheckRun(&policyCheckOptions{Path: path, Dir: dir, Out: &stdout, ErrOut: &stderr}); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(stderr.String(), "warning") {
				t.Errorf("policy check warns where the job saved:\n%s", stderr.String())
			}
		})
	}
	// No output-directory flag: the preset's globs, unchanged.
	var out bytes.Buffer
	if err := policyInitRun(&policyInitOptions{Argv: []string{"python", "train.py", "--batch-size", "8"}, Dir: t.TempDir(), Out: &out}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "guessed from") || !strings.Contains(out.String(), "globs: [checkpoints/*.pt, checkpoints/*.pth, checkpoint.pth.tar]") {
		t.Errorf("without an output directory flag:\n%s", out.String())
	}
}

// policy check warns (and still succeeds) when a checkpoint glob matches
// nothing in the directory it runs in, with the dry run's words; a glob
// with a {knob} is left to --dry-run; a match silences the warning.
func TestCheckWarnsOfGlobsMatchingNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpuguard.yaml")
	write(t, path, "version: 1\ncheckpoints:\n  globs: [ckpt/*.pt]\n")
	check := func() (string, string) {
		var stdout, stderr bytes.Buffer
		if err := policyCheckRun(&policyCheckOptions{Path: path, Dir: dir, Out: &stdout, ErrOut: &stderr}); err != nil {
			t.Fatalf("policy check failed: %v", err)
		}
		return stdout.String(), stderr.String()
	}
	stdout, stderr := check()
	want := "warning: checkpoint glob ckpt/*.pt matches nothing in the job's directory now: fine before the job's first save; otherwise no relaunch will find a checkpoint to resume from\n"
	if !strings.Contains(stdout, ": valid (policy version 1)") || stderr != want {
		t.Errorf("stdout %q\nstderr %q\nwant   %q", stdout, stderr, want)
	}
	write(t, filepath.Join(dir, "ckpt", "step_1.pt"), "x")
	if _, stderr := check(); strings.Contains(stderr, "warning") {
		t.Errorf("warns although ckpt/step_1.pt matches: %q", stderr)
	}
	if err := os.RemoveAll(filepath.Join(dir, "ckpt")); err != nil {
		t.Fatal(err)
	}
	// A glob that names a knob depends on the command: left to --dry-run.
	write(t, path, "version: 1\nknobs:\n  out: {flag: --out, default: o}\ncheckpoints:\n  globs: [ckpt/*.pt, \"{out}/step_*.pt\"]\n")
	if _, stderr := check(); stderr != "note: checkpoint glob {out}/step_*.pt depends on the command's knobs: gpuguard run --dry-run -- COMMAND checks it\n" {
		t.Errorf("with a {knob} glob: %q", stderr)
	}
}

// docs/policy.md quotes the warning, and the glob policy init writes for
// its example command.
func TestDocsQuoteTheGlobLines(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	write(t, path, "version: 1\ncheckpoints:\n  globs: [ckpt/*.pt]\n")
	if err := policyCheckRun(&policyCheckOptions{Path: path, Dir: dir, Out: &bytes.Buffer{}, ErrOut: &stderr}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "\n"+stderr.String()) {
		t.Errorf("docs/policy.md does not quote the warning:\n%s", stderr.String())
	}
	var out bytes.Buffer
	if err := policyInitRun(&policyInitOptions{Argv: []string{"python", "train.py", "--save_dir", "runs/exp1"}, Dir: dir, Out: &out}); err != nil {
		t.Fatal(err)
	}
	_, globs, _ := strings.Cut(out.String(), "\n  globs: ")
	globs, _, _ = strings.Cut(globs, "\n")
	if !strings.Contains(string(doc), "`globs: "+globs+"`") {
		t.Errorf("docs/policy.md does not quote the globs written: %s", globs)
	}
}
