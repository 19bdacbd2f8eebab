package attempt

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// containments are the ways an attempt's processes are held together: each
// test below runs under each, where this machine allows it.
var containments = []string{ContainCgroup2, ContainCgroup1, ContainTree}

// needContainment skips the test when mode cannot be had here (no cgroup
// file system gpuguard may write: not root, or no v1 freezer hierarchy).
// CI runs as root on a machine with both, where nothing is skipped.
func needContainment(t *testing.T, mode string) {
	t.Helper()
	if mode == ContainTree {
		return
	}
	if err := CheckContainment(mode); err != nil {
		t.Skipf("containment %s is not available here, so it is not tested: %v", mode, err)
	}
}

// escapeScript starts a process that leaves everything that marks it as the
// job's behind: a cleared environment, a session of its own, a parent that
// is gone at once, no output. It writes its pid to $1, and the job's main
// process waits for that file.
const escapeScript = `( env -i setsid sh -c 'echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 3001' "$1" </dev/null >/dev/null 2>&1 & )
while [ ! -s "$1" ]; do sleep 0.01; done
`

// startEscaping starts a job under containment mode and launcher l whose
// main process starts an escaping process (escapeScript) and then runs the
// shell command then. It returns the attempt and the file the escaped
// process's pid is written to.
func startEscaping(t *testing.T, mode string, l launcher, then string) (*Attempt, string) {
	t.Helper()
	needContainment(t, mode)
	pidFile := filepath.Join(t.TempDir(), "escaped")
	a := start(t, Spec{
		Argv:        []string{"sh", "-c", escapeScript + then, "sh", pidFile},
		PTY:         l.pty,
		Containment: mode,
		Grace:       5 * time.Second,
	})
	return a, pidFile
}

// Finding 1 of issue 23: an escaped daemon outlived the attempt. It must be
// a member of the job while it runs, and be stopped with it.
func TestEscapedProcessIsStoppedWithTheJob(t *testing.T) {
	for _, mode := range containments {
		for _, l := range launchers {
			t.Run(mode+"/"+l.name, func(t *testing.T) {
				a, pidFile := startEscaping(t, mode, l, "echo started; exec sleep 3002")
				escaped := readPid(t, pidFile)
				if want := "process tree"; mode != ContainTree && a.Containment() == want {
					t.Fatalf("Containment() = %q under %s", want, mode)
				}
				if !slices.Contains(memberPids(a), escaped) {
					t.Errorf("Members() = %v lacks the escaped process %d", memberPids(a), escaped)
				}
				a.Shutdown(5 * time.Second)
				res := waitDone(t, a)
				if !res.StoppedByUs {
					t.Errorf("result %+v: not stopped by us", res)
				}
				supervisortest.Gone(t, escaped)
			})
		}
	}
}

// The same when the job's main process exits by itself, leaving the daemon
// behind (the reproduction of the issue).
func TestEscapedProcessIsStoppedAfterTheJobExits(t *testing.T) {
	for _, mode := range containments {
		for _, l := range launchers {
			t.Run(mode+"/"+l.name, func(t *testing.T) {
				a, pidFile := startEscaping(t, mode, l, "exit 3")
				res := waitDone(t, a)
				escaped := readPid(t, pidFile)
				if res.Code != 3 || res.Leftovers != 1 || res.Survivors != 0 {
					t.Errorf("result %+v, want code 3, 1 leftover, no survivor", res)
				}
				supervisortest.Gone(t, escaped)
				if a.cg != nil {
					if _, err := os.Stat(a.cg.dir); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("the attempt's cgroup %s is still there (%v)", a.cg.dir, err)
					}
				}
			})
		}
	}
}

// Finding 7: an orphan of the job that dies is reaped as it dies, not when
// the attempt ends. The job orphans short-lived processes of both kinds
// (in the job's session or group, and in a session of their own), then
// keeps running; each must stop being a zombie child of gpuguard.
func TestOrphanedZombiesAreReapedWhileTheJobRuns(t *testing.T) {
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			dir := t.TempDir()
			script := `for i in 1 2 3 4 5; do
  ( sh -c 'echo $$ >> "$0"' "$1" & )
  ( env -i setsid sh -c 'echo $$ >> "$0"' "$1" & )
done
echo orphaned
exec sleep 3002`
			out := &supervisortest.SyncBuffer{}
			a := start(t, Spec{Argv: []string{"sh", "-c", script, "sh", filepath.Join(dir, "pids")}, PTY: l.pty,
				Stdout: out, Stderr: out, Containment: ContainTree})
			supervisortest.WaitChan(t, out.Seen("orphaned"), "the job to orphan its helpers")
			pids := waitLines(t, filepath.Join(dir, "pids"), 10)
			// Each orphan is gone: reaped, not a zombie child of the test
			// process (gpuguard here).
			deadline := time.Now().Add(20 * time.Second)
			for _, pid := range pids {
				for {
					p, err := procfs.ReadStat("/proc", pid)
					if err != nil || p.PPID != os.Getpid() {
						break // reaped (or never ours)
					}
					if time.Now().After(deadline) {
						t.Fatalf("orphan %d is still a %c child of gpuguard while the job runs", pid, p.State)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			a.Kill("test")
			waitDone(t, a)
		})
	}
}

