package procfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/procfs/procfstest"
)

func pidsOf(ps []Proc) []int {
	return procfstest.SortedPIDs(ps, func(p Proc) int { return p.PID })
}

// The membership rule on testdata/proc/job: the root 100 and its
// descendants by parentage; 300, re-parented to init, whose environment
// holds the marker, and its child 301; not 200, whose marker has another
// value, nor 302, which holds the marker but is older than the root.
func TestTreeMembershipRule(t *testing.T) {
	const marker = "GPUGUARD_ATTEMPT_TOKEN=t1"
	for _, c := range []struct {
		marker string
		want   []int
	}{
		{"", []int{100, 102, 103, 104, 105}},
		{marker, []int{100, 102, 103, 104, 105, 300, 301}},
	} {
		tr := NewTree("testdata/proc/job", c.marker)
		if _, err := tr.SetRoot(100); err != nil {
			t.Fatal(err)
		}
		if got := tr.Processes(nil); len(got) != 1 || got[0].PID != 100 {
			t.Errorf("marker %q: before any scan Processes = %v, want the root", c.marker, pidsOf(got))
		}
		scan := tr.Scan()
		if got := pidsOf(scan); !slices.Equal(got, c.want) {
			t.Errorf("marker %q: Scan = %v, want %v", c.marker, got, c.want)
		}
		if scan[0].PID != 100 {
			t.Errorf("marker %q: Scan starts with %d, want the root", c.marker, scan[0].PID)
		}
		list := tr.Processes(nil)
		if !slices.Equal(pidsOf(list), c.want) || list[0].PID != 100 || tr.PID() != 100 {
			t.Errorf("marker %q: Processes = %v (PID %d), want %v root first", c.marker, pidsOf(list), tr.PID(), c.want)
		}
		if got := pidsOf(tr.ScanQuick()); !slices.Equal(got, c.want) {
			t.Errorf("marker %q: ScanQuick = %v, want %v", c.marker, got, c.want)
		}
	}
}

// testMarker returns a marker entry unique to the call, as gpuguard's
// attempts have: processes of an earlier test, still dying, must not be
// taken for this one's.
func testMarker() string {
	return "GPUGUARD_TEST_TOKEN=" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// fakeProc writes /proc/PID/stat (and environ, unless nil) of a sleeping
// process under root.
func fakeProc(t *testing.T, root string, pid, ppid int, start uint64, environ []string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (sh) S %d %d %d 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 1000 10\n", pid, ppid, pid, pid, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if environ != nil {
		env := strings.Join(environ, "\x00")
		if len(environ) > 0 {
			env += "\x00"
		}
		if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A process whose environment reads empty (as one does for a moment while
// it execs) is neither taken for the job's nor for a stranger's: the next
// scan, quick or not, reads it again. One whose environment lacks the
// marker is read once.
func TestTreeRereadsAnEnvironmentThatReadEmpty(t *testing.T) {
	const marker = "GPUGUARD_ATTEMPT_TOKEN=t1"
	root := t.TempDir()
	fakeProc(t, root, 10, 1, 100, []string{marker})
	fakeProc(t, root, 20, 1, 200, []string{})            // mid-exec
	fakeProc(t, root, 30, 1, 200, []string{"PATH=/bin"}) // a stranger
	tr := NewTree(root, marker)
	if _, err := tr.SetRoot(10); err != nil {
		t.Fatal(err)
	}
	if got := pidsOf(tr.Scan()); !slices.Equal(got, []int{10}) {
		t.Fatalf("scan %v, want [10]", got)
	}
	_, out20 := tr.outside[20]
	_, out30 := tr.outside[30]
	if out20 || tr.checked[procID{20, 200}] || !out30 || !tr.checked[procID{30, 200}] {
		t.Errorf("20 outside %v checked %v (want neither), 30 outside %v checked %v (want both)",
			out20, tr.checked[procID{20, 200}], out30, tr.checked[procID{30, 200}])
	}
	fakeProc(t, root, 20, 1, 200, []string{"PATH=/bin", marker}) // the exec is done
	fakeProc(t, root, 30, 1, 200, []string{marker})              // read once: not again
	if got := pidsOf(tr.ScanQuick()); !slices.Equal(got, []int{10, 20}) {
		t.Errorf("quick scan %v, want [10 20]", got)
	}
}

// startJob starts script under sh with the marker in its environment, in a
// process group of its own, and returns it with a reader of its stdout; a
// cleanup closes its stdin (the script's cue to end), kills the group and
// the pids in *also, and reaps it.
func startJob(t *testing.T, marker, script string, also *[]int) (*exec.Cmd, *bufio.Reader, io.Writer) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range *also {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		stdin.Close()
		cmd.Wait()
	})
	return cmd, bufio.NewReader(stdout), stdin
}

// readPid reads one line holding a pid.
func readPid(t *testing.T, r *bufio.Reader) int {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a pid: %q %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("not a pid: %q", line)
	}
	return pid
}

