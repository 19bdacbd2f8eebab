package supervisor

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// Run end to end, as a subprocess: the job's stdout is gpuguard's stdout
// byte for byte, the status lines go to stderr on fresh lines, and the run
// directory records the run.
func TestRunRecordsTheRun(t *testing.T) {
	wantOut, wantErr, wantCombined := supervisortest.MixedStreams()
	for _, m := range ptyModes {
		t.Run(m.name, func(t *testing.T) {
			g := startGpuguard(t, m.mode, false, m.ttyOut, "5s", fake("mixed")...)
			g.stdin.Close()
			if code := g.exitCode(t); code != 0 {
				t.Fatalf("exit %d: %s", code, g.errb.String())
			}
			out := g.out.String()
			if m.ttyOut {
				if got := strings.ReplaceAll(out, "\r\n", "\n"); got != wantCombined {
					t.Errorf("stdout %q, want %q", got, wantCombined)
				}
			} else if out != wantOut {
				t.Errorf("stdout %q, want %q", out, wantOut)
			}
			stderr := g.errb.String()
			if !strings.HasPrefix(stderr, "gpuguard: run directory "+g.runDir+"\n") ||
				!strings.Contains(stderr, "gpuguard: allocator settings: PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True\n") {
				t.Errorf("status lines: %q", stderr)
			}
			if !m.ttyOut && !strings.HasSuffix(stderr, wantErr) {
				t.Errorf("the job's stderr is not on gpuguard's stderr: %q", stderr)
			}
			log, _ := os.ReadFile(filepath.Join(g.runDir, OutputLogName))
			if !m.ttyOut && len(log) != len(wantOut)+len(wantErr) {
				t.Errorf("output.log has %d bytes: %q", len(log), log)
			}
			if m.ttyOut && string(log) != out {
				t.Errorf("output.log %q differs from the terminal's %q", log, out)
			}
			ev := events(t, g.runDir)
			var types []string
			for _, e := range ev {
				types = append(types, e["type"].(string))
			}
			// In this order, among others (phases, memory samples, ...).
			want := []string{"run_start", "attempt_start", "attempt_end", "run_end"}
			for _, typ := range types {
				if len(want) > 0 && typ == want[0] {
					want = want[1:]
				}
			}
			if len(want) != 0 || types[0] != "run_start" || types[len(types)-1] != "run_end" {
				t.Errorf("events %v", types)
			}
			end := findEvent(ev, "attempt_end")
			wantLines := len(supervisortest.SplitAll(wantOut)) + len(supervisortest.SplitAll(wantErr))
			if m.ttyOut {
				wantLines = len(supervisortest.SplitAll(wantCombined))
			}
			if end["exit_code"] != 0.0 || end["lines"] != float64(wantLines) {
				t.Errorf("attempt_end %v", end)
			}
			if rss := findEvent(ev, "run_end")["peak_rss_kb"].(float64); rss <= 0 {
				t.Errorf("run_end peak_rss_kb %v", rss)
			}
		})
	}
}

// A status line printed while the job's last line is unfinished starts on a
// line of its own.
func TestRunStatusLineAfterPartialLine(t *testing.T) {
	dir := t.TempDir()
	args := append([]string{"-gpuguard", "never", "5s", dir, "--", "sh", "-c", `"$@"; exit 3`, "sh"}, fake("notrail", "50%|#####")...)
	cmd := exec.Command(testBinary(), args...)
	out, err := cmd.CombinedOutput() // stdout and stderr: one file, as on a terminal
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit %v: %s", err, out)
	}
	if !strings.HasSuffix(string(out), "50%|#####\ngpuguard: the job exited with status 3\n") {
		t.Errorf("output %q", out)
	}
}

func TestRunRefusesWhatCannotRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"not found", []string{"auto", "5s", "-", "--", "no-such-program-xyz"}, 127, "gpuguard: command not found: \"no-such-program-xyz\" (searched PATH="},
		{"not executable", []string{"auto", "5s", "-", "--", file}, 126, "permission denied (not executable)"},
		{"run dir", []string{"auto", "5s", filepath.Join(file, "run"), "--", "true"}, 73, "gpuguard: cannot create run directory"},
		{"bad --pty", []string{"sometimes", "5s", "-", "--", "true"}, 64, "--pty \"sometimes\" is not one of auto, always, never"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wd := t.TempDir()
			cmd := exec.Command(testBinary(), append([]string{"-gpuguard"}, c.args...)...)
			cmd.Dir = wd
			out, err := cmd.CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != c.code {
				t.Fatalf("exit %v, want %d: %s", err, c.code, out)
			}
			if !strings.Contains(string(out), c.msg) || strings.Count(string(out), "\n") != 1 {
				t.Errorf("want one line with %q, got %q", c.msg, out)
			}
			if _, err := os.Stat(filepath.Join(wd, ".gpuguard")); err == nil {
				t.Errorf("a run directory was created for a run that could not start")
			}
		})
	}
}

// After a terminating signal, RunAttempt starts nothing.
func TestRunAttemptRefusesAfterTerminatingSignal(t *testing.T) {
	s := notifySignals()
	defer s.Stop()
	s.mu.Lock()
	s.term = syscall.SIGTERM
	s.mu.Unlock()
	rd, err := createRunDir(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	j := &Job{Signals: s, RunDir: rd, Status: newStatus(nil, nil), Logger: rd.Logger()}
	marker := filepath.Join(t.TempDir(), "started")
	_, err = j.RunAttempt(2, attemptSpec{Argv: fake("ignoreterm", marker)}, attemptHooks{})
	if exitCodeOf(err) != 143 {
		t.Fatalf("RunAttempt after SIGTERM: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the job was started")
	}
}

// When gpuguard's stdout and stderr are one file (`> log 2>&1`, Slurm's -o
// without -e) or one pipe (`2>&1 | tee`), the job's bytes reach it in the
// order the job wrote them, as when it runs alone: the job gets one pipe for
// both, since two pipes read apart cannot keep the order of two streams.
// output.log holds the same bytes.
func TestOneFileKeepsTheJobsOrder(t *testing.T) {
	const n = 400
	argv := fake("alternate", fmt.Sprint(n))
	// Alone, with `> f 2>&1`.
	alone := filepath.Join(t.TempDir(), "alone")
	f, err := os.Create(alone)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want, _ := os.ReadFile(alone)
	if !strings.HasPrefix(string(want), "out 1\nerr 1\nout 2\nerr 2\n") || strings.Count(string(want), "\n") != 2*n {
		t.Fatalf("the fake alone wrote %.80q…", want)
	}

	for _, target := range []string{"file", "pipe"} {
		t.Run(target, func(t *testing.T) {
			runDir := t.TempDir()
			args := append([]string{"-gpuguard", "never", "5s", runDir, "--"}, argv...)
			cmd := exec.Command(testBinary(), args...)
			var got []byte
			var wait func()
			switch target {
			case "file":
				out, err := os.Create(filepath.Join(t.TempDir(), "log"))
				if err != nil {
					t.Fatal(err)
				}
				defer out.Close()
				cmd.Stdout, cmd.Stderr = out, out
				wait = func() { got, _ = os.ReadFile(out.Name()) }
			case "pipe":
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdout, cmd.Stderr = w, w
				done := make(chan []byte)
				go func() { b, _ := io.ReadAll(r); r.Close(); done <- b }()
				defer w.Close()
				wait = func() { w.Close(); got = <-done }
			}
			if err := cmd.Run(); err != nil {
				t.Fatalf("gpuguard: %v", err)
			}
			wait()
			// gpuguard's own status lines, each on a line of its own, go
			// to the same file; without them it is the job's output.
			var job []string
			for _, line := range strings.SplitAfter(string(got), "\n") {
				if !strings.HasPrefix(line, "gpuguard: ") {
					job = append(job, line)
				}
			}
			if strings.Join(job, "") != string(want) {
				t.Errorf("the job's output, without gpuguard's lines, differs from the job's alone:\n%.300q\nwant\n%.300q", strings.Join(job, ""), want)
			}
			if log, _ := os.ReadFile(filepath.Join(runDir, OutputLogName)); string(log) != string(want) {
				t.Errorf("output.log differs from the job's output alone:\n%.300q", log)
			}
		})
	}
}
