package attempt

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// DefaultGrace is the time a job gets between the polite SIGTERM and SIGKILL
// when Spec.Grace is zero.
const DefaultGrace = 10 * time.Second

const (
	// drainTimeout bounds the wait for the rest of the child's output once
	// the child and its descendants are gone: the kernel hands over what is
	// buffered at once, so only a process outside the tree still holding the
	// pty or a pipe can make it run out.
	drainTimeout = 2 * time.Second
	// trackInterval is how often the tree is scanned while the child runs
	// (so that the watchdog knows every process, and orphaned zombies are
	// reaped).
	trackInterval = 500 * time.Millisecond
	// killGiveUp bounds how long SIGKILL is repeated at processes that do
	// not die (stuck in the kernel, state D) before gpuguard moves on and
	// leaves them to the watchdog.
	killGiveUp = 10 * time.Second
)

// Spec describes one child lifetime.
type Spec struct {
	// Argv is the command; Argv[0] is looked up in the PATH of Env (not in
	// gpuguard's own PATH) unless it contains a '/'.
	Argv []string
	// Env is the complete environment (KEY=VALUE); nil means os.Environ().
	// Start adds MarkerVar, and PYTHONUNBUFFERED=1 under pipes when
	// Env does not set it.
	Env []string
	// Dir is the working directory; "" means gpuguard's.
	Dir string
	// PTY starts the child under a pseudo-terminal; otherwise under pipes.
	PTY bool
	// OnePipe, under pipes, gives the child one pipe for its stdout and
	// stderr, as `2>&1` does, so that its bytes keep the order it wrote them
	// in; everything then goes to Stdout, as stream 1. Set it when
	// gpuguard's own stdout and stderr are one file (see SameFile): two
	// pipes read apart cannot keep the order of two streams.
	OnePipe bool
	// Stdin is the child's standard input; nil means /dev/null. Under a pty,
	// when Stdin is a terminal and gpuguard is in its foreground process
	// group, the terminal is put in raw mode for the attempt and its input
	// is copied into the pty (a typed ^C then reaches the job through the
	// pty's line discipline); otherwise Stdin is handed to the child as is.
	Stdin *os.File
	// Stdout and Stderr receive the child's output live. Under a pty
	// everything goes to Stdout. A nil writer discards.
	Stdout, Stderr io.Writer
	// Term is the terminal whose window size the pty follows (see Resize);
	// nil means $COLUMNS × $LINES from Env, else 80×24.
	Term *os.File
	// Log receives the raw child bytes of both streams, may be nil.
	Log io.Writer
	// Scan receives each line: stream 1 is stdout (or the pty, or both
	// streams under OnePipe), 2 is
	// stderr. It is called from one goroutine, never concurrently, and must
	// not retain l.Text. A nil Scan disables scanning.
	Scan func(stream int, l lines.Line)
	// Grace is the time between the polite SIGTERM and SIGKILL when the
	// job is stopped; zero means DefaultGrace.
	Grace time.Duration
	// Logger receives gpuguard's own diagnostics; nil discards them.
	Logger *zap.Logger
	// Containment says how the job's processes are held together: "auto"
	// (or ""), "cgroup2", "cgroup1" or "tree" (see cgroup.go); "" reads
	// $GPUGUARD_CONTAINMENT.
	Containment string
}

// Result is how an attempt ended.
type Result struct {
	Pid    int
	Code   int            // the child's exit code, or 128+signal
	Signal syscall.Signal // the signal that killed the child; 0 when it exited
	Start  time.Time
	End    time.Time // when the main child exited

	ScannedLines     int64 // lines delivered to Scan
	DroppedScanBytes int64 // output the scanner could not keep up with
	StoppedByUs      bool  // Stop or Kill was called
	StopReason       string
	Killed           bool // SIGKILL had to be sent to the job's processes
	Leftovers        int  // descendants still running when the main child exited (then stopped)
	Survivors        int  // processes that outlived SIGKILL; left to the watchdog
	// TerminalDropped is the job's output that Stdout or Stderr dropped
	// because their destination took nothing (a Status; counted over its
	// life): output.log has it.
	TerminalDropped int64
}

