package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
	"gonum.org/v1/plot/vg"
)

// plotOf reads a run directory and plots it as `report --plot` does; it
// returns the run, with the layout of the labels as drawn.
func plotOf(t *testing.T, dir string) *Run {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, record.Events))
	if err != nil {
		t.Fatal(err)
	}
	run, err := readEvents(f, dir)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ti := loadTimeline(run, nil)
	if run.origin.IsZero() && run.Start != nil {
		run.origin = *run.Start // as Command does
	}
	if ti == nil {
		t.Fatalf("%s has no timeline", dir)
	}
	if err := plotRun(run, ti, filepath.Join(dir, record.Timeline), filepath.Join(t.TempDir(), "memory.png")); err != nil {
		t.Fatal(err)
	}
	return run
}

// checkLayout: no label covers another, and every label lies inside its
// panel's data area, whole.
func checkLayout(t *testing.T, run *Run, wantLabels int) {
	t.Helper()
	n := 0
	for _, l := range run.labels {
		for i, r := range l.placed {
			n++
			it := l.items[i]
			if r.Min.X < l.area.Min.X || r.Max.X > l.area.Max.X || r.Min.Y < l.area.Min.Y || r.Max.Y > l.area.Max.Y {
				t.Errorf("label %q at %v leaves the data area %v", it.text, r, l.area)
			}
			for j := range i {
				if overlaps(r, l.placed[j]) {
					t.Errorf("label %q at %v covers label %q at %v", it.text, r, l.items[j].text, l.placed[j])
				}
			}
		}
	}
	if n != wantLabels {
		t.Errorf("%d labels placed, want %d", n, wantLabels)
	}
}

// The plots of the README's example (no GPU sampled: its GPU is simulated)
// and of a two-GPU run: every label is inside its panel, none covers
// another. The example's plot has a GPU panel drawn from the figures its
// OOM messages gave, and its time axis starts at the run.
func TestPlotLayout(t *testing.T) {
	run := plotOf(t, "testdata/run-oom")
	checkLayout(t, run, 3+2) // three attempts, two OOMs

	run = plotOf(t, "testdata/run-example")
	checkLayout(t, run, 3+2)
	figs := oomFigures(run)
	if len(figs) != 2 {
		t.Fatalf("%d OOM figures, want the two the example's messages gave", len(figs))
	}
	f := figs[0]
	if f.asked != 4 || f.inUse != 14.5 || f.free != 1.5 || f.total != 16 {
		t.Errorf("attempt 1's figures %+v, want asked 4, in use 14.5, free 1.5, total 16 (GiB)", f)
	}
	ti := loadTimeline(run, nil)
	panels, err := buildPanels(run, ti, "testdata/run-example/"+record.Timeline)
	if err != nil || len(panels) != 2 {
		t.Fatalf("%d panels, %v", len(panels), err)
	}
	gpu := panels[0]
	if gpu.Y.Label.Text != gpuFromMessages+" (GiB)" || gpu.Y.Max < f.inUse+f.asked {
		t.Errorf("GPU panel %q up to %v, want %q reaching %v", gpu.Y.Label.Text, gpu.Y.Max, gpuFromMessages, f.inUse+f.asked)
	}
	for _, p := range panels {
		if p.X.Min != 0 {
			t.Errorf("%q: the time axis starts at %v, not at the run", p.Y.Label.Text, p.X.Min)
		}
	}
}

// Many short attempts, each relaunched with a long change and dying of a
// GPU OOM with all its figures: the labels crowd the top of the panel, and
// are moved down, never over one another, never out of the frame.
func TestPlotLayoutCrowded(t *testing.T) {
	dir := t.TempDir()
	origin := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var ev strings.Builder
	const n = 8
	fmt.Fprintf(&ev, `{"time":%q,"type":"run_start","argv":["python","train.py"]}`+"\n", origin.Format(time.RFC3339Nano))
	gib := func(f float64) int64 { return int64(f * (1 << 30)) }
	for i := 1; i <= n; i++ {
		start := origin.Add(time.Duration(i-1) * 2 * time.Second)
		end := start.Add(1500 * time.Millisecond)
		fmt.Fprintf(&ev, `{"time":%q,"type":"attempt_start","attempt":%d}`+"\n", start.Format(time.RFC3339Nano), i)
		fmt.Fprintf(&ev, `{"time":%q,"type":"phase","attempt":%d,"phase":"val","line":3}`+"\n", start.Add(time.Second).Format(time.RFC3339Nano), i)
		fmt.Fprintf(&ev, `{"time":%q,"type":"failure","attempt":%d,"kind":"gpu_oom","line":9}`+"\n", end.Format(time.RFC3339Nano), i)
		fmt.Fprintf(&ev, `{"time":%q,"type":"attempt_end","attempt":%d,"exit_code":1,"verdict":{"kind":"gpu_oom","phase":"val","step":%d,"oom":{"requested_bytes":%d,"free_bytes":%d,"total_bytes":%d,"in_use_bytes":%d}}}`+"\n",
			end.Format(time.RFC3339Nano), i, 1000*i, gib(4), gib(1.5), gib(16), gib(14.5))
		fmt.Fprintf(&ev, `{"time":%q,"type":"decision","attempt":%d,"verb":"relaunch","rule":"val-oom","changes":[{"name":"val_crop_size_of_a_long_name","old":%d,"new":%d},{"name":"val_batch_size","old":64,"new":32}]}`+"\n",
			end.Format(time.RFC3339Nano), i, 2048>>(i-1), 1024>>(i-1))
	}
	fmt.Fprintf(&ev, `{"time":%q,"type":"run_end","exit_code":1}`+"\n", origin.Add(n*2*time.Second).Format(time.RFC3339Nano))
	csv := record.TimelineHeader + "\n"
	for ms := 0; ms <= n*2000; ms += 250 {
		csv += fmt.Sprintf("%d,%d,train,host,%d,0,\n", ms, ms/2000+1, 300<<20)
	}
	for name, data := range map[string]string{record.Events: ev.String(), record.Timeline: csv} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := plotOf(t, dir)
	if len(oomFigures(run)) != n {
		t.Fatalf("%d OOM figures, want %d", len(oomFigures(run)), n)
	}
	checkLayout(t, run, 2*n)
	moved := 0
	for _, l := range run.labels {
		for _, r := range l.placed {
			if r.Max.Y < l.area.Max.Y-labelTop-vg.Points(1) {
				moved++
			}
		}
	}
	if moved == 0 {
		t.Errorf("no label was moved down: the case does not crowd them")
	}
}
