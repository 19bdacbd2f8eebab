package examples

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"go.yaml.in/yaml/v3"
)

// runLimit bounds one run of the script so that a hang fails the test with a
// message instead of stalling the suite; runs take well under a second.
const runLimit = 60 * time.Second

type result struct {
	stdout, stderr string
	code           int
}

// setup copies train.py and config.yaml into a fresh directory and returns it.
func setup(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found: install python3 to run the example job's tests")
	}
	dir := t.TempDir()
	for _, name := range []string{"train.py", "config.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// jobEnv is the environment of a run: ours without the variables the script
// reads, plus a 1 ms step so that 200 steps take a fraction of a second.
func jobEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "VAL_CROP_SIZE", name == "PYTORCH_CUDA_ALLOC_CONF", strings.HasPrefix(name, "EXAMPLE_"):
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "EXAMPLE_STEP_MS=1")
	return append(env, extra...)
}

func command(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	argv := append([]string{"train.py", "--config", "config.yaml"}, args...)
	cmd := exec.CommandContext(ctx, "python3", argv...)
	cmd.Dir = dir
	cmd.Env = jobEnv(env...)
	return cmd
}

// run runs the script to completion; env holds extra NAME=value settings.
func run(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := command(ctx, dir, env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		res.code = ee.ExitCode()
	default:
		t.Fatalf("python3 train.py %v: %v (did it hang past %v?)\nstdout:\n%s\nstderr:\n%s", args, err, runLimit, res.stdout, res.stderr)
	}
	return res
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout ---\n%s\n--- stderr ---\n%s", r.code, r.stdout, r.stderr)
}

var stepLine = regexp.MustCompile(`(?m)^step (\d+) loss \d+\.\d{3}$`)

// steps returns the step numbers of the "step N loss X" lines, in order.
func steps(t *testing.T, stdout string) []int {
	t.Helper()
	var out []int
	for _, m := range stepLine.FindAllStringSubmatch(stdout, -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// wantSteps checks that exactly the steps from..to were printed, once each, in order.
func wantSteps(t *testing.T, r result, from, to int) {
	t.Helper()
	got := steps(t, r.stdout)
	if len(got) != to-from+1 {
		t.Fatalf("printed %d step lines, want steps %d..%d\n%v", len(got), from, to, r)
	}
	for i, s := range got {
		if s != from+i {
			t.Fatalf("step line %d is step %d, want %d\n%v", i, s, from+i, r)
		}
	}
}

// lastPhase is the phase of the last "gpuguard: phase=" marker.
func lastPhase(stdout string) string {
	i := strings.LastIndex(stdout, "gpuguard: phase=")
	if i < 0 {
		return ""
	}
	rest := stdout[i+len("gpuguard: phase="):]
	phase, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(phase)
}

// PyTorch's message (CUDACachingAllocator.cpp, 2.1 and later), with the
// exception name torch prints since it moved OutOfMemoryError to torch.
var oomLine = regexp.MustCompile(`(?m)^torch\.OutOfMemoryError: CUDA out of memory\. ` +
	`Tried to allocate (\S+ \S+)\. GPU 0 has a total capacity of (\S+ \S+) of which (\S+ \S+) is free\. ` +
	`Including non-PyTorch memory, this process has (\S+ \S+) memory in use\. ` +
	`Of the allocated memory (\S+ \S+) is allocated by PyTorch, and (\S+ \S+) is reserved by PyTorch but unallocated\. ` +
	`If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ` +
	`to avoid fragmentation\.  See documentation for Memory Management  ` +
	`\(https://pytorch\.org/docs/stable/notes/cuda\.html#environment-variables\)$`)

type oom struct{ requested, total, free, inUse, allocated, reserved float64 }

// size parses "4.00 GiB" (or MiB, KiB, bytes) into bytes; tol is half the
// last printed digit, the rounding error of the printed figure.
func size(t *testing.T, s string) (bytes, tol float64) {
	t.Helper()
	num, unit, _ := strings.Cut(s, " ")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		t.Fatalf("size %q: %v", s, err)
	}
	mult := map[string]float64{"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	if mult == 0 {
		t.Fatalf("size %q: unit %q is not one PyTorch prints", s, unit)
	}
	if unit == "bytes" {
		return v, 0.5
	}
	return v * mult, 0.005 * mult
}

// parseOOM finds PyTorch's OOM line in stderr, after a traceback, and checks
// that its figures agree with each other.
func parseOOM(t *testing.T, r result) oom {
	t.Helper()
	if !strings.HasPrefix(r.stderr, "Traceback (most recent call last):\n") {
		t.Fatalf("stderr does not start with a Python traceback\n%v", r)
	}
	m := oomLine.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no PyTorch OOM message in the exact upstream form\n%v", r)
	}
	var v [6]float64
	var tol float64
	for i := range v {
		b, e := size(t, m[i+1])
		v[i] = b
		tol += e
	}
	o := oom{v[0], v[1], v[2], v[3], v[4], v[5]}
	switch {
	case o.requested <= o.free:
		t.Errorf("OOM asks for %s with %s free: that allocation would have succeeded", m[1], m[3])
	case math.Abs(o.free+o.inUse-o.total) > tol:
		t.Errorf("free %s + in use %s != total %s", m[3], m[4], m[2])
	case o.allocated+o.reserved > o.inUse+tol:
		t.Errorf("allocated %s + reserved-unallocated %s > in use %s", m[5], m[6], m[4])
	}
	return o
}

