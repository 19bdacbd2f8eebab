package e2e

// The scenarios run directly, without gpuguard: each fails for real under its
// memory limit with PyTorch's own message and status, and the good settings
// fit under the same limit.

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestGoodSettingsFitAndResume: batch 32 with validation on 64-pixel crops
// trains all 6 steps under the address-space limit and writes its
// checkpoints atomically; a run resumed from step 4 trains steps 5 and 6
// only, with exactly the losses of the uninterrupted run (same batches, same
// weights and optimizer state).
func TestGoodSettingsFitAndResume(t *testing.T) {
	needTorch(t)
	out := t.TempDir()
	env := jobEnv("VAL_CROP_SIZE=64")
	first := job(t, env, asWrapper(t), out, "--workers", "0")
	if first.code != 0 {
		t.Fatalf("the good settings did not fit under the limit:\n%s", dump(first))
	}
	tr := trained(t, first.stdout)
	if !reflect.DeepEqual(tr.order, stepsRange(1, 6)) {
		t.Fatalf("trained steps %v, want 1..6:\n%s", tr.order, dump(first))
	}
	for _, want := range []string{
		"effective batch 32 (batch_size 32 x grad_accum 1)",
		"gpuguard: phase=train",
		"gpuguard: phase=val",
		"Validating at step 4: 32 images at 64x64 center crops",
		"saved checkpoint " + filepath.Join(out, "step_4.pt"),
		"training finished at step 6",
	} {
		if !strings.Contains(first.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, dump(first))
		}
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{"step_4.pt", "step_6.pt"}) {
		t.Errorf("output directory holds %v, want the two checkpoints and no temporary file", names)
	}

	second := job(t, env, asWrapper(t), out, "--workers", "0", "--resume", filepath.Join(out, "step_4.pt"))
	if second.code != 0 {
		t.Fatalf("the resumed run failed:\n%s", dump(second))
	}
	tr2 := trained(t, second.stdout)
	if !reflect.DeepEqual(tr2.resumes, []string{filepath.Join(out, "step_4.pt")}) || !reflect.DeepEqual(tr2.order, []int{5, 6}) {
		t.Fatalf("resumed run: resumes %v, steps %v; want one resume from step_4.pt and steps 5, 6:\n%s", tr2.resumes, tr2.order, dump(second))
	}
	for _, s := range []int{5, 6} {
		if tr2.losses[s] != tr.losses[s] {
			t.Errorf("step %d: loss %s after resume, %s uninterrupted; the resume did not restore the run", s, tr2.losses[s], tr.losses[s])
		}
	}
}

// TestValidationFullResolutionOOM: with data.val_crop_size null the first
// validation runs at 384x384 and PyTorch's CPU allocator fails under the
// address-space limit, in validation, after the step-4 checkpoint.
func TestValidationFullResolutionOOM(t *testing.T) {
	needTorch(t)
	out := t.TempDir()
	r := job(t, jobEnv(), asWrapper(t), out, "--workers", "0")
	if r.code != 1 {
		t.Fatalf("want exit 1 (Python's uncaught RuntimeError):\n%s", dump(r))
	}
	m := allocRe.FindStringSubmatch(r.stderr)
	if m == nil || !strings.Contains(r.stderr, "RuntimeError: [enforce fail at") {
		t.Fatalf("stderr lacks the allocator's RuntimeError:\n%s", dump(r))
	}
	// The failed request is the first conv's output for the whole validation
	// batch at full resolution: 32 images x 16 channels x 384 x 384 floats.
	if n, _ := strconv.Atoi(m[1]); n != 32*16*384*384*4 {
		t.Errorf("allocation of %d bytes failed, want the full-resolution activation (%d)", n, 32*16*384*384*4)
	}
	if p := lastPhase(r.stdout); p != "val" || !strings.Contains(r.stdout, "Validating at step 4: 32 images at 384x384 (full resolution)") {
		t.Errorf("last phase %q, want val at step 4:\n%s", p, dump(r))
	}
	if tr := trained(t, r.stdout); !reflect.DeepEqual(tr.order, stepsRange(1, 4)) {
		t.Errorf("trained steps %v, want 1..4", tr.order)
	}
	if _, err := os.Stat(filepath.Join(out, "step_4.pt")); err != nil {
		t.Errorf("the checkpoint written before validation is missing: %v", err)
	}
}

