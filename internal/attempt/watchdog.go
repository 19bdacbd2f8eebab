package attempt

import (
	"bufio"
	"fmt"
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// The watchdog keeps the promise that a job never outlives gpuguard, even
// when gpuguard is killed with SIGKILL and runs no cleanup at all.
//
// Pdeathsig only reaches the direct child, and only the thread that forked
// it. So each attempt also starts a small watchdog: gpuguard's own binary,
// re-executed in its own session, reading a pipe that only gpuguard holds.
// gpuguard writes the pid and start time of every process it sees in the
// job's tree; when the attempt is over and the tree swept, it writes "done"
// and the watchdog exits. If the pipe reaches end of file without "done",
// gpuguard died: the watchdog sends SIGTERM to every process it was told about
// or that carries the attempt's MarkerVar, waits the grace period, sends
// SIGKILL to what is left, and exits.
//
// The watchdog is started as `<gpuguard> run -- gpuguard-internal-watchdog`
// with watchdogEnv set; Run (and a test binary's TestMain) must hand such an
// invocation to WatchdogMain before doing anything else.

const (
	watchdogEnv = "GPUGUARD_WATCHDOG"
	watchdogArg = "gpuguard-internal-watchdog"
	// watchdogGiveUp bounds how long the watchdog keeps sending SIGKILL to
	// processes that do not die (stuck in the kernel, state D).
	watchdogGiveUp = 10 * time.Second
)

// IsWatchdogInvocation reports whether argv (the command after "--") and the
// environment say that this process is an attempt's watchdog.
func IsWatchdogInvocation(argv []string) bool {
	return len(argv) == 1 && argv[0] == watchdogArg && os.Getenv(watchdogEnv) != ""
}

// watchdog is gpuguard's end of one attempt's watchdog.
type watchdog struct {
	cmd    *exec.Cmd
	w      *os.File
	logger *zap.Logger

	mu     sync.Mutex
	sent   map[procKey]bool
	closed bool
	failed bool
}

// startWatchdog starts the watchdog for the attempt with this marker token.
// cg, when not nil, is the attempt's cgroup: the watchdog kills it too.
func startWatchdog(token string, grace time.Duration, cg *cgroup, logger *zap.Logger) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{"gpuguard", "run", "--", watchdogArg},
		Env: []string{
			watchdogEnv + "=v2 " + token + " " + strconv.FormatInt(int64(grace), 10) + " " + cgroupDesc(cg),
			helperVar + "=" + helperToken,
		},
		// Its own session: a ^C on the terminal or a signal to gpuguard's
		// process group must not take it down with gpuguard.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
		Stdin:       r,
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	r.Close()
	wd := &watchdog{cmd: cmd, w: w, logger: logger, sent: make(map[procKey]bool)}
	watchdogs.Store(cmd.Process.Pid, struct{}{})
	go func() {
		_ = cmd.Wait()
		watchdogs.Delete(cmd.Process.Pid)
	}()
	return wd, nil
}

// track tells the watchdog about processes of the tree it has not heard of.
func (wd *watchdog) track(ps []procInfo) {
	if wd == nil {
		return
	}
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.closed || wd.failed {
		return
	}
	var b strings.Builder
	for _, p := range ps {
		k := procKey{p.pid, p.start}
		if p.zombie() || wd.sent[k] {
			continue
		}
		wd.sent[k] = true
		fmt.Fprintf(&b, "p %d %d\n", p.pid, p.start)
	}
	if b.Len() == 0 {
		return
	}
	if _, err := wd.w.WriteString(b.String()); err != nil {
		wd.failed = true
		wd.logger.Warn("watchdog gone: the job will not be cleaned up if gpuguard is killed", zap.Error(err))
	}
}

// release tells the watchdog that the tree is gone, and lets it exit.
func (wd *watchdog) release() { wd.close(true) }

// abandon closes the pipe without "done": the watchdog goes on trying to
// kill what is left of the tree after gpuguard has exited.
func (wd *watchdog) abandon() { wd.close(false) }

// close closes the pipe to the watchdog once, after "done" when done.
func (wd *watchdog) close(done bool) {
	if wd == nil {
		return
	}
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.closed {
		return
	}
	wd.closed = true
	if done {
		_, _ = wd.w.WriteString("done\n")
	}
	wd.w.Close()
}

// WatchdogMain is the watchdog process. It returns its exit status.
func WatchdogMain() int {
	f := strings.SplitN(os.Getenv(watchdogEnv), " ", 4)
	if len(f) != 4 || f[0] != "v2" {
		fmt.Fprintf(os.Stderr, "gpuguard watchdog: bad %s=%q\n", watchdogEnv, os.Getenv(watchdogEnv))
		return exitcode.Software
	}
	token := f[1]
	grace, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || grace < 0 {
		grace = int64(DefaultGrace)
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE, syscall.SIGTTOU, syscall.SIGTTIN)

	t := newTracker(token, openCgroup(f[3]))
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		if line == "done" {
			return 0
		}
		var pid int
		var start uint64
		if _, err := fmt.Sscanf(line, "p %d %d", &pid, &start); err == nil && pid > 0 {
			t.remember(pid, start)
		}
	}
	// End of file without "done": gpuguard is gone.
	killTreeOrphaned(t, time.Duration(grace))
	return 0
}

// killTreeOrphaned stops the tree t without being its parent: SIGTERM (and
// SIGCONT, for stopped processes), grace, SIGKILL (and the cgroup's kill),
// until nothing is left or watchdogGiveUp has passed since the SIGKILL. It
// then removes the attempt's cgroup.
func killTreeOrphaned(t *tracker, grace time.Duration) {
	defer t.cg.remove(time.Second)
	ps := t.scan()
	if alive(ps, 0) == 0 {
		t.cg.kill()
		return
	}
	signalProcs(ps, syscall.SIGTERM, 0)
	signalProcs(ps, syscall.SIGCONT, 0)
	killAt := time.Now().Add(grace)
	giveUp := killAt.Add(watchdogGiveUp)
	for {
		time.Sleep(20 * time.Millisecond)
		ps = t.scan()
		if alive(ps, 0) == 0 {
			return
		}
		now := time.Now()
		if now.After(giveUp) {
			return
		}
		if !now.Before(killAt) {
			t.cg.kill()
			signalProcs(ps, syscall.SIGKILL, 0)
		}
	}
}