// Attempt is one running child and its process tree.
type Attempt struct {
	spec    Spec
	logger  *zap.Logger
	grace   time.Duration
	env     []string
	token   string // the attempt's marker value in the job's environment
	path    string // the program, resolved in the job's PATH
	pid     int
	ptmx    *os.File // nil under pipes
	tracker *tracker
	cg      *cgroup // nil: the job is contained by its tree alone
	wd      *watchdog
	start   time.Time

	readers   []*os.File
	pumps     []*reader
	readersWG sync.WaitGroup
	// readersDone is closed when every reader has reached the end of its
	// stream: no process holds the job's output open any more.
	readersDone chan struct{}
	queue       *scanQueue
	scanDone    chan struct{}
	scanned     int64 // lines delivered; written by the scanner before scanDone
	// termDropped: Result.TerminalDropped, written by drain.
	termDropped int64

	rawFd      int
	rawState   *term.State
	stdinStop  chan struct{}
	stdinDone  chan struct{}
	restoreRaw sync.Once
	typed      atomic.Int32 // first interrupt typed into the pty (raw mode)

	stopCh   chan time.Duration // Shutdown's grace
	killCh   chan struct{}
	exitedCh chan struct{} // closed when the main child has been reaped
	done     chan struct{}

	mu          sync.Mutex
	stopping    bool
	stoppedByUs bool
	stopReason  string
	killed      bool
	state       *os.ProcessState
	end         time.Time
	result      Result
}

// Start starts spec's command and returns once it runs. The child gets
// its own process group (under a pty, its own session with the pty as
// controlling terminal) and dies if gpuguard dies (Pdeathsig, backed by a
// watchdog process that also stops its descendants). gpuguard becomes a child
// subreaper, so that orphaned descendants are reparented to it.
//
// A command that cannot be started returns an *Error with exitcode.NotFound
// (127: not in PATH, or no such file) or exitcode.NotRunnable (126: a directory,
// not executable, bad interpreter); its message names the PATH searched and
// what to do. Other failures (pty or pipe creation) return an *Error with
// exitcode.Software.
func Start(spec Spec) (*Attempt, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, &exitcode.Error{Code: exitcode.Usage, Msg: "no command given; usage: gpuguard run [flags] -- COMMAND [ARGS...]"}
	}
	a := newAttempt(spec)
	path, err := a.resolve()
	if err != nil {
		return nil, err
	}
	pdeathsig, err := a.contain()
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: spec.Argv, Env: a.env, Dir: spec.Dir}
	childSide, err := a.wire(cmd, pdeathsig)
	if err != nil {
		a.uncontain()
		return nil, err
	}
	a.cg.prepare(cmd.SysProcAttr)
	if spec.PTY && a.wantRaw() {
		a.enterRaw()
	}
	if err := a.launch(cmd, childSide); err != nil {
		return nil, err
	}
	a.startPumps()
	go a.supervise()
	return a, nil
}

// newAttempt is the attempt of spec before anything is started, with the
// defaults filled in.
func newAttempt(spec Spec) *Attempt {
	a := &Attempt{
		spec:     spec,
		logger:   spec.Logger,
		grace:    spec.Grace,
		rawFd:    -1,
		stopCh:   make(chan time.Duration, 1),
		killCh:   make(chan struct{}, 1),
		exitedCh: make(chan struct{}),
		done:     make(chan struct{}),
	}
	if a.logger == nil {
		a.logger = zap.NewNop()
	}
	if a.grace <= 0 {
		a.grace = DefaultGrace
	}
	return a
}

// resolve sets the job's environment (the attempt's marker; unbuffered
// Python on a pipe) and returns the program's path, or the error that says
// why it cannot be run.
func (a *Attempt) resolve() (string, error) {
	env := a.spec.Env
	if env == nil {
		env = os.Environ()
	}
	a.token = newToken()
	env = envlist.Unset(env, MarkerVar, watchdogEnv, helperVar)
	env = append(env, MarkerVar+"="+a.token)
	if _, ok := envlist.Lookup(env, "PYTHONUNBUFFERED"); !ok && !a.spec.PTY {
		// Python block-buffers stdout on a pipe: without this, a training
		// script's progress would arrive in 8 KiB lumps, late.
		env = append(env, "PYTHONUNBUFFERED=1")
	}
	a.env = env

	pathEnv, _ := envlist.Lookup(env, "PATH")
	path, err := LookPathIn(a.spec.Argv[0], pathEnv, a.spec.Dir)
	if err != nil {
		return "", err
	}
	if dir := a.spec.Dir; dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return "", &exitcode.Error{Code: exitcode.NotRunnable, Err: err,
				Msg: fmt.Sprintf("cannot run %q in directory %q: it does not exist or is not a directory", a.spec.Argv[0], dir)}
		}
	}
	a.path = path
	return path, nil
}

