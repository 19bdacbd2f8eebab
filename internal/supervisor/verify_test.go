package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

const verifyPolicy = `version: 1
knobs:
  batch_size: {flag: --batch-size}
  workers: {flag: --workers, default: 4}
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - halve: batch_size
      - cut_workers: workers
budget: {relaunches: 4}
backoff: {initial: 0s}
checkpoints:
  globs: [ckpt/step_*.pt]
  choose: highest_step
  pass: {flag: --resume}
`

const verifyOOMLine = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 15.77 GiB of which 1.00 GiB is free."

// fakeOutput is an attempt that prints out (one line each, on stdout) and
// exits with code, run through the loop's own runOne: the hooks see its
// lines as they see a job's.
type fakeOutput struct {
	out  []string
	code int
	ckpt string // a checkpoint the attempt writes (relative), if any
}

// verifyLoop is a loop test whose attempts are fake outputs, with the
// run's hooks registered as a run registers them.
func verifyLoop(t *testing.T, policy string, attempts ...fakeOutput) *loopTest {
	t.Helper()
	lt := newLoopTest(t, policy, []string{"train.py", "--batch-size", "32"}, nil)
	lt.recordPlans()
	lt.start = func(n int, spec attemptSpec, h attemptHooks) (attemptResult, error) {
		if n > len(attempts) {
			t.Fatalf("attempt %d was started; the test has %d", n, len(attempts))
		}
		a := attempts[n-1]
		for i, text := range a.out {
			spec.Scan(1, lines.Line{Text: []byte(text), Num: i + 1})
		}
		if a.ckpt != "" {
			lt.checkpointAt(t, a.ckpt)
		}
		res := attemptResult{Code: a.code}
		h.Ended(res, &record.AttemptEnd{})
		return res, nil
	}
	lt.hooks.add(newVerifyHook(lt.loop))
	return lt
}

// The job restores the old batch from its checkpoint and dies the same
// way: the change did not take hold, which is said and journalled, and
// is no evidence against the batch; by default the run gives up saying so.
func TestVerifyUnappliedGivesUp(t *testing.T) {
	lt := verifyLoop(t, verifyPolicy,
		fakeOutput{out: []string{"Namespace(batch_size=32, workers=4)", "step 10 loss 2.0", verifyOOMLine}, code: 1, ckpt: "ckpt/step_10.pt"},
		fakeOutput{out: []string{"Namespace(batch_size=16, workers=4)", "Restoring train_batch_size=32 from the checkpoint",
			"  Instantaneous batch size per device = 32", verifyOOMLine}, code: 1})
	if code := lt.attempts(); code != 1 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	wantContains(t, "stderr", lt.stderr.String(),
		`attempt 2: batch_size 16 did not take hold: the job used 32 (line 3: "  Instantaneous batch size per device = 32"); the attempt is no evidence about batch_size`,
		"kept the value it resumed with from ckpt/step_10.pt, and attempt 2 says nothing of whether batch_size is the cause",
		"set verify: {unapplied: drop_checkpoint}")
	if strings.Contains(lt.stderr.String(), "not the cause:") || strings.Contains(lt.stderr.String(), "workers 4→") {
		t.Errorf("the attempt was taken as evidence:\n%s", lt.stderr.String())
	}
	evs := verifyEvents(t, lt)
	if len(evs) != 1 || evs[0] != (record.Verify{Attempt: 2, Knob: "batch_size", Set: "16", Used: "32", Held: false, Line: 3, Stream: "stdout",
		Text: "  Instantaneous batch size per device = 32"}) {
		t.Errorf("journal: %+v", evs)
	}
}

