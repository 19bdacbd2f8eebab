package attempt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// scanned collects what Scan receives. Scan is called from one goroutine;
// the race detector checks that claim, as nothing here is locked.
type scanned struct {
	lines [3][]lines.Line
}

func (s *scanned) scan(stream int, l lines.Line) {
	l.Text = bytes.Clone(l.Text)
	s.lines[stream] = append(s.lines[stream], l)
}

func (s *scanned) texts(stream int) []string {
	var out []string
	for _, l := range s.lines[stream] {
		out = append(out, string(l.Text))
	}
	return out
}

func start(t *testing.T, spec Spec) *Attempt {
	t.Helper()
	a, err := Start(spec)
	if err != nil {
		t.Fatalf("StartAttempt(%q): %v", spec.Argv, err)
	}
	t.Cleanup(func() {
		a.Kill("test cleanup")
		<-a.Done()
	})
	return a
}

func TestExitStatusPassesThrough(t *testing.T) {
	cases := []struct {
		mode []string
		code int
		sig  syscall.Signal
	}{
		{[]string{"exit", "0"}, 0, 0},
		{[]string{"exit", "3"}, 3, 0},
		{[]string{"exit", "255"}, 255, 0},
		{[]string{"kill", "TERM"}, 143, syscall.SIGTERM},
		{[]string{"kill", "INT"}, 130, syscall.SIGINT},
		{[]string{"kill", "KILL"}, 137, syscall.SIGKILL},
		{[]string{"kill", "HUP"}, 129, syscall.SIGHUP},
	}
	for _, l := range launchers {
		for _, c := range cases {
			t.Run(l.name+"/"+strings.Join(c.mode, "_"), func(t *testing.T) {
				a := start(t, Spec{Argv: fake(c.mode...), PTY: l.pty})
				res := waitDone(t, a)
				if res.Code != c.code || res.Signal != c.sig {
					t.Errorf("code %d signal %v, want %d %v", res.Code, res.Signal, c.code, c.sig)
				}
				if res.StoppedByUs || res.Killed || res.Leftovers != 0 {
					t.Errorf("unexpected %+v", res)
				}
				if res.Pid != a.PID() || res.End.Before(res.Start) {
					t.Errorf("bad result %+v", res)
				}
			})
		}
	}
}

// The job's bytes reach our stdout and stderr exactly as when it runs alone;
// the log gets both; Scan sees every line, the partial last one included.
func TestOutputPassesThroughUnchanged(t *testing.T) {
	wantOut, wantErr, wantCombined := supervisortest.MixedStreams()

	// The program alone, for reference: its streams kept apart, and
	// together in the order written.
	alone := exec.Command(fake("mixed")[0], fake("mixed")[1:]...)
	var aloneOut, aloneErr bytes.Buffer
	alone.Stdout, alone.Stderr = &aloneOut, &aloneErr
	if err := alone.Run(); err != nil {
		t.Fatal(err)
	}
	if aloneOut.String() != wantOut || aloneErr.String() != wantErr {
		t.Fatalf("the fake itself prints %q %q", aloneOut.String(), aloneErr.String())
	}

	t.Run("pipes", func(t *testing.T) {
		var out, errb, log supervisortest.SyncBuffer
		var sc scanned
		a := start(t, Spec{Argv: fake("mixed"), Stdout: &out, Stderr: &errb, Log: &log, Scan: sc.scan})
		res := waitDone(t, a)
		if res.Code != 0 {
			t.Fatalf("exit %d", res.Code)
		}
		if out.String() != aloneOut.String() {
			t.Errorf("stdout\n got %q\nwant %q", out.String(), aloneOut.String())
		}
		if errb.String() != aloneErr.String() {
			t.Errorf("stderr\n got %q\nwant %q", errb.String(), aloneErr.String())
		}
		if len(log.String()) != len(wantCombined) {
			t.Errorf("log has %d bytes, want %d: %q", len(log.String()), len(wantCombined), log.String())
		}
		if got, want := sc.texts(1), supervisortest.SplitAll(wantOut); !slices.Equal(got, want) {
			t.Errorf("scanned stdout\n got %q\nwant %q", got, want)
		}
		if got, want := sc.texts(2), supervisortest.SplitAll(wantErr); !slices.Equal(got, want) {
			t.Errorf("scanned stderr\n got %q\nwant %q", got, want)
		}
		last := sc.lines[1][len(sc.lines[1])-1]
		if !last.Partial || string(last.Text) != "last line without newline" {
			t.Errorf("last line %+v", last)
		}
	})

	t.Run("pty", func(t *testing.T) {
		var out, errb, log supervisortest.SyncBuffer
		var sc scanned
		a := start(t, Spec{Argv: fake("mixed"), PTY: true, Stdout: &out, Stderr: &errb, Log: &log, Scan: sc.scan})
		res := waitDone(t, a)
		if res.Code != 0 {
			t.Fatalf("exit %d", res.Code)
		}
		// The pty turns "\n" into "\r\n" (ONLCR), as on any terminal.
		got := strings.ReplaceAll(out.String(), "\r\n", "\n")
		if got != wantCombined {
			t.Errorf("output\n got %q\nwant %q", got, wantCombined)
		}
		if errb.String() != "" {
			t.Errorf("under a pty everything goes to Stdout; stderr got %q", errb.String())
		}
		if log.String() != out.String() {
			t.Errorf("log differs from the terminal output:\n%q\n%q", log.String(), out.String())
		}
		if got, want := sc.texts(1), supervisortest.SplitAll(wantCombined); !slices.Equal(got, want) {
			t.Errorf("scanned\n got %q\nwant %q", got, want)
		}
		last := sc.lines[1][len(sc.lines[1])-1]
		if !last.Partial || string(last.Text) != "last line without newline" {
			t.Errorf("last line %+v", last)
		}
		if len(sc.lines[2]) != 0 {
			t.Errorf("stream 2 under a pty: %q", sc.texts(2))
		}
	})
}