// contain sets up what holds the job's processes: gpuguard as their child
// subreaper, the attempt's cgroup where the containment mode gives one, the
// tracker that finds them, and the watchdog that stops them if gpuguard
// dies. It returns the signal the child gets when its parent thread dies.
func (a *Attempt) contain() (syscall.Signal, error) {
	if err := BecomeSubreaper(); err != nil {
		a.logger.Warn("could not become a child subreaper; orphaned workers will be found by their environment only", zap.Error(err))
	}
	mode, err := containmentMode(a.spec.Containment)
	if err != nil {
		return 0, &exitcode.Error{Code: exitcode.Usage, Err: err, Msg: err.Error()}
	}
	cg, why := newCgroup(mode, "gpuguard-"+a.token)
	if cg == nil && mode != ContainTree {
		a.logger.Info("no cgroup for the attempt: its processes are those of its tree", zap.Error(why))
	}
	a.cg = cg
	a.tracker = newTracker(a.token, cg)
	a.tracker.adopt = true
	wd, err := startWatchdog(a.token, a.grace, cg, a.logger)
	if err != nil {
		a.logger.Warn("no watchdog: if gpuguard is killed, only the direct child is killed with it", zap.Error(err))
	}
	a.wd = wd
	if wd != nil {
		// The watchdog gives the tree its grace period before SIGKILL, so the
		// direct child (torchrun, say) may stop its workers itself.
		return syscall.SIGTERM, nil
	}
	return syscall.SIGKILL, nil
}

// uncontain undoes contain for a job that never started.
func (a *Attempt) uncontain() {
	a.wd.release()
	a.cg.remove(0)
}

