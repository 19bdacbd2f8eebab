package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// 10 ms): a rename within the tick of the write would not show. The
	// write is dated two seconds back instead of waiting for the clock.
	written := time.Now().Add(-2 * time.Second)
	if err := os.Chtimes(tmp, written, written); err != nil {
		t.Fatal(err)
	}
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

// The resume choice once the job is gone decides from evidence, and names
// every checkpoint it passes over that would have won, with why.
func TestSelectEvidence(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	end := t0.Add(10 * time.Minute)
	step := func(n int64) *int64 { return &n }
	s100 := Checkpoint{Path: "ckpt/step_100.pt", Step: step(100), ModTime: t0.Add(time.Minute), Size: 100, Complete: true, Why: "renamed into place"}
	// step_200 was written in place 0.4 s before the end: inside any quiet
	// period and inside the old fixed 2 s.
	late := Checkpoint{Path: "ckpt/step_200.pt", Step: step(200), ModTime: end.Add(-400 * time.Millisecond), Size: 100, Settling: true, Why: "last change 0s ago"}
	whole := late
	whole.Structure, whole.StructureWhy = StructureComplete, "zip archive with its central directory and end record"
	announced := late
	announced.SavedWentOn = `the job printed "saved checkpoint ckpt/step_200.pt" and went on ("step 201")`
	cut := late
	cut.Structure, cut.StructureWhy = StructureTruncated, "zip archive (100 bytes) without its end-of-central-directory record"
	cutQuiet := cut // quiet for long: the quiet rule alone would take it
	cutQuiet.Complete, cutQuiet.Settling, cutQuiet.ModTime = true, false, t0.Add(2*time.Minute)
	failed := FailedLoad{Path: "ckpt/step_200.pt", Attempt: 2, At: end.Add(time.Minute), Failure: LoadFailure{Exception: "_pickle.UnpicklingError: invalid load key, '\\x00'.", Frame: "torch.load in train.py"}}
	rewritten := whole
	rewritten.ModTime = end.Add(2 * time.Minute)
	gone := Resume{Choose: "highest_step", Since: t0, WritersGone: end}

	cases := []struct {
		name   string
		r      Resume
		in     []Checkpoint
		best   string
		passed string // the one passed over, "" none
		reason string // how its reason starts
	}{
		{"format's end present: taken", gone, []Checkpoint{s100, whole}, "ckpt/step_200.pt", "", ""},
		{"save printed and went on: taken", gone, []Checkpoint{s100, announced}, "ckpt/step_200.pt", "", ""},
		{"nothing shows it whole: passed over, said", gone, []Checkpoint{s100, late}, "ckpt/step_100.pt", "ckpt/step_200.pt", "still being written 0.4s before the job died"},
		{"cut short beats the quiet rule", gone, []Checkpoint{s100, cutQuiet}, "ckpt/step_100.pt", "ckpt/step_200.pt", "cut short: zip archive"},
		{"cut short, nothing else: none, and said", gone, []Checkpoint{cut}, "", "ckpt/step_200.pt", "cut short"},
		{"died loading it: the one before", Resume{Choose: "highest_step", Since: t0, WritersGone: end, FailedLoads: []FailedLoad{failed}}, []Checkpoint{s100, whole, whole}, "ckpt/step_100.pt", "ckpt/step_200.pt", "attempt 2 died loading it (_pickle.UnpicklingError"},
		{"died loading it, written again since: taken", Resume{Choose: "highest_step", Since: t0, WritersGone: end, FailedLoads: []FailedLoad{failed}}, []Checkpoint{s100, rewritten}, "ckpt/step_200.pt", "", ""},
		{"an older incomplete one is not named", gone, []Checkpoint{late, withStep(s100, 300)}, "ckpt/step_300.pt", "", ""},
		{"writers alive: a whole format needs no wait", Resume{Choose: "highest_step", Since: t0}, []Checkpoint{s100, whole}, "ckpt/step_200.pt", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Select(c.r, c.in)
			best := ""
			if s.Found {
				best = s.Best.Path
			}
			if best != c.best || s.Pending {
				t.Fatalf("best %q pending %v; want %q, not pending", best, s.Pending, c.best)
			}
			switch {
			case c.passed == "" && len(s.Passed) != 0:
				t.Errorf("passed over %+v, want none", s.Passed)
			case c.passed != "" && (len(s.Passed) != 1 || s.Passed[0].Path != c.passed || !strings.HasPrefix(s.Passed[0].Reason, c.reason)):
				t.Errorf("passed over %+v; want %s, %q...", s.Passed, c.passed, c.reason)
			}
		})
	}
}

func withStep(c Checkpoint, n int64) Checkpoint {
	c.Step = &n
	c.Path = fmt.Sprintf("ckpt/step_%d.pt", n)
	return c
}
