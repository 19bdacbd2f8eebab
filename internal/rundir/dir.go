// Package rundir writes the directory that keeps one run's record:
// output.log (the job's bytes, Log), events.jsonl (Write), gpuguard.log
// (Logger) and files replaced whole (WriteFileAtomic; state.json holds a
// RunState). What the files hold, and how to read them back, is package
// record.
package rundir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// logFlushDelay bounds how long output sits in output.log's buffer.
const logFlushDelay = 100 * time.Millisecond

// Dir is the directory that keeps one run's record. Its methods are safe
// for concurrent use.
type Dir struct {
	path   string
	out    *bufferedFile
	events *os.File
	glog   *os.File
	logger *zap.Logger

	mu       sync.Mutex // events, observers
	eventErr bool
	onWrite  []func(time.Time, record.Event)

	// warn says, once per file, what could not be written (OnWriteError).
	warnMu sync.Mutex
	warn   func(string)
	warned map[string]bool
}

// OnWriteError sets where the run directory says, once per file, that it
// could not write events.jsonl or gpuguard.log (a full or failing file
// system): the job goes on, and the user must know its record is incomplete.
// Without it those errors are dropped; they never reach the job's stream.
func (r *Dir) OnWriteError(warn func(msg string)) {
	r.warnMu.Lock()
	defer r.warnMu.Unlock()
	r.warn = warn
}

func (r *Dir) writeFailed(name string, err error) {
	r.warnMu.Lock()
	defer r.warnMu.Unlock()
	if r.warn == nil || r.warned[name] {
		return
	}
	if r.warned == nil {
		r.warned = map[string]bool{}
	}
	r.warned[name] = true
	r.warn(fmt.Sprintf("cannot write %s (%v): the run's record is incomplete; the job goes on", filepath.Join(r.path, name), unwrapPath(err)))
}

// zapErrors receives zap's own errors (a failed write of gpuguard.log),
// which zap would otherwise print on gpuguard's stderr, unprefixed, in
// the middle of the job's output.
type zapErrors struct{ r *Dir }

func (z zapErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	// "<time> write error: write <path>: <cause>": keep the cause.
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	z.r.writeFailed(record.GpuguardLog, errors.New(msg))
	return len(p), nil
}

func (zapErrors) Sync() error { return nil }

// Create creates the directory of a new run: explicit when given (created
// if missing; an existing one is appended to), otherwise
// .gpuguard/runs/<YYYYMMDD-HHMMSS>-<random> under workDir. A new .gpuguard
// directory gets a .gitignore so that runs stay out of version control.
// The error of a failure says which directory and how to choose another.
func Create(explicit, workDir string) (*Dir, error) {
	if explicit != "" {
		p := explicit
		if !filepath.IsAbs(p) && workDir != "" {
			p = filepath.Join(workDir, p)
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, runDirError(p, err)
		}
		return openFiles(p)
	}
	top := filepath.Join(workDir, ".gpuguard")
	if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(top, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, runDirError(top, err)
		}
		// Best effort: a run directory is no source file.
		_ = os.WriteFile(filepath.Join(top, ".gitignore"), []byte("# gpuguard run records\n*\n"), 0o644)
	}
	runs := filepath.Join(top, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return nil, runDirError(runs, err)
	}
	for i := 0; ; i++ {
		var b [3]byte
		_, _ = rand.Read(b[:])
		p := filepath.Join(runs, time.Now().Format("20060102-150405")+"-"+hex.EncodeToString(b[:]))
		err := os.Mkdir(p, 0o755)
		if err == nil {
			return openFiles(p)
		}
		if !errors.Is(err, fs.ErrExist) || i >= 10 {
			return nil, runDirError(p, err)
		}
	}
}

// Open opens the directory of an earlier run (--resume-run) to append to
// it. It must exist.
func Open(path string) (*Dir, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &dirError{err: err,
			msg: fmt.Sprintf("cannot open run directory %q: %v; give the directory an earlier run printed at its start", path, unwrapPath(err))}
	}
	if !st.IsDir() {
		return nil, &dirError{msg: fmt.Sprintf("cannot open run directory %q: not a directory", path)}
	}
	return openFiles(path)
}

// dirError is a run directory that cannot be created, opened or written
// in; its message says what to do.
type dirError struct {
	msg string
	err error
}

func (e *dirError) Error() string { return e.msg }
func (e *dirError) Unwrap() error { return e.err }

func runDirError(p string, err error) error {
	return &dirError{err: err,
		msg: fmt.Sprintf("cannot create run directory %q: %v; pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to a writable directory", p, unwrapPath(err))}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func openFiles(p string) (*Dir, error) {
	open := func(name string) (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(p, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, &dirError{err: err,
				msg: fmt.Sprintf("cannot write in run directory %q: %v; pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to a writable directory", p, unwrapPath(err))}
		}
		return f, nil
	}
	r := &Dir{path: p}
	var err error
	var out *os.File
	if out, err = open(record.OutputLog); err != nil {
		return nil, err
	}
	if r.events, err = open(record.Events); err != nil {
		out.Close()
		return nil, err
	}
	if r.glog, err = open(record.GpuguardLog); err != nil {
		out.Close()
		r.events.Close()
		return nil, err
	}
	r.out = newBufferedFile(out)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(r.glog)), zapcore.InfoLevel)
	// No sampling: every entry of a run's log matters.
	r.logger = zap.New(core, zap.Fields(zap.Int("gpuguard_pid", os.Getpid())), zap.ErrorOutput(zapErrors{r}))
	return r, nil
}

