package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

const (
	// ckptMaxWatches bounds the directories one watcher asks inotify for
	// (each costs one of fs.inotify.max_user_watches); beyond it the
	// polling scan covers the rest.
	ckptMaxWatches = 1024
	// ckptMaxInnerDepth bounds how deep the watcher follows subdirectories
	// inside a directory checkpoint.
	ckptMaxInnerDepth = 4
)

// Watcher follows a job's checkpoints while it runs: fsnotify on
// the checkpoint directories, with a polling scan as a fallback. It only
// reads the file system. Create it with Watch; its methods are
// safe for concurrent use.
//
// What it watches: for each glob, the directory before its first wildcard
// (or, while that does not exist, its nearest existing parent, so that the
// directory is picked up the moment the job creates it), the directories
// between it and the checkpoints, and the inside of directory checkpoints.
// fsnotify does not recurse: each new directory is added when its Create
// event arrives and then read, because files written before the Add are
// never reported. A directory deleted mid-run is picked up again when it is
// recreated. An inotify queue overflow, or any other fsnotify error, leads
// to a full rescan; when fsnotify cannot be used at all (no inotify
// instances or watches left) the watcher polls.
//
// When a checkpoint is complete: a directory, when a Marker is set, exactly
// when the marker exists (and, for a .json marker, holds complete JSON);
// otherwise when it was seen renamed into place in a watched directory (at
// once), or when neither an event nor a stat has shown a change for
// spec.Quiet and two looks found the same size and modification time. A
// complete checkpoint that is written to again is incomplete again until it
// qualifies once more.
type Watcher struct {
	cs      *ckptSpec
	log     *zap.Logger
	fsw     *fsnotify.Watcher // nil: polling only
	updates chan Checkpoint
	done    chan struct{}
	exited  chan struct{}
	now     func() time.Time

	closeOnce sync.Once
	closeErr  error

	mu        sync.Mutex
	latest    Checkpoint
	hasLatest bool

	// syncDir is a private directory fsnotify also watches, for Sync's
	// barrier files; "" when polling only. syncWait (under mu) maps a
	// barrier file to the channel closed when the loop reaches its event.
	syncDir  string
	syncN    int
	syncWait map[string]chan struct{}

	// asks are functions the loop runs between events, with its state.
	asks chan func()

	// Owned by the loop (and by Watch before the loop starts).
	entries   map[string]*ckptEntry // by checkpoint path
	watched   map[string]bool       // directories handed to fsnotify
	warnedCap bool
	live      bool         // the initial scan is over: completions are news
	outbox    []Checkpoint // completions to send once Latest includes them

	// Test hooks, called from the loop: after each event is handled, after
	// each directory is (re-)added to fsnotify, after each quiet check.
	testEvent func(fsnotify.Event)
	testWatch func(dir string)
	testTick  func()
}

// ckptEntry is the watcher's knowledge of one checkpoint path.
type ckptEntry struct {
	found     ckptFound
	cp        Checkpoint // the last evaluation
	rule      ckptRule
	renamed   bool
	lastEvent time.Time
	// created: the watcher saw the path appear (a create or a rename into
	// place); wrote: when it last saw the path itself written (zero: not
	// since it appeared). A path that appeared and was never written was
	// placed whole, as atomic writers place a file.
	created  bool
	wrote    time.Time
	hasPrev  bool
	prevSize int64
	prevMod  time.Time
	gone     bool // no longer matched (deleted or renamed away)
	reported bool // its completion was sent (or predates the watch)
}

// ckptWatchOpts are test-only knobs.
type ckptWatchOpts struct {
	noFsnotify bool             // poll only, as on a network file system
	now        func() time.Time // the clock of the quiet rule
	testEvent  func(fsnotify.Event)
	testWatch  func(string)
	testTick   func()
}

