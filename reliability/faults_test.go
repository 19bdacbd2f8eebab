package reliability

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// testPolicy halves --batch-size on every GPU out-of-memory failure, with
// no backoff, and resumes from DIR/ckpt/step_N.ckpt (relative to the job's
// working directory) through --resume.
const testPolicy = `version: 1
description: reliability suite
knobs:
  batch_size:
    flag: --batch-size
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - halve: batch_size
        min: 1
budget:
  relaunches: 4
backoff: {initial: 0s}
checkpoints:
  globs: [ckpt/step_*.ckpt]
  choose: highest_step
  quiet: 1ms
  pass: {flag: --resume}
`

// scriptJob prepares the script job in dir with plan (one line per
// attempt) and returns its argv.
func scriptJob(t *testing.T, dir string, plan ...string) []string {
	t.Helper()
	writeFile(t, filepath.Join(dir, "plan"), strings.Join(plan, "\n")+"\n")
	return job("script", dir)
}

// makeFIFO creates the script job's DIR/go.
func makeFIFO(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "go")
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// release lets a job blocked on its FIFO go on.
func release(t *testing.T, fifo string) {
	t.Helper()
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// readArgs returns the argv attempt n recorded (NUL-joined, then the
// VAL_CROP_SIZE line).
func readArgs(t *testing.T, dir string, n int) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "args-"+strconv.Itoa(n)))
	if err != nil {
		t.Fatalf("attempt %d did not record its arguments: %v", n, err)
	}
	return strings.ReplaceAll(string(data), "\x00", " ")
}

// needRoot skips a test that mounts file systems when it cannot.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a tmpfs needs root (run the suite as root to include it)")
	}
}

// mountTmpfs mounts a tmpfs of size bytes at a new directory and unmounts
// it when the test ends; it skips the test when mounting is not allowed
// (no CAP_SYS_ADMIN, as in an unprivileged container).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs at %s (%v): this test needs root with CAP_SYS_ADMIN", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes to a file in dir until the file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	if f == nil {
		return
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// A run directory on a file system that fills up: before the run starts,
// or while the job runs. The job runs to its end, its output reaches
// gpuguard's stdout in full, its exit status passes through, and gpuguard
// says what it could not write.
func TestFullRunDirectory(t *testing.T) {
	for _, when := range []string{"before", "during"} {
		t.Run(when, func(t *testing.T) {
			mnt := mountTmpfs(t, "256k")
			dir := t.TempDir()
			fifo := makeFIFO(t, dir)
			argv := scriptJob(t, dir, "ready wait print 5000 exit 3")
			if when == "before" {
				fill(t, mnt)
			}
			g := startGpuguard(t, dir, []string{"--run-dir", filepath.Join(mnt, "run"), "--pty", "never"}, argv...)
			g.waitFile(t, filepath.Join(dir, "ready-1"), "ready")
			if when == "during" {
				fill(t, mnt)
			}
			release(t, fifo)
			if code := g.exitCode(t); code != 3 {
				t.Fatalf("gpuguard exited %d, want the job's 3; stderr %q", code, g.stderr.String())
			}
			var want strings.Builder
			for j := 1; j <= 5000; j++ {
				want.WriteString("attempt 1 line " + strconv.Itoa(j) + "\n")
			}
			if got := g.stdout.String(); got != want.String() {
				t.Errorf("stdout: %d bytes, want the job's %d", len(got), want.Len())
			}
			stderr := g.stderr.String()
			t.Logf("gpuguard's stderr: %q", stderr)
			if !strings.Contains(stderr, "no space left on device") || !strings.Contains(stderr, supervisor.OutputLogName) {
				t.Errorf("gpuguard does not say it could not write %s: %q", supervisor.OutputLogName, stderr)
			}
			if strings.Contains(stderr, "panic") {
				t.Errorf("stderr: %q", stderr)
			}
			// The job printed nothing on stderr: every line there is
			// gpuguard's, and gpuguard's lines are "gpuguard: ..." (Status).
			for _, l := range strings.SplitAfter(stderr, "\n") {
				if l != "" && !strings.HasPrefix(l, "gpuguard: ") {
					t.Errorf("gpuguard wrote a line without its prefix on the job's stderr (zap's ErrorOutput, see docs/reliability.md): %q", l)
					break
				}
			}
		})
	}
}

// A read-only run directory: gpuguard refuses to start (73, as README's
// table says), names the directory, and never starts the job. (A file
// system cannot be made read-only under a run that has files open for
// writing: the kernel refuses the remount with EBUSY, so a run directory
// cannot turn read-only mid-run; one that fills up is tested above.)
func TestReadOnlyRunDirectory(t *testing.T) {
	mnt := mountTmpfs(t, "1m")
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", mnt, err)
	}
	dir := t.TempDir()
	argv := scriptJob(t, dir, "args exit 0")
	runDir := filepath.Join(mnt, "run")
	g := startGpuguard(t, dir, []string{"--run-dir", runDir}, argv...)
	if code := g.exitCode(t); code != supervisor.ExitCantCreate {
		t.Fatalf("gpuguard exited %d, want %d; stderr %q", code, supervisor.ExitCantCreate, g.stderr.String())
	}
	if stderr := g.stderr.String(); !strings.Contains(stderr, runDir) || !strings.Contains(stderr, "read-only") {
		t.Errorf("the message does not name the directory and the cause: %q", stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "args-1")); err == nil {
		t.Errorf("the job was started although the run directory cannot be written")
	}
}