// wire gives cmd its terminal or its pipes, and its process attributes: a
// new session with the pty as controlling terminal, or a process group of
// its own. It returns the child's ends, which the parent closes once the
// child runs; the parent's ends are a.readers.
func (a *Attempt) wire(cmd *exec.Cmd, pdeathsig syscall.Signal) ([]*os.File, error) {
	spec := a.spec
	if spec.PTY {
		ptmx, tty, err := openPTY()
		if err != nil {
			return nil, &exitcode.Error{Code: exitcode.Software, Err: err, Msg: fmt.Sprintf("cannot open a pseudo-terminal for the job: %v; run with --pty never", err)}
		}
		a.ptmx = ptmx
		a.setSize()
		cmd.Stdout, cmd.Stderr = tty, tty
		cmd.Stdin = spec.Stdin
		if a.wantRaw() {
			cmd.Stdin = tty
		}
		// A new session with the pty as controlling terminal (fd 1 in the
		// child; fd 0 may be our own stdin, which is no pty).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 1, Pdeathsig: pdeathsig}
		a.readers = []*os.File{ptmx}
		return []*os.File{tty}, nil
	}
	pipeErr := func(err error) error {
		return &exitcode.Error{Code: exitcode.Software, Err: err, Msg: fmt.Sprintf("cannot create a pipe for the job's output: %v", err)}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, pipeErr(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, outW, outW // a nil Stdin: exec opens /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: pdeathsig}
	childSide := []*os.File{outW}
	a.readers = []*os.File{outR}
	if !spec.OnePipe {
		errR, errW, err := os.Pipe()
		if err != nil {
			closeFiles(outR, outW)
			return nil, pipeErr(err)
		}
		cmd.Stderr = errW
		childSide = append(childSide, errW)
		a.readers = append(a.readers, errR)
	}
	return childSide, nil
}

// launch forks the child and waits until it runs. Pdeathsig fires when the
// thread that forked the child exits, not the process: the child is forked
// from a locked thread that stays blocked in Wait for the child's whole
// life. On failure it undoes what Start set up.
func (a *Attempt) launch(cmd *exec.Cmd, childSide []*os.File) error {
	// Counted before the fork: while another attempt of this process
	// starts, no attempt takes its child for an adopted orphan (adopt.go).
	liveAttempts.Add(1)
	started := make(chan forked, 1)
	go func() {
		runtime.LockOSThread()
		f := a.fork(cmd)
		started <- f
		if f.err != nil {
			if !f.threadStuck {
				runtime.UnlockOSThread()
			}
			return
		}
		_ = f.cmd.Wait()
		end := time.Now()
		if !f.threadStuck {
			// A thread that could not leave the job's v1 cgroup ends
			// with this goroutine, locked.
			runtime.UnlockOSThread()
		}
		a.mu.Lock()
		a.state, a.end = f.cmd.ProcessState, end
		a.mu.Unlock()
		close(a.exitedCh)
	}()
	a.start = time.Now()
	f := <-started
	if f.cgErr != nil {
		a.logger.Warn("the job could not start in its cgroup: its processes are those of its tree", zap.String("cgroup", a.cg.dir), zap.Error(f.cgErr))
		a.cg.remove(0)
		a.cg, a.tracker.cg = nil, nil
	}
	closeFiles(childSide...)
	if err := f.err; err != nil {
		closeFiles(a.readers...)
		a.leaveRaw()
		a.uncontain()
		liveAttempts.Add(-1)
		return startError(a.spec.Argv, a.env, a.path, err)
	}
	a.cg.started()
	a.pid = f.cmd.Process.Pid
	roots.Store(a.pid, struct{}{})
	a.wd.track([]procInfo{{pid: a.pid, start: a.tracker.setRoot(a.pid)}})
	return nil
}

// startPumps starts copying the job's output to the terminal, output.log
// and the scanner, and the terminal's input to the job under a raw pty.
func (a *Attempt) startPumps() {
	spec := a.spec
	if spec.Scan != nil {
		a.queue = newScanQueue(func() {
			a.logger.Warn("the output scanner fell behind; output is being dropped from scanning (the terminal and output.log still get every byte)")
		})
		a.scanDone = make(chan struct{})
		go func() {
			defer close(a.scanDone)
			a.scanned = runScanner(a.queue, spec.Scan)
		}()
	}
	var log io.Writer
	if spec.Log != nil {
		log = spec.Log
		if !spec.PTY {
			log = &lockedWriter{w: spec.Log}
		}
	}
	outs := []io.Writer{spec.Stdout, spec.Stderr}
	for i, f := range a.readers {
		r := &reader{stream: i + 1, src: f, out: outs[i], log: log, q: a.queue, logger: a.logger}
		if i == 1 {
			r.first = a.pumps[0] // under pipes: what stdout holds goes before stderr's output
		}
		a.pumps = append(a.pumps, r)
	}
	for _, r := range a.pumps {
		a.readersWG.Add(1)
		go func() {
			defer a.readersWG.Done()
			r.run()
		}()
	}
	a.readersDone = make(chan struct{})
	go func() {
		a.readersWG.Wait()
		close(a.readersDone)
	}()
	if a.rawState != nil {
		a.stdinStop, a.stdinDone = make(chan struct{}), make(chan struct{})
		go a.copyStdin()
	}
}

// closeFiles closes each file that is not nil.
func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// PID is the main child's process id.
func (a *Attempt) PID() int { return a.pid }

// Members returns the job's live processes, read from /proc now: the main
// child (until it exits) and every process that is the job's (its
// descendants, those that started sessions of their own, those carrying the
// attempt's marker, and, under a cgroup, every process in it). These are the
// processes Shutdown stops. The order is unspecified.
func (a *Attempt) Members() []procfs.Proc {
	raw := a.tracker.scanProcs(true)
	a.wd.track(infosOf(raw))
	out := raw[:0]
	for _, p := range raw {
		if p.State != 'Z' && p.State != 'X' {
			out = append(out, p)
		}
	}
	return out
}

// Wait waits until the attempt is over (Done) and returns how it ended.
func (a *Attempt) Wait() Result {
	<-a.done
	return a.Result()
}

// Done is closed when the main child has exited, every descendant is gone
// (or survived SIGKILL for killGiveUp), the output is drained, and Scan has
// seen every line, the partial last one included.
func (a *Attempt) Done() <-chan struct{} { return a.done }

// Result reports how the attempt ended. It is valid after Done is closed.
func (a *Attempt) Result() Result {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.result
}

// Signal forwards sig to the job: under a pty to the terminal's foreground
// process group (what a terminal would signal), and to the child's own group
// when that differs; under pipes to the child's process group. After the main
// child has exited, it goes to each remaining process of the tree. It does
// nothing once the attempt is done.
func (a *Attempt) Signal(sig syscall.Signal) {
	select {
	case <-a.done:
		return
	case <-a.exitedCh:
		signalProcs(a.tracker.scan(), sig, 0)
		return
	default:
	}
	groups := []int{a.pid}
	if a.ptmx != nil {
		if fg := a.foregroundGroup(); fg > 0 && fg != a.pid {
			groups = append([]int{fg}, groups...)
		}
	}
	sent := false
	for _, g := range groups {
		if syscall.Kill(-g, sig) == nil {
			sent = true
		}
	}
	if !sent {
		_ = syscall.Kill(a.pid, sig)
	}
}

// Shutdown stops the job: SIGTERM (and SIGCONT, in case it is stopped) to
// its process group and to the processes of the job outside it, then, after
// grace, SIGKILL to every process of the job, including those in sessions of
// their own, until none is left. A grace of zero or less sends SIGKILL at
// once. It returns at once; wait on Done. After a first call, a call with no
// grace still kills at once (a second ^C); any other does nothing.
func (a *Attempt) Shutdown(grace time.Duration) {
	a.shutdown(grace, "")
}

// Stop is Shutdown with the attempt's grace period (Spec.Grace), saying why
// (Result.StopReason, the first reason given).
func (a *Attempt) Stop(reason string) { a.shutdown(a.grace, reason) }

// Kill is Shutdown without a grace period (a second ^C), saying why.
func (a *Attempt) Kill(reason string) { a.shutdown(0, reason) }

func (a *Attempt) shutdown(grace time.Duration, reason string) {
	a.mu.Lock()
	again := a.stopping
	a.stopping, a.stoppedByUs = true, true
	if a.stopReason == "" {
		a.stopReason = reason
	}
	a.mu.Unlock()
	if grace <= 0 {
		select {
		case a.killCh <- struct{}{}:
		default:
		}
		return
	}
	if again {
		return
	}
	select {
	case a.stopCh <- grace:
	default:
	}
}

// Resize sets the pty's window size again from Spec.Term (after our
// terminal was resized: SIGWINCH). The kernel signals the job's foreground
// group with SIGWINCH when the size changes. It does nothing under pipes.
func (a *Attempt) Resize() {
	select {
	case <-a.done:
		return
	default:
	}
	a.setSize()
}

func (a *Attempt) setSize() {
	if a.ptmx == nil {
		return
	}
	ws := windowSize(a.spec.Term, a.env)
	_ = withFd(a.ptmx, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols, Xpixel: ws.X, Ypixel: ws.Y})
	})
}