// With verify: {unapplied: drop_checkpoint} the job is relaunched with the
// same values without the checkpoint; there the change holds, and is
// confirmed.
func TestVerifyDropCheckpoint(t *testing.T) {
	lt := verifyLoop(t, verifyPolicy+"verify: {unapplied: drop_checkpoint}\n",
		fakeOutput{out: []string{"step 10 loss 2.0", verifyOOMLine}, code: 1, ckpt: "ckpt/step_10.pt"},
		fakeOutput{out: []string{"Namespace(batch_size=16, workers=4)", "Restoring train_batch_size=32 from the checkpoint",
			"  Instantaneous batch size per device = 32", verifyOOMLine}, code: 1},
		fakeOutput{out: []string{"Namespace(batch_size=16, workers=4)", "  Instantaneous batch size per device = 16", "trained"}, code: 0})
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	wantContains(t, "stderr", lt.stderr.String(),
		`attempt 2: batch_size 16 did not take hold: the job used 32 (line 3: "  Instantaneous batch size per device = 32")`,
		"starting without the checkpoint that pins it, ckpt/step_10.pt (verify: {unapplied: drop_checkpoint})",
		`attempt 3: batch_size 16 confirmed: line 2: "  Instantaneous batch size per device = 16"`,
		"again without the checkpoint")
	// docs/policy.md quotes these lines as the code prints them.
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	quoted := 0
	for _, line := range strings.Split(lt.stderr.String(), "\n") {
		if strings.Contains(line, "did not take hold") || strings.Contains(line, "confirmed") {
			quoted++
			if !strings.Contains(string(doc), "\n"+line+"\n") {
				t.Errorf("docs/policy.md does not quote, on a line of its own:\n%s", line)
			}
		}
	}
	if quoted != 3 {
		t.Errorf("%d lines to quote, want 3", quoted)
	}
	if strings.Contains(lt.stderr.String(), "no checkpoint yet") {
		t.Errorf("said there was no checkpoint:\n%s", lt.stderr.String())
	}
	if len(lt.plans) != 3 || lt.plans[2].ckpt != "" || slices.Contains(lt.plans[2].argv, "--resume") ||
		!slices.Equal(lt.plans[2].argv, []string{"train.py", "--batch-size", "16"}) {
		t.Errorf("attempt 3: %q from %q", lt.plans[2].argv, lt.plans[2].ckpt)
	}
	if !slices.Contains(lt.plans[1].argv, filepath.Join(lt.wd, "ckpt/step_10.pt")) {
		t.Errorf("attempt 2 did not resume: %q", lt.plans[1].argv)
	}
	evs := verifyEvents(t, lt)
	if len(evs) != 2 || evs[0].Held || !evs[1].Held || evs[1].Attempt != 3 {
		t.Errorf("journal: %+v", evs)
	}
}

// A job that echoes nothing of the knob, or something that is not a
// value of it, is not judged; the first attempt is never checked.
func TestVerifyNothingToRead(t *testing.T) {
	lt := verifyLoop(t, verifyPolicy,
		fakeOutput{out: []string{"Namespace(batch_size=32)", verifyOOMLine}, code: 1, ckpt: "ckpt/step_10.pt"},
		fakeOutput{out: []string{"batch size: see the config", "saved to runs/batch_size=32/x.pt", "val_batch_size=32", "batch_size=24", "trained"}, code: 0})
	if code := lt.attempts(); code != 0 {
		t.Fatalf("exit %d\n%s", code, lt.stderr.String())
	}
	if s := lt.stderr.String(); strings.Contains(s, "confirmed") || strings.Contains(s, "did not take hold") {
		t.Errorf("judged from nothing:\n%s", s)
	}
	// A value neither set nor the old one is said, and is no evidence.
	wantContains(t, "stderr", lt.stderr.String(),
		`attempt 2: batch_size: line 4 says 24, neither 16 as set nor 32 as before: not taken as evidence either way ("batch_size=24")`)
	if evs := verifyEvents(t, lt); len(evs) != 0 {
		t.Errorf("journal: %+v", evs)
	}
}

func verifyEvents(t *testing.T, lt *loopTest) []record.Verify {
	t.Helper()
	f, err := os.Open(filepath.Join(lt.job.RunDir.Path(), record.Events))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, _, err := record.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []record.Verify
	for _, e := range entries {
		if ev, _ := e.Event(); ev != nil {
			if v, ok := ev.(record.Verify); ok {
				out = append(out, v)
			}
		}
	}
	return out
}