func TestLongLineWithoutNewline(t *testing.T) {
	const size = 10 << 20
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			var out countWriter
			var sc scanned
			a := start(t, Spec{Argv: fake("bigline", fmt.Sprint(size)), PTY: l.pty, Stdout: &out, Scan: sc.scan})
			res := waitDone(t, a)
			if res.Code != 0 {
				t.Fatalf("exit %d", res.Code)
			}
			if out.n != size || out.other != 0 {
				t.Errorf("got %d bytes (%d not 'x'), want %d", out.n, out.other, size)
			}
			if len(sc.lines[1]) != 1 {
				t.Fatalf("scanned %d lines, want 1", len(sc.lines[1]))
			}
			l := sc.lines[1][0]
			if !l.Truncated || !l.Partial || len(l.Text) != lines.DefaultMax {
				t.Errorf("line: truncated %v partial %v len %d", l.Truncated, l.Partial, len(l.Text))
			}
		})
	}
}

type countWriter struct{ n, other int }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	for _, b := range p {
		if b != 'x' {
			c.other++
		}
	}
	return len(p), nil
}

// A scanner that stops must not stop the job: its output is dropped from
// scanning, counted, and every line that is delivered is whole and numbered
// as in the log.
func TestSlowScannerNeverBlocksTheJob(t *testing.T) {
	const n = 100000 // 10 MB of lines, beyond the 4 MiB queue
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			var out supervisortest.SyncBuffer
			release := make(chan struct{})
			ended := out.Seen("END")
			var sc scanned
			first := true
			scan := func(stream int, l lines.Line) {
				if first {
					first = false
					<-release // stuck until the job has written everything
				}
				sc.scan(stream, l)
			}
			a := start(t, Spec{Argv: fake("flood", fmt.Sprint(n)), PTY: l.pty, Stdout: &out, Scan: scan})
			supervisortest.WaitChan(t, ended, "the job's last line on the terminal while the scanner is stuck")
			close(release)
			res := waitDone(t, a)
			if res.Code != 0 {
				t.Fatalf("exit %d", res.Code)
			}
			if res.DroppedScanBytes == 0 {
				t.Errorf("nothing dropped although the scanner was stuck for %d lines", n)
			}
			if c := strings.Count(out.String(), "\n"); c != n+1 {
				t.Errorf("terminal got %d lines, want %d", c, n+1)
			}
			got := sc.lines[1]
			if len(got) == 0 || len(got) > n+1 {
				t.Fatalf("scanned %d lines", len(got))
			}
			for _, l := range got {
				var i int
				if string(l.Text) == "END" {
					if l.Num != n+1 {
						t.Errorf("END numbered %d, want %d", l.Num, n+1)
					}
					continue
				}
				want := fmt.Sprintf("flood %08d %s", l.Num, strings.Repeat("y", 84))
				if _, err := fmt.Sscanf(string(l.Text), "flood %d", &i); err != nil || string(l.Text) != want {
					t.Fatalf("line %d delivered cut or misnumbered: %q", l.Num, l.Text)
				}
			}
			if last := got[len(got)-1]; string(last.Text) != "END" {
				t.Errorf("last scanned line %q, want END", last.Text)
			}
		})
	}
}