// Path is the run directory.
func (r *Dir) Path() string { return r.path }

// Log is output.log: the job's raw bytes. Writes are buffered for at most
// logFlushDelay; a write error is returned by the next write or by Close.
func (r *Dir) Log() io.Writer { return r.out }

// LogOffset is the byte offset in output.log at which the next output of the
// job will be written: attempt_start events carry it (log_offset), so that
// `gpuguard explain RUN_DIR` can read each attempt's output apart.
func (r *Dir) LogOffset() int64 { return r.out.Offset() }

// Logger writes gpuguard's diagnostics to gpuguard.log (never to the
// terminal).
func (r *Dir) Logger() *zap.Logger { return r.logger }

// OnWrite adds fn to the functions Write calls with each event it records
// (and the time it was stamped with), in the order of events.jsonl, whether
// or not the file could be written: notifications and metrics follow the
// run's events this way. fn runs while Write holds the journal's lock, so
// it must return quickly (hand slow work to a goroutine) and must not call
// Write.
func (r *Dir) OnWrite(fn func(t time.Time, ev record.Event)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onWrite = append(r.onWrite, fn)
}

// Write appends ev to events.jsonl, stamped with the time (record.Marshal
// gives the line), and passes it to the OnWrite functions. Write failures
// are logged once, never returned: the record must not stop the job.
func (r *Dir) Write(ev record.Event) {
	now := time.Now()
	line := record.Marshal(now, ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.events.Write(line); err != nil && !r.eventErr {
		r.eventErr = true
		r.logger.Error("writing events.jsonl failed; the run record is incomplete", zap.Error(err))
		r.writeFailed(record.Events, err)
	}
	for _, fn := range r.onWrite {
		fn(now, ev)
	}
}

// WriteFileAtomic replaces the file name in the run directory with data: a
// temporary file is written, synced and renamed over it, and the directory
// is synced, so that a reader (or a crash) sees the old content or the new,
// never a mix. name must be a plain file name.
func (r *Dir) WriteFileAtomic(name string, data []byte) error {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return fmt.Errorf("run directory: %q is not a plain file name", name)
	}
	tmp, err := os.CreateTemp(r.path, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s in %s: %w", name, r.path, err)
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s in %s: %w", name, r.path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s in %s: %w", name, r.path, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(r.path, name)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s in %s: %w", name, r.path, err)
	}
	if d, err := os.Open(r.path); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Close flushes and closes the run's files. It returns the first error of
// output.log (writing or closing), which means the log is incomplete.
func (r *Dir) Close() error {
	err := r.out.Close()
	_ = r.logger.Sync()
	r.events.Close()
	r.glog.Close()
	return err
}

// bufferedFile batches small writes of the job's output into fewer system
// calls. Data is flushed when the buffer fills, logFlushDelay after the first
// unflushed write, and on Close.
type bufferedFile struct {
	mu    sync.Mutex
	f     *os.File
	off   int64 // the file's size once every accepted write is flushed
	buf   []byte
	timer *time.Timer
	armed bool
	err   error
}

func newBufferedFile(f *os.File) *bufferedFile {
	b := &bufferedFile{f: f, buf: make([]byte, 0, 64<<10)}
	if st, err := f.Stat(); err == nil {
		b.off = st.Size() // output.log is appended to by --resume-run
	}
	b.timer = time.AfterFunc(time.Hour, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.armed = false
		b.flushLocked()
	})
	b.timer.Stop()
	return b
}

func (b *bufferedFile) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	b.off += int64(len(p))
	if len(b.buf)+len(p) > cap(b.buf) {
		b.flushLocked()
		if len(p) >= cap(b.buf) {
			if _, err := b.f.Write(p); err != nil && b.err == nil {
				b.err = err
			}
			return len(p), b.err
		}
	}
	b.buf = append(b.buf, p...)
	if !b.armed {
		b.armed = true
		b.timer.Reset(logFlushDelay)
	}
	return len(p), b.err
}

func (b *bufferedFile) flushLocked() {
	if len(b.buf) == 0 {
		return
	}
	if _, err := b.f.Write(b.buf); err != nil && b.err == nil {
		b.err = err
	}
	b.buf = b.buf[:0]
}

// Offset is the size output.log will have once what was written is flushed.
func (b *bufferedFile) Offset() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.off
}

// Flush writes out what is buffered.
func (b *bufferedFile) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	return b.err
}

func (b *bufferedFile) Close() error {
	b.timer.Stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	if err := b.f.Close(); err != nil && b.err == nil {
		b.err = err
	}
	return b.err
}