type checkpoint struct {
	Format         string `json:"format"`
	Step           int    `json:"step"`
	EffectiveBatch int    `json:"effective_batch"`
	BatchSize      int    `json:"batch_size"`
	GradAccum      int    `json:"grad_accum"`
	Weights        string `json:"weights_sha256"`
}

var ckptName = regexp.MustCompile(`^step_(\d+)\.ckpt$`)

// checkpoints reads every file of the checkpoint directory, failing on
// anything that is not a complete checkpoint whose step matches its name
// (a leftover temp file included), and returns them by step.
func checkpoints(t *testing.T, dir string) map[int]checkpoint {
	t.Helper()
	ckdir := filepath.Join(dir, ".gpuguard", "example")
	ents, err := os.ReadDir(ckdir)
	if err != nil {
		t.Fatalf("checkpoint directory: %v", err)
	}
	out := map[int]checkpoint{}
	for _, e := range ents {
		m := ckptName.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("unexpected file %s in the checkpoint directory (a temp file left behind?)", e.Name())
			continue
		}
		b, err := os.ReadFile(filepath.Join(ckdir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var c checkpoint
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			t.Errorf("%s is not complete JSON: %v\n%s", e.Name(), err, b)
			continue
		}
		if n, _ := strconv.Atoi(m[1]); c.Step != n {
			t.Errorf("%s holds step %d", e.Name(), c.Step)
		}
		if c.Format != "gpuguard-example-checkpoint/1" || len(c.Weights) != 64 ||
			c.EffectiveBatch != c.BatchSize*c.GradAccum || c.EffectiveBatch == 0 {
			t.Errorf("%s: fields do not add up: %+v", e.Name(), c)
		}
		out[c.Step] = c
	}
	return out
}

func stepsOf(m map[int]checkpoint) []int {
	var s []int
	for k := range m {
		s = append(s, k)
	}
	sort.Ints(s)
	return s
}

var finalLine = regexp.MustCompile(`(?m)^training complete: (\d+) steps, effective batch size (\d+), weights sha256 ([0-9a-f]{64})$`)
var effectiveLine = regexp.MustCompile(`(?m)^batch_size=(\d+) grad_accum=(\d+) effective batch size=(\d+) workers=\d+$`)