func (a *Attempt) foregroundGroup() int {
	pgrp := -1
	_ = withFd(a.ptmx, func(fd int) error {
		p, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		if err == nil {
			pgrp = p
		}
		return err
	})
	return pgrp
}

// supervise runs the attempt to its end: it escalates Stop to SIGKILL,
// stops leftover descendants after the main child exits, drains the output,
// waits for the scanner and closes Done.
func (a *Attempt) supervise() {
	var killAt time.Time // zero: no SIGKILL due
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	tick := time.NewTicker(trackInterval)
	defer tick.Stop()
	// An orphan of the job that dies is reaped at once (adopt.go).
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	killed := false

	for exited := false; !exited; {
		select {
		case <-a.exitedCh:
			exited = true
		case <-sigchld:
			a.tracker.reapOrphans()
		case grace := <-a.stopCh:
			a.Signal(syscall.SIGTERM)
			a.Signal(syscall.SIGCONT)
			a.signalStrays(syscall.SIGTERM)
			a.signalStrays(syscall.SIGCONT)
			if killAt.IsZero() {
				killAt = time.Now().Add(grace)
				timer.Reset(grace)
			}
		case <-a.killCh:
			killAt = time.Now()
			killed = a.killTree() || killed
			timer.Reset(100 * time.Millisecond)
		case <-timer.C:
			// Grace is over and the main child is still there: SIGKILL the
			// tree, and again every 100 ms until the main child is reaped
			// (a process may fork in between).
			killed = a.killTree() || killed
			timer.Reset(100 * time.Millisecond)
		case <-tick.C:
			ps := a.tracker.scanQuick()
			a.wd.track(ps)
			a.tracker.reapZombies(ps, a.pid)
		}
	}
	timer.Stop()

	leftovers, survivors, k := a.sweep(killAt, sigchld)
	killed = killed || k
	a.drain()
	roots.Delete(a.pid)
	liveAttempts.Add(-1)
	if survivors == 0 && !a.cg.remove(time.Second) {
		a.logger.Warn("the attempt's cgroup is not empty; leaving it", zap.String("cgroup", a.cg.dir))
	}

	a.mu.Lock()
	st := a.state
	a.result = Result{
		Pid:         a.pid,
		Start:       a.start,
		End:         a.end,
		StoppedByUs: a.stoppedByUs,
		StopReason:  a.stopReason,
		Killed:      killed,
		Leftovers:   leftovers,
		Survivors:   survivors,
	}
	a.result.Code, a.result.Signal = ExitStatus(st)
	a.result.TerminalDropped = a.termDropped
	if a.queue != nil {
		a.result.DroppedScanBytes = a.queue.droppedBytes()
		a.result.ScannedLines = a.scanned
	}
	a.mu.Unlock()
	if a.result.TerminalDropped > 0 {
		a.logger.Warn("job output was not shown because the terminal took nothing; output.log has it",
			zap.Int64("bytes", a.result.TerminalDropped))
	}
	if a.result.DroppedScanBytes > 0 {
		a.logger.Warn("output dropped from scanning because the scanner fell behind",
			zap.Int64("bytes", a.result.DroppedScanBytes))
	}
	if survivors == 0 {
		a.wd.release()
	} else {
		a.wd.abandon()
	}
	close(a.done)
}