// --resume-run with a state.json that is not one: a clear message naming
// the file, exit 78 (the README's table: invalid input, like a bad policy),
// and the job is not started. A missing state.json is 73.
func TestCorruptStateJSON(t *testing.T) {
	cases := []struct {
		name, content string
		code          int
		says          string
	}{
		{"garbage", "\x00\x01not json at all", supervisor.ExitConfig, "is not a gpuguard state file"},
		{"truncated", `{"version": 1, "argv": ["x"], "attempt": 2, "state": {"relaunches"`, supervisor.ExitConfig, "is not a gpuguard state file"},
		{"other version", `{"version": 7}`, supervisor.ExitConfig, "is not a gpuguard state file"},
		{"wrong types", `{"version": 1, "attempt": "two", "state": []}`, supervisor.ExitConfig, "is not a gpuguard state file"},
		{"empty", "", supervisor.ExitConfig, "is not a gpuguard state file"},
		{"missing", "-", supervisor.ExitCantCreate, "cannot resume"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			pol := writeFile(t, filepath.Join(dir, "policy.yaml"), testPolicy)
			runDir := filepath.Join(dir, "run")
			os.Mkdir(runDir, 0o755)
			if c.content != "-" {
				writeFile(t, filepath.Join(runDir, supervisor.StateFile), c.content)
			}
			keepUnchanged(t, pol, runDir)
			argv := scriptJob(t, dir, "args exit 0")
			g := startGpuguard(t, dir, []string{"--policy", pol, "--resume-run", runDir}, append(argv, "--batch-size", "8")...)
			if code := g.exitCode(t); code != c.code {
				t.Fatalf("gpuguard exited %d, want %d; stderr %q", code, c.code, g.stderr.String())
			}
			stderr := g.stderr.String()
			if !strings.Contains(stderr, c.says) || !strings.Contains(stderr, runDir) {
				t.Errorf("stderr %q does not say %q about %s", stderr, c.says, runDir)
			}
			if _, err := os.Stat(filepath.Join(dir, "args-1")); err == nil {
				t.Errorf("the job was started")
			}
		})
	}
}

// The policy file edited between two attempts: the run keeps the policy it
// loaded at the start (the relaunch halves the batch as the original says,
// not as the edit says), and the user's edit is left alone.
func TestPolicyEditedMidRun(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, filepath.Join(dir, "policy.yaml"), testPolicy)
	fifo := makeFIFO(t, dir)
	argv := scriptJob(t, dir, "args ready wait oom exit 1", "args exit 0")
	g := startGpuguard(t, dir, []string{"--policy", pol, "--pty", "never"}, append(argv, "--batch-size", "64")...)
	g.waitFile(t, filepath.Join(dir, "ready-1"), "ready")
	edited := strings.Replace(testPolicy, "      - halve: batch_size\n        min: 1\n", "      - set: {batch_size: 3}\n", 1)
	if edited == testPolicy {
		t.Fatal("the edit changed nothing")
	}
	writeFile(t, pol, edited)
	keepUnchanged(t, pol)
	release(t, fifo)
	if code := g.exitCode(t); code != 0 {
		t.Fatalf("gpuguard exited %d; stderr %q", code, g.stderr.String())
	}
	if a := readArgs(t, dir, 2); !strings.Contains(a, "--batch-size 32") {
		t.Errorf("attempt 2 ran with %q, want --batch-size 32 (the policy loaded at the start halves 64)", a)
	}
}

// The checkpoint directory deleted while an attempt runs: attempt 2
// resumes from step_10, the directory disappears during attempt 2, and
// attempt 3 starts from scratch (no --resume of a file that is gone), with
// no panic.
func TestCheckpointDirectoryDeletedMidRun(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, filepath.Join(dir, "policy.yaml"), testPolicy)
	keepUnchanged(t, pol)
	fifo := makeFIFO(t, dir)
	argv := scriptJob(t, dir,
		"args ckpt 10 oom exit 1",
		"args ready wait oom exit 1",
		"args exit 0")
	g := startGpuguard(t, dir, []string{"--policy", pol, "--pty", "never"}, append(argv, "--batch-size", "64")...)
	g.waitFile(t, filepath.Join(dir, "ready-2"), "ready")
	if err := os.RemoveAll(filepath.Join(dir, "ckpt")); err != nil {
		t.Fatal(err)
	}
	release(t, fifo)
	code := g.exitCode(t)
	stderr := g.stderr.String()
	if code != 0 || strings.Contains(stderr, "panic") {
		t.Fatalf("gpuguard exited %d; stderr %q", code, stderr)
	}
	if a := readArgs(t, dir, 2); !strings.Contains(a, "--resume "+filepath.Join(dir, "ckpt", "step_10.ckpt")) {
		t.Errorf("attempt 2 ran with %q, want --resume of step_10", a)
	}
	if a := readArgs(t, dir, 3); strings.Contains(a, "--resume") {
		t.Errorf("attempt 3 ran with %q: it resumes from a checkpoint that was deleted", a)
	}
}

// Every attempt's environment carries GPUGUARD_ATTEMPT, the attempt's
// number (docs/memory.md; `gpuguard doctor` shows it for each process on a
// GPU). The suite found it holding the watchdog's marker token instead, the
// two variables having had the same name.
func TestJobSeesItsAttemptNumber(t *testing.T) {
	dir := t.TempDir()
	g := startGpuguard(t, dir, []string{"--pty", "never"}, fake("printenv", "GPUGUARD_ATTEMPT")...)
	if code := g.exitCode(t); code != 0 {
		t.Fatalf("gpuguard exited %d; stderr %q", code, g.stderr.String())
	}
	if got := strings.TrimSpace(g.stdout.String()); got != "GPUGUARD_ATTEMPT=1" {
		t.Errorf("the job sees %q, want GPUGUARD_ATTEMPT=1", got)
	}
}
