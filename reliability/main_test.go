package reliability

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/supervisor"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The test binary plays every program the suite needs (supervisortest.Main),
// chosen by its first argument:
//
//	MODE ...                        the fake trainer's modes (supervisortest.Trainer)
//	-job MODE ...                   the jobs of this package (runJob)
//	-gpuguard [FLAGS] -- CMD ...    gpuguard itself: supervisor.Run, as main.go calls it
//	run -- gpuguard-internal-watchdog   an attempt's watchdog (supervisor.Run hands it over)
//
// Orphans of the gpuguard processes the tests kill with SIGKILL come back to
// the test process (a subreaper), which reaps them (see gone).
func TestMain(m *testing.M) { supervisortest.Main(m, helpers, supervisortest.Subreaper()) }

var helpers = supervisortest.Modes("record", "printenv", "exit").With(supervisortest.Helpers{
	"-job":      runJob,
	"-gpuguard": runAsGpuguard,
	"run": func(args []string) int {
		if len(args) < 1 || !supervisor.IsWatchdogInvocation(args[1:]) {
			fmt.Fprintf(os.Stderr, "run %q: not an attempt's watchdog (GPUGUARD_WATCHDOG unset?)\n", args)
			return supervisor.ExitUsage
		}
		return supervisor.Run(supervisor.Config{Argv: args[1:]})
	},
})

func self() string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe
}

// fake is the argv of the supervisortest fake trainer in mode.
func fake(mode ...string) []string { return supervisortest.Argv(mode[0], mode[1:]...) }

// job is the argv of one of this package's jobs.
func job(mode ...string) []string { return supervisortest.Argv("-job", mode...) }

// runAsGpuguard is `gpuguard run` with the flags of main.go that the suite
// uses; it returns what supervisor.Run returns.
func runAsGpuguard(args []string) int {
	fs := flag.NewFlagSet("gpuguard", flag.ContinueOnError)
	ptyMode := fs.String("pty", "auto", "")
	runDir := fs.String("run-dir", "", "")
	pol := fs.String("policy", "", "")
	resume := fs.String("resume-run", "", "")
	grace := fs.Duration("grace", 10*time.Second, "")
	noEnv := fs.Bool("no-env", false, "")
	if err := fs.Parse(args); err != nil {
		return supervisor.ExitUsage
	}
	return supervisor.Run(supervisor.Config{
		Argv: fs.Args(), PTY: *ptyMode, RunDir: *runDir, Policy: *pol, ResumeRun: *resume,
		Grace: *grace, NoEnv: *noEnv,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
}

// reps scales full, the repetitions the issue asks for, by the suite's
// scale: 0.25 by default (the package runs in about two minutes on 2 busy
// cores), 0.025 with -short, RELIABILITY_SCALE when set (1: the full
// counts). Never fewer than 2.
func reps(t *testing.T, full int) int {
	t.Helper()
	scale := 0.25
	if testing.Short() {
		scale = 0.025
	}
	if s := os.Getenv("RELIABILITY_SCALE"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 {
			t.Fatalf("RELIABILITY_SCALE=%q: want a positive number (1 runs the full counts)", s)
		}
		scale = f
	}
	return max(int(float64(full)*scale+0.5), 2)
}

// gpuguardProc is gpuguard running as a subprocess in a process group of its
// own (a signal sent to it never reaches the test), stdin a pipe.
type gpuguardProc struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *supervisortest.SyncBuffer
	stderr *supervisortest.SyncBuffer
	runDir string
	done   <-chan struct{}
}

// startGpuguard starts gpuguard with flags (a --run-dir in a new temporary
// directory is added unless flags name one) on argv, in dir ("" for a new
// temporary directory).
func startGpuguard(t *testing.T, dir string, flags []string, argv ...string) *gpuguardProc {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	g := &gpuguardProc{stdout: &supervisortest.SyncBuffer{}, stderr: &supervisortest.SyncBuffer{}}
	hasRunDir := false
	for _, f := range flags {
		if strings.HasPrefix(f, "-run-dir") || strings.HasPrefix(f, "--run-dir") || strings.Contains(f, "resume-run") {
			hasRunDir = true
		}
	}
	if !hasRunDir {
		g.runDir = filepath.Join(t.TempDir(), "run")
		flags = append([]string{"--run-dir", g.runDir}, flags...)
	}
	args := append(append(append([]string{"-gpuguard"}, flags...), "--"), argv...)
	cmd := exec.Command(self(), args...)
	cmd.Dir = dir
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, g.stdout, g.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.Close() }) // after gpuguard is gone (cleanups run last first)
	g.cmd, g.stdin, g.done = cmd, w, supervisortest.WaitInBackground(t, cmd)
	return g
}

