package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func pidsOf(ps []procInfo) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.pid)
	}
	slices.Sort(out)
	return out
}

// Quick scans find the same tree as full ones: the members, a grandchild in
// a session of its own, and a process that appears between scans; an
// unrelated process is kept outside without being read again until the
// next full scan.
func TestQuickScanFindsTheTree(t *testing.T) {
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })

	dir := t.TempDir()
	a := start(t, AttemptSpec{Argv: fake("tree", filepath.Join(dir, "pids")), Grace: time.Second})
	gc := readPids(t, filepath.Join(dir, "pids"))
	tr := a.tracker
	tr.mu.Lock()
	tr.quick = 0
	tr.mu.Unlock()

	quick := pidsOf(tr.scanQuick())
	for _, p := range append([]int{a.PID()}, gc...) {
		if !slices.Contains(quick, p) {
			t.Errorf("quick scan %v lacks %d", quick, p)
		}
	}
	if slices.Contains(quick, other.Process.Pid) {
		t.Errorf("quick scan %v holds the unrelated process %d", quick, other.Process.Pid)
	}
	tr.mu.Lock()
	kept := tr.outside[other.Process.Pid]
	tr.mu.Unlock()
	if !kept {
		t.Errorf("the unrelated process %d is not remembered as outside the tree", other.Process.Pid)
	}
	if full := pidsOf(tr.scan()); !slices.Equal(full, quick) {
		t.Errorf("full scan %v, quick scan %v", full, quick)
	}

	// A process of the job that starts after the last quick scan, in a
	// session of its own: found by the next quick one, being new.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	late := filepath.Join(dir, "late")
	b := start(t, AttemptSpec{Argv: []string{"sh", "-c", "read x; setsid sleep 60 </dev/null & echo $! $$ > " + late + "; wait"}, Stdin: r, Grace: time.Second})
	r.Close()
	if q := pidsOf(b.tracker.scanQuick()); !slices.Equal(q, []int{b.PID()}) {
		t.Errorf("quick scan before the fork: %v, want only the shell %d", q, b.PID())
	}
	w.Write([]byte("go\n"))
	sleeper := readPids(t, late)[0]
	if q := pidsOf(b.tracker.scanQuick()); !slices.Contains(q, sleeper) {
		t.Errorf("quick scan %v lacks %d, started after the last scan", q, sleeper)
	}

	// The full scan comes back every fullScanEvery-th time.
	tr.mu.Lock()
	tr.quick = fullScanEvery - 1
	tr.mu.Unlock()
	tr.scanQuick()
	tr.mu.Lock()
	n := tr.quick
	tr.mu.Unlock()
	if n != 0 {
		t.Errorf("after %d quick scans the counter is %d, want a full scan and 0", fullScanEvery, n)
	}
}

// BenchmarkTrackerScan: one look at a job's tree (a fake trainer with two
// grandchildren) on a machine running 300 more processes, by a full scan
// (every process's stat file) and by the periodic quick scan (members and
// new processes; every fullScanEvery-th one full):
//
//	go test ./supervisor -run '^$' -bench TrackerScan
func BenchmarkTrackerScan(b *testing.B) {
	for i := 0; i < 300; i++ {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	dir := b.TempDir()
	a, err := StartAttempt(AttemptSpec{Argv: fake("tree", filepath.Join(dir, "pids")), Grace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Kill("done"); <-a.Done() })
	for _, m := range []struct {
		name string
		scan func() []procInfo
	}{{"full", a.tracker.scan}, {"quick", a.tracker.scanQuick}} {
		b.Run(m.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if len(m.scan()) == 0 {
					b.Fatal("empty tree")
				}
			}
		})
	}
}