// signalStrays sends sig to the processes of the tree that a signal to the
// job's process group (and the pty's foreground group) misses: those in
// groups or sessions of their own, as torchrun's workers are. Without it a
// launcher that does not pass SIGTERM on leaves them to SIGKILL after the
// grace period, with no chance to exit cleanly.
func (a *Attempt) signalStrays(sig syscall.Signal) {
	fg := -1
	if a.ptmx != nil {
		fg = a.foregroundGroup()
	}
	for _, p := range a.tracker.scan() {
		if p.pid != a.pid && !p.zombie() && p.pgid != a.pid && p.pgid != fg {
			_ = syscall.Kill(p.pid, sig)
		}
	}
}

// killTree sends SIGKILL to every live process of the tree. It reports
// whether there was any.
func (a *Attempt) killTree() bool {
	ps := a.tracker.scan()
	a.wd.track(ps)
	cg := a.cg.kill()
	return signalProcs(ps, syscall.SIGKILL, 0) > 0 || cg
}

// sweep stops the processes of the job still running after the main child
// exited. Unless a SIGKILL is already due, they may first go on writing
// until the job's output is closed (the last lines of a logger or an
// uploader), for up to the grace period; then they get SIGTERM, the grace
// period, and SIGKILL (the cgroup's kill with it), until none is left. It
// returns how many there were, how many outlived SIGKILL for killGiveUp, and
// whether SIGKILL was sent.
func (a *Attempt) sweep(killAt time.Time, sigchld <-chan os.Signal) (leftovers, survivors int, killed bool) {
	ps := a.tracker.scan()
	a.tracker.reapZombies(ps, a.pid)
	leftovers = alive(ps, a.pid)
	if leftovers == 0 {
		a.reapRest()
		return 0, 0, false
	}
	a.wd.track(ps)
	if killAt.IsZero() {
		var gone bool
		killAt, gone = a.drainLeftovers(sigchld)
		if gone {
			// They finished by themselves: none was stopped.
			a.reapRest()
			return 0, 0, false
		}
		ps = a.tracker.scan()
		a.tracker.reapZombies(ps, a.pid)
		if leftovers = alive(ps, a.pid); leftovers == 0 {
			a.cg.kill()
			a.reapRest()
			return 0, 0, false
		}
	}
	pids := make([]int, 0, leftovers)
	for _, p := range ps {
		if !p.zombie() && p.pid != a.pid {
			pids = append(pids, p.pid)
		}
	}
	a.logger.Info("stopping processes the job left running", zap.Ints("pids", pids))
	if killAt.IsZero() {
		signalProcs(ps, syscall.SIGTERM, a.pid)
		signalProcs(ps, syscall.SIGCONT, a.pid)
		a.cg.signal(syscall.SIGTERM)
		a.cg.signal(syscall.SIGCONT)
		killAt = time.Now().Add(a.grace)
	}
	giveUp := killAt.Add(killGiveUp)
	wait := 5 * time.Millisecond
	for {
		select {
		case <-a.killCh:
			killAt = time.Now()
		case <-a.stopCh:
		case <-sigchld:
		case <-time.After(wait):
		}
		wait = min(wait*2, 100*time.Millisecond)
		ps = a.tracker.scan()
		a.tracker.reapZombies(ps, a.pid)
		n := alive(ps, a.pid)
		if n == 0 {
			a.cg.kill() // what no scan saw
			a.reapRest()
			return leftovers, 0, killed
		}
		now := time.Now()
		if !now.Before(killAt) {
			a.wd.track(ps)
			if a.cg.kill() {
				killed = true
			}
			if signalProcs(ps, syscall.SIGKILL, a.pid) > 0 {
				killed = true
			}
		}
		if now.After(giveUp) {
			a.logger.Error("processes of the job survive SIGKILL (stuck in the kernel?); leaving them to the watchdog",
				zap.Int("count", n))
			return leftovers, n, killed
		}
	}
}