// TestTrainBatchTooLargeOOM: batch 256 fits during the warm-up at 32-pixel
// crops, then fails in the allocator at the first step at 96 pixels (step 5),
// in training.
func TestTrainBatchTooLargeOOM(t *testing.T) {
	needTorch(t)
	out := t.TempDir()
	r := job(t, jobEnv("VAL_CROP_SIZE=64"), asWrapper(t), out, "--workers", "0", "--batch-size", "256")
	if r.code == 128+int(syscall.SIGSEGV) {
		// About one run in fifteen under go test, the address-space limit is
		// first hit by an allocation outside PyTorch's allocator, in code
		// that does not check it, and the job dies of SIGSEGV (never seen
		// in 25 runs of the same command alone). That run shows nothing of
		// the allocator's error; faulthandler says where it died.
		t.Skipf("the job died of SIGSEGV, not of the allocator's error (an unchecked allocation hit the limit first):\n%s", dump(r))
	}
	if r.code != 1 {
		t.Fatalf("want exit 1 (Python's uncaught RuntimeError):\n%s", dump(r))
	}
	if !allocRe.MatchString(r.stderr) {
		t.Fatalf("stderr lacks the allocator's RuntimeError:\n%s", dump(r))
	}
	if !strings.Contains(r.stdout, "effective batch 256 (batch_size 256 x grad_accum 1)") {
		t.Errorf("output lacks the effective batch:\n%s", dump(r))
	}
	if p := lastPhase(r.stdout); p != "train" {
		t.Errorf("last phase %q, want train", p)
	}
	if tr := trained(t, r.stdout); !reflect.DeepEqual(tr.order, stepsRange(1, 4)) {
		t.Errorf("trained steps %v, want 1..4 (step 5, the first at 96 pixels, fails)", tr.order)
	}
}

// TestWorkersKilledByKernel: four DataLoader workers fit through the warm-up
// at 32 pixels; at 96 pixels the loader is rebuilt and each new worker caches
// 3000 crops (316 MiB), which exceeds the memory cgroup's limit (workerLimit).
// The kernel's OOM killer kills a worker (the workers raise their
// oom_score_adj) and the DataLoader reports it. Two workers fit under the same
// limit.
func TestWorkersKilledByKernel(t *testing.T) {
	needTorch(t)
	needCgroup(t)
	env := jobEnv("VAL_CROP_SIZE=64")
	out := t.TempDir()
	r := job(t, env, cgroupWrapper(t), out, "--workers", "4")
	if r.code != 1 {
		t.Fatalf("want exit 1 (Python's uncaught RuntimeError):\n%s", dump(r))
	}
	// torch 1.13 raises this from its SIGCHLD handler, or, when its status
	// check finds the dead worker first, chains it to "DataLoader worker
	// (pid(s) N) exited unexpectedly".
	m := workerRe.FindStringSubmatch(r.stderr)
	if m == nil || !strings.Contains(r.stderr, "RuntimeError: DataLoader worker (pid "+m[1]+") is killed by signal: Killed.") {
		t.Fatalf("stderr lacks the DataLoader's report of a killed worker:\n%s", dump(r))
	}
	if !oomKillRe.MatchString(r.stderr) {
		t.Errorf("memlimit.sh does not report the cgroup's OOM kill:\n%s", dump(r))
	}

	if tr := trained(t, r.stdout); !reflect.DeepEqual(tr.order, stepsRange(1, 4)) {
		t.Errorf("trained steps %v, want 1..4 (the stage at 96 pixels starts new workers with bigger caches)", tr.order)
	}
	if _, err := os.Stat(filepath.Join(out, "step_4.pt")); err != nil {
		t.Errorf("the checkpoint of step 4 is missing: %v", err)
	}

	r = job(t, env, cgroupWrapper(t), t.TempDir(), "--workers", "2")
	if r.code != 0 {
		t.Fatalf("two workers did not fit under the limit:\n%s", dump(r))
	}
	if !strings.Contains(r.stderr, "oom_kill 0") {
		t.Errorf("the cgroup saw an OOM kill with two workers:\n%s", dump(r))
	}
	if tr := trained(t, r.stdout); !reflect.DeepEqual(tr.order, stepsRange(1, 6)) {
		t.Errorf("trained steps %v, want 1..6", tr.order)
	}
}
