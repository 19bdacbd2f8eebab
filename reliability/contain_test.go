package reliability

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuguard/gpuguard/internal/attempt"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The findings of issue 23 about the job's processes and gpuguard's own
// output, reproduced as the issue tried them: gpuguard as a subprocess.

// escapeJob starts a process that leaves everything marking it as the job's
// behind (a cleared environment, a session of its own, a parent gone at
// once, no output), writes its pid to $1, and then runs rest.
func escapeJob(pidFile, rest string) []string {
	return []string{"sh", "-c", `( env -i setsid sh -c 'echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 3001' "$1" </dev/null >/dev/null 2>&1 & )
while [ ! -s "$1" ]; do sleep 0.01; done
` + rest, "sh", pidFile}
}

func escapedPid(t *testing.T, g *gpuguardProc, pidFile string) int {
	t.Helper()
	s := strings.TrimSpace(g.waitFile(t, pidFile, "\n"))
	pid, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("pid file %s: %q", pidFile, s)
	}
	return pid
}

// Finding 1: the escaped process does not outlive gpuguard, under each
// containment, after a normal end.
func TestEscapedProcessDoesNotOutliveTheRun(t *testing.T) {
	for _, mode := range []string{attempt.ContainCgroup2, attempt.ContainCgroup1, attempt.ContainTree} {
		t.Run(mode, func(t *testing.T) {
			if err := attempt.CheckContainment(mode); err != nil {
				t.Skipf("containment %s is not available here, so it is not tested: %v", mode, err)
			}
			t.Setenv("GPUGUARD_CONTAINMENT", mode)
			pidFile := filepath.Join(t.TempDir(), "escaped")
			g := startGpuguard(t, "", []string{"--pty", "never"}, escapeJob(pidFile, "exit 0")...)
			if code := g.exitCode(t); code != 0 {
				t.Fatalf("gpuguard exited %d; stderr %q", code, g.stderr.String())
			}
			if !strings.Contains(g.stderr.String(), "gpuguard: containment: ") {
				t.Errorf("stderr %q does not say which containment is in use", g.stderr.String())
			}
			gone(t, escapedPid(t, g, pidFile))
		})
	}
}

// Finding 1, after kill -9 of gpuguard: its watchdog knows the attempt's
// cgroup and kills it. (Without a cgroup, the watchdog knows the processes
// gpuguard found before it died, which may not include one that escaped
// the moment before: docs/reliability.md.)
func TestEscapedProcessDoesNotOutliveKill9(t *testing.T) {
	for _, mode := range []string{attempt.ContainCgroup2, attempt.ContainCgroup1} {
		t.Run(mode, func(t *testing.T) {
			if err := attempt.CheckContainment(mode); err != nil {
				t.Skipf("containment %s is not available here, so it is not tested: %v", mode, err)
			}
			t.Setenv("GPUGUARD_CONTAINMENT", mode)
			pidFile := filepath.Join(t.TempDir(), "escaped")
			g := startGpuguard(t, "", []string{"--pty", "never", "--grace", "1s"}, escapeJob(pidFile, "exec sleep 3002")...)
			escaped := escapedPid(t, g, pidFile)
			g.signal(t, syscall.SIGKILL)
			if ws := g.wait(t); ws.Signal() != syscall.SIGKILL {
				t.Fatalf("gpuguard: %v", ws)
			}
			gone(t, escaped)
			reapOrphans()
		})
	}
}

// Finding 2: gpuguard's stdout is a pipe nobody reads (a frozen terminal, a
// stalled `| tee`). Its SIGTERM reaches the job (which ignores it), the
// second kills it, and the run ends and is recorded: attempt_end and
// run_end in events.jsonl, every byte in output.log.
func TestBlockedStdoutDoesNotWedgeGpuguard(t *testing.T) {
	runDir := t.TempDir() // gpuguard takes an empty directory
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // never read
	stderr := &supervisortest.SyncBuffer{}
	cmd := exec.Command(self(), "-gpuguard", "--run-dir", runDir, "--pty", "never", "--grace", "30s", "--",
		"sh", "-c", `trap "" TERM; while :; do echo x; done`)
	cmd.Stdout, cmd.Stderr = w, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	g := &gpuguardProc{cmd: cmd, stderr: stderr, stdout: &supervisortest.SyncBuffer{}, done: supervisortest.WaitInBackground(t, cmd), runDir: runDir}
	events := filepath.Join(runDir, "events.jsonl")
	g.waitFile(t, events, `"type":"attempt_start"`)
	g.signal(t, syscall.SIGTERM)
	// The first one is recorded before the second is sent: two signals sent
	// together may reach gpuguard as one.
	g.waitFile(t, events, `"type":"signal"`)
	g.signal(t, syscall.SIGTERM)
	if code := g.exitCode(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("gpuguard exited %d, want %d (the job killed); stderr %q", code, 128+int(syscall.SIGKILL), stderr.String())
	}
	ev, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"type":"attempt_end"`, `"type":"run_end"`, `"action":"killed"`} {
		if !strings.Contains(string(ev), want) {
			t.Errorf("events.jsonl lacks %s:\n%s", want, ev)
		}
	}
	if st, err := os.Stat(filepath.Join(runDir, "output.log")); err != nil || st.Size() == 0 {
		t.Errorf("output.log: %v", err)
	}
}