// drainLeftovers lets the processes the job left running write until the
// job's output is closed, they are all gone, or the grace period ends. A
// Kill ends the wait with a SIGKILL due now (killAt); a Stop ends it
// early. gone reports that no process is left.
func (a *Attempt) drainLeftovers(sigchld <-chan os.Signal) (killAt time.Time, gone bool) {
	grace := time.NewTimer(a.grace)
	defer grace.Stop()
	tick := time.NewTicker(trackInterval)
	defer tick.Stop()
	for {
		select {
		case <-a.readersDone:
			return time.Time{}, false
		case <-grace.C:
			return time.Time{}, false
		case <-a.stopCh:
			return time.Time{}, false
		case <-a.killCh:
			return time.Now(), false
		case <-sigchld:
			a.tracker.reapOrphans()
		case <-tick.C:
		}
		ps := a.tracker.scanQuick()
		a.wd.track(ps)
		a.tracker.reapZombies(ps, a.pid)
		if alive(ps, a.pid) == 0 {
			return time.Time{}, true
		}
	}
}

// reapRest reaps the dead members of the tree that were reparented to
// gpuguard after their parent was reaped (a chain of zombies is handed over
// one level at a time).
func (a *Attempt) reapRest() {
	for i := 0; i < 100; i++ {
		ps := a.tracker.scan()
		ours := false
		for _, p := range ps {
			if p.zombie() && p.ppid == a.tracker.self && p.pid != a.pid {
				ours = true
			}
		}
		if !ours {
			return
		}
		a.tracker.reapZombies(ps, a.pid)
	}
}

// drain waits for the readers to reach the end of the output (bounded by
// drainTimeout: the tree is gone, so what is buffered comes at once), then
// for the scanner, and restores the terminal.
func (a *Attempt) drain() {
	deadline := time.Now().Add(drainTimeout).UnixNano()
	for _, r := range a.pumps {
		r.setDeadline(deadline)
	}
	a.readersWG.Wait()
	for _, f := range a.readers {
		f.Close()
	}
	// What the job printed is on the terminal before the attempt is over,
	// unless the terminal takes nothing (then it is dropped, and said).
	for _, w := range []io.Writer{a.spec.Stdout, a.spec.Stderr} {
		if f, ok := w.(interface{ Flush() int64 }); ok {
			a.termDropped = max(a.termDropped, f.Flush())
		}
	}
	if a.queue != nil {
		a.queue.close()
		<-a.scanDone
	}
	a.leaveRaw()
}

