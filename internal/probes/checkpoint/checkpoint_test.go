package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ckptWriteFile writes body at dir/rel (creating parents) and sets its
// modification time to mod unless mod is zero.
func ckptWriteFile(t *testing.T, dir, rel, body string, mod time.Time) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if !mod.IsZero() {
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func ckptStepOf(c Checkpoint) int64 {
	if c.Step == nil {
		return -1
	}
	return *c.Step
}

func TestCheckpointStep(t *testing.T) {
	for name, want := range map[string]int64{
		"step_1000.pt":                  1000,
		"checkpoint-500":                500,
		"epoch=3-step=1200.ckpt":        1200,
		"epoch=3-step=1200-v1.ckpt":     1200,
		"global_step300":                300,
		"model_100.pth.tar":             100,
		"ckpt-2000.index":               2000,
		"step_7.h5":                     7,
		"iter_0000042":                  42,
		"last.ckpt":                     -1,
		"model.h5":                      -1,
		"best.safetensors":              -1,
		"step_99999999999999999999.pt":  -1, // overflows int64
		"run2-step_30.pt":               30,
		"checkpoint-500.distcp.stage12": 500, // an extension that starts with a letter is set aside, digits included
	} {
		got, ok := StepOf(name)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("StepOf(%q) = %d, want %d", name, got, want)
		}
	}
}

