package supervisor

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// These tests run gpuguard as a subprocess (the test binary in its -gpuguard
// role, calling Run) and signal it as a shell, Slurm or kill(1) would.

// ptyModes are the launch modes the signal tests run under: pipes, and a
// pty picked by --pty auto because gpuguard's stdout is a terminal.
var ptyModes = []struct {
	name   string
	mode   string
	ttyOut bool
}{
	{"pipes", "auto", false},
	{"pty", "auto", true},
}

// recordedSignals returns the signal lines of the fake's record file.
func recordedSignals(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "ready" {
			out = append(out, l)
		}
	}
	return out
}

func TestEverySignalForwardedExactlyOnce(t *testing.T) {
	sigs := map[syscall.Signal]string{
		syscall.SIGINT: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP",
		syscall.SIGQUIT: "QUIT", syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2",
	}
	for _, m := range ptyModes {
		for sig, name := range sigs {
			t.Run(m.name+"/"+name, func(t *testing.T) {
				rec := filepath.Join(t.TempDir(), "signals")
				g := startGpuguard(t, m.mode, false, m.ttyOut, "5s", fake("record", rec)...)
				supervisortest.WaitFile(t, rec, "ready\n")
				g.signal(t, sig)
				supervisortest.WaitFile(t, rec, name+"\n")
				g.stdin.Close() // the fake exits at end of input
				if code := g.exitCode(t); code != 0 {
					t.Fatalf("exit %d, stderr %q", code, g.errb.String())
				}
				if got := recordedSignals(t, rec); len(got) != 1 || got[0] != name {
					t.Errorf("the job received %q, want [%s] once", got, name)
				}
				ev := events(t, g.runDir)
				if e := findEvent(ev, "signal"); e == nil || e["signal"] != "SIG"+name || e["action"] != "forwarded" {
					t.Errorf("signal event %v; all: %v", e, ev)
				}
				if m.ttyOut != (findEvent(ev, "run_start")["pty"] == true) {
					t.Errorf("--pty auto picked the wrong launcher: %v", findEvent(ev, "run_start"))
				}
			})
		}
	}
}

// A second SIGINT or SIGTERM kills the tree: the job ignores the first.
func TestSecondInterruptKillsTheTree(t *testing.T) {
	for _, m := range ptyModes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			rec, pidFile := filepath.Join(dir, "signals"), filepath.Join(dir, "pids")
			g := startGpuguard(t, m.mode, false, m.ttyOut, "1h", fake("record", rec, pidFile)...)
			supervisortest.WaitFile(t, rec, "ready\n")
			pids := supervisortest.ReadPids(t, pidFile)
			g.signal(t, syscall.SIGINT)
			supervisortest.WaitFile(t, rec, "INT\n")
			g.signal(t, syscall.SIGTERM)
			if code := g.exitCode(t); code != 137 {
				t.Errorf("exit %d, want 137; stderr %q", code, g.errb.String())
			}
			if got := recordedSignals(t, rec); len(got) != 1 || got[0] != "INT" {
				t.Errorf("the job received %q; the second signal must not be forwarded", got)
			}
			supervisortest.Gone(t, pids...)
			stderr := g.errb.String() + g.out.String()
			if !strings.Contains(stderr, "gpuguard: second SIGTERM: killing the job and all its processes") {
				t.Errorf("no status line about the kill: %q", stderr)
			}
		})
	}
}

// SIGTERM and SIGINT to gpuguard end the job and every process it started,
// including one in a session of its own, and gpuguard exits with the job's
// status.
func TestTerminatingSignalLeavesNoProcess(t *testing.T) {
	for _, m := range ptyModes {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			t.Run(m.name+"/"+unix.SignalName(sig), func(t *testing.T) {
				pidFile := filepath.Join(t.TempDir(), "pids")
				g := startGpuguard(t, m.mode, false, m.ttyOut, "2s", fake("tree", pidFile)...)
				pids := supervisortest.ReadPids(t, pidFile)
				g.signal(t, sig)
				if code := g.exitCode(t); code != 128+int(sig) {
					t.Errorf("exit %d, want %d", code, 128+int(sig))
				}
				supervisortest.Gone(t, pids...)
			})
		}
	}
}

// kill -9 of gpuguard: it can do nothing, yet the job and all its
// descendants die (Pdeathsig for the child, the watchdog for the rest).
func TestKill9OfGpuguardLeavesNoProcess(t *testing.T) {
	for _, m := range ptyModes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			rec, pidFile := filepath.Join(dir, "signals"), filepath.Join(dir, "pids")
			g := startGpuguard(t, m.mode, false, m.ttyOut, "300ms", fake("record", rec, pidFile)...)
			supervisortest.WaitFile(t, rec, "ready\n")
			pids := supervisortest.ReadPids(t, pidFile)
			child := childOf(t, g.cmd.Process.Pid, rec)
			g.signal(t, syscall.SIGKILL)
			if ws := g.wait(t); ws.Signal() != syscall.SIGKILL {
				t.Fatalf("gpuguard: %v", ws)
			}
			supervisortest.Gone(t, append([]int{child}, pids...)...)
		})
	}
}

// childOf finds gpuguard's fake child (the record process) among its
// children.
func childOf(t *testing.T, parent int, arg string) int {
	t.Helper()
	for _, p := range supervisortest.ListProcs() {
		if p.PPID != parent {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if strings.Contains(string(cmdline), arg) {
			return p.PID
		}
	}
	t.Fatalf("no child of %d runs %s", parent, arg)
	return 0
}

// In raw mode a ^C typed on gpuguard's terminal reaches the job once,
// through the pty, and the terminal is restored afterwards.
func TestTypedInterruptInRawMode(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "signals")
	g := startGpuguard(t, "auto", true, false, "5s", fake("record", rec)...)
	before := g.termios
	supervisortest.WaitFile(t, rec, "ready\n")
	during, err := unix.IoctlGetTermios(int(g.master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if during.Lflag&(unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("terminal not in raw mode while the job runs: lflag %#x", during.Lflag)
	}
	g.master.Write([]byte{0x03}) // ^C
	supervisortest.WaitFile(t, rec, "INT\n")
	g.master.Write([]byte{0x04}) // ^D: end of input for the job
	if code := g.exitCode(t); code != 0 {
		t.Fatalf("exit %d; output %q", code, g.out.String())
	}
	if got := recordedSignals(t, rec); len(got) != 1 || got[0] != "INT" {
		t.Errorf("the job received %q, want INT once", got)
	}
	after, err := unix.IoctlGetTermios(int(g.master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("terminal mode not restored:\nbefore %+v\nafter  %+v", before, after)
	}
	if e := findEvent(events(t, g.runDir), "attempt_end"); e == nil || e["typed_interrupt"] != "SIGINT" {
		t.Errorf("attempt_end does not record the typed ^C: %v", e)
	}
}

func events(t *testing.T, runDir string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(runDir, eventsName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("events.jsonl line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func findEvent(ev []map[string]any, typ string) map[string]any {
	for _, e := range ev {
		if e["type"] == typ {
			return e
		}
	}
	return nil
}
