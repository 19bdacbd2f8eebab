package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// readStat reads one process; ok is false when it is gone.
func readStat(pid int) (procInfo, bool) {
	p, err := procfs.ReadStat("/proc", pid)
	return infoOf(p), err == nil
}

// listProcs reads every process in /proc.
func listProcs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, ok := readStat(pid); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// BenchmarkTrackerScan: one look at a job's tree (a fake trainer with two
// grandchildren) on a machine running 300 more processes, by a full scan
// (every process's stat file) and by the periodic quick scan (members and
// new processes; every fullScanEvery-th one full):
//
//	go test ./internal/supervisor -run '^$' -bench TrackerScan
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
