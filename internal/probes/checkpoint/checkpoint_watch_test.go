package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// ckptWaitLimit bounds every wait on the watcher so that a bug fails the test
// with a message instead of hanging it. Waits end on events, not on time.
const ckptWaitLimit = 10 * time.Second

// ckptRecorder collects what the watcher's test hooks report.
type ckptRecorder struct {
	mu      sync.Mutex
	events  []fsnotify.Event
	watches []string
	ticks   int
	notify  chan struct{}
}

// ckptBarriers numbers barrier files: each name is new, so each is a Create.
var ckptBarriers atomic.Int64

func newCkptRecorder() *ckptRecorder { return &ckptRecorder{notify: make(chan struct{}, 1)} }

func (r *ckptRecorder) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *ckptRecorder) opts(o ckptWatchOpts) ckptWatchOpts {
	o.testEvent = func(ev fsnotify.Event) {
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
		r.poke()
	}
	o.testWatch = func(d string) {
		r.mu.Lock()
		r.watches = append(r.watches, d)
		r.mu.Unlock()
		r.poke()
	}
	o.testTick = func() {
		r.mu.Lock()
		r.ticks++
		r.mu.Unlock()
		r.poke()
	}
	return o
}

// mark is a position in what was recorded, to wait for what comes after it.
type ckptMark struct{ events, watches, ticks int }

func (r *ckptRecorder) mark() ckptMark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ckptMark{len(r.events), len(r.watches), r.ticks}
}

// waitFor waits until cond (called under the lock) holds.
func (r *ckptRecorder) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(ckptWaitLimit)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("watcher never reported %s", what)
		}
	}
}

// waitEvent waits until the watcher has handled an event on name with op.
func (r *ckptRecorder) waitEvent(t *testing.T, m ckptMark, name string, op fsnotify.Op) {
	t.Helper()
	r.waitFor(t, fmt.Sprintf("event %v on %s", op, name), func() bool {
		for _, ev := range r.events[m.events:] {
			if filepath.Clean(ev.Name) == name && ev.Has(op) {
				return true
			}
		}
		return false
	})
}

// waitWatch waits until the watcher has added dir to fsnotify.
func (r *ckptRecorder) waitWatch(t *testing.T, m ckptMark, dir string) {
	t.Helper()
	r.waitFor(t, "a watch on "+dir, func() bool {
		for _, d := range r.watches[m.watches:] {
			if d == dir {
				return true
			}
		}
		return false
	})
}

// waitTick waits for a quiet check that started after m.
func (r *ckptRecorder) waitTick(t *testing.T, m ckptMark) {
	t.Helper()
	r.waitFor(t, "a quiet check", func() bool { return r.ticks >= m.ticks+2 })
}

// barrier creates a file in the watched directory dir and waits until the
// watcher has handled its event: inotify keeps one queue in order, so every
// change made before it has been handled too.
func (r *ckptRecorder) barrier(t *testing.T, dir string) {
	t.Helper()
	name := filepath.Join(dir, fmt.Sprintf(".barrier-%d", ckptBarriers.Add(1)))
	m := r.mark()
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(t, m, name, fsnotify.Create)
}