func TestStdinReachesTheJob(t *testing.T) {
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			in := filepath.Join(t.TempDir(), "in")
			if err := os.WriteFile(in, []byte("hello\nworld\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out supervisortest.SyncBuffer
			a := start(t, Spec{Argv: fake("stdin"), PTY: l.pty, Stdin: f, Stdout: &out})
			if res := waitDone(t, a); res.Code != 0 {
				t.Fatalf("exit %d", res.Code)
			}
			if got := strings.ReplaceAll(out.String(), "\r\n", "\n"); got != "hello\nworld\n" {
				t.Errorf("got %q", got)
			}
		})
	}
	t.Run("nil is /dev/null", func(t *testing.T) {
		var out supervisortest.SyncBuffer
		a := start(t, Spec{Argv: fake("stdin"), Stdout: &out})
		if res := waitDone(t, a); res.Code != 0 || out.String() != "" {
			t.Fatalf("exit %d, output %q", res.Code, out.String())
		}
	})
}

func TestLaunchModeAndEnvironment(t *testing.T) {
	var out supervisortest.SyncBuffer
	a := start(t, Spec{Argv: fake("istty"), PTY: true, Stdout: &out})
	waitDone(t, a)
	if got := out.String(); got != "stdin=false stdout=true stderr=true\r\n" {
		t.Errorf("under a pty: %q", got)
	}
	out = supervisortest.SyncBuffer{}
	a = start(t, Spec{Argv: fake("istty"), Stdout: &out})
	waitDone(t, a)
	if got := out.String(); got != "stdin=false stdout=false stderr=false\n" {
		t.Errorf("under pipes: %q", got)
	}

	env := []string{"PATH=" + os.Getenv("PATH"), "KEEP=1", MarkerVar + "=forged"}
	out = supervisortest.SyncBuffer{}
	a = start(t, Spec{Argv: fake("printenv", "KEEP", "PYTHONUNBUFFERED", MarkerVar, "HOME"), Env: env, Stdout: &out})
	waitDone(t, a)
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 4 || got[0] != "KEEP=1" || got[1] != "PYTHONUNBUFFERED=1" || got[3] != "HOME unset" ||
		!strings.HasPrefix(got[2], MarkerVar+"=") || got[2] == MarkerVar+"=forged" {
		t.Errorf("pipes env: %q", got)
	}
	out = supervisortest.SyncBuffer{}
	a = start(t, Spec{Argv: fake("printenv", "PYTHONUNBUFFERED"), Env: append(env, "PYTHONUNBUFFERED=0"), Stdout: &out})
	waitDone(t, a)
	if got := out.String(); got != "PYTHONUNBUFFERED=0\n" {
		t.Errorf("the user's PYTHONUNBUFFERED must win: %q", got)
	}
	out = supervisortest.SyncBuffer{}
	a = start(t, Spec{Argv: fake("printenv", "PYTHONUNBUFFERED"), Env: env, PTY: true, Stdout: &out})
	waitDone(t, a)
	if got := out.String(); got != "PYTHONUNBUFFERED unset\r\n" {
		t.Errorf("a pty needs no PYTHONUNBUFFERED: %q", got)
	}
}

func TestWindowSize(t *testing.T) {
	t.Run("default 80x24", func(t *testing.T) {
		var out supervisortest.SyncBuffer
		a := start(t, Spec{Argv: fake("winsize"), PTY: true, Env: []string{}, Stdout: &out})
		waitDone(t, a)
		if got := out.String(); got != "size 24 80\r\n" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("COLUMNS and LINES", func(t *testing.T) {
		var out supervisortest.SyncBuffer
		a := start(t, Spec{Argv: fake("winsize"), PTY: true, Env: []string{"COLUMNS=132", "LINES=43"}, Stdout: &out})
		waitDone(t, a)
		if got := out.String(); got != "size 43 132\r\n" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("follows our terminal", func(t *testing.T) {
		m, s, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		defer s.Close()
		pty.Setsize(m, &pty.Winsize{Rows: 50, Cols: 200})
		var out supervisortest.SyncBuffer
		first := out.Seen("size 50 200\r\n")
		a := start(t, Spec{Argv: fake("winsize", "wait"), PTY: true, Term: s, Env: []string{"COLUMNS=1"}, Stdout: &out})
		supervisortest.WaitChan(t, first, "the first size")
		pty.Setsize(m, &pty.Winsize{Rows: 40, Cols: 120})
		a.Resize() // what Signals does on SIGWINCH
		waitDone(t, a)
		if got := out.String(); got != "size 50 200\r\nsize 40 120\r\n" {
			t.Errorf("got %q", got)
		}
	})
}

// Stop: SIGTERM to the group and to a descendant in a session of its own
// (as torchrun's workers are), which all die of it before the grace period
// ends: no SIGKILL is needed, and nothing is left, not even a zombie.
func TestStopKillsTheWholeTree(t *testing.T) {
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pids")
			a := start(t, Spec{Argv: fake("tree", pidFile), PTY: l.pty, Grace: time.Minute})
			pids := supervisortest.ReadPids(t, pidFile)
			tree := memberPids(a)
			for _, p := range append([]int{a.PID()}, pids...) {
				if !slices.Contains(tree, p) {
					t.Errorf("Members() = %v lacks %d", tree, p)
				}
			}
			a.Stop("test")
			res := waitDone(t, a)
			if !res.StoppedByUs || res.StopReason != "test" {
				t.Errorf("result %+v", res)
			}
			if res.Code != 143 {
				t.Errorf("code %d, want 143 (SIGTERM)", res.Code)
			}
			if res.Killed {
				t.Errorf("SIGKILL was sent after the grace period: a process outside the job's group did not get SIGTERM")
			}
			for _, p := range pids {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); !errors.Is(err, os.ErrNotExist) {
					st, _ := readStat(p)
					t.Errorf("process %d is still there: %+v", p, st)
				}
			}
			if left := memberPids(a); len(left) != 0 {
				t.Errorf("Members() after Done: %v", left)
			}
		})
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			ready := filepath.Join(t.TempDir(), "ready")
			a := start(t, Spec{Argv: fake("ignoreterm", ready), PTY: l.pty, Grace: 100 * time.Millisecond})
			supervisortest.WaitFile(t, ready, "ready")
			a.Stop("test")
			res := waitDone(t, a)
			if res.Code != 137 || !res.Killed || res.Signal != syscall.SIGKILL {
				t.Errorf("result %+v, want SIGKILL after the grace period", res)
			}
		})
	}
}

