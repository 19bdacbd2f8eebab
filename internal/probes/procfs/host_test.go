package procfs

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses: fields count from the last ')'.
	line := "4242 (my (odd) name) S 17 4240 4239 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 7 0 98765 1000000 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := ParseStat(4242, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != "my (odd) name" || st.PPID != 17 || st.PGID != 4240 || st.SID != 4239 || st.Threads != 7 ||
		st.Start != 98765 || st.RSSBytes != 2560*procPageSize || st.State != 'S' || st.Zombie() {
		t.Errorf("%+v", st)
	}
	if _, err := ParseStat(1, []byte("1 (init) S 0 1")); err == nil {
		t.Error("a short stat line parsed")
	}
	if _, err := ParseStat(1, []byte("garbage")); err == nil {
		t.Error("garbage parsed")
	}
}

// TestReadHostFakeTree reads testdata/proc/job: a Python trainer with a
// forked DataLoader worker (and its sleep child), a spawn-method worker, the
// resource tracker, and unrelated processes elsewhere.
func TestReadHostFakeTree(t *testing.T) {
	h, err := ReadHost("testdata/proc/job", 100)
	if err != nil {
		t.Fatal(err)
	}
	if h.Processes != 5 {
		t.Errorf("processes = %d, want 5 (100, 102, 103, 104, 105; not 200, 300, 301, 302)", h.Processes)
	}
	if h.Workers != 2 {
		t.Errorf("workers = %d, want 2 (forked 102, spawned 103; not the resource tracker or sleep)", h.Workers)
	}
	wantRSS := (50000 + 30000 + 20000 + 100 + 3000) * procPageSize
	if h.RSSBytes != wantRSS {
		t.Errorf("RSS = %d, want %d", h.RSSBytes, wantRSS)
	}
	// PSS from smaps_rollup, and 104's RSS since it has none.
	wantPSS := uint64(150000+40000+60000+9000)*1024 + 100*procPageSize
	if h.PSSBytes != wantPSS || h.PSSComplete {
		t.Errorf("PSS = %d complete=%v, want %d incomplete", h.PSSBytes, h.PSSComplete, wantPSS)
	}
	if h.TreeBytes() != wantPSS {
		t.Errorf("TreeBytes = %d", h.TreeBytes())
	}
	if h.MemTotalBytes != 16384000*1024 || h.MemAvailableBytes != 8192000*1024 {
		t.Errorf("meminfo %d %d", h.MemTotalBytes, h.MemAvailableBytes)
	}
	if h.Cgroup != nil || h.CgroupErr == "" {
		t.Errorf("the fake tree has no cgroup; got %+v / %q", h.Cgroup, h.CgroupErr)
	}
}

// ReadJob measures what the job's ProcessList lists: on testdata/proc/job,
// with the job's marker, the tree of 100 and also 300, re-parented to init
// but holding the marker, and its child 301; ReadHost, by parentage, does
// not count them.
func TestReadJobMeasuresTheJobsProcesses(t *testing.T) {
	job := NewTree("testdata/proc/job", "GPUGUARD_ATTEMPT_TOKEN=t1")
	if _, err := job.SetRoot(100); err != nil {
		t.Fatal(err)
	}
	job.Scan()
	r := NewHostReader("testdata/proc/job")
	defer r.Close()
	h, err := r.ReadJob(job, time.Now(), true)
	if err != nil {
		t.Fatal(err)
	}
	byTree, err := ReadHost("testdata/proc/job", 100)
	if err != nil {
		t.Fatal(err)
	}
	if h.Processes != 7 || byTree.Processes != 5 {
		t.Errorf("processes: job %d, want 7; tree by parentage %d, want 5", h.Processes, byTree.Processes)
	}
	if want := byTree.RSSBytes + (7000+100)*procPageSize; h.RSSBytes != want {
		t.Errorf("RSS %d, want %d (the tree's and 300's and 301's)", h.RSSBytes, want)
	}
	if pids := r.Pids(nil); len(pids) != 7 || pids[0] != 100 {
		t.Errorf("pids %v, want 7, the root first", pids)
	}
}

func TestReadHostGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := ReadHost("/proc", cmd.Process.Pid)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want os.ErrNotExist for a reaped process", err)
	}
}

// pythonTree is a real Python job: two workers forked by multiprocessing,
// one spawned, a subprocess that is exec'd (like a torchrun rank) and a
// sleep. It prints "ready" once all are started, and ends when its stdin
// closes.
const pythonTree = `
import multiprocessing as mp, subprocess, sys

def work(ev):
    ev.wait()

if __name__ == "__main__":
    fork = mp.get_context("fork")
    spawn = mp.get_context("spawn")
    evf, evs = fork.Event(), spawn.Event()
    ps = [fork.Process(target=work, args=(evf,)) for _ in range(2)] + [spawn.Process(target=work, args=(evs,))]
    for p in ps:
        p.start()
    rank = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    sl = subprocess.Popen(["sleep", "600"])
    ballast = bytearray(b"x" * (64 << 20))
    print("ready", flush=True)
    sys.stdin.read()
    sl.kill(); sl.wait()
    rank.stdin.close(); rank.wait()
    evf.set(); evs.set()
    for p in ps:
        p.join()
`

// startPythonTree starts pythonTree in its own process group and waits for
// its ready line; cleanup ends it (and the group, should the test fail).
func startPythonTree(t *testing.T) *exec.Cmd {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed; the real Python process-tree test needs it (apt-get install python3)")
	}
	script := filepath.Join(t.TempDir(), "tree.py")
	if err := os.WriteFile(script, []byte(pythonTree), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("python tree did not start: %q %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	return cmd
}

func TestReadHostRealPythonTree(t *testing.T) {
	cmd := startPythonTree(t)
	h, err := ReadHost("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// main, 2 forked, 1 spawned, the rank, sleep, and multiprocessing's
	// resource tracker (started by the spawn context).
	if h.Processes < 6 {
		t.Errorf("processes = %d, want at least 6", h.Processes)
	}
	if h.Workers != 3 {
		t.Errorf("workers = %d, want 3 (2 forked + 1 spawned; not the rank, sleep or resource tracker)", h.Workers)
	}
	if h.RSSBytes < 64<<20 {
		t.Errorf("RSS = %s, want at least the 64 MiB ballast", humanize.Bytes(h.RSSBytes))
	}
	if !h.PSSComplete || h.PSSBytes == 0 || h.PSSBytes > h.RSSBytes {
		t.Errorf("PSS = %s (complete %v) against RSS %s: PSS must be read and not exceed RSS",
			humanize.Bytes(h.PSSBytes), h.PSSComplete, humanize.Bytes(h.RSSBytes))
	}
	if h.MemTotalBytes == 0 || h.MemAvailableBytes == 0 || h.MemAvailableBytes > h.MemTotalBytes {
		t.Errorf("meminfo: %d / %d", h.MemAvailableBytes, h.MemTotalBytes)
	}
	t.Logf("tree of %d: %d processes, %d workers, RSS %s, PSS %s", cmd.Process.Pid, h.Processes, h.Workers,
		humanize.Bytes(h.RSSBytes), humanize.Bytes(h.PSSBytes))
}

// TestTreeScanRealSetsidGrandchild checks that a Tree finds a child that
// left the session with setsid: it is still a descendant by parent PID.
func TestTreeScanRealSetsidGrandchild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sleep 600 & echo $!; read x")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	grand := strings.TrimSpace(line)
	t.Cleanup(func() {
		if pid, err := memParsePID(grand); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		stdin.Close()
		cmd.Wait()
	})
	tr := NewTree("/proc", "")
	if _, err := tr.SetRoot(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	tree := tr.Scan()
	gpid, err := memParsePID(grand)
	if err != nil {
		t.Fatalf("shell printed %q", grand)
	}
	found := false
	for _, st := range tree {
		found = found || st.PID == gpid
	}
	if !found {
		t.Errorf("scan of %d missed the setsid child %s: %+v", cmd.Process.Pid, grand, tree)
	}
}

func memParsePID(s string) (int, error) {
	var n int
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a pid")
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

func TestProcReadGrowsBuffer(t *testing.T) {
	p := newProcFS("/proc")
	p.buf = make([]byte, 0, 8)
	b, err := p.read("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "VmRSS") || !strings.HasSuffix(string(b), "\n") {
		t.Errorf("read %d bytes: %q", len(b), b)
	}
}

// TestHostReaderBetweenWalks checks the cheap path between two walks (RSS
// through kept statm descriptors): a member that is reaped drops out, a
// reaped root is an error, and descriptors are released.
func TestHostReaderBetweenWalks(t *testing.T) {
	a := exec.Command("sleep", "600")
	b := exec.Command("sleep", "600")
	for _, c := range []*exec.Cmd{a, b} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		c := c
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	r := NewHostReader("/proc")
	r.p.hot = true
	defer r.Close()
	now := time.Now()
	h, err := r.Read(os.Getpid(), now, false) // first read walks
	if err != nil {
		t.Fatal(err)
	}
	has := func(pid int) bool {
		for _, st := range r.tree {
			if st.PID == pid {
				return true
			}
		}
		return false
	}
	if !has(a.Process.Pid) || !has(b.Process.Pid) || r.procs[a.Process.Pid].fd < 0 {
		t.Fatalf("walk missed the children: %+v", r.tree)
	}
	a.Process.Kill()
	a.Wait() // reaped: its statm descriptor now fails
	h2, err := r.Read(os.Getpid(), now.Add(100*time.Millisecond), false)
	if err != nil {
		t.Fatal(err)
	}
	if r.lastFull != now {
		t.Fatal("the second read walked again; it should have re-read RSS only")
	}
	if has(a.Process.Pid) || !has(b.Process.Pid) || h2.Processes != h.Processes-1 {
		t.Errorf("after reaping %d: processes %d -> %d, tree %+v", a.Process.Pid, h.Processes, h2.Processes, r.tree)
	}
	if _, ok := r.procs[a.Process.Pid]; ok {
		t.Error("the reaped process is still cached")
	}

	// A root that is reaped between walks is an error.
	r2 := NewHostReader("/proc")
	r2.p.hot = true
	defer r2.Close()
	if _, err := r2.Read(b.Process.Pid, now, false); err != nil {
		t.Fatal(err)
	}
	b.Process.Kill()
	b.Wait()
	if _, err := r2.Read(b.Process.Pid, now.Add(100*time.Millisecond), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reaped root: err = %v, want os.ErrNotExist", err)
	}
	r2.Close()
	if len(r2.procs) != 0 || len(r2.p.fds) != 0 {
		t.Errorf("close left %d processes, %d files", len(r2.procs), len(r2.p.fds))
	}
}

// listed is a ProcessList whose members a test sets.
type listed struct {
	root  int
	procs []Proc
}

func (l *listed) PID() int                    { return l.root }
func (l *listed) Processes(dst []Proc) []Proc { return append(dst, l.procs...) }

// A process that joins the job between two refreshes (a DataLoader worker
// the supervisor's tracker has just found) is measured at the next sample,
// not at the next refresh a second later.
func TestReadJobTakesANewMemberAtOnce(t *testing.T) {
	var procs []Proc
	for range 2 {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		p, err := ReadStat("/proc", cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	job := &listed{root: procs[0].PID, procs: procs[:1]}
	r := NewHostReader("/proc")
	defer r.Close()
	now := time.Now()
	h, err := r.ReadJob(job, now, true)
	if err != nil || h.Processes != 1 {
		t.Fatalf("first read: %d processes, %v", h.Processes, err)
	}
	job.procs = procs // the worker joins
	h, err = r.ReadJob(job, now.Add(50*time.Millisecond), false)
	if err != nil || h.Processes != 2 {
		t.Fatalf("after the worker joined: %d processes, %v; want 2 at once", h.Processes, err)
	}
	job.procs = procs[:1] // and leaves
	h, err = r.ReadJob(job, now.Add(100*time.Millisecond), false)
	if err != nil || h.Processes != 1 {
		t.Fatalf("after the worker left: %d processes, %v; want 1", h.Processes, err)
	}
}
