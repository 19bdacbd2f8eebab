package procfs

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A real child under a soft RLIMIT_DATA: ReadCeiling names it, and Usage
// reads the child's data segment, below it.
func TestReadCeilingRlimit(t *testing.T) {
	const limit = 512 << 20
	cmd := exec.Command("/bin/sh", "-c", "ulimit -S -d "+strconv.Itoa(limit>>10)+" && exec sleep 100")
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// The shell applies the limit, then execs sleep: wait for the exec.
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
	c, err := ReadCeiling("/proc", cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != CeilingData || c.Bytes != limit {
		t.Errorf("ceiling %+v, want RLIMIT_DATA of %d", c, limit)
	}
	u, ok := Usage("/proc", cmd.Process.Pid, c.Kind)
	if !ok || u == 0 || u >= limit {
		t.Errorf("usage %d (%v), want some data segment below the limit", u, ok)
	}
	if _, ok := Usage("/proc", cmd.Process.Pid, CeilingCgroup); ok {
		t.Errorf("a cgroup's usage is not read per process")
	}
}

func TestLimitRow(t *testing.T) {
	b := []byte("Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max data size             unlimited            unlimited            bytes     \n" +
		"Max address space         1073741824           unlimited            bytes     \n")
	if v, ok := limitRow(b, "Max address space"); !ok || v != 1<<30 {
		t.Errorf("address space %d %v", v, ok)
	}
	if _, ok := limitRow(b, "Max data size"); ok {
		t.Errorf("unlimited read as a limit")
	}
}
