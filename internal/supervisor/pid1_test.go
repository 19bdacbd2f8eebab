package supervisor

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// gpuguard as PID 1 of a fresh PID namespace (a container's entrypoint):
// an orphan re-parented to it (a process left by `docker exec`, here by
// nsenter) is reaped, SIGTERM reaches the job and ends the run, and no
// process is left behind.
func TestPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a fresh PID namespace (unshare --pid) needs root")
	}
	unshare, err1 := exec.LookPath("unshare")
	nsenter, err2 := exec.LookPath("nsenter")
	if err1 != nil || err2 != nil {
		t.Skip("unshare and nsenter (util-linux) are needed")
	}
	if out, err := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare --pid --fork --mount-proc does not work here: %v: %s", err, out)
	}
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	args := append([]string{"--pid", "--fork", "--mount-proc", testBinary(), "-gpuguard", "never", "1s", filepath.Join(dir, "run"), "--"}, fake("tree", pids)...)
	cmd := exec.Command(unshare, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var werr error
	go func() { werr = cmd.Wait(); close(exited) }()
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}()
	supervisortest.WaitFile(t, pids, "\n") // the job and its two grandchildren are up

	// The namespace's PID 1 (unshare's child), and every process in it.
	init := childrenOf(cmd.Process.Pid)
	if len(init) != 1 {
		t.Fatalf("unshare's children: %v", init)
	}
	pid1 := init[0]
	inside := descendants(pid1)
	if len(inside) < 5 { // gpuguard proper, its watchdog, the job, its two grandchildren
		t.Fatalf("processes under PID 1: %v\n%s", inside, out.String())
	}

	// An orphan: nsenter's shell leaves cat behind, blocked on a pipe; the
	// shell exits, and cat is re-parented to the namespace's PID 1.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	enter := exec.Command(nsenter, "--target", strconv.Itoa(pid1), "--pid", "--mount", "--", "sh", "-c", "cat <&3 >/dev/null 2>&1 & exit 0")
	enter.ExtraFiles = []*os.File{r}
	if b, err := enter.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v: %s", err, b)
	}
	r.Close()
	var orphan int
	for _, pid := range childrenOf(pid1) {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "cat" {
			orphan = pid
		}
	}
	if orphan == 0 {
		t.Fatalf("no orphaned cat under PID 1 %d: children %v", pid1, childrenOf(pid1))
	}
	w.Close() // cat exits: a zombie until PID 1 reaps it
	reaped(t, orphan)

	// SIGTERM to PID 1: passed on to the job, which dies of it; its tree
	// (a grandchild in a session of its own too) is swept, and gpuguard
	// exits with the job's status.
	syscall.Kill(pid1, syscall.SIGTERM)
	supervisortest.WaitChan(t, exited, "gpuguard as PID 1 to exit after SIGTERM")
	code := -1
	if ee, ok := werr.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %v, want the job's status 143 (SIGTERM); output:\n%s", werr, out.String())
	}
	supervisortest.Gone(t, inside...)
	t.Logf("PID 1 was host pid %d; reaped orphan %d; exit %d; output:\n%s", pid1, orphan, code, out.String())
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := supervisortest.ReadStat(n); ok && p.PPID == pid {
			out = append(out, n)
		}
	}
	return out
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, c := range childrenOf(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// reaped waits until pid has not only exited but been reaped by its parent
// (its /proc entry is gone). The kernel tells a non-parent when a process
// exits (pidfd) but not when it is reaped, so after the exit this looks
// again, at most for 20 s: a zombie never reaped fails the test.
func reaped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, ok := supervisortest.ReadStat(pid)
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not reaped (state %c, parent %d)", pid, p.State, p.PPID)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
