package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The test binary plays the programs these tests run (supervisortest.Main),
// chosen by its first argument:
//
//	MODE ...                           the fake trainer's modes (supervisortest.Trainer)
//	-gpuguard PTY GRACE RUNDIR -- CMD  gpuguard itself: Run with that config
//	-gpuguard-group WHERE RANK SIZE TIMEOUT RUNDIR POLICY -- CMD
//	                                   gpuguard in a group (group_test.go)
//	run -- gpuguard-internal-watchdog  an attempt's watchdog
//
// Orphans of the gpuguard subprocesses these tests kill come back to the
// test process (a subreaper), which reaps them (see gone).
func TestMain(m *testing.M) { supervisortest.Main(m, helpers, supervisortest.Subreaper()) }

var helpers = supervisortest.Modes("mixed", "alternate", "notrail", "ignoreterm", "record", "trap", "tree").With(supervisortest.Helpers{
	"-gpuguard":       runAsGpuguard,
	"-gpuguard-group": runAsGroupMember,
	"run":             runWatchdog,
})

// runWatchdog is `gpuguard run -- gpuguard-internal-watchdog`, as Run hands
// it over.
func runWatchdog(args []string) int {
	if len(args) < 1 || !IsWatchdogInvocation(args[1:]) {
		fmt.Fprintf(os.Stderr, "run %q: not an attempt's watchdog (GPUGUARD_WATCHDOG unset?)\n", args)
		return ExitUsage
	}
	return watchdogMain()
}

func testBinary() string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe
}

// fake returns the argv of the fake trainer in mode.
func fake(mode ...string) []string { return supervisortest.Argv(mode[0], mode[1:]...) }

func runAsGpuguard(args []string) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: -gpuguard PTY GRACE RUNDIR -- CMD...")
		return ExitUsage
	}
	grace, err := time.ParseDuration(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return ExitUsage
	}
	runDir := args[2]
	if runDir == "-" {
		runDir = ""
	}
	return Run(Config{
		Argv: args[4:], PTY: args[0], Grace: grace, RunDir: runDir, Group: os.Getenv("GPUGUARD_GROUP"),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
}

type launcher struct {
	name string
	pty  bool
}

var launchers = []launcher{{"pipes", false}, {"pty", true}}

// syncBuffer is a bytes.Buffer safe for the reader goroutines, which can
// also tell when a string has arrived.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	waiters []waiter
}

type waiter struct {
	s  string
	ch chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		all := s.b.Bytes()
		tail := all[max(0, len(all)-len(p)-len(w.s)):] // earlier bytes were searched before
		if bytes.Contains(tail, []byte(w.s)) {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	s.waiters = kept
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// seen returns a channel closed once the buffer contains str.
func (s *syncBuffer) seen(str string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if bytes.Contains(s.b.Bytes(), []byte(str)) {
		close(ch)
	} else {
		s.waiters = append(s.waiters, waiter{str, ch})
	}
	return ch
}

func waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func waitDone(t *testing.T, a *Attempt) attemptResult {
	t.Helper()
	waitChan(t, a.Done(), "the attempt to finish")
	return a.Result()
}

// waitFile waits until file exists and contains want, and returns its
// content. The fake trainer writes its files atomically (rename) or by
// appending; inotify reports both.
func waitFile(t *testing.T, file, want string) string {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(file)); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		data, err := os.ReadFile(file)
		if err == nil && strings.Contains(string(data), want) {
			return string(data)
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			t.Fatalf("watching %s: %v", file, err)
		case <-timeout:
			t.Fatalf("timed out waiting for %q in %s (have %q)", want, file, data)
		}
	}
}

// readPids reads the "GC SGC" file of the fake's tree mode.
func readPids(t *testing.T, file string) []int {
	t.Helper()
	f := strings.Fields(waitFile(t, file, "\n"))
	var pids []int
	for _, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("bad pid file %s: %q", file, f)
		}
		pids = append(pids, n)
	}
	if len(pids) != 2 {
		t.Fatalf("pid file %s: %q", file, f)
	}
	return pids
}

