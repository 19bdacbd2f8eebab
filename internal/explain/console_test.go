package explain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/exitcode"
)

// A console log's attempts take how they ended from gpuguard's lines: a
// hang has no words of its own in the output (gpuguard's decision line
// says it), a signal comes from "was killed by", and a resumed run's first
// attempt is the one its launch line names.
func TestConsoleEvidence(t *testing.T) {
	log := strings.Join([]string{
		"gpuguard: run directory .gpuguard/runs/x",
		"gpuguard: attempt 3: python train.py --resume ckpt/step_10.ckpt",
		"gpuguard: phase=train",
		"step 11 loss 1.0",
		"gpuguard: the job was killed by SIGTERM (exit status 143)",
		"gpuguard: attempt 3 died of a hang (no progress within its rhythm: stopped after 10m) → rule hang step 1; relaunching in 1s",
		"gpuguard: attempt 4: python train.py --resume ckpt/step_10.ckpt",
		"step 11 loss 1.0",
		"step 12 loss 0.9 \rprogress 50%\rprogress 100%",
		"gpuguard: the job exited with status 2",
		"gpuguard:   attempt  ended             phase  step  duration  resumed from      then",
		"gpuguard:   3        hang (exit 143)   train  11    10m       ckpt/step_10.ckpt hang step 1",
		"gpuguard:   4        failed (exit 2)   train  12    1s        ckpt/step_10.ckpt gave up: no rule",
		"",
	}, "\n")
	path := filepath.Join(t.TempDir(), "slurm-1.out")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, "-"} {
		code, out, errs := run(t, log, true, p)
		if code != exitcode.OK || errs != "" {
			t.Fatalf("%s: status %d, stderr %q", p, code, errs)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: want attempts 3 and 4, got:\n%s", p, out)
		}
		for i, want := range []string{`"attempt":3,"kind":"hang"`, `"attempt":4,"kind":"crash"`} {
			if !strings.Contains(lines[i], want) {
				t.Errorf("%s: line %d: want %s in\n%s", p, i+1, want, lines[i])
			}
		}
		if !strings.Contains(lines[0], "The output alone reads as none") {
			t.Errorf("%s: the hang's verdict does not say it is gpuguard's: %s", p, lines[0])
		}
		if !strings.Contains(lines[1], "status 2") {
			t.Errorf("%s: attempt 4 does not say its exit status 2: %s", p, lines[1])
		}
	}
}

// Two runs appended to one log (`>>`, a requeued batch job): each run's
// attempts are its own, even where their numbers repeat.
func TestConsoleTwoRuns(t *testing.T) {
	one := strings.Join([]string{
		"gpuguard: run directory .gpuguard/runs/a",
		"step 1 loss 2.0",
		"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free.",
		"gpuguard: the job exited with status 1",
		"gpuguard: attempt 1 died of GPU OOM (asked 2.00 GiB, 1.00 GiB free of 16.00 GiB) → giving up",
		"gpuguard:   attempt  ended             phase  step  duration  resumed from  then",
		"gpuguard:   1        gpu_oom (exit 1)  -      1     1s        -             gave up: no rule",
		"",
	}, "\n")
	two := strings.Join([]string{
		"gpuguard: run directory .gpuguard/runs/b",
		"step 1 loss 2.0",
		"training complete",
		"gpuguard:   attempt  ended  phase  step  duration  resumed from  then",
		"gpuguard:   1        ok     -      1     1s        -             done",
		"",
	}, "\n")
	code, out, errs := run(t, one+two, true, "-")
	if code != exitcode.OK || errs != "" {
		t.Fatalf("status %d, stderr %q", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"attempt":1,"kind":"gpu_oom"`) || !strings.Contains(lines[1], `"attempt":1,"kind":"none"`) {
		t.Fatalf("want the first run's attempt 1 (gpu_oom), then the second's (none):\n%s", out)
	}
}