// Finding 8: after the main process exits, what it left running may still
// write until the output is closed, within the grace period: a background
// process that prints once the main process is gone is heard. (It ignores
// SIGHUP: under a pty, the kernel sends it one when the main process, the
// session leader, exits.)
func TestLeftoversMayFinishWriting(t *testing.T) {
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			out := &supervisortest.SyncBuffer{}
			logFile := filepath.Join(t.TempDir(), "output.log")
			log, err := os.Create(logFile)
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			a := start(t, Spec{
				Argv:   []string{"sh", "-c", `trap "" HUP; p=$$; (while kill -0 $p 2>/dev/null; do sleep 0.01; done; echo late) & echo main`},
				PTY:    l.pty,
				Stdout: out, Stderr: out, Log: log,
				Grace: 30 * time.Second,
			})
			res := waitDone(t, a)
			// (Leftovers may be 1: the background process closes its output
			// as it exits, and may not be gone yet when gpuguard looks.)
			if res.Code != 0 || res.Killed {
				t.Errorf("result %+v, want code 0, nothing killed", res)
			}
			for _, got := range []string{out.String(), readFile(t, logFile)} {
				if !strings.Contains(got, "main") || !strings.Contains(got, "late") {
					t.Errorf("output %q lacks main or late", got)
				}
			}
		})
	}
}

// Finding 10: an argument list the kernel refuses is the command's fault
// (126), said so, not an internal error (70).
func TestArgumentListTooLong(t *testing.T) {
	_, err := Start(Spec{Argv: []string{"/bin/true", strings.Repeat("x", 256<<10)}})
	if got := exitcode.Of(err); got != exitcode.NotRunnable {
		t.Fatalf("Start: exit code %d (%v), want %d", got, err, exitcode.NotRunnable)
	}
	for _, want := range []string{"too long", "argument 1 with 262144 bytes", "in a file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// readPid waits for file to hold a pid and returns it.
func readPid(t *testing.T, file string) int {
	t.Helper()
	s := strings.TrimSpace(supervisortest.WaitFile(t, file, "\n"))
	pid, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("pid file %s: %q", file, s)
	}
	return pid
}

// waitLines waits for file to hold n lines of pids and returns them.
func waitLines(t *testing.T, file string, n int) []int {
	t.Helper()
	for {
		data := supervisortest.WaitFile(t, file, "\n")
		f := strings.Fields(data)
		if len(f) >= n && strings.HasSuffix(data, "\n") {
			var pids []int
			for _, s := range f {
				pid, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("pid file %s: %q", file, data)
				}
				pids = append(pids, pid)
			}
			return pids
		}
		waitChange(t, file, data)
	}
}

// waitChange waits until file no longer holds old.
func waitChange(t *testing.T, file, old string) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, file, unix.IN_MODIFY|unix.IN_CLOSE_WRITE); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if data, _ := os.ReadFile(file); string(data) != old {
			return
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 30_000); n == 0 {
			t.Fatalf("timed out waiting for %s to change from %q", file, old)
		}
		_, _ = unix.Read(fd, buf)
	}
}

func readFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The mark of gpuguard's own helpers is never the job's: with it, an
// orphan of the job would pass for one of them and outlive the run.
func TestJobDoesNotCarryTheHelperMark(t *testing.T) {
	if os.Getenv(helperVar) == "" {
		t.Fatalf("%s is not set in gpuguard's own environment", helperVar)
	}
	var out supervisortest.SyncBuffer
	// Not the fake trainer: the test binary sets its own mark as it starts.
	a := start(t, Spec{Argv: []string{"sh", "-c", "echo ${" + helperVar + "-unset}"}, Stdout: &out})
	waitDone(t, a)
	if got := out.String(); got != "unset\n" {
		t.Errorf("the job's environment: %q", got)
	}
}