// gone waits until every pid has exited (reaping it when it is the test
// process's own child, as orphans of a killed gpuguard become) and fails the
// test if one is still running after the deadline. It waits on pidfds, which
// become readable when the process exits.
func gone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // no such process
		}
		for {
			p, ok := readStat(pid)
			if !ok || p.zombie() {
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

// running reports whether pid is alive (not a zombie).
func running(pid int) bool {
	p, ok := readStat(pid)
	return ok && !p.zombie()
}

// gpuguardProc is gpuguard (the test binary in its -gpuguard role) running
// as a subprocess in its own process group, so that signals sent to it never
// reach the test.
type gpuguardProc struct {
	cmd    *exec.Cmd
	out    *syncBuffer // stdout (and, under a pty, stderr too)
	errb   *syncBuffer
	stdin  *os.File // write end of its stdin, nil when stdin is a terminal
	master *os.File // its terminal, when started on one
	// termios is the terminal's mode before gpuguard started, when started
	// on one (read then: gpuguard may change it as soon as it runs).
	termios *unix.Termios
	done    chan struct{}
	runDir  string
}

// startGpuguard runs gpuguard with --pty mode. With onTerm, its stdin, stdout
// and stderr are a new terminal whose foreground group it leads (as in an
// interactive shell); with ttyOut, only its stdout is a terminal; otherwise
// all are pipes.
func startGpuguard(t *testing.T, mode string, onTerm, ttyOut bool, grace string, argv ...string) *gpuguardProc {
	t.Helper()
	g := &gpuguardProc{out: &syncBuffer{}, errb: &syncBuffer{}, done: make(chan struct{}), runDir: t.TempDir()}
	args := append([]string{"-gpuguard", mode, grace, g.runDir, "--"}, argv...)
	cmd := exec.Command(testBinary(), args...)
	var closeAfter []*os.File
	switch {
	case onTerm:
		m, s, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		pty.Setsize(m, &pty.Winsize{Rows: 30, Cols: 100})
		g.master = m
		if g.termios, err = unix.IoctlGetTermios(int(m.Fd()), unix.TCGETS); err != nil {
			t.Fatal(err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		closeAfter = append(closeAfter, s)
		go func() { copyUntilEIO(g.out, m) }()
	default:
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin, g.stdin = r, w
		closeAfter = append(closeAfter, r)
		cmd.Stderr = g.errb
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if ttyOut {
			m, s, err := pty.Open()
			if err != nil {
				t.Fatal(err)
			}
			// Output processing off, as a terminal emulator sees the bytes:
			// the job's pty already turned "\n" into "\r\n".
			if _, err := term.MakeRaw(int(s.Fd())); err != nil {
				t.Fatal(err)
			}
			g.master = m
			cmd.Stdout = s
			closeAfter = append(closeAfter, s)
			go func() { copyUntilEIO(g.out, m) }()
		} else {
			cmd.Stdout = g.out
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range closeAfter {
		f.Close()
	}
	g.cmd = cmd
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
		if g.stdin != nil {
			g.stdin.Close()
		}
		if g.master != nil {
			g.master.Close()
		}
	})
	return g
}

func copyUntilEIO(dst *syncBuffer, src *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			dst.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// wait waits for gpuguard to exit and returns its wait status.
func (g *gpuguardProc) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	waitChan(t, g.done, "gpuguard to exit")
	return g.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func (g *gpuguardProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
}

// exitCode is gpuguard's exit status, which must not be a signal death.
func (g *gpuguardProc) exitCode(t *testing.T) int {
	t.Helper()
	ws := g.wait(t)
	if ws.Signaled() {
		t.Fatalf("gpuguard died of %v; stdout %q stderr %q", ws.Signal(), g.out.String(), g.errb.String())
	}
	return ws.ExitStatus()
}

// readState reads the state.json of the run directory dir.
func readState(t *testing.T, dir string) runState {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st runState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