// wait waits for gpuguard to exit and returns its wait status.
func (g *gpuguardProc) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("gpuguard did not exit; stderr so far %q", g.stderr.String())
	}
	return g.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// exitCode is gpuguard's exit status, which must not be a death by signal.
func (g *gpuguardProc) exitCode(t *testing.T) int {
	t.Helper()
	ws := g.wait(t)
	if ws.Signaled() {
		t.Fatalf("gpuguard died of %v; stderr %q", ws.Signal(), g.stderr.String())
	}
	return ws.ExitStatus()
}

func (g *gpuguardProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
}

// fileWait is how long the suite waits for a file's content.
const fileWait = 60 * time.Second

// waitFile waits until file contains want and returns its content
// (supervisortest.WaitFile, waiting fileWait).
func waitFile(t *testing.T, file, want string) string {
	t.Helper()
	return supervisortest.WaitFileOr(t, supervisortest.FileWait{Timeout: fileWait}, file, want)
}

// waitFile waits until file contains want, failing at once with gpuguard's
// stderr when gpuguard exits first.
func (g *gpuguardProc) waitFile(t *testing.T, file, want string) string {
	t.Helper()
	return supervisortest.WaitFileOr(t, supervisortest.FileWait{
		Timeout: fileWait,
		Exited:  g.done,
		Why: func() string {
			return fmt.Sprintf("gpuguard exited (%v; stderr %q)", g.cmd.ProcessState, g.stderr.String())
		},
	}, file, want)
}

// withEnv returns the live processes (not zombies) whose environment holds
// the entry kv ("NAME=value").
func withEnv(kv string) []int {
	var out []int
	for _, p := range supervisortest.ListProcs() {
		if p.State == 'Z' {
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/environ")
		if err != nil {
			continue
		}
		for _, e := range bytes.Split(env, []byte{0}) {
			if string(e) == kv {
				out = append(out, p.PID)
				break
			}
		}
	}
	return out
}

// childrenRunning returns the children of parent whose command line
// contains arg.
func childrenRunning(parent int, arg string) []int {
	var out []int
	for _, p := range supervisortest.ListProcs() {
		if p.PPID != parent || p.State == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if strings.Contains(string(cmdline), arg) {
			out = append(out, p.PID)
		}
	}
	return out
}

// gone waits until every pid has exited, reaping the test process's own
// children, and fails the test when one still runs after 30 seconds
// (supervisortest.GoneWithin).
func gone(t *testing.T, pids ...int) {
	t.Helper()
	supervisortest.GoneWithin(t, 30*time.Second, pids...)
}

// reapOrphans reaps the test process's zombie children that exec.Cmd does
// not own (orphans reparented to the subreaper).
func reapOrphans() {
	for _, p := range supervisortest.ListProcs() {
		if p.PPID == os.Getpid() && p.State == 'Z' {
			var ws syscall.WaitStatus
			syscall.Wait4(p.PID, &ws, syscall.WNOHANG, nil)
		}
	}
}

// keepUnchanged records the SHA-256 of every regular file under each path
// (a file or a directory) and fails the test at its end if any was
// changed, removed or added: gpuguard never writes a user's files.
func keepUnchanged(t *testing.T, paths ...string) {
	t.Helper()
	before := checksums(t, paths...)
	if len(before) == 0 {
		t.Fatalf("keepUnchanged: no files under %q", paths)
	}
	t.Cleanup(func() {
		after := checksums(t, paths...)
		for f, sum := range before {
			switch got, ok := after[f]; {
			case !ok:
				t.Errorf("user file %s was removed", f)
			case got != sum:
				t.Errorf("user file %s was modified", f)
			}
		}
		for f := range after {
			if _, ok := before[f]; !ok {
				t.Errorf("file %s appeared among the user's files", f)
			}
		}
	})
}

func checksums(t *testing.T, paths ...string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for _, root := range paths {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(data)
			sums[p] = hex.EncodeToString(h[:])
			return nil
		})
		if err != nil {
			t.Fatalf("checksums of %s: %v", root, err)
		}
	}
	return sums
}

// writeFile writes a test's own input file.
func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
