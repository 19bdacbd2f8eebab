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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

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
	stdout *lockedBuffer
	stderr *lockedBuffer
	runDir string
	done   chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startGpuguard starts gpuguard with flags (a --run-dir in a new temporary
// directory is added unless flags name one) on argv, in dir ("" for a new
// temporary directory).
func startGpuguard(t *testing.T, dir string, flags []string, argv ...string) *gpuguardProc {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	g := &gpuguardProc{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
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
	g.cmd, g.stdin = cmd, w
	go func() {
		cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			cmd.Process.Kill()
			<-g.done
		}
		w.Close()
	})
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

// waitFile waits until file contains want and returns its content. The
// writers append or rename into place; inotify reports both.
func waitFile(t *testing.T, file, want string) string {
	t.Helper()
	return waitFileOr(t, nil, file, want)
}

// waitFile waits until file contains want, failing at once with gpuguard's
// stderr when gpuguard exits first.
func (g *gpuguardProc) waitFile(t *testing.T, file, want string) string {
	t.Helper()
	return waitFileOr(t, g, file, want)
}

func waitFileOr(t *testing.T, g *gpuguardProc, file, want string) string {
	t.Helper()
	var exited <-chan struct{}
	if g != nil {
		exited = g.done
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(file)); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(60 * time.Second)
	for {
		data, err := os.ReadFile(file)
		if err == nil && strings.Contains(string(data), want) {
			return string(data)
		}
		select {
		case <-w.Events:
		case <-exited:
			if data, err := os.ReadFile(file); err == nil && strings.Contains(string(data), want) {
				return string(data)
			}
			t.Fatalf("gpuguard exited (%v) before %q appeared in %s; stderr %q", g.cmd.ProcessState, want, file, g.stderr.String())
		case err := <-w.Errors:
			t.Fatalf("watching %s: %v", file, err)
		case <-timeout:
			t.Fatalf("timed out waiting for %q in %s (have %q)", want, file, data)
		}
	}
}

// proc is one line of /proc/PID/stat.
type proc struct {
	pid, ppid int
	state     byte
}

func readStat(pid int) (proc, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+4 > len(data) {
		return proc{}, false
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 2 {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return proc{pid: pid, ppid: ppid, state: f[0][0]}, true
}

func listProcs() []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readStat(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// withEnv returns the live processes (not zombies) whose environment holds
// the entry kv ("NAME=value").
func withEnv(kv string) []int {
	var out []int
	for _, p := range listProcs() {
		if p.state == 'Z' {
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ")
		if err != nil {
			continue
		}
		for _, e := range bytes.Split(env, []byte{0}) {
			if string(e) == kv {
				out = append(out, p.pid)
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
	for _, p := range listProcs() {
		if p.ppid != parent || p.state == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
		if strings.Contains(string(cmdline), arg) {
			out = append(out, p.pid)
		}
	}
	return out
}

// gone waits until every pid has exited (reaping those that are the test
// process's own children, as orphans of a killed gpuguard become) and fails
// the test when one is still running after the deadline. It waits on
// pidfds, which become readable when the process exits.
func gone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // no such process
		}
		for {
			p, ok := readStat(pid)
			if !ok || p.state == 'Z' {
				if ok && p.ppid == os.Getpid() {
					var ws syscall.WaitStatus
					syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				}
				break
			}
			left := time.Until(deadline)
			if left <= 0 {
				unix.Close(fd)
				t.Fatalf("process %d is still running (state %c, parent %d)", pid, p.state, p.ppid)
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			unix.Poll(fds, int(left.Milliseconds())+1)
		}
		unix.Close(fd)
	}
}

// reapOrphans reaps the test process's zombie children that exec.Cmd does
// not own (orphans reparented to the subreaper).
func reapOrphans() {
	for _, p := range listProcs() {
		if p.ppid == os.Getpid() && p.state == 'Z' {
			var ws syscall.WaitStatus
			syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
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