// Watch starts watching spec's checkpoints under dir (the job's
// working directory: relative globs are relative to it). Checkpoints that
// already exist are scanned before it returns and count towards Latest but
// are not sent on Updates. log may be nil.
//
// Errors: those of Scan for a bad spec. fsnotify being
// unavailable is not an error: it is logged and the watcher polls every
// spec.Poll.
func Watch(dir string, spec Spec, log *zap.Logger) (*Watcher, error) {
	return watchCheckpoints(dir, spec, log, ckptWatchOpts{})
}

func watchCheckpoints(dir string, spec Spec, log *zap.Logger, o ckptWatchOpts) (*Watcher, error) {
	cs, err := compileCkptSpec(dir, spec)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	w := &Watcher{
		cs:        cs,
		log:       log,
		updates:   make(chan Checkpoint, 1),
		asks:      make(chan func()),
		done:      make(chan struct{}),
		exited:    make(chan struct{}),
		now:       o.now,
		entries:   map[string]*ckptEntry{},
		watched:   map[string]bool{},
		testEvent: o.testEvent,
		testWatch: o.testWatch,
		testTick:  o.testTick,
	}
	if w.now == nil {
		w.now = time.Now
	}
	if !o.noFsnotify {
		fsw, err := fsnotify.NewWatcher()
		if err != nil {
			log.Warn("checkpoint watcher: fsnotify unavailable, polling only",
				zap.Error(err), zap.Duration("poll", cs.poll))
		} else {
			w.fsw = fsw
			if d, err := os.MkdirTemp("", "gpuguard-ckpt-sync-"); err == nil {
				if fsw.Add(d) == nil {
					w.syncDir, w.syncWait = d, map[string]chan struct{}{}
				} else {
					os.Remove(d)
				}
			}
		}
	}
	w.syncWatches()
	w.rescan(w.now()) // what is there before the watch counts, but is not news
	w.publish()
	w.live = true
	go w.loop()
	return w, nil
}

// Latest returns the best complete checkpoint so far by spec.Choose: one
// seen renamed into place counts at once, others when their rule says so.
// While no present checkpoint is complete, it keeps the last good one even
// if it was deleted since (check that Path still exists before using it);
// false when there never was one. A checkpoint being rewritten in place is
// not returned while it is written.
func (w *Watcher) Latest() (Checkpoint, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest, w.hasLatest
}

// Updates delivers each checkpoint that becomes complete after
// Watch returned, in order. Sends never block the watcher: a
// reader that falls behind gets the newest one (earlier ones are dropped).
// The channel is closed by Close.
func (w *Watcher) Updates() <-chan Checkpoint { return w.updates }

// Sync returns once the watcher has handled every change the file system
// reported before the call, so that Latest then knows of a checkpoint the
// job renamed into place just before it exited. It is a barrier through
// fsnotify's queue, which is first in, first out: Sync writes a file in a
// private directory the watcher also watches, and waits for the loop to
// reach its event. It reports false at timeout, or when the watcher is
// closed; true at once when there is no fsnotify (polling only: nothing is
// queued).
func (w *Watcher) Sync(timeout time.Duration) bool {
	if w.syncDir == "" {
		return true
	}
	w.mu.Lock()
	w.syncN++
	name := filepath.Join(w.syncDir, strconv.Itoa(w.syncN))
	reached := make(chan struct{})
	w.syncWait[name] = reached
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.syncWait, name)
		w.mu.Unlock()
		os.Remove(name)
	}()
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		return false
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-reached:
		return true
	case <-t.C:
	case <-w.exited:
	}
	return false
}

// MarkPlaced sets MovedAfterWrite on each of cs that the watcher saw appear
// (created or renamed into place) and never written after: placed whole,
// as atomic writers place a file, even where fsnotify did not pair the
// rename's two halves and the file's times do not show it. Call Sync first
// for what happened just before. A watcher without fsnotify knows nothing
// and changes nothing.
func (w *Watcher) MarkPlaced(cs []Checkpoint) {
	if w.fsw == nil {
		return
	}
	done := make(chan struct{})
	ask := func() {
		defer close(done)
		for i := range cs {
			if e := w.entries[cs[i].Path]; e != nil && !e.gone && e.created && e.wrote.IsZero() {
				cs[i].MovedAfterWrite = true
			}
		}
	}
	select {
	case w.asks <- ask:
		<-done
	case <-w.exited:
	}
}