// wantRaw reports whether the attempt should put Stdin in raw mode: under a
// pty, with Stdin a terminal whose foreground group is gpuguard's.
func (a *Attempt) wantRaw() bool {
	return a.spec.PTY && IsTerminal(a.spec.Stdin) && inForeground(a.spec.Stdin)
}

func (a *Attempt) enterRaw() {
	fd := -1
	_ = withFd(a.spec.Stdin, func(f int) error { fd = f; return nil })
	st, err := term.MakeRaw(fd)
	if err != nil {
		a.logger.Warn("could not put the terminal in raw mode; keys go to the job line by line", zap.Error(err))
		return
	}
	a.rawFd, a.rawState = fd, st
}

// leaveRaw restores the terminal mode changed by enterRaw. It is idempotent.
func (a *Attempt) leaveRaw() {
	a.restoreRaw.Do(func() {
		if a.stdinStop != nil {
			close(a.stdinStop)
			<-a.stdinDone
		}
		if a.rawState != nil {
			if err := term.Restore(a.rawFd, a.rawState); err != nil {
				a.logger.Warn("could not restore the terminal mode; run `reset`", zap.Error(err))
			}
		}
	})
}

// copyStdin copies keys from the raw terminal into the pty until the
// attempt ends. It polls so that it can stop without consuming input meant
// for a later attempt.
func (a *Attempt) copyStdin() {
	defer close(a.stdinDone)
	buf := make([]byte, 4096)
	fds := []unix.PollFd{{Fd: int32(a.rawFd), Events: unix.POLLIN}}
	for {
		select {
		case <-a.stdinStop:
			return
		default:
		}
		n, err := unix.Poll(fds, 100)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil || fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
		m, err := unix.Read(a.rawFd, buf)
		if m <= 0 || err != nil {
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			return
		}
		if a.typed.Load() == 0 {
			a.noteInterrupt(buf[:m])
		}
		if _, err := a.ptmx.Write(buf[:m]); err != nil {
			return
		}
	}
}

// noteInterrupt records a typed ^C (or ^\) that the pty's line discipline
// will turn into SIGINT (SIGQUIT) for the job.
func (a *Attempt) noteInterrupt(p []byte) {
	var t *unix.Termios
	_ = withFd(a.ptmx, func(fd int) error {
		var err error
		t, err = unix.IoctlGetTermios(fd, unix.TCGETS)
		return err
	})
	if t == nil || t.Lflag&unix.ISIG == 0 {
		return
	}
	for _, c := range p {
		switch {
		case c != 0 && c == t.Cc[unix.VINTR]:
			a.typed.CompareAndSwap(0, int32(syscall.SIGINT))
		case c != 0 && c == t.Cc[unix.VQUIT]:
			a.typed.CompareAndSwap(0, int32(syscall.SIGQUIT))
		}
	}
}

// TypedInterrupt is the first interrupt (SIGINT for ^C, SIGQUIT for ^\)
// typed on the terminal and passed to the job through the pty in raw mode;
// 0 when none.
func (a *Attempt) TypedInterrupt() syscall.Signal {
	return syscall.Signal(a.typed.Load())
}

// ExitStatus maps a process state to the shell's convention: the exit code,
// or 128+N when the process died of signal N.
func ExitStatus(st *os.ProcessState) (int, syscall.Signal) {
	if st == nil {
		return exitcode.Software, 0
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			return 128 + int(ws.Signal()), ws.Signal()
		}
		return ws.ExitStatus(), 0
	}
	return st.ExitCode(), 0
}

// openPTY opens a pseudo-terminal pair. The master is returned in
// non-blocking mode, registered with the runtime poller, so that a read
// deadline and Close interrupt a blocked Read.
func openPTY() (ptmx, tty *os.File, err error) {
	m, t, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	var dup int
	err = withFd(m, func(fd int) error {
		var err error
		dup, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		return err
	})
	m.Close()
	if err != nil {
		t.Close()
		return nil, nil, err
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		t.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(dup), "/dev/ptmx"), t, nil
}

// withFd runs fn with f's descriptor without switching f to blocking mode
// (which f.Fd() would do).
func withFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func newToken() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("gpuguard: no randomness for the attempt token: %v", err))
	}
	return hex.EncodeToString(b[:])
}
