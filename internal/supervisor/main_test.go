package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
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
// test process (a subreaper), which reaps them (see supervisortest.Gone).
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

func waitDone(t *testing.T, a *Attempt) attemptResult {
	t.Helper()
	supervisortest.WaitChan(t, a.Done(), "the attempt to finish")
	return a.Result()
}

// gpuguardProc is gpuguard (the test binary in its -gpuguard role) running
// as a subprocess in its own process group, so that signals sent to it never
// reach the test.
type gpuguardProc struct {
	cmd    *exec.Cmd
	out    *supervisortest.SyncBuffer // stdout (and, under a pty, stderr too)
	errb   *supervisortest.SyncBuffer
	stdin  *os.File // write end of its stdin, nil when stdin is a terminal
	master *os.File // its terminal, when started on one
	// termios is the terminal's mode before gpuguard started, when started
	// on one (read then: gpuguard may change it as soon as it runs).
	termios *unix.Termios
	done    <-chan struct{}
	runDir  string
}

// startGpuguard runs gpuguard with --pty mode. With onTerm, its stdin, stdout
// and stderr are a new terminal whose foreground group it leads (as in an
// interactive shell); with ttyOut, only its stdout is a terminal; otherwise
// all are pipes.
func startGpuguard(t *testing.T, mode string, onTerm, ttyOut bool, grace string, argv ...string) *gpuguardProc {
	t.Helper()
	g := &gpuguardProc{out: &supervisortest.SyncBuffer{}, errb: &supervisortest.SyncBuffer{}, runDir: t.TempDir()}
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
	// Closed after gpuguard is gone (cleanups run last first).
	t.Cleanup(func() {
		if g.stdin != nil {
			g.stdin.Close()
		}
		if g.master != nil {
			g.master.Close()
		}
	})
	g.cmd, g.done = cmd, supervisortest.WaitInBackground(t, cmd)
	return g
}

func copyUntilEIO(dst *supervisortest.SyncBuffer, src *os.File) {
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
	supervisortest.WaitChan(t, g.done, "gpuguard to exit")
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