// synced marks the barrier file name reached (see Sync).
func (w *Watcher) synced(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.syncWait[name]; ok {
		close(ch)
		delete(w.syncWait, name)
	}
}

// Close stops the watcher and closes Updates. It is idempotent and returns
// the error of closing fsnotify, if any.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		<-w.exited
		if w.fsw != nil {
			w.closeErr = w.fsw.Close()
		}
		if w.syncDir != "" {
			os.RemoveAll(w.syncDir)
		}
	})
	return w.closeErr
}

func (w *Watcher) loop() {
	defer close(w.exited)
	defer close(w.updates)
	poll := time.NewTicker(w.cs.poll)
	defer poll.Stop()
	tick := time.NewTicker(min(max(w.cs.quiet/4, 5*time.Millisecond), time.Second))
	defer tick.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fsw != nil {
		events, errs = w.fsw.Events, w.fsw.Errors
	}
	for {
		select {
		case <-w.done:
			return
		case f := <-w.asks:
			f()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			w.onEvent(ev)
			if w.testEvent != nil {
				w.testEvent(ev)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.log.Warn("checkpoint watcher: inotify queue overflowed, rescanning (raise fs.inotify.max_queued_events)")
			} else {
				w.log.Warn("checkpoint watcher: fsnotify error, rescanning", zap.Error(err))
			}
			w.syncWatches()
			w.rescan(w.now())
			w.publish()
		case <-poll.C:
			w.syncWatches()
			w.rescan(w.now())
			w.publish()
		case <-tick.C:
			if w.checkPending(w.now()) {
				w.publish()
			}
			if w.testTick != nil {
				w.testTick()
			}
		}
	}
}