func TestValidationAtFullResolutionRunsOutOfMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"config null", nil},
		{"env null", []string{"VAL_CROP_SIZE=null"}},
		{"env empty", []string{"VAL_CROP_SIZE="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := setup(t)
			r := run(t, dir, tc.env)
			if r.code != 1 {
				t.Fatalf("want exit 1 (OOM)\n%v", r)
			}
			if lastPhase(r.stdout) != "val" || !strings.Contains(r.stdout, "\nValidating: step 50, 4 batches at full resolution (1024 px)\n") {
				t.Fatalf("the OOM did not come in validation at full resolution\n%v", r)
			}
			o := parseOOM(t, r)
			if o.requested < 1<<30 {
				t.Errorf("full-resolution validation asked for only %.0f bytes", o.requested)
			}
			wantSteps(t, r, 1, 50)
			if got := stepsOf(checkpoints(t, dir)); fmt.Sprint(got) != "[25 50]" {
				t.Errorf("checkpoints at steps %v, want [25 50] (one must exist before the OOM)", got)
			}
		})
	}
}

func TestCroppedValidationPassesThenTrainingRunsOutOfMemoryAtLargerImages(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	r := run(t, dir, []string{"VAL_CROP_SIZE=256"})
	if r.code != 1 {
		t.Fatalf("want exit 1 (OOM when the crops grow)\n%v", r)
	}
	for _, want := range []string{"\nval step 50 val_loss ", "\nval step 100 val_loss ",
		"\nprogressive resizing: image_size 256 -> 400 from step 101\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if lastPhase(r.stdout) != "train" {
		t.Errorf("phase at the OOM is %q, want train", lastPhase(r.stdout))
	}
	parseOOM(t, r)
	wantSteps(t, r, 1, 100)
	if got := stepsOf(checkpoints(t, dir)); fmt.Sprint(got) != "[25 50 75 100]" {
		t.Errorf("checkpoints at steps %v, want [25 50 75 100]", got)
	}
	if t.Failed() {
		t.Log(r)
	}
}

// gpuguard sets expandable_segments:True: the cache slack shrinks to 2 MiB
// and every failure stays a failure with consistent figures.
func TestExpandableSegmentsKeepTheFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		env   []string
		args  []string
		phase string
	}{
		{"val full resolution", nil, nil, "val"},
		{"larger crops", []string{"VAL_CROP_SIZE=256"}, nil, "train"},
		{"batch 64", []string{"VAL_CROP_SIZE=256"}, []string{"--batch-size", "64"}, "train"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, setup(t), append(tc.env, "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6, expandable_segments:True"), tc.args...)
			if r.code != 1 || lastPhase(r.stdout) != tc.phase {
				t.Fatalf("want exit 1 in phase %s\n%v", tc.phase, r)
			}
			if o := parseOOM(t, r); o.reserved != 2<<20 || o.requested-o.free < 256<<20 {
				t.Errorf("reserved %.0f (want 2 MiB), requested %.0f vs free %.0f (want them well apart)\n%v", o.reserved, o.requested, o.free, r)
			}
		})
	}
}

func TestTooLargeBatchRunsOutOfMemoryInTraining(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	r := run(t, dir, []string{"VAL_CROP_SIZE=256"}, "--batch-size", "64")
	if r.code != 1 || lastPhase(r.stdout) != "train" {
		t.Fatalf("want exit 1 in phase train\n%v", r)
	}
	parseOOM(t, r)
	if s := steps(t, r.stdout); len(s) != 0 {
		t.Errorf("steps %v finished with a batch that does not fit", s)
	}
	if m := effectiveLine.FindStringSubmatch(r.stdout); m == nil || m[3] != "64" {
		t.Errorf("banner does not print effective batch size=64\n%v", r)
	}
}

// fullRun runs the settings that fit from step 1 and returns the result.
func fullRun(t *testing.T, dir string) result {
	t.Helper()
	r := run(t, dir, []string{"VAL_CROP_SIZE=256"}, "--batch-size", "16", "--grad-accum", "2")
	if r.code != 0 {
		t.Fatalf("half batch with double accumulation and a validation crop should fit\n%v", r)
	}
	return r
}