// Quick scans find what full ones find: the root, a child in a session of
// its own, and a process that appears between two scans after leaving the
// tree (double-forked: re-parented, found by the marker). An unrelated
// process is kept outside without being read again until the next full
// scan, which comes every fullScanEvery-th time.
func TestTreeQuickScan(t *testing.T) {
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })

	marker := testMarker()
	var kill []int
	// Prints its setsid child's pid; after "go", a shell that a setsid
	// shell started and left behind prints its own pid (its environment is
	// in place by then), and the job prints "left" once the setsid shell
	// has exited (the escaped shell is re-parented by then). The escaped
	// shell waits on the job's stdin, and ends when the test closes it.
	job, out, in := startJob(t, marker, `exec 3<&0
setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!
read x
setsid sh -c 'sh -c "echo \$\$; exec >/dev/null; read x <&3" &'
echo left
read x`, &kill)
	child := readPid(t, out)
	kill = append(kill, child)

	tr := NewTree("/proc", marker)
	tr.Exclude(os.Getpid())
	if _, err := tr.SetRoot(job.Process.Pid); err != nil {
		t.Fatal(err)
	}
	quick := pidsOf(tr.ScanQuick())
	want := []int{job.Process.Pid, child}
	slices.Sort(want)
	if !slices.Equal(quick, want) {
		t.Errorf("quick scan %v, want %v", quick, want)
	}
	tr.scanMu.Lock()
	_, kept := tr.outside[other.Process.Pid]
	tr.scanMu.Unlock()
	if !kept {
		t.Errorf("the unrelated process %d is not remembered as outside the tree", other.Process.Pid)
	}
	if full := pidsOf(tr.Scan()); !slices.Equal(full, quick) {
		t.Errorf("full scan %v, quick scan %v", full, quick)
	}

	in.Write([]byte("go\n"))
	escaped := 0
	for left := false; escaped == 0 || !left; { // the two lines come in either order
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("job printed %q, %v", line, err)
		}
		if line == "left\n" {
			left = true
		} else if escaped, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
			t.Fatalf("not a pid: %q", line)
		}
	}
	kill = append(kill, escaped)
	if st, err := ReadStat("", escaped); err != nil || st.PPID == job.Process.Pid || st.Comm != "sh" {
		t.Fatalf("the escaped sleep %d: %+v %v, want it re-parented", escaped, st, err)
	}
	if q := pidsOf(tr.ScanQuick()); !slices.Contains(q, escaped) || slices.Contains(q, other.Process.Pid) {
		t.Errorf("quick scan %v: want %d (started after the last scan, left the tree, holds the marker), not %d",
			q, escaped, other.Process.Pid)
	}

	// The full scan comes back every fullScanEvery-th time.
	tr.scanMu.Lock()
	tr.quick = fullScanEvery - 1
	tr.scanMu.Unlock()
	tr.ScanQuick()
	tr.scanMu.Lock()
	n := tr.quick
	tr.scanMu.Unlock()
	if n != 0 {
		t.Errorf("after %d quick scans the counter is %d, want a full scan and 0", fullScanEvery, n)
	}
}

// A member stays one after it leaves the tree, with no marker: found by
// parentage once, it is known by pid and start time.
func TestTreeKeepsMembersThatLeave(t *testing.T) {
	var kill []int
	job, out, in := startJob(t, testMarker(), `sh -c 'sleep 600 </dev/null >/dev/null 2>&1 & echo $!; read x'
echo left
read x`, &kill)
	sleeper := readPid(t, out)
	kill = append(kill, sleeper)
	tr := NewTree("/proc", "")
	if _, err := tr.SetRoot(job.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if got := pidsOf(tr.ScanQuick()); !slices.Contains(got, sleeper) {
		t.Fatalf("scan %v lacks the grandchild %d", got, sleeper)
	}
	in.Write([]byte("x\n")) // the middle shell exits: the sleep is re-parented
	if line, err := out.ReadString('\n'); line != "left\n" {
		t.Fatalf("job printed %q, %v", line, err)
	}
	if got := pidsOf(tr.Scan()); !slices.Contains(got, sleeper) {
		t.Errorf("scan %v lost %d once it was re-parented", got, sleeper)
	}
	fresh := NewTree("", "")
	if _, err := fresh.SetRoot(job.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if got := pidsOf(fresh.Scan()); slices.Contains(got, sleeper) {
		t.Errorf("a fresh tree finds the re-parented %d by parentage (%v): the test shows nothing", sleeper, got)
	}
}