// onEvent handles one fsnotify event.
func (w *Watcher) onEvent(ev fsnotify.Event) {
	now := w.now()
	name := filepath.Clean(ev.Name)
	if w.syncDir != "" && filepath.Dir(name) == w.syncDir {
		w.synced(name)
		return
	}
	// fsnotify pairs a rename's IN_MOVED_FROM and IN_MOVED_TO by cookie but
	// keeps the old name unexported; Event.String shows it as
	// `CREATE "new" ← "old"`. A Create without it (a plain create, or a
	// rename from a directory nobody watches) is left to the other rules,
	// so a change in that format can only make the watcher slower, never
	// make it take a file still being written.
	renamedInto := ev.Has(fsnotify.Create) && strings.Contains(ev.String(), `" ← "`)
	if ev.Op == fsnotify.Chmod { // a delete shows as Chmod until the last fd closes
		return
	}
	w.log.Debug("checkpoint watcher: event", zap.String("op", ev.Op.String()), zap.String("path", name))

	changed := false
	if ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(name); err == nil && fi.IsDir() {
			// A new directory: watch it (and what it leads to), then read
			// it, since what was written before the Add is never reported.
			w.syncWatches()
			w.rescan(now)
			changed = true
		}
	}
	if (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && w.watched[name] {
		// A watched directory went away: inotify dropped its watch. Watch
		// its parent until it returns, and forget what was inside.
		w.forgetWatches(name)
		w.syncWatches()
		w.rescan(now)
		changed = true
	}

	e := w.entries[name] // the checkpoint itself, or a link's target
	if e != nil && e.gone {
		e = nil
	}
	matched := w.cs.matches(name)
	switch {
	case ev.Has(fsnotify.Create) && (matched || e != nil):
		f := ckptFound{path: name}
		if matched {
			var ok bool
			if f, ok = ckptResolve(name); !ok {
				break
			}
		} else {
			f = e.found
		}
		e = w.entry(f)
		if f.path == name { // a link (re)created says nothing about its target
			e.renamed = renamedInto
			e.lastEvent = now
			e.created, e.wrote = true, time.Time{}
		}
		w.update(e, now)
		changed = true
	case (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && (matched || e != nil):
		w.rescan(now)
		changed = true
	case ev.Has(fsnotify.Write) && e != nil:
		e.lastEvent = now
		e.wrote = now
		if e.cp.Complete || e.renamed { // written again: no longer complete
			e.renamed = false
			w.update(e, now)
			changed = true
		}
	case e == nil && !matched:
		in := w.containing(name)
		if in == nil {
			break
		}
		in.lastEvent = now
		in.renamed = false // changed inside after its rename
		rel, _ := filepath.Rel(in.found.path, name)
		if (w.cs.marker != "" && rel == w.cs.marker) || in.cp.Complete {
			w.update(in, now)
			changed = true
		}
	}
	if changed {
		w.publish()
	}
}

// entry returns the entry for f, creating or reviving it.
func (w *Watcher) entry(f ckptFound) *ckptEntry {
	e := w.entries[f.path]
	if e == nil || e.gone {
		e = &ckptEntry{}
		w.entries[f.path] = e
	}
	e.found = f
	return e
}

// containing is the directory checkpoint that name is inside, if any.
func (w *Watcher) containing(name string) *ckptEntry {
	for p, e := range w.entries {
		if !e.gone && strings.HasPrefix(name, p+string(filepath.Separator)) {
			return e
		}
	}
	return nil
}

// update re-evaluates one entry and sends its completion once.
func (w *Watcher) update(e *ckptEntry, now time.Time) {
	if _, err := os.Lstat(e.found.path); errors.Is(err, fs.ErrNotExist) {
		w.markGone(e)
		return
	}
	c, rule := w.cs.evaluate(e.found, now, ckptObs{renamed: e.renamed, lastEvent: e.lastEvent})
	if e.hasPrev && (c.Size != e.prevSize || !c.ModTime.Equal(e.prevMod)) {
		e.lastEvent = now
		if rule == ckptRuleQuiet {
			c.Complete, rule = false, ckptRuleNone
			c.Why = "size or modification time changed since the last look; complete after " + w.cs.quiet.String() + " without changes"
		}
	}
	e.hasPrev, e.prevSize, e.prevMod = true, c.Size, c.ModTime
	e.cp, e.rule = c, rule
	switch {
	case c.Complete && !e.reported:
		e.reported = true
		if w.live {
			w.log.Info("checkpoint complete", zap.String("path", c.Path), zap.String("why", c.Why))
			w.outbox = append(w.outbox, c)
		} else {
			w.log.Debug("checkpoint watcher: complete at start", zap.String("path", c.Path), zap.String("why", c.Why))
		}
	case !c.Complete:
		e.reported = false
	}
}

func (w *Watcher) markGone(e *ckptEntry) {
	if !e.gone {
		e.gone = true
		e.reported = false
		w.log.Debug("checkpoint watcher: checkpoint gone", zap.String("path", e.found.path))
	}
}

// send delivers c without blocking: when the reader has not taken the
// previous one, it is replaced by c.
func (w *Watcher) send(c Checkpoint) {
	select {
	case w.updates <- c:
		return
	default:
	}
	select {
	case <-w.updates:
	default:
	}
	select {
	case w.updates <- c:
	default:
	}
}

// rescan matches the globs again: new paths become entries, vanished ones
// gone, and every present one is re-evaluated. The caller publishes.
func (w *Watcher) rescan(now time.Time) {
	seen := map[string]bool{}
	for _, f := range w.cs.find() {
		seen[f.path] = true
		w.update(w.entry(f), now)
	}
	for p, e := range w.entries {
		if !seen[p] {
			w.markGone(e)
		}
	}
}

// checkPending re-evaluates the checkpoints not yet complete (the quiet
// rule needs time to pass, and a marker may appear where no watch is).
func (w *Watcher) checkPending(now time.Time) bool {
	any := false
	for _, e := range w.entries {
		if !e.gone && !e.cp.Complete {
			w.update(e, now)
			any = any || e.cp.Complete
		}
	}
	return any
}

// publish recomputes Latest (the best complete present checkpoint, else the
// best complete one that has gone since), then sends the completions found
// since the last publish, so that a reader of Updates finds Latest current.
func (w *Watcher) publish() {
	var best *Checkpoint
	bestGone := true
	for _, e := range w.entries {
		if !e.cp.Complete {
			continue
		}
		c := e.cp
		switch {
		case best == nil, bestGone && !e.gone:
		case bestGone == e.gone && w.cs.less(c, *best):
		default:
			continue
		}
		best, bestGone = &c, e.gone
	}
	w.mu.Lock()
	if best != nil {
		w.latest, w.hasLatest = *best, true
	} else {
		w.latest, w.hasLatest = Checkpoint{}, false
	}
	w.mu.Unlock()
	for _, c := range w.outbox {
		w.send(c)
	}
	w.outbox = w.outbox[:0]
}

// desiredWatches lists the directories fsnotify should watch now.
func (w *Watcher) desiredWatches() []string {
	var out []string
	seen := map[string]bool{}
	add := func(d string) bool {
		if seen[d] {
			return true
		}
		if len(out) >= ckptMaxWatches {
			return false
		}
		seen[d] = true
		out = append(out, d)
		return true
	}
	isDir := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.IsDir()
	}
	addTree := func(root string) { // a directory checkpoint and what is inside it
		base := strings.Count(root, string(filepath.Separator))
		_ = filepath.WalkDir(root, func(q string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(q, string(filepath.Separator))-base > ckptMaxInnerDepth || !add(q) {
				return filepath.SkipDir
			}
			return nil
		})
	}
	for _, p := range w.cs.patterns {
		if !isDir(p.root) {
			for a := filepath.Dir(p.root); ; a = filepath.Dir(a) {
				if isDir(a) {
					add(a)
					break
				}
				if a == filepath.Dir(a) {
					break
				}
			}
			continue
		}
		add(p.root)
		level := []string{p.root}
		for i := 0; i < len(p.rest) && len(level) > 0; i++ {
			last := i == len(p.rest)-1
			var next []string
			for _, d := range level {
				ms, _ := filepath.Glob(filepath.Join(ckptEscapeGlob(d), p.rest[i]))
				for _, m := range ms {
					switch {
					case !isDir(m):
					case last:
						addTree(m)
					case add(m):
						next = append(next, m)
					}
				}
			}
			level = next
		}
	}
	return out
}

