package attempt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The test binary plays the programs these tests run (supervisortest.Main),
// chosen by its first argument:
//
//	MODE ...                           the fake trainer's modes (supervisortest.Trainer)
//	run -- gpuguard-internal-watchdog  an attempt's watchdog
//
// Orphans of the jobs these tests start come back to the test process (a
// subreaper), which reaps them (see gone).
func TestMain(m *testing.M) { supervisortest.Main(m, helpers, supervisortest.Subreaper()) }

var helpers = supervisortest.Modes("mixed", "bigline", "flood", "exit", "kill", "ignoreterm", "tree", "stdin",
	"printenv", "istty", "winsize").With(supervisortest.Helpers{"run": runWatchdog})

// runWatchdog is `gpuguard run -- gpuguard-internal-watchdog`, as the
// attempt starts it.
func runWatchdog(args []string) int {
	if len(args) < 1 || !IsWatchdogInvocation(args[1:]) {
		fmt.Fprintf(os.Stderr, "run %q: not an attempt's watchdog (GPUGUARD_WATCHDOG unset?)\n", args)
		return 64
	}
	return WatchdogMain()
}

func testBinary() string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe
}

func fakeSelf() []string { return []string{testBinary()} }

// fake returns the argv of the fake trainer in mode.
func fake(mode ...string) []string { return append(fakeSelf(), mode...) }

// launcher is one way of connecting the job's output: the tests that hold
// for both run once under each, as nomad runs its executor tests across
// implementations.
type launcher struct {
	name string
	pty  bool
}

var launchers = []launcher{{"pipes", false}, {"pty", true}}

// syncBuffer is a bytes.Buffer safe for the reader goroutines, which can
// also tell when a string has arrived.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	waiters []waiter
}

type waiter struct {
	s  string
	ch chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		all := s.b.Bytes()
		tail := all[max(0, len(all)-len(p)-len(w.s)):] // earlier bytes were searched before
		if bytes.Contains(tail, []byte(w.s)) {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	s.waiters = kept
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// seen returns a channel closed once the buffer contains str.
func (s *syncBuffer) seen(str string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if bytes.Contains(s.b.Bytes(), []byte(str)) {
		close(ch)
	} else {
		s.waiters = append(s.waiters, waiter{str, ch})
	}
	return ch
}

func waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func waitDone(t *testing.T, a *Attempt) Result {
	t.Helper()
	waitChan(t, a.Done(), "the attempt to finish")
	return a.Result()
}

// waitFile waits until file exists and contains want, and returns its
// content. The fake trainer writes its files atomically (rename) or by
// appending; inotify reports both.
func waitFile(t *testing.T, file, want string) string {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(file)); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		data, err := os.ReadFile(file)
		if err == nil && strings.Contains(string(data), want) {
			return string(data)
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			t.Fatalf("watching %s: %v", file, err)
		case <-timeout:
			t.Fatalf("timed out waiting for %q in %s (have %q)", want, file, data)
		}
	}
}

// readPids reads the "GC SGC" file of the fake's tree mode.
func readPids(t *testing.T, file string) []int {
	t.Helper()
	f := strings.Fields(waitFile(t, file, "\n"))
	var pids []int
	for _, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("bad pid file %s: %q", file, f)
		}
		pids = append(pids, n)
	}
	if len(pids) != 2 {
		t.Fatalf("pid file %s: %q", file, f)
	}
	return pids
}

// gone waits until every pid has exited (reaping it when it is the test
// process's own child, as orphans of a killed gpuguard become) and fails the
// test if one is still running after the deadline. It waits on pidfds, which
// become readable when the process exits.
func gone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // no such process
		}
		for {
			p, ok := readStat(pid)
			if !ok || p.zombie() {
				if ok && p.ppid == os.Getpid() {
					var ws syscall.WaitStatus
					syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				}
				break
			}
			left := time.Until(deadline)
			if left <= 0 {
				unix.Close(fd)
				t.Fatalf("process %d is still running (state %c, parent %d)", pid, p.state, p.ppid)
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			unix.Poll(fds, int(left.Milliseconds())+1)
		}
		unix.Close(fd)
	}
}

// running reports whether pid is alive (not a zombie).
func running(pid int) bool {
	p, ok := readStat(pid)
	return ok && !p.zombie()
}

// memberPids is the pids of a's Members.
func memberPids(a *Attempt) []int {
	var out []int
	for _, p := range a.Members() {
		out = append(out, p.PID)
	}
	return out
}
