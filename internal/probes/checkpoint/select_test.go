package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSelect(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	step := func(n int64) *int64 { return &n }
	ck := func(path string, n *int64, age time.Duration, complete bool) Checkpoint {
		return Checkpoint{Path: path, Step: n, ModTime: t0.Add(age), Size: 100, Complete: complete}
	}
	old := ck("out/step_900.ckpt", step(900), -time.Hour, true)     // an earlier run's
	s100 := ck("out/step_100.ckpt", step(100), time.Minute, true)   // this run's
	s200 := ck("out/step_200.ckpt", step(200), 2*time.Minute, true) // this run's, later
	last := ck("out/last.ckpt", nil, 3*time.Minute, true)           // newest, no step
	writing := ck("out/step_300.ckpt", step(300), 4*time.Minute, false)
	empty := writing
	empty.Size = 0
	settling := writing // incomplete only for its quiet period
	settling.Settling = true
	renamed := settling
	renamed.MovedAfterWrite = true

	cases := []struct {
		name    string
		r       Resume
		in      []Checkpoint
		best    string // "" when none
		earlier string
		pending bool
	}{
		{"newest of this run", Resume{Since: t0}, []Checkpoint{s100, s200, old}, "out/step_200.ckpt", "out/step_900.ckpt", false},
		{"highest step beats a newer unnumbered one", Resume{Choose: "highest_step", Since: t0}, []Checkpoint{last, s100, s200}, "out/step_200.ckpt", "", false},
		{"newest takes the unnumbered one", Resume{Since: t0}, []Checkpoint{s200, last}, "out/last.ckpt", "", false},
		{"an earlier run's only: none, and it is named", Resume{Since: t0}, []Checkpoint{old}, "", "out/step_900.ckpt", false},
		{"earlier runs allowed: newest wins", Resume{Since: t0, EarlierRuns: true}, []Checkpoint{old, s100}, "out/step_100.ckpt", "", false},
		{"highest step across runs when allowed", Resume{Choose: "highest_step", Since: t0, EarlierRuns: true}, []Checkpoint{s200, old}, "out/step_900.ckpt", "", false},
		{"a checkpoint being written beats the best: pending", Resume{Since: t0}, []Checkpoint{s100, writing}, "out/step_100.ckpt", "", true},
		{"an empty file is not pending", Resume{Since: t0}, []Checkpoint{s100, empty}, "out/step_100.ckpt", "", false},
		{"nothing yet but one being written", Resume{Since: t0}, []Checkpoint{writing}, "", "", true},
		{"no run start: everything counts", Resume{}, []Checkpoint{old, s100}, "out/step_100.ckpt", "", false},
		{"within the clock slack of the start", Resume{Since: t0.Add(time.Minute + ClockSlack/2)}, []Checkpoint{s100}, "out/step_100.ckpt", "", false},
		{"nothing", Resume{Since: t0}, nil, "", "", false},
		// The job's processes are all gone: no waiting. A file that stopped
		// changing before the end is complete; one written up to the end was
		// torn by the death and the one before it is taken.
		{"writers gone: settled before the end", Resume{Since: t0, WritersGone: t0.Add(10 * time.Minute)}, []Checkpoint{s100, settling}, "out/step_300.ckpt", "", false},
		{"writers gone: written up to the end", Resume{Since: t0, WritersGone: t0.Add(4*time.Minute + time.Second)}, []Checkpoint{s100, settling}, "out/step_100.ckpt", "", false},
		{"writers gone: renamed into place up to the end", Resume{Since: t0, WritersGone: t0.Add(4*time.Minute + time.Second)}, []Checkpoint{s100, renamed}, "out/step_300.ckpt", "", false},
		{"writers gone: a torn directory is never complete", Resume{Since: t0, WritersGone: t0.Add(10 * time.Minute)}, []Checkpoint{s100, writing}, "out/step_100.ckpt", "", false},
		{"writers alive: settling is pending", Resume{Since: t0}, []Checkpoint{s100, settling}, "out/step_100.ckpt", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Select(c.r, c.in)
			best := ""
			if s.Found {
				best = s.Best.Path
			}
			earlier := ""
			if s.Earlier != nil {
				earlier = s.Earlier.Path
			}
			if best != c.best || earlier != c.earlier || s.Pending != c.pending {
				t.Errorf("best %q earlier %q pending %v; want %q %q %v", best, earlier, s.Pending, c.best, c.earlier, c.pending)
			}
		})
	}
}

// A file renamed into place after it was written shows it in its status
// times (ctime after mtime); one written in place does not. The scan reads
// it from the file system, with no watcher.
func TestScanSeesAMoveAfterTheWrite(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, ".step_20.pt.tmp")
	if err := os.WriteFile(tmp, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel stamps files from a clock that moves a tick at a time (1 to
	// 10 ms): the rename must come a tick after the write to show.
	time.Sleep(20 * time.Millisecond)
	if err := os.Rename(tmp, filepath.Join(dir, "step_20.pt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "step_10.pt"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := Scan(dir, Spec{Globs: []string{"step_*.pt"}, Quiet: time.Hour}, time.Now())
	if err != nil || len(all) != 2 {
		t.Fatalf("Scan: %v, %+v", err, all)
	}
	for _, c := range all {
		moved := filepath.Base(c.Path) == "step_20.pt"
		if c.MovedAfterWrite != moved || !c.Settling || c.Complete {
			t.Errorf("%s: moved after write %v settling %v complete %v; want moved %v, settling, not complete",
				filepath.Base(c.Path), c.MovedAfterWrite, c.Settling, c.Complete, moved)
		}
	}
	s := Select(Resume{WritersGone: time.Now()}, all)
	if !s.Found || filepath.Base(s.Best.Path) != "step_20.pt" {
		t.Errorf("after the writers ended: %+v, want step_20.pt", s)
	}
}
