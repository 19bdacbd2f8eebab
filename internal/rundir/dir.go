// Package rundir writes the directory that keeps one run's record:
// output.log (the job's bytes, Log), events.jsonl (Write), gpuguard.log
// (Logger) and files replaced whole (WriteFileAtomic; state.json holds a
// record.RunState). What the files hold, and how to read them back, is
// package record.
//
// A run owns its directory: Create and Open take an exclusive lock on its
// gpuguard.lock, held until Close or the process's end (kill -9 included),
// so that a second run, or a --resume-run of a live one, is refused
// (ErrInUse) rather than mixed into it. The run's files are opened without
// following symbolic links, and a link planted in their place is refused.
package rundir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gpuguard/gpuguard/internal/fsutil"
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
	lock   *os.File // gpuguard.lock, flock'ed for the run's life
	// unlocked says why the directory could not be locked ("" when it is).
	unlocked string
	logger   *zap.Logger

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
//
// A directory that could not be locked (a file system without flock, such
// as Lustre mounted noflock) is said there too, at once.
func (r *Dir) OnWriteError(warn func(msg string)) {
	r.warnMu.Lock()
	defer r.warnMu.Unlock()
	r.warn = warn
	if r.unlocked != "" && warn != nil {
		warn(r.unlocked)
	}
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
// if missing; an existing one is appended to: CheckNew says first whether a
// new run may take it), otherwise
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
		return openFiles(p, false, false)
	}
	runs, err := runsDir(workDir)
	if err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		p := filepath.Join(runs, newName())
		err := os.Mkdir(p, 0o755)
		if err == nil {
			return openFiles(p, true, false)
		}
		if !errors.Is(err, fs.ErrExist) || i >= 10 {
			return nil, runDirError(p, err)
		}
	}
}

// Open opens the directory of an earlier run (--resume-run) to append to
// it. It must exist, and its run must have ended: a live one is ErrInUse.
func Open(path string) (*Dir, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &dirError{err: err,
			msg: fmt.Sprintf("cannot open run directory %q: %v; give the directory an earlier run printed at its start", path, unwrapPath(err))}
	}
	if !st.IsDir() {
		return nil, &dirError{msg: fmt.Sprintf("cannot open run directory %q: not a directory", path)}
	}
	return openFiles(path, false, true)
}

// Live reports whether a gpuguard holds dir's lock now (a run is going on
// in it): the lock lock takes exclusively for a run's life, asked for
// shared without waiting and let go at once.
func Live(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, record.Lock), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

// flock is syscall.Flock; tests replace it to be a file system without
// locks.
var flock = syscall.Flock

// noLockError: the directory is usable but could not be locked.
type noLockError struct {
	msg string
	err error
}

func (e *noLockError) Error() string { return e.msg }
func (e *noLockError) Unwrap() error { return e.err }

// ErrInUse is the error (errors.Is) of Create and Open for a run directory
// whose lock another live gpuguard holds.
var ErrInUse = errors.New("run directory in use")