func TestHalfBatchDoubleAccumulationSucceeds(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	r := fullRun(t, dir)
	wantSteps(t, r, 1, 200)
	m := effectiveLine.FindStringSubmatch(r.stdout)
	if m == nil || m[1] != "16" || m[2] != "2" || m[3] != "32" {
		t.Fatalf("banner: want batch_size=16 grad_accum=2 effective batch size=32 (the default's 32x1)\n%v", r)
	}
	if f := finalLine.FindStringSubmatch(r.stdout); f == nil || f[1] != "200" || f[2] != "32" {
		t.Errorf("no 'training complete' line for 200 steps at effective batch 32\n%v", r)
	}
	if strings.Contains(r.stdout, "\r") || r.stderr != "" {
		t.Errorf("without a terminal: want plain lines and a quiet stderr\n%v", r)
	}
	ck := checkpoints(t, dir)
	if got := stepsOf(ck); fmt.Sprint(got) != "[25 50 75 100 125 150 175 200]" {
		t.Errorf("checkpoints at %v", got)
	}
	if ck[200].EffectiveBatch != 32 || ck[200].BatchSize != 16 || ck[200].GradAccum != 2 {
		t.Errorf("last checkpoint: %+v", ck[200])
	}

	// The default batch in one step: the same effective batch is printed.
	d := run(t, setup(t), []string{"VAL_CROP_SIZE=256"}, "--steps", "1")
	if m := effectiveLine.FindStringSubmatch(d.stdout); d.code != 0 || m == nil || m[3] != "32" || m[1] != "32" {
		t.Errorf("default banner: want batch_size=32 ... effective batch size=32\n%v", d)
	}
}

func TestResumeContinuesAfterTheCheckpointAndNeverRepeatsAStep(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	first := run(t, dir, nil) // dies in validation at step 50
	if first.code != 1 {
		t.Fatalf("first attempt should die of OOM\n%v", first)
	}
	ckpt := filepath.Join(dir, ".gpuguard", "example", "step_50.ckpt")
	r := run(t, dir, []string{"VAL_CROP_SIZE=256"}, "--batch-size", "16", "--grad-accum", "2", "--resume", ckpt)
	if r.code != 0 {
		t.Fatalf("resumed run failed\n%v", r)
	}
	if !strings.Contains(r.stdout, "resumed from "+ckpt+" at step 50\n") {
		t.Errorf("no 'resumed from %s at step 50' line\n%v", ckpt, r)
	}
	wantSteps(t, r, 51, 200)
	if strings.Contains(r.stdout, "\nval step 50 ") {
		t.Errorf("validation of step 50 ran again after resuming from it")
	}

	// Resuming changes nothing: the weights match a run that never stopped.
	whole := fullRun(t, setup(t))
	a, b := finalLine.FindStringSubmatch(r.stdout), finalLine.FindStringSubmatch(whole.stdout)
	if a == nil || b == nil || a[3] != b[3] {
		t.Errorf("resumed run ends with weights %v, uninterrupted run with %v", a, b)
	}
	checkpoints(t, dir)

	// Resuming from the last step does nothing and says so.
	done := filepath.Join(dir, ".gpuguard", "example", "step_200.ckpt")
	n := run(t, dir, nil, "--resume", done)
	if n.code != 0 || len(steps(t, n.stdout)) != 0 || !strings.Contains(n.stdout, "nothing to do") {
		t.Errorf("resume at the last step should train nothing\n%v", n)
	}

	// A truncated checkpoint is refused with exit 2, before any training.
	bad := filepath.Join(t.TempDir(), "step_7.ckpt")
	b7, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, b7[:len(b7)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	e := run(t, dir, nil, "--resume", bad)
	if e.code != 2 || !strings.Contains(e.stderr, "cannot resume from "+bad) || len(steps(t, e.stdout)) != 0 {
		t.Errorf("truncated checkpoint: want exit 2 naming it\n%v", e)
	}
}

func TestSIGTERMWritesACheckpointAndExits143(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	// A long run at 20 ms a step whose settings fit, so that only the signal ends it.
	cmd := command(ctx, dir, []string{"VAL_CROP_SIZE=256", "EXAMPLE_STEP_MS=20"},
		"--batch-size", "16", "--grad-accum", "2", "--steps", "100000")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	signalled := false
	lastStep := 0
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := stepLine.FindStringSubmatch(line); m != nil {
			lastStep, _ = strconv.Atoi(m[1])
			if lastStep >= 5 && !signalled {
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				signalled = true
			}
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("want exit 143 after SIGTERM, got %v\n%v", err, r)
	}
	want := fmt.Sprintf("SIGTERM received: checkpoint of step %d is in .gpuguard/example; exiting", lastStep)
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("want %q (the last step printed)\n%v", want, r)
	}
	ck := checkpoints(t, dir)
	if _, ok := ck[lastStep]; !ok || lastStep < 5 {
		t.Errorf("no checkpoint of step %d: have %v", lastStep, stepsOf(ck))
	}
}