// A file written in chunks, in place, is not chosen until it has been quiet
// for spec.Quiet; the older complete checkpoint is chosen meanwhile.
func TestScanChunkedWriteIsNotChosenUntilQuiet(t *testing.T) {
	dir := t.TempDir()
	past := time.Now().Add(-time.Hour)
	ckptWriteFile(t, dir, "ckpt/step_100.pt", "old weights", past)
	spec := Spec{Globs: []string{"ckpt/step_*.pt"}, Quiet: 30 * time.Second}

	f, err := os.Create(filepath.Join(dir, "ckpt", "step_200.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mod time.Time
	for i := 0; i < 3; i++ {
		if _, err := f.WriteString(strings.Repeat("w", 4096)); err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		mod = fi.ModTime()
		// As of the write, and just short of quiet: the old one.
		for _, now := range []time.Time{mod, mod.Add(29 * time.Second)} {
			c, ok, err := Latest(dir, spec, now)
			if err != nil || !ok || filepath.Base(c.Path) != "step_100.pt" {
				t.Fatalf("chunk %d, now=mtime+%v: latest = %+v %v %v, want step_100.pt", i, now.Sub(mod), c, ok, err)
			}
		}
	}
	all, err := Scan(dir, spec, mod.Add(time.Second))
	if err != nil || len(all) != 2 {
		t.Fatalf("scan: %+v %v", all, err)
	}
	if w := all[1]; w.Complete || filepath.Base(w.Path) != "step_200.pt" || w.Size != 3*4096 ||
		!strings.Contains(w.Why, "last change 1s ago") {
		t.Errorf("checkpoint being written: %+v", w)
	}
	c, ok, _ := Latest(dir, spec, mod.Add(30*time.Second))
	if !ok || filepath.Base(c.Path) != "step_200.pt" || !c.Complete || ckptStepOf(c) != 200 || !strings.HasPrefix(c.Why, "no change for 30s") {
		t.Errorf("after 30s quiet: %+v, want step_200.pt complete", c)
	}
	if c.Path != filepath.Join(dir, "ckpt", "step_200.pt") {
		t.Errorf("Path %q is not the match joined to dir", c.Path)
	}
	// A file modified "in the future" (clock skew) is not complete.
	all, _ = Scan(dir, spec, mod.Add(-time.Minute))
	if all[1].Complete || !strings.Contains(all[1].Why, "in the future") {
		t.Errorf("future mtime: %+v", all[1])
	}
}

func TestScanEmptyFileIsNeverComplete(t *testing.T) {
	dir := t.TempDir()
	ckptWriteFile(t, dir, "step_1.pt", "", time.Now().Add(-time.Hour))
	all, err := Scan(dir, Spec{Globs: []string{"*.pt"}}, time.Now())
	if err != nil || len(all) != 1 || all[0].Complete || all[0].Why != "empty file" {
		t.Fatalf("empty file: %+v %v", all, err)
	}
}

// A directory checkpoint with a marker is complete exactly when the marker
// exists and (for .json) parses, however old the directory is.
func TestScanMarkerDirectory(t *testing.T) {
	dir := t.TempDir()
	past := time.Now().Add(-time.Hour)
	ckptWriteFile(t, dir, "out/checkpoint-500/model.safetensors", strings.Repeat("m", 1000), past)
	ckptWriteFile(t, dir, "out/checkpoint-500/optimizer.pt", strings.Repeat("o", 500), past)
	spec := Spec{Globs: []string{"out/checkpoint-*"}, Marker: "trainer_state.json"}
	later := time.Now().Add(24 * time.Hour)

	check := func(wantComplete bool, wantWhy string) Checkpoint {
		t.Helper()
		all, err := Scan(dir, spec, later)
		if err != nil || len(all) != 1 {
			t.Fatalf("scan: %+v %v", all, err)
		}
		c := all[0]
		if c.Complete != wantComplete || c.Why != wantWhy || ckptStepOf(c) != 500 {
			t.Fatalf("got %+v, want complete=%v why %q", c, wantComplete, wantWhy)
		}
		return c
	}
	check(false, "marker trainer_state.json missing")
	state := `{"global_step": 500, "log_history": [{"loss": 0.5}]}`
	ckptWriteFile(t, dir, "out/checkpoint-500/trainer_state.json", state[:20], time.Time{})
	check(false, "marker trainer_state.json is not complete JSON yet")
	ckptWriteFile(t, dir, "out/checkpoint-500/trainer_state.json", state, time.Time{})
	c := check(true, "marker trainer_state.json present")
	if c.Size != int64(1500+len(state)) {
		t.Errorf("size %d, want the tree's %d", c.Size, 1500+len(state))
	}
	if c.ModTime.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("ModTime %v is not the newest in the tree (the marker's)", c.ModTime)
	}

	// Without a marker, a directory is judged by the newest mtime in its tree.
	spec.Marker = ""
	ckptWriteFile(t, dir, "out/checkpoint-600/sub/shard-0.bin", "x", past)
	ckptWriteFile(t, dir, "out/checkpoint-600/sub/shard-1.bin", "y", time.Time{}) // just now
	all, _ := Scan(dir, spec, time.Now())
	for _, c := range all {
		if filepath.Base(c.Path) == "checkpoint-600" && c.Complete {
			t.Errorf("directory with a file written just now is complete: %+v", c)
		}
	}
	all, _ = Scan(dir, spec, later)
	if len(all) != 2 || !all[0].Complete || !all[1].Complete {
		t.Errorf("a day later both directories are quiet: %+v", all)
	}
}

func TestScanChooseNewestVersusHighestStep(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ckptWriteFile(t, dir, "ck/step_1000.pt", "a", now.Add(-2*time.Hour)) // highest step, older
	ckptWriteFile(t, dir, "ck/step_900.pt", "b", now.Add(-time.Hour))    // newest
	ckptWriteFile(t, dir, "ck/best.pt", "c", now.Add(-3*time.Hour))      // no step
	ckptWriteFile(t, dir, "ck/step_5000.pt", "d", now)                   // highest, still being written
	spec := Spec{Globs: []string{"ck/*.pt"}}

	for choose, want := range map[string]string{"": "step_900.pt", "newest": "step_900.pt", "highest_step": "step_1000.pt"} {
		spec.Choose = choose
		c, ok, err := Latest(dir, spec, now)
		if err != nil || !ok || filepath.Base(c.Path) != want {
			t.Errorf("choose %q: got %+v %v %v, want %s", choose, c, ok, err, want)
		}
		all, _ := Scan(dir, spec, now)
		if last := all[len(all)-1]; last.Complete || filepath.Base(last.Path) != "step_5000.pt" {
			t.Errorf("choose %q: incomplete step_5000.pt should sort last: %+v", choose, all)
		}
	}
	// highest_step ranks unnumbered names after numbered ones.
	spec.Choose = "highest_step"
	all, _ := Scan(dir, spec, now)
	if filepath.Base(all[2].Path) != "best.pt" {
		t.Errorf("highest_step order: %v", all)
	}
}

// last.ckpt links resolve to their target: the target's step, size and
// completeness, one entry when the target is also matched directly.
func TestScanSymlinkLastCkpt(t *testing.T) {
	dir := t.TempDir()
	past := time.Now().Add(-time.Hour)
	ckptWriteFile(t, dir, "ck/epoch=2-step=300.ckpt", "weights", past)
	if err := os.Symlink("epoch=2-step=300.ckpt", filepath.Join(dir, "ck", "last.ckpt")); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Globs: []string{"ck/last.ckpt"}}
	c, ok, err := Latest(dir, spec, time.Now())
	if err != nil || !ok || c.Path != filepath.Join(dir, "ck", "epoch=2-step=300.ckpt") || ckptStepOf(c) != 300 ||
		c.Size != 7 || !strings.HasPrefix(c.Why, "via last.ckpt: no change for") {
		t.Fatalf("last.ckpt: %+v %v %v", c, ok, err)
	}
	spec.Globs = []string{"ck/*.ckpt"}
	all, _ := Scan(dir, spec, time.Now())
	if len(all) != 1 {
		t.Errorf("link and target matched: want one checkpoint, got %+v", all)
	}

	// A link to a file still being written is not complete.
	ckptWriteFile(t, dir, "ck/epoch=3-step=400.ckpt", "new weights", time.Time{})
	ckptRelink(t, filepath.Join(dir, "ck", "last.ckpt"), "epoch=3-step=400.ckpt")
	spec.Globs = []string{"ck/last.ckpt"}
	all, _ = Scan(dir, spec, time.Now())
	if len(all) != 1 || all[0].Complete || ckptStepOf(all[0]) != 400 {
		t.Errorf("link to a fresh file: %+v", all)
	}
	// A dangling link is listed, incomplete.
	ckptRelink(t, filepath.Join(dir, "ck", "last.ckpt"), "epoch=9-step=900.ckpt")
	all, _ = Scan(dir, spec, time.Now())
	if len(all) != 1 || all[0].Complete || all[0].Path != filepath.Join(dir, "ck", "last.ckpt") ||
		!strings.Contains(all[0].Why, "does not exist") {
		t.Errorf("dangling link: %+v", all)
	}
}

