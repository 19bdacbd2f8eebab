package reliability

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// launchers are gpuguard's two ways of starting the job.
var launchers = []string{"never", "always"} // --pty

var signalKinds = []struct {
	sig  syscall.Signal
	name string
}{
	{syscall.SIGINT, "INT"}, {syscall.SIGTERM, "TERM"}, {syscall.SIGHUP, "HUP"},
	{syscall.SIGQUIT, "QUIT"}, {syscall.SIGUSR1, "USR1"}, {syscall.SIGUSR2, "USR2"},
}

// Each forwarded signal, sent to gpuguard as kill(1), a shell or Slurm
// would, under both launchers, many times over. Odd repetitions: the job
// (supervisortest's fake trainer in record mode, with two grandchildren, one
// in a session of its own) records every signal it gets and exits 0 at end
// of input; it must have received the signal exactly once, gpuguard exits
// 0, and no process of the job is left. Even repetitions: the job dies of
// the signal (its default action), and gpuguard exits 128+N.
func TestSignalsRepeated(t *testing.T) {
	n := reps(t, 100)
	for _, mode := range launchers {
		for _, k := range signalKinds {
			t.Run(fmt.Sprintf("pty=%s/%s", mode, k.name), func(t *testing.T) {
				for i := 0; i < n; i++ {
					t.Run(strconv.Itoa(i), func(t *testing.T) {
						t.Parallel()
						if i%2 == 0 {
							signalRecorded(t, mode, k.sig, k.name)
						} else {
							signalKills(t, mode, k.sig)
						}
					})
				}
			})
		}
	}
}

// jobProcs are the processes of a running record-mode job.
type jobProcs struct {
	child, watchdog int
	grandchildren   []int
	marker          string // the GPUGUARD_RUN_DIR entry in the job's environment
}

// startRecording starts gpuguard on the fake trainer in record mode with
// its two grandchildren, and waits until all are running.
func startRecording(t *testing.T, mode, grace string) (*gpuguardProc, string, jobProcs) {
	t.Helper()
	dir := t.TempDir()
	rec, pidFile := filepath.Join(dir, "signals"), filepath.Join(dir, "pids")
	g := startGpuguard(t, dir, []string{"--pty", mode, "--grace", grace}, fake("record", rec, pidFile)...)
	g.waitFile(t, rec, "ready\n")
	var p jobProcs
	for _, f := range strings.Fields(waitFile(t, pidFile, "\n")) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid file %s: %v", pidFile, err)
		}
		p.grandchildren = append(p.grandchildren, pid)
	}
	if c := childrenRunning(g.cmd.Process.Pid, rec); len(c) == 1 {
		p.child = c[0]
	} else {
		t.Fatalf("gpuguard's children running the job: %v", c)
	}
	if w := childrenRunning(g.cmd.Process.Pid, "gpuguard-internal-watchdog"); len(w) == 1 {
		p.watchdog = w[0]
	} else {
		t.Fatalf("gpuguard's watchdogs: %v", w)
	}
	p.marker = "GPUGUARD_RUN_DIR=" + g.runDir
	// The leftover check below looks for this environment entry: it must
	// find the job's processes while they run.
	if with := withEnv(p.marker); len(with) != 3 {
		t.Fatalf("processes with %s: %v, want the job and its 2 grandchildren", p.marker, with)
	}
	return g, rec, p
}

// checkNoneLeft waits for every process of the job and the watchdog to be
// gone, and looks through /proc for any other process carrying the run's
// marker.
func checkNoneLeft(t *testing.T, p jobProcs) {
	t.Helper()
	gone(t, append([]int{p.child, p.watchdog}, p.grandchildren...)...)
	if left := withEnv(p.marker); len(left) > 0 {
		t.Fatalf("processes of the job still running after gpuguard exited: %v", left)
	}
}

func signalRecorded(t *testing.T, mode string, sig syscall.Signal, name string) {
	g, rec, p := startRecording(t, mode, "5s")
	g.signal(t, sig)
	g.waitFile(t, rec, name+"\n")
	g.stdin.Close() // the job exits 0 at end of its input
	if code := g.exitCode(t); code != 0 {
		t.Fatalf("gpuguard exited %d, want the job's 0; stderr %q", code, g.stderr.String())
	}
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(data)); got != "ready\n"+name {
		t.Fatalf("the job recorded %q, want ready and %s once", got, name)
	}
	checkNoneLeft(t, p)
}

func signalKills(t *testing.T, mode string, sig syscall.Signal) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	// sh and sleep keep the default action of every signal (no core file:
	// SIGQUIT's default action dumps core).
	g := startGpuguard(t, dir, []string{"--pty", mode, "--grace", "5s"},
		"/bin/sh", "-c", `ulimit -c 0; echo ready > "$1"; exec sleep 600`, "sh", ready)
	g.waitFile(t, ready, "ready\n")
	g.signal(t, sig)
	if code := g.exitCode(t); code != 128+int(sig) {
		t.Fatalf("gpuguard exited %d, want %d (the job died of %v); stderr %q", code, 128+int(sig), sig, g.stderr.String())
	}
	if left := withEnv("GPUGUARD_RUN_DIR=" + g.runDir); len(left) > 0 {
		gone(t, left...)
	}
}

// kill -9 of gpuguard: it runs no cleanup at all, yet the job and both
// grandchildren die (Pdeathsig for the child, the watchdog for the rest),
// and the watchdog exits too.
func TestKill9OfGpuguardRepeated(t *testing.T) {
	n := reps(t, 20)
	for _, mode := range launchers {
		t.Run("pty="+mode, func(t *testing.T) {
			for i := 0; i < n; i++ {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					t.Parallel()
					g, _, p := startRecording(t, mode, "300ms")
					g.signal(t, syscall.SIGKILL)
					if ws := g.wait(t); ws.Signal() != syscall.SIGKILL {
						t.Fatalf("gpuguard: %v", ws)
					}
					checkNoneLeft(t, p)
					reapOrphans()
				})
			}
		})
	}
}
