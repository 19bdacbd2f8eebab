package attempt

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// Orphans. gpuguard is a child subreaper: a process of the job whose parent
// dies is re-parented to gpuguard, not to init. It may have left everything
// that marks it as the job's behind (`env -i setsid daemon`: a cleared
// environment, a session of its own, and a parent that exited before any
// scan saw it), so without a cgroup the tree cannot find it by parentage or
// by the marker. But gpuguard's children are few and known: the job's main
// child, the watchdogs, and the helpers gpuguard runs itself (notification
// commands, py-spy, scontrol). Every other child of gpuguard is an orphan it
// adopted from the job, and so the job's: it is stopped with the job, and
// reaped as soon as it dies (a job that orphans short-lived helpers in a
// loop would otherwise fill the process table with zombies).
//
// Helpers are told apart by helperVar: gpuguard sets it in its own
// environment as it starts, so that everything it runs inherits it, and
// takes it out of the job's. A zombie's environment cannot be read; one is a
// helper when it is in gpuguard's session and either gpuguard's process
// group or one of its own (notification commands run in their own group):
// no process of the job is, under a pty (the job has a session of its own)
// or under pipes (the job has a process group of its own, which its
// descendants keep unless they make their own, and `setsid` leaves
// gpuguard's session).
//
// This holds while one attempt runs in the process, as in gpuguard: with
// two at once (tests), an orphan could be either's, and neither adopts.

// helperVar marks the environment of the processes gpuguard starts itself.
const helperVar = "GPUGUARD_HELPER_TOKEN"

// helperToken is the value of helperVar for this process.
var helperToken = newToken()

func init() {
	// Set before any helper can start; a process started by one gpuguard
	// with another's token (a gpuguard inside a job) is that one's job.
	_ = os.Setenv(helperVar, helperToken)
}

// liveAttempts counts the attempts running in this process, from just
// before the fork of their child.
var liveAttempts atomic.Int32

// roots are the main children of the attempts of this process: never an
// adopted orphan, and never reaped but by their exec.Cmd.
var roots sync.Map // int → struct{}

// watchdogs are the pids of the watchdogs this process started and has not
// reaped: children that are never the job's.
var watchdogs sync.Map // int → struct{}

// enlist makes members of the processes in the attempt's cgroup and of the
// orphans gpuguard adopted from the job.
func (t *tracker) enlist() {
	inCg := t.cg.pids()
	for _, pid := range inCg {
		t.enroll(pid, true)
	}
	if !t.adopt {
		return
	}
	// Counted after the listing: another attempt counts itself before it
	// forks, so a child of it listed here makes the count 2.
	kids := children(t.self)
	if liveAttempts.Load() != 1 {
		return
	}
	for _, pid := range kids {
		t.enroll(pid, false)
	}
	t.forget(inCg, kids)
}

// forget drops the decisions about processes that are neither in the
// cgroup nor gpuguard's children any more (dead and reaped): a job that
// orphans helpers for days must not grow the map.
func (t *tracker) forget(lists ...[]int) {
	now := make(map[int]bool)
	for _, l := range lists {
		for _, pid := range l {
			now[pid] = true
		}
	}
	t.mu.Lock()
	for k := range t.known {
		if !now[k.pid] {
			delete(t.known, k)
		}
	}
	t.mu.Unlock()
}

// enroll decides whether pid, in the attempt's cgroup or a child of
// gpuguard, is the job's, and remembers it as a member when it is.
func (t *tracker) enroll(pid int, inCgroup bool) {
	t.mu.Lock()
	root := t.root
	t.mu.Unlock()
	if pid == t.self || pid == root {
		return
	}
	if _, ok := watchdogs.Load(pid); ok {
		return
	}
	if _, ok := roots.Load(pid); ok {
		return
	}
	p, err := procfs.ReadStat("/proc", pid)
	if err != nil {
		return
	}
	k := procKey{pid, p.Start}
	t.mu.Lock()
	was, decided := t.known[k]
	t.mu.Unlock()
	if decided && (was || !inCgroup) {
		return
	}
	ours := inCgroup || (p.PPID == t.self && t.orphan(p))
	if ours {
		t.tree.Remember(pid, p.Start)
	}
	t.mu.Lock()
	t.known[k] = ours
	t.mu.Unlock()
}

// orphan reports whether p, a child of gpuguard, is the job's.
func (t *tracker) orphan(p procfs.Proc) bool {
	if env, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/environ"); err == nil && len(env) > 0 {
		return !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+helperVar+"="+helperToken+"\x00"))
	}
	// A zombie (or a process just forked, whose environment is gpuguard's:
	// it reads fine).
	sid, _ := unix.Getsid(0)
	return !(p.SID == sid && (p.PGID == syscall.Getpgrp() || p.PGID == p.PID))
}

// reapOrphans reaps the adopted orphans of the job that have died. It never
// waits for a helper gpuguard started (its own code waits for it), nor for
// the main child (exec.Cmd.Wait does).
func (t *tracker) reapOrphans() {
	if !t.adopt {
		return
	}
	kids := children(t.self) // then counted, as in enlist
	if liveAttempts.Load() != 1 {
		return
	}
	for _, pid := range kids {
		p, err := procfs.ReadStat("/proc", pid)
		if err != nil || !p.Zombie() {
			continue
		}
		t.enroll(pid, false)
		t.mu.Lock()
		ours := t.known[procKey{pid, p.Start}]
		t.mu.Unlock()
		if _, root := roots.Load(pid); ours && !root {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
}

// children lists the children of process pid, from the children files of
// its threads (Linux 3.5 and later, CONFIG_PROC_CHILDREN).
func children(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
