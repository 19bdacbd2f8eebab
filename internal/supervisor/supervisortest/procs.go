package supervisortest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/lines"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// What the tests of the supervisor, of an attempt and of the reliability
// suite do with the processes they start and the files those write: one
// copy here, for every package's tests.

// SyncBuffer is a bytes.Buffer safe for the reader goroutines, which can
// also tell when a string has arrived (Seen).
type SyncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	waiters []waiter
}

type waiter struct {
	s  string
	ch chan struct{}
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
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

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Seen returns a channel closed once the buffer contains str.
func (s *SyncBuffer) Seen(str string) <-chan struct{} {
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

// WaitChan waits for ch to close, and fails the test after 30 seconds.
func WaitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// WaitFile waits until file exists and contains want, and returns its
// content; it fails the test after 30 seconds. The writers (the fake
// trainer, gpuguard) write their files atomically (rename) or by appending;
// inotify reports both.
func WaitFile(t *testing.T, file, want string) string {
	t.Helper()
	return WaitFileOr(t, FileWait{Timeout: 30 * time.Second}, file, want)
}

// FileWait is how WaitFileOr waits.
type FileWait struct {
	// Timeout is how long it waits before failing the test.
	Timeout time.Duration
	// Exited, when not nil, closes when the writer exits: the file is read
	// once more, and the test fails at once with Why's account of the exit
	// when want is not in it.
	Exited <-chan struct{}
	Why    func() string
}

// WaitFileOr is WaitFile with how it waits in w.
func WaitFileOr(t *testing.T, w FileWait, file, want string) string {
	t.Helper()
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	if err := watcher.Add(filepath.Dir(file)); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(w.Timeout)
	for {
		data, err := os.ReadFile(file)
		if err == nil && strings.Contains(string(data), want) {
			return string(data)
		}
		select {
		case <-watcher.Events:
		case <-w.Exited:
			if data, err := os.ReadFile(file); err == nil && strings.Contains(string(data), want) {
				return string(data)
			}
			t.Fatalf("%s before %q appeared in %s", w.Why(), want, file)
		case err := <-watcher.Errors:
			t.Fatalf("watching %s: %v", file, err)
		case <-timeout:
			t.Fatalf("timed out waiting for %q in %s (have %q)", want, file, data)
		}
	}
}

// ReadPids reads the "GC SGC" file of the fake trainer's tree mode.
func ReadPids(t *testing.T, file string) []int {
	t.Helper()
	f := strings.Fields(WaitFile(t, file, "\n"))
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

// Gone waits until every pid has exited (reaping it when it is the test
// process's own child, as orphans of a killed gpuguard become) and fails the
// test if one is still running after 20 seconds.
func Gone(t *testing.T, pids ...int) {
	t.Helper()
	GoneWithin(t, 20*time.Second, pids...)
}

// GoneWithin is Gone with a deadline of d. It waits on pidfds, which become
// readable when the process exits.
func GoneWithin(t *testing.T, d time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // no such process
		}
		for {
			p, ok := ReadStat(pid)
			if !ok || p.Zombie() {
				if ok && p.PPID == os.Getpid() {
					var ws syscall.WaitStatus
					syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				}
				break
			}
			left := time.Until(deadline)
			if left <= 0 {
				unix.Close(fd)
				t.Fatalf("process %d is still running (state %c, parent %d)", pid, p.State, p.PPID)
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			unix.Poll(fds, int(left.Milliseconds())+1)
		}
		unix.Close(fd)
	}
}

// Running reports whether pid is alive (not a zombie).
func Running(pid int) bool {
	p, ok := ReadStat(pid)
	return ok && !p.Zombie()
}

// ReadStat reads one process from /proc; ok is false when it is gone.
func ReadStat(pid int) (p procfs.Proc, ok bool) {
	p, err := procfs.ReadStat("/proc", pid)
	return p, err == nil
}

// ListProcs reads every process in /proc.
func ListProcs() []procfs.Proc {
	ents, _ := os.ReadDir("/proc")
	var out []procfs.Proc
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, ok := ReadStat(pid); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// WaitInBackground waits for the started cmd in a goroutine, and returns a
// channel closed when it has exited. When the test ends, the process is
// killed if it still runs, and waited for.
func WaitInBackground(t *testing.T, cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})
	return done
}

// SplitAll runs data through a lines.Splitter: the lines it makes of data,
// the reference for the scanners under test.
func SplitAll(data string) []string {
	var out []string
	sp := lines.New(0, func(l lines.Line) { out = append(out, string(l.Text)) })
	sp.Write([]byte(data))
	sp.Flush()
	return out
}