func TestTooManyWorkersGetOneKilled(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	r := run(t, dir, []string{"VAL_CROP_SIZE=256"}, "--workers", "8")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "Traceback (most recent call last):\n") {
		t.Fatalf("want exit 1 with a traceback\n%v", r)
	}
	m := regexp.MustCompile(`(?m)^RuntimeError: DataLoader worker \(pid (\d+)\) is killed by signal: Killed\.$`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no DataLoader worker kill message\n%v", r)
	}
	pid, _ := strconv.Atoi(m[1])
	if pid <= 1 {
		t.Errorf("worker pid %d", pid)
	}
	// The worker was a real process, and it is gone (reaped, not orphaned).
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("worker pid %d still exists", pid)
	}

	// With enough host memory the same workers are fine.
	ok := run(t, setup(t), []string{"VAL_CROP_SIZE=256", "EXAMPLE_HOST_GIB=16"}, "--workers", "8", "--steps", "5")
	if ok.code != 0 {
		t.Errorf("8 workers in 16 GiB should fit\n%v", ok)
	}
}

func TestProgressBarRedrawsOnATerminal(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := command(ctx, dir, []string{"VAL_CROP_SIZE=256"}, "--steps", "10")
	f, err := pty.Start(cmd)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	b, _ := io.ReadAll(f) // ends with EIO once the job has exited
	_ = f.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("job under a terminal: %v\n%s", err, b)
	}
	out := string(b)
	for _, want := range []string{"\rEpoch 1:  10%|#         | 1/10 [step 1, loss=", "\rEpoch 1: 100%|##########| 10/10 [step 10, loss="} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q\n%q", want, out)
		}
	}
	if stepLine.MatchString(strings.ReplaceAll(out, "\r\n", "\n")) {
		t.Errorf("plain step lines on a terminal\n%q", out)
	}
}

// The policy writes a derived copy of the config with go-yaml when a knob is
// a YAML key; the script must read that copy the same way.
func TestConfigWrittenByGoYAMLIsRead(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	src, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	data := doc.Content[0].Content[1] // the mapping under "data"
	for i := 0; i < len(data.Content); i += 2 {
		if data.Content[i].Value == "val_crop_size" {
			data.Content[i+1].Value, data.Content[i+1].Tag = "256", "!!int"
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "derived.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "train.py", "--config", "derived.yaml", "--steps", "50")
	cmd.Dir, cmd.Env = dir, jobEnv()
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "Validating: step 50, 4 batches at center crops of 256 px") {
		t.Fatalf("derived config:\n%s\nrun: %v\n%s", out, err, b)
	}
}

func TestConfigErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	for name, body := range map[string]string{
		"list.yaml":   "train:\n  steps:\n    - 1\n",
		"indent.yaml": "train:\n  steps: 5\n    batch_size: 3\n",
		"type.yaml":   "train:\n  batch_size: many\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), runLimit)
		cmd := exec.CommandContext(ctx, "python3", "train.py", "--config", name)
		cmd.Dir, cmd.Env = dir, jobEnv()
		b, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(b), "train.py: error: ") {
			t.Errorf("%s: want exit 2 with an error, got %v\n%s", name, err, b)
		}
		if name != "type.yaml" && !strings.Contains(string(b), name+":3: ") {
			t.Errorf("%s: error does not name line 3\n%s", name, b)
		}
	}
}