func TestKillIsImmediate(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	a := start(t, Spec{Argv: fake("ignoreterm", ready), Grace: time.Hour})
	supervisortest.WaitFile(t, ready, "ready")
	a.Kill("test")
	res := waitDone(t, a)
	if res.Code != 137 || !res.Killed {
		t.Errorf("result %+v", res)
	}
}

// Descendants still running when the main child exits are stopped, and the
// child's own status is kept.
func TestLeftoversStoppedAfterExit(t *testing.T) {
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pids")
			a := start(t, Spec{Argv: fake("tree", pidFile, "exit"), PTY: l.pty, Grace: 500 * time.Millisecond})
			res := waitDone(t, a)
			pids := supervisortest.ReadPids(t, pidFile)
			if res.Code != 0 || res.Leftovers != 2 || res.StoppedByUs {
				t.Errorf("result %+v, want code 0 with 2 leftovers", res)
			}
			for _, p := range pids {
				if supervisortest.Running(p) {
					t.Errorf("leftover %d still running", p)
				}
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notExec := write("notexec.sh", "#!/bin/sh\necho hi\n", 0o644)
	badInterp := write("badinterp.sh", "#!/nonexistent/python9\n", 0o755)
	garbage := write("garbage", "\x00\x01\x02 not a program", 0o755)
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	write("bin/mytool", "#!/bin/sh\necho mytool ran\n", 0o755)

	cases := []struct {
		name string
		argv []string
		env  []string
		code int
		msg  string
	}{
		{"not in PATH", []string{"no-such-program-xyz"}, []string{"PATH=/nonexistent/a:/nonexistent/b"}, 127,
			`command not found: "no-such-program-xyz" (searched PATH=/nonexistent/a:/nonexistent/b)`},
		{"no such file", []string{"./no-such-file"}, nil, 127, `command not found: "./no-such-file": no such file`},
		{"directory", []string{dir}, nil, 126, "it is a directory"},
		{"not executable", []string{notExec}, nil, 126, "permission denied (not executable); run `chmod +x"},
		{"not executable in PATH", []string{"notexec.sh"}, []string{"PATH=" + dir}, 126, "permission denied"},
		{"bad interpreter", []string{badInterp}, nil, 126, "its interpreter, named on its #! line, was not found"},
		{"exec format error", []string{garbage}, nil, 126, "exec format error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Start(Spec{Argv: c.argv, Env: c.env})
			if err == nil {
				t.Fatal("started")
			}
			if got := exitcode.Of(err); got != c.code {
				t.Errorf("exit code %d, want %d (%v)", got, c.code, err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("message %q does not contain %q", err, c.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("message is not one line: %q", err)
			}
		})
	}

	t.Run("PATH of the job, not ours", func(t *testing.T) {
		var out supervisortest.SyncBuffer
		a := start(t, Spec{Argv: []string{"mytool"}, Env: []string{"PATH=" + bin}, Stdout: &out})
		if res := waitDone(t, a); res.Code != 0 || out.String() != "mytool ran\n" {
			t.Errorf("code %d output %q", res.Code, out.String())
		}
	})
}