// ckptClock is the quiet rule's clock: frozen unless a test moves it, so
// that a checkpoint being written can never pass for quiet by accident.
type ckptClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *ckptClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *ckptClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func ckptStartWatch(t *testing.T, dir string, spec Spec, log *zap.Logger, o ckptWatchOpts) *Watcher {
	t.Helper()
	w, err := watchCheckpoints(dir, spec, log, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w
}

// ckptWaitUpdate reads Updates until a checkpoint with base name base arrives.
func ckptWaitUpdate(t *testing.T, w *Watcher, base string) Checkpoint {
	t.Helper()
	deadline := time.NewTimer(ckptWaitLimit)
	defer deadline.Stop()
	for {
		select {
		case c, ok := <-w.Updates():
			if !ok {
				t.Fatalf("Updates closed while waiting for %s", base)
			}
			if filepath.Base(c.Path) == base {
				if !c.Complete {
					t.Fatalf("update for %s is not complete: %+v", base, c)
				}
				return c
			}
		case <-deadline.C:
			l, ok := w.Latest()
			t.Fatalf("no update for %s (latest: %+v %v)", base, l, ok)
		}
	}
}

func ckptNoUpdate(t *testing.T, w *Watcher) {
	t.Helper()
	select {
	case c := <-w.Updates():
		t.Fatalf("unexpected update: %+v", c)
	default:
	}
}

func ckptWantLatest(t *testing.T, w *Watcher, base string) Checkpoint {
	t.Helper()
	c, ok := w.Latest()
	if base == "" {
		if ok {
			t.Fatalf("Latest = %+v, want none", c)
		}
		return c
	}
	if !ok || filepath.Base(c.Path) != base || !c.Complete {
		t.Fatalf("Latest = %+v %v, want %s", c, ok, base)
	}
	return c
}

// ckptRenameInto writes body to a temp name in the same directory and renames
// it to rel, as torch.save-then-rename and the example job do.
func ckptRenameInto(t *testing.T, dir, rel, body string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

func ckptFrozenSpec(globs ...string) Spec {
	return Spec{Globs: globs, Quiet: 40 * time.Millisecond, Poll: time.Hour}
}

func TestWatchRenameIntoPlaceIsCompleteAtOnce(t *testing.T) {
	dir := t.TempDir()
	ckptWriteFile(t, dir, "ckpt/step_1.pt", "old", time.Now().Add(-time.Hour))
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	core, logs := observer.New(zapcore.InfoLevel)
	w := ckptStartWatch(t, dir, ckptFrozenSpec("ckpt/step_*.pt"), zap.New(core), rec.opts(ckptWatchOpts{now: clock.now}))

	ckptWantLatest(t, w, "step_1.pt") // there before the watch: Latest, not an update
	rec.barrier(t, filepath.Join(dir, "ckpt"))
	ckptNoUpdate(t, w)

	ckptRenameInto(t, dir, "ckpt/step_2.pt", "new weights")
	c := ckptWaitUpdate(t, w, "step_2.pt")
	if c.Why != "renamed into place" || ckptStepOf(c) != 2 || c.Size != int64(len("new weights")) {
		t.Errorf("update: %+v", c)
	}
	ckptWantLatest(t, w, "step_2.pt")
	if n := logs.FilterMessage("checkpoint complete").FilterField(zap.String("path", c.Path)).Len(); n != 1 {
		t.Errorf("logged %d 'checkpoint complete' entries for %s, want 1", n, c.Path)
	}

	// Written to again in place: no longer complete, the older one is chosen.
	f, err := os.OpenFile(filepath.Join(dir, "ckpt", "step_2.pt"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(" and more"); err != nil {
		t.Fatal(err)
	}
	rec.barrier(t, filepath.Join(dir, "ckpt"))
	ckptWantLatest(t, w, "step_1.pt")
}

// A file moved out of the directory followed by a plain create is not a
// rename into place: the new file is still being written.
func TestWatchMoveOutThenCreateIsNotARename(t *testing.T) {
	dir := t.TempDir()
	ckptWriteFile(t, dir, "ckpt/notes.txt", "n", time.Time{})
	if err := os.Mkdir(filepath.Join(dir, "elsewhere"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	w := ckptStartWatch(t, dir, ckptFrozenSpec("ckpt/step_*.pt"), nil, rec.opts(ckptWatchOpts{now: clock.now}))
	if err := os.Rename(filepath.Join(dir, "ckpt", "notes.txt"), filepath.Join(dir, "elsewhere", "notes.txt")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "ckpt", "step_3.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("partial"); err != nil {
		t.Fatal(err)
	}
	rec.barrier(t, filepath.Join(dir, "ckpt"))
	ckptWantLatest(t, w, "")
	ckptNoUpdate(t, w)
}

// A last.ckpt link: its target's rules decide, and re-pointing the link
// does not undo what was seen of the target.
func TestWatchLastCkptLink(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()

	// Only the link matches: its target was not seen renamed, so it waits
	// for quiet.
	w := ckptStartWatch(t, dir, ckptFrozenSpec("ck/last.ckpt"), nil, rec.opts(ckptWatchOpts{now: clock.now}))
	ckptRenameInto(t, dir, "ck/epoch=0-step=5.ckpt", "w5")
	ckptRelink(t, filepath.Join(ck, "last.ckpt"), "epoch=0-step=5.ckpt")
	rec.barrier(t, ck)
	ckptWantLatest(t, w, "")
	clock.add(time.Hour)
	c := ckptWaitUpdate(t, w, "epoch=0-step=5.ckpt")
	if ckptStepOf(c) != 5 || !strings.HasPrefix(c.Why, "via last.ckpt: no change for") {
		t.Errorf("via link: %+v", c)
	}

	// Link and targets match: the target's rename counts, and re-pointing
	// the link at it keeps it complete.
	rec2 := newCkptRecorder()
	w2 := ckptStartWatch(t, dir, ckptFrozenSpec("ck/*.ckpt"), nil, rec2.opts(ckptWatchOpts{now: clock.now}))
	ckptRenameInto(t, dir, "ck/epoch=1-step=10.ckpt", "w10")
	if c := ckptWaitUpdate(t, w2, "epoch=1-step=10.ckpt"); c.Why != "renamed into place" {
		t.Errorf("target: %+v", c)
	}
	ckptRelink(t, filepath.Join(ck, "last.ckpt"), "epoch=1-step=10.ckpt")
	rec2.barrier(t, ck)
	if c := ckptWantLatest(t, w2, "epoch=1-step=10.ckpt"); !strings.HasSuffix(c.Why, "renamed into place") {
		t.Errorf("after re-pointing last.ckpt: %+v", c)
	}
}

func TestWatchChunkedWriteIsCompleteOnlyWhenQuiet(t *testing.T) {
	dir := t.TempDir()
	ckptWriteFile(t, dir, "ckpt/step_1.pt", "old", time.Now().Add(-time.Hour))
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	w := ckptStartWatch(t, dir, ckptFrozenSpec("ckpt/step_*.pt"), nil, rec.opts(ckptWatchOpts{now: clock.now}))

	f, err := os.Create(filepath.Join(dir, "ckpt", "step_2.pt"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := f.Write(bytes.Repeat([]byte{'w'}, 64<<10)); err != nil {
			t.Fatal(err)
		}
		rec.barrier(t, filepath.Join(dir, "ckpt"))
		rec.waitTick(t, rec.mark())
		ckptWantLatest(t, w, "step_1.pt")
		ckptNoUpdate(t, w)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rec.barrier(t, filepath.Join(dir, "ckpt"))
	rec.waitTick(t, rec.mark()) // one look at the final size
	clock.add(time.Hour)
	c := ckptWaitUpdate(t, w, "step_2.pt")
	if !strings.HasPrefix(c.Why, "no change for ") || c.Size != 3*64<<10 {
		t.Errorf("update: %+v", c)
	}
	ckptWantLatest(t, w, "step_2.pt")
}

// With the real clock and a short Quiet, a file written in place is
// reported once it has been left alone.
func TestWatchQuietWithRealClock(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := ckptStartWatch(t, dir, Spec{Globs: []string{"ckpt/*.pt"}, Quiet: 50 * time.Millisecond, Poll: time.Hour}, nil, ckptWatchOpts{})
	ckptWriteFile(t, dir, "ckpt/model_300.pt", "weights", time.Time{})
	c := ckptWaitUpdate(t, w, "model_300.pt")
	if !strings.HasPrefix(c.Why, "no change for ") || ckptStepOf(c) != 300 {
		t.Errorf("update: %+v", c)
	}
}

func TestWatchMarkerDirectoryCreatedAfterStart(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	spec := ckptFrozenSpec("out/checkpoint-*")
	spec.Marker = "trainer_state.json"
	w := ckptStartWatch(t, dir, spec, nil, rec.opts(ckptWatchOpts{now: clock.now}))

	m := rec.mark()
	ck := filepath.Join(out, "checkpoint-100")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	rec.waitWatch(t, m, ck)
	ckptWriteFile(t, out, "checkpoint-100/model.safetensors", strings.Repeat("m", 1000), time.Time{})
	ckptWriteFile(t, out, "checkpoint-100/trainer_state.json", `{"global_step": 1`, time.Time{})
	rec.barrier(t, out)
	rec.waitTick(t, rec.mark())
	ckptWantLatest(t, w, "")
	ckptNoUpdate(t, w)

	clock.add(time.Hour) // time does not make a marker directory complete
	rec.waitTick(t, rec.mark())
	ckptWantLatest(t, w, "")

	state := `{"global_step": 100}`
	ckptWriteFile(t, out, "checkpoint-100/trainer_state.json", state, time.Time{})
	c := ckptWaitUpdate(t, w, "checkpoint-100")
	if c.Why != "marker trainer_state.json present" || c.Size != int64(1000+len(state)) || ckptStepOf(c) != 100 {
		t.Errorf("update: %+v", c)
	}
	ckptWantLatest(t, w, "checkpoint-100")

	// Files written into a new directory before the watcher could add it
	// are found by reading it after the Add.
	ckptWriteFile(t, out, "checkpoint-200/model.safetensors", "m2", time.Time{})
	ckptWriteFile(t, out, "checkpoint-200/trainer_state.json", `{"global_step": 200}`, time.Time{})
	ckptWaitUpdate(t, w, "checkpoint-200")
	ckptWantLatest(t, w, "checkpoint-200")
}

func TestWatchNewSubdirectoryOfTheGlobIsWatched(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	if err := os.Mkdir(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	w := ckptStartWatch(t, dir, ckptFrozenSpec("runs/*/step_*.pt"), nil, rec.opts(ckptWatchOpts{now: clock.now}))

	m := rec.mark()
	if err := os.Mkdir(filepath.Join(runs, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	rec.waitWatch(t, m, filepath.Join(runs, "a"))
	ckptRenameInto(t, runs, "a/step_5.pt", "weights")
	c := ckptWaitUpdate(t, w, "step_5.pt")
	if c.Why != "renamed into place" || c.Path != filepath.Join(runs, "a", "step_5.pt") {
		t.Errorf("update: %+v", c)
	}
}

func TestWatchCheckpointDirectoryDeletedAndRecreated(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	if err := os.Mkdir(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	w := ckptStartWatch(t, dir, ckptFrozenSpec("ckpt/step_*.pt"), nil, rec.opts(ckptWatchOpts{now: clock.now}))

	ckptRenameInto(t, dir, "ckpt/step_10.pt", "w10")
	ckptWaitUpdate(t, w, "step_10.pt")

	m := rec.mark()
	if err := os.RemoveAll(ckpt); err != nil {
		t.Fatal(err)
	}
	rec.waitEvent(t, m, ckpt, fsnotify.Remove)
	// Latest keeps the last good one (its file is gone: callers check).
	c := ckptWantLatest(t, w, "step_10.pt")
	if _, err := os.Stat(c.Path); err == nil {
		t.Errorf("%s should be gone", c.Path)
	}

	m = rec.mark()
	if err := os.Mkdir(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	rec.waitWatch(t, m, ckpt)
	ckptRenameInto(t, dir, "ckpt/step_20.pt", "w20")
	if c := ckptWaitUpdate(t, w, "step_20.pt"); c.Why != "renamed into place" {
		t.Errorf("after recreation: %+v", c)
	}
	ckptWantLatest(t, w, "step_20.pt")
}

// A spec whose directory does not exist yet: fsnotify watches the nearest
// existing parent and follows the directories down as they are created.
func TestWatchDirectoryThatDoesNotExistYet(t *testing.T) {
	dir := t.TempDir()
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	w := ckptStartWatch(t, dir, ckptFrozenSpec("later/ckpt/step_*.pt"), nil, rec.opts(ckptWatchOpts{now: clock.now}))
	ckptWantLatest(t, w, "")

	m := rec.mark()
	ckpt := filepath.Join(dir, "later", "ckpt")
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	rec.waitWatch(t, m, ckpt)
	ckptRenameInto(t, dir, "later/ckpt/step_7.pt", "w7")
	if c := ckptWaitUpdate(t, w, "step_7.pt"); c.Why != "renamed into place" {
		t.Errorf("update: %+v", c)
	}
}

// Without fsnotify (a network file system delivers no events), the polling
// scan finds checkpoints, including in a directory created after the start.
func TestWatchPollingFallback(t *testing.T) {
	dir := t.TempDir()
	clock := &ckptClock{t: time.Now()}
	spec := Spec{Globs: []string{"later/ckpt/step_*.pt"}, Quiet: 40 * time.Millisecond, Poll: 20 * time.Millisecond}
	rec := newCkptRecorder()
	w := ckptStartWatch(t, dir, spec, nil, rec.opts(ckptWatchOpts{now: clock.now, noFsnotify: true}))
	if w.fsw != nil {
		t.Fatal("fsnotify in use")
	}
	ckptWantLatest(t, w, "")
	ckptWriteFile(t, dir, "later/ckpt/step_7.pt", "w7", time.Time{})
	clock.add(time.Hour)
	c := ckptWaitUpdate(t, w, "step_7.pt")
	if !strings.HasPrefix(c.Why, "no change for ") {
		t.Errorf("update: %+v", c)
	}
	ckptWantLatest(t, w, "step_7.pt")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 0 || len(rec.watches) != 0 {
		t.Errorf("polling watcher used fsnotify: %v %v", rec.events, rec.watches)
	}
}

// Sends never block: an unread channel holds the newest completion, Latest
// keeps up, and Close closes the channel.
func TestWatchUpdatesCoalesceAndCloseClosesThem(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := &ckptClock{t: time.Now()}
	rec := newCkptRecorder()
	w, err := watchCheckpoints(dir, ckptFrozenSpec("ckpt/step_*.pt"), nil, rec.opts(ckptWatchOpts{now: clock.now}))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		ckptRenameInto(t, dir, fmt.Sprintf("ckpt/step_%d.pt", i), "w")
	}
	rec.barrier(t, filepath.Join(dir, "ckpt"))
	ckptWantLatest(t, w, "step_3.pt")
	select {
	case c := <-w.Updates():
		if filepath.Base(c.Path) != "step_3.pt" {
			t.Errorf("pending update %s, want the newest, step_3.pt", c.Path)
		}
	default:
		t.Fatal("no pending update")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.Updates(); ok {
		t.Error("Updates still open after Close")
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ckptWantLatest(t, w, "step_3.pt") // still answers after Close
}

// Scanning and watching only read: every file's bytes and modification
// time, and every directory's listing and modification time, are unchanged.
func TestScanAndWatchDoNotModifyCheckpoints(t *testing.T) {
	dir := t.TempDir()
	past := time.Now().Add(-time.Hour)
	ckptWriteFile(t, dir, "ck/step_1.pt", "one", past)
	ckptWriteFile(t, dir, "ck/step_2.pt", "two", time.Time{})
	ckptWriteFile(t, dir, "out/checkpoint-5/model.bin", "m", past)
	ckptWriteFile(t, dir, "out/checkpoint-5/trainer_state.json", `{"global_step": 5}`, past)
	ckptWriteFile(t, dir, "out/checkpoint-6/model.bin", "m", time.Time{})
	if err := os.Symlink("step_1.pt", filepath.Join(dir, "ck", "last.pt")); err != nil {
		t.Fatal(err)
	}
	before := ckptSnapshot(t, dir)

	for _, spec := range []Spec{
		{Globs: []string{"ck/*.pt"}},
		{Globs: []string{"out/checkpoint-*"}, Marker: "trainer_state.json", Choose: "highest_step"},
		{Globs: []string{"out/checkpoint-*"}},
	} {
		if _, err := Scan(dir, spec, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Latest(dir, spec, time.Now()); err != nil {
			t.Fatal(err)
		}
		spec.Poll, spec.Quiet = 10*time.Millisecond, 10*time.Millisecond
		rec := newCkptRecorder()
		w, err := watchCheckpoints(dir, spec, nil, rec.opts(ckptWatchOpts{}))
		if err != nil {
			t.Fatal(err)
		}
		rec.waitTick(t, rec.mark())
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after := ckptSnapshot(t, dir)
	for p, b := range before {
		if after[p] != b {
			t.Errorf("%s changed:\n before %s\n after  %s", p, b, after[p])
		}
	}
	if len(after) != len(before) {
		t.Errorf("entries: %d before, %d after", len(before), len(after))
	}
}

// ckptSnapshot describes every entry under dir: kind, modification time, and
// the bytes of files (the target of links).
func ckptSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d", fi.Mode(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The watcher follows the example job (examples/train.py) as it runs: every
// checkpoint it reports is complete JSON, each seen renamed into place.
func TestWatchExampleJob(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found: install python3 to run the example job")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "examples", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(filepath.Dir(script), "config.yaml")
	dir := t.TempDir()
	spec := Spec{Globs: []string{".gpuguard/example/step_*.ckpt"}, Choose: "highest_step", Quiet: 10 * time.Second, Poll: time.Hour}
	rec := newCkptRecorder()
	w, err := watchCheckpoints(dir, spec, nil, rec.opts(ckptWatchOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	var got []Checkpoint
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for c := range w.Updates() {
			b, err := os.ReadFile(c.Path) // as soon as it is reported
			var body struct{ Step int64 }
			if err != nil || json.Unmarshal(b, &body) != nil || c.Step == nil || body.Step != *c.Step {
				t.Errorf("reported %+v, but its contents are %q (%v)", c, b, err)
			}
			got = append(got, c)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", script, "--config", config, "--steps", "60", "--batch-size", "16", "--grad-accum", "2")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "VAL_CROP_SIZE=256", "EXAMPLE_STEP_MS=1", "EXAMPLE_GPU_GIB=16", "EXAMPLE_HOST_GIB=8")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("example job: %v\n%s", err, out)
	}
	rec.barrier(t, filepath.Join(dir, ".gpuguard", "example"))
	c := ckptWantLatest(t, w, "step_60.ckpt")
	if c.Why != "renamed into place" || ckptStepOf(c) != 60 {
		t.Errorf("latest: %+v", c)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	<-collected
	if len(got) == 0 {
		t.Fatal("no updates while the job wrote 3 checkpoints")
	}
	for _, u := range got {
		if u.Why != "renamed into place" {
			t.Errorf("update %s: %s", u.Path, u.Why)
		}
	}
}

// Sync is a barrier: once it returns, a checkpoint renamed into place before
// the call is in Latest, with no update read and no wait for a clock. Many
// renames in a row check that it does not return early.
func TestWatchSyncSeesEveryRenameBeforeIt(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := ckptStartWatch(t, dir, Spec{Globs: []string{"ckpt/step_*.pt"}, Choose: "highest_step", Quiet: time.Hour, Poll: time.Hour},
		zap.NewNop(), ckptWatchOpts{})
	if w.syncDir == "" {
		t.Skip("fsnotify is not available here")
	}
	for i := 1; i <= 50; i++ {
		ckptRenameInto(t, dir, fmt.Sprintf("ckpt/step_%d.pt", i), "weights")
		if !w.Sync(ckptWaitLimit) {
			t.Fatalf("Sync after rename %d did not return within %s", i, ckptWaitLimit)
		}
		c, ok := w.Latest()
		if !ok || ckptStepOf(c) != int64(i) || c.Why != "renamed into place" {
			t.Fatalf("after rename %d and Sync, Latest is %+v (%v)", i, c, ok)
		}
	}
	if entries, _ := os.ReadDir(w.syncDir); len(entries) != 0 {
		t.Errorf("Sync left %d files behind", len(entries))
	}
	syncDir := w.syncDir
	w.Close()
	if _, err := os.Stat(syncDir); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", syncDir, err)
	}
	if w.Sync(time.Second) {
		t.Error("Sync on a closed watcher reported success")
	}
}

// MarkPlaced tells a checkpoint placed whole (renamed into place) from one
// written in place, by what the watcher saw happen to the path itself.
func TestWatchMarkPlaced(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := ckptStartWatch(t, dir, Spec{Globs: []string{"ckpt/step_*.pt"}, Quiet: time.Hour, Poll: time.Hour}, zap.NewNop(), ckptWatchOpts{})
	if w.syncDir == "" {
		t.Skip("fsnotify is not available here")
	}
	ckptRenameInto(t, dir, "ckpt/step_1.pt", "weights")
	f, err := os.Create(filepath.Join(dir, "ckpt", "step_2.pt")) // torch.save in place
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("half of the weig")
	f.Close()
	if !w.Sync(ckptWaitLimit) {
		t.Fatal("Sync timed out")
	}
	all, err := Scan(dir, Spec{Globs: []string{"ckpt/step_*.pt"}, Quiet: time.Hour}, time.Now())
	if err != nil || len(all) != 2 {
		t.Fatalf("Scan: %v %+v", err, all)
	}
	for i := range all {
		all[i].MovedAfterWrite = false // what the file's times say is another test's
	}
	w.MarkPlaced(all)
	for _, c := range all {
		if want := filepath.Base(c.Path) == "step_1.pt"; c.MovedAfterWrite != want {
			t.Errorf("%s: placed %v, want %v", filepath.Base(c.Path), c.MovedAfterWrite, want)
		}
	}
}