// syncWatches hands fsnotify the directories it should watch. Add is
// idempotent and re-arms a directory that was deleted and recreated under
// the same name; the loop repeats while new directories keep appearing.
func (w *Watcher) syncWatches() {
	if w.fsw == nil {
		return
	}
	var want []string
	for round := 0; round < 4; round++ {
		want = w.desiredWatches()
		added := false
		for _, d := range want {
			if err := w.fsw.Add(d); err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					w.log.Warn("checkpoint watcher: cannot watch directory; the polling scan covers it",
						zap.String("dir", d), zap.Error(err))
				}
				continue
			}
			if !w.watched[d] {
				added = true
			}
			w.watched[d] = true
			if w.testWatch != nil {
				w.testWatch(d)
			}
		}
		if !added {
			break
		}
	}
	if len(want) >= ckptMaxWatches && !w.warnedCap {
		w.warnedCap = true
		w.log.Warn("checkpoint watcher: too many directories to watch; the polling scan covers the rest",
			zap.Int("watches", ckptMaxWatches), zap.Duration("poll", w.cs.poll))
	}
	keep := map[string]bool{}
	for _, d := range want {
		keep[d] = true
	}
	for d := range w.watched {
		if !keep[d] {
			_ = w.fsw.Remove(d) // already gone with its directory: nothing to undo
			delete(w.watched, d)
		}
	}
}

// forgetWatches drops dir and everything under it from the watched set
// (inotify drops the watches of deleted directories by itself).
func (w *Watcher) forgetWatches(dir string) {
	for d := range w.watched {
		if d == dir || strings.HasPrefix(d, dir+string(filepath.Separator)) {
			delete(w.watched, d)
		}
	}
}