func ckptRelink(t *testing.T, link, target string) {
	t.Helper()
	tmp := link + ".tmp"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

func TestScanSpecErrorsAndMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := Scan(dir, Spec{}, time.Now()); !errors.Is(err, ErrNoGlobs) {
		t.Errorf("no globs: %v", err)
	}
	for _, spec := range []Spec{
		{Globs: []string{"ck/[.pt"}},
		{Globs: []string{"  "}},
		{Globs: []string{"*.pt"}, Choose: "largest"},
		{Globs: []string{"*"}, Marker: "../state.json"},
	} {
		if _, err := Scan(dir, spec, time.Now()); err == nil {
			t.Errorf("spec %+v: want an error", spec)
		} else if _, werr := Watch(dir, spec, nil); werr == nil {
			t.Errorf("spec %+v: Watch accepted what Scan refused", spec)
		}
	}
	all, err := Scan(filepath.Join(dir, "nope"), Spec{Globs: []string{"ck/*.pt"}}, time.Now())
	if err != nil || len(all) != 0 {
		t.Errorf("missing directory: %v %v", all, err)
	}
	// Absolute globs ignore dir; a dir with glob metacharacters is taken literally.
	odd := filepath.Join(dir, "run[1]*")
	ckptWriteFile(t, odd, "ck/step_3.pt", "w", time.Now().Add(-time.Hour))
	ckptWriteFile(t, dir, "run1x/ck/step_4.pt", "w", time.Now().Add(-time.Hour))
	c, ok, err := Latest(odd, Spec{Globs: []string{"ck/*.pt"}}, time.Now())
	if err != nil || !ok || ckptStepOf(c) != 3 {
		t.Errorf("glob ck/*.pt under %q: %+v %v %v", odd, c, ok, err)
	}
	abs := filepath.Join(dir, "run1x", "ck", "*.pt")
	c, ok, err = Latest(odd, Spec{Globs: []string{abs}}, time.Now())
	if err != nil || !ok || ckptStepOf(c) != 4 {
		t.Errorf("absolute glob %q: %+v %v %v", abs, c, ok, err)
	}
}

// BenchmarkScanCheckpoints: one scan of 500 file checkpoints plus 50
// directory checkpoints of 5 files each, with a JSON marker.
//
//	go test -run '^$' -bench Scan ./probes/
func BenchmarkScanCheckpoints(b *testing.B) {
	dir := b.TempDir()
	past := time.Now().Add(-time.Hour)
	for i := 0; i < 500; i++ {
		p := filepath.Join(dir, "ck", fmt.Sprintf("step_%d.pt", i*100))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("weights"), 0o644); err != nil {
			b.Fatal(err)
		}
		_ = os.Chtimes(p, past, past)
	}
	for i := 0; i < 50; i++ {
		d := filepath.Join(dir, "out", fmt.Sprintf("checkpoint-%d", i*500))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		for _, n := range []string{"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"} {
			if err := os.WriteFile(filepath.Join(d, n), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "trainer_state.json"), []byte(`{"global_step": 1}`), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		spec Spec
	}{
		{"files", Spec{Globs: []string{"ck/step_*.pt"}, Choose: "highest_step"}},
		{"marker-dirs", Spec{Globs: []string{"out/checkpoint-*"}, Marker: "trainer_state.json"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			now := time.Now()
			for b.Loop() {
				if _, ok, err := Latest(dir, bc.spec, now); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