// lock takes the run directory's lock, without waiting: the holder's pid
// and start time are then written in the file, for the message another run
// gets.
func lock(p string, resume bool) (*os.File, error) {
	path := filepath.Join(p, record.Lock)
	// O_RDWR, never O_APPEND: the holder rewrites the file.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			err = &fs.PathError{Op: "open", Path: path, Err: fsutil.ErrSymlink}
		}
		return nil, writeError(p, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, &dirError{msg: fmt.Sprintf("cannot use run directory %q: %s is not a regular file; remove it, or pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to another directory", p, path)}
	}
	for {
		err = flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EWOULDBLOCK {
		holder := "another gpuguard"
		if b, rerr := io.ReadAll(io.LimitReader(f, 512)); rerr == nil && len(b) > 0 {
			holder += " (" + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if resume {
			return nil, &dirError{err: ErrInUse, msg: fmt.Sprintf("cannot resume run directory %q: its run is still going, in %s; stop that run first, or wait for its end", p, holder)}
		}
		return nil, &dirError{err: ErrInUse, msg: fmt.Sprintf("cannot use run directory %q: %s is running in it; wait for that run's end, or pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to another directory", p, holder)}
	}
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOLCK) {
		// A file system without locks: the run goes on, unguarded, and says so.
		return f, &noLockError{err: err, msg: fmt.Sprintf("warning: run directory %s is not locked (%v: its file system has no flock): nothing stops a second run from using it at the same time", p, err)}
	}
	if err != nil {
		f.Close()
		return nil, &dirError{err: err, msg: fmt.Sprintf("cannot lock run directory %q (%s): %v; pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to another directory", p, path, err)}
	}
	// Best effort: the lock, not this text, keeps the directory.
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d, started %s\n", os.Getpid(), time.Now().Format(time.RFC3339))
	}
	return f, nil
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

func writeError(p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && (errors.Is(err, fsutil.ErrSymlink) || isNotRegular(err)) {
		return &dirError{err: err,
			msg: fmt.Sprintf("cannot use run directory %q: %s %v; remove it, or pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to another directory", p, pe.Path, pe.Err)}
	}
	return &dirError{err: err,
		msg: fmt.Sprintf("cannot write in run directory %q: %v; pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to a writable directory", p, unwrapPath(err))}
}

func isNotRegular(err error) bool {
	var nr *fsutil.NotRegularError
	return errors.As(err, &nr)
}

// openFiles locks the directory p and opens its files: new ones (fresh: p
// was just made, so each file must not exist yet) or appended to. resume
// says the lock is taken for --resume-run (its message).
func openFiles(p string, fresh, resume bool) (*Dir, error) {
	lk, err := lock(p, resume)
	var nl *noLockError
	if err != nil && !errors.As(err, &nl) {
		return nil, err
	}
	r := &Dir{path: p, lock: lk}
	if nl != nil {
		r.unlocked = nl.msg
	}
	var opened []*os.File
	open := func(name string) (*os.File, error) {
		f, err := fsutil.OpenAppend(filepath.Join(p, name), 0o644, fresh)
		if err != nil {
			for _, f := range opened {
				f.Close()
			}
			lk.Close()
			return nil, writeError(p, err)
		}
		opened = append(opened, f)
		return f, nil
	}
	var out *os.File
	if out, err = open(record.OutputLog); err != nil {
		return nil, err
	}
	if r.events, err = open(record.Events); err != nil {
		return nil, err
	}
	if r.glog, err = open(record.GpuguardLog); err != nil {
		return nil, err
	}
	r.out = newBufferedFile(out)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(r.glog)), zapcore.InfoLevel)
	// No sampling: every entry of a run's log matters.
	r.logger = zap.New(core, zap.Fields(zap.Int("gpuguard_pid", os.Getpid())), zap.ErrorOutput(zapErrors{r}))
	if r.unlocked != "" {
		r.logger.Warn("run directory not locked", zap.String("why", r.unlocked))
	}
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

// WriteFileAtomic replaces the file name in the run directory with data
// (fsutil.WriteFileAtomic): a reader (or a crash) sees the old content or
// the new, never a mix. The file's mode is 0644 less the umask, like the
// run's other files. name must be a plain file name.
func (r *Dir) WriteFileAtomic(name string, data []byte) error {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return fmt.Errorf("run directory: %q is not a plain file name", name)
	}
	return fsutil.WriteFileAtomic(filepath.Join(r.path, name), data, 0o644)
}

// Close flushes and closes the run's files. It returns the first error of
// output.log (writing or closing), which means the log is incomplete.
func (r *Dir) Close() error {
	err := r.out.Close()
	_ = r.logger.Sync()
	r.events.Close()
	r.glog.Close()
	r.lock.Close() // last: the directory is another run's only once its files are closed
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
