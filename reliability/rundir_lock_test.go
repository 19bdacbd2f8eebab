package reliability

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 23, finding 3: several gpuguards started at once on one run
// directory (a sweep given the same --run-dir, a job script run twice). One
// runs; every other is refused with 73 before it writes anything there. The
// winner's job waits on a FIFO until the others have ended, so that the
// runs overlap whatever the scheduling.
func TestConcurrentRunsShareNoDirectory(t *testing.T) {
	n := max(reps(t, 24), 3)
	jd := t.TempDir()
	argv := scriptJob(t, jd, "ready print 1 wait exit 0")
	fifo := makeFIFO(t, jd)
	runDir := filepath.Join(t.TempDir(), "shared")
	procs := make([]*gpuguardProc, n)
	ended := make(chan int, n)
	for i := range procs {
		procs[i] = startGpuguard(t, "", []string{"--pty", "never", "--run-dir", runDir}, argv...)
		go func(i int) { <-procs[i].done; ended <- i }(i)
	}
	refused := map[int]bool{}
	for len(refused) < n-1 {
		select {
		case i := <-ended:
			refused[i] = true
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d gpuguards ended; the others run on", len(refused), n)
		}
	}
	winner := -1
	for i, g := range procs {
		if refused[i] {
			if code := g.exitCode(t); code != 73 || !strings.Contains(g.stderr.String(), "is running in it; wait for that run's end") {
				t.Errorf("gpuguard %d of the losers: exit %d, stderr %q", i, code, g.stderr.String())
			}
			if g.stdout.String() != "" {
				t.Errorf("a refused gpuguard ran its job: %q", g.stdout.String())
			}
		} else {
			winner = i
		}
	}
	waitFile(t, filepath.Join(jd, "ready-1"), "ready")
	release(t, fifo)
	if code := procs[winner].exitCode(t); code != 0 {
		t.Fatalf("the run that holds the directory: exit %d, stderr %q", code, procs[winner].stderr.String())
	}
	if count, _ := os.ReadFile(filepath.Join(jd, "count")); string(count) != "." {
		t.Errorf("the job ran %d times, want once", len(count))
	}
	if data, _ := os.ReadFile(filepath.Join(runDir, "output.log")); string(data) != "attempt 1 line 1\n" {
		t.Errorf("output.log %q: the runs' outputs mixed", data)
	}
	events, _ := os.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if k := strings.Count(string(events), `"type":"run_start"`); k != 1 {
		t.Errorf("events.jsonl holds %d run_start events, want 1", k)
	}
}

// kill -9 of the run that holds a directory frees it: the kernel drops the
// lock with the process, and no stale lock file refuses the next run.
func TestKill9FreesRunDirectory(t *testing.T) {
	jd := t.TempDir()
	argv := scriptJob(t, jd, "ready wait exit 0")
	makeFIFO(t, jd)
	runDir := filepath.Join(t.TempDir(), "rd")
	g := startGpuguard(t, "", []string{"--pty", "never", "--run-dir", runDir}, argv...)
	g.waitFile(t, filepath.Join(jd, "ready-1"), "ready")
	second := startGpuguard(t, "", []string{"--pty", "never", "--run-dir", runDir}, fake("exit", "0")...)
	if code := second.exitCode(t); code != 73 {
		t.Fatalf("a run beside a live one: exit %d, stderr %q", code, second.stderr.String())
	}
	g.signal(t, syscall.SIGKILL)
	if ws := g.wait(t); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("gpuguard: %v", ws)
	}
	third := startGpuguard(t, "", []string{"--pty", "never", "--run-dir", runDir}, fake("exit", "0")...)
	if code := third.exitCode(t); code != 0 {
		t.Fatalf("a run after kill -9 of the holder: exit %d, stderr %q", code, third.stderr.String())
	}
	reapOrphans()
}
