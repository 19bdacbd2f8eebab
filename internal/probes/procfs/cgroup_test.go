package procfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuguard/gpuguard/internal/humanize"
)

func TestCgroupFixtures(t *testing.T) {
	tests := []struct {
		description string
		dir         string
		version     int
		wantDir     string // relative to the fixture
		limit       uint64
		usage       uint64
		workingSet  uint64
		oomKills    uint64
		oomKnown    bool
	}{
		{"v2 under Slurm: the limit is on the job cgroup, three levels up",
			"v2", 2, "sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
			8589934592, 8375000000, 8375000000 - 100000000, 2, true},
		{"v1 hybrid (systemd's empty unified hierarchy is ignored): hierarchical limit",
			"v1", 1, "sys/fs/cgroup/memory/slurm/uid_1000/job_42/step_0/task_0",
			4294967296, 1073741824, 1073741824 - 134217728, 0, true},
		{"v2 in a container with a cgroup namespace",
			"ns", 2, "sys/fs/cgroup", 2147483648, 536870912, 536870912, 0, true},
		{"v1 in a container without a cgroup namespace; old kernel without oom_kill",
			"v1docker", 1, "sys/fs/cgroup/memory", 536870912, 104857600, 100000000, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.description, func(t *testing.T) {
			root := filepath.Join("testdata/cgroup", tc.dir)
			cg, err := ReadCgroup(filepath.Join(root, "proc"), 4242)
			if err != nil {
				t.Fatal(err)
			}
			if cg.Version != tc.version || cg.Dir != filepath.Join(root, tc.wantDir) {
				t.Errorf("version %d dir %s, want %d %s", cg.Version, cg.Dir, tc.version, filepath.Join(root, tc.wantDir))
			}
			if cg.LimitBytes != tc.limit || cg.UsageBytes != tc.usage || cg.WorkingSetBytes != tc.workingSet {
				t.Errorf("limit %d usage %d working set %d, want %d %d %d", cg.LimitBytes, cg.UsageBytes, cg.WorkingSetBytes,
					tc.limit, tc.usage, tc.workingSet)
			}
			if cg.OOMKills != tc.oomKills || cg.OOMKillsKnown != tc.oomKnown {
				t.Errorf("oom kills %d known %v, want %d %v", cg.OOMKills, cg.OOMKillsKnown, tc.oomKills, tc.oomKnown)
			}
			n, ok := CgroupOOMKills(filepath.Join(root, "proc"), 4242)
			if n != tc.oomKills || ok != tc.oomKnown {
				t.Errorf("CgroupOOMKills = %d %v", n, ok)
			}
			// ReadHost picks the same cgroup, and the limit becomes the ceiling.
			h, err := ReadHost(filepath.Join(root, "proc"), 4242)
			if err != nil {
				t.Fatal(err)
			}
			if h.Cgroup == nil || h.Cgroup.LimitBytes != tc.limit || h.LimitBytes() != min(tc.limit, h.MemTotalBytes) {
				t.Errorf("ReadHost cgroup %+v limit %d", h.Cgroup, h.LimitBytes())
			}
		})
	}
}

func TestCgroupNoMemoryController(t *testing.T) {
	_, err := ReadCgroup("testdata/cgroup/none/proc", 4242)
	if err == nil || !strings.Contains(err.Error(), "no memory cgroup is mounted") {
		t.Fatalf("err = %v", err)
	}
	if _, ok := CgroupOOMKills("testdata/cgroup/none/proc", 4242); ok {
		t.Error("counter reported without a cgroup")
	}
	if _, ok := CgroupOOMKills("/proc", 1<<30); ok {
		t.Error("counter reported for a process that does not exist")
	}
}

func TestCgroupUnescape(t *testing.T) {
	if got := UnescapeMountinfo(`/sys/fs/cgroup/my\040dir`); got != "/sys/fs/cgroup/my dir" {
		t.Errorf("got %q", got)
	}
}

// TestCgroupRealSelf reads this test process's own cgroup: whatever the
// machine uses, the figures must be consistent.
func TestCgroupRealSelf(t *testing.T) {
	cg, err := ReadCgroup("/proc", os.Getpid())
	if err != nil {
		t.Skipf("no readable memory cgroup here: %v", err)
	}
	if _, err := os.Stat(cg.Dir); err != nil {
		t.Errorf("cgroup dir %s: %v", cg.Dir, err)
	}
	if cg.UsageBytes == 0 || cg.WorkingSetBytes > cg.UsageBytes {
		t.Errorf("usage %d working set %d", cg.UsageBytes, cg.WorkingSetBytes)
	}
	t.Logf("cgroup v%d %s: usage %s, limit %s, oom kills %d (known %v)", cg.Version, cg.Dir,
		humanize.Bytes(cg.UsageBytes), humanize.Bytes(cg.LimitBytes), cg.OOMKills, cg.OOMKillsKnown)
}

// TestCgroupRealOOMKill makes the kernel OOM-kill a process in a memory
// cgroup of its own and checks that the counter rises, the way the
// supervisor uses it. It needs root and a writable memory cgroup (v1, or a
// v2 cgroup that can take children), and python3; it skips otherwise.
func TestCgroupRealOOMKill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a memory cgroup")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 for the memory hog")
	}
	self, err := ReadCgroup("/proc", os.Getpid())
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	dir := filepath.Join(self.Dir, fmt.Sprintf("gpuguard-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a child cgroup under %s: %v", self.Dir, err)
	}
	defer os.Remove(dir) // on early exits; removed and checked below otherwise
	limit := []byte(strconv.Itoa(64 << 20))
	if self.Version == 1 {
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), limit, 0); err != nil {
			t.Skipf("cannot set the limit: %v", err)
		}
		os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), limit, 0) // no swap escape, where accounted
	} else {
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), limit, 0); err != nil {
			t.Skipf("cannot set the limit (memory controller not delegated to %s?): %v", self.Dir, err)
		}
		os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	}
	hog := exec.Command(py, "-c", "import sys; sys.stdin.readline(); b = b'x' * (512 << 20); print(len(b))")
	stdin, _ := hog.StdinPipe()
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	defer hog.Process.Kill()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(hog.Process.Pid)), 0); err != nil {
		hog.Process.Kill()
		hog.Wait()
		t.Skipf("cannot move a process into %s: %v", dir, err)
	}
	cg, err := ReadCgroup("/proc", hog.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if cg.Dir != dir {
		t.Fatalf("the hog's cgroup resolves to %s, want %s", cg.Dir, dir)
	}
	before, ok := CgroupOOMKills("/proc", hog.Process.Pid)
	if !ok {
		t.Skipf("this kernel has no oom_kill counter in %s", dir)
	}
	stdin.Write([]byte("go\n"))
	err = hog.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the hog ended with %v, want death by SIGKILL from the OOM killer", err)
	}
	// The counter is read through the cgroup dir: the pid is gone now.
	after, ok := cg.ReadOOMKills()
	if !ok {
		t.Fatalf("cannot read the counter in %s after the kill", cg.Dir)
	}
	if after != before+1 {
		t.Errorf("oom_kill went %d -> %d, want +1", before, after)
	}
	if err := os.Remove(dir); err != nil {
		t.Errorf("removing the test cgroup %s: %v", dir, err)
	}
}
