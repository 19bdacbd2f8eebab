package attempt

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// This file holds the supervisor's view of a job's processes. Which
// processes are the job's is decided by procfs.Tree (the main child, its
// descendants, and every process carrying the attempt's marker variable,
// MarkerVar, in its initial environment; a member stays one for as long as
// it lives); the tracker owns an attempt's Tree, knowing its marker, and
// hands the same members to the memory sampler (Attempt.Processes) that it
// stops and kills.

// MarkerVar is set in every job's environment to a token unique to the
// attempt, so that gpuguard (and its watchdog, should gpuguard die) can find
// every process the job started, even after they left its process group and
// session. Programs must not rely on its value.
const MarkerVar = "GPUGUARD_ATTEMPT_TOKEN"

// procInfo is the part of a procfs.Proc that the supervisor acts on: it
// signals, reaps and tells the watchdog about processes by it.
type procInfo struct {
	pid, ppid, pgid, sid int
	start                uint64 // start time in clock ticks after boot
	state                byte   // R, S, D, Z, T, ...
}

func (p procInfo) zombie() bool { return p.state == 'Z' || p.state == 'X' }

func infoOf(p procfs.Proc) procInfo {
	return procInfo{pid: p.PID, ppid: p.PPID, pgid: p.PGID, sid: p.SID, start: p.Start, state: p.State}
}

func infosOf(ps []procfs.Proc) []procInfo {
	out := make([]procInfo, len(ps))
	for i, p := range ps {
		out[i] = infoOf(p)
	}
	return out
}

// procKey identifies a process across pid reuse.
type procKey struct {
	pid   int
	start uint64
}

// tracker identifies the processes of one attempt. It is safe for
// concurrent use.
type tracker struct {
	self int // gpuguard's pid: never part of the job
	tree *procfs.Tree
	// cg is the attempt's cgroup, nil when there is none: every process in
	// it is the job's.
	cg *cgroup
	// adopt: gpuguard's children other than its helpers are the job's
	// (orphans it adopted as the subreaper; see adopted). Off in the
	// watchdog, which adopts nothing.
	adopt bool
	root  int // the main child

	mu    sync.Mutex
	known map[procKey]bool // processes adopt has decided on: true, the job's
}

func newTracker(token string, cg *cgroup) *tracker {
	t := &tracker{self: os.Getpid(), tree: procfs.NewTree("/proc", MarkerVar+"="+token), cg: cg,
		known: make(map[procKey]bool)}
	t.tree.Exclude(t.self)
	return t
}

// setRoot records the main child and returns its start time (0 when it is
// already gone: then the marker is looked for in every process). It must be
// called before scan.
func (t *tracker) setRoot(pid int) uint64 {
	t.mu.Lock()
	t.root = pid
	t.mu.Unlock()
	p, _ := t.tree.SetRoot(pid)
	return p.Start
}

// remember records a process known to be the job's (the watchdog's list).
func (t *tracker) remember(pid int, start uint64) { t.tree.Remember(pid, start) }

// scan returns the members of the tree now in /proc, zombies included. It
// reads the stat file of every process on the machine.
func (t *tracker) scan() []procInfo { return infosOf(t.scanProcs(true)) }

// scanProcs is scan (full) or scanQuick, as procfs.Procs: first the
// processes in the attempt's cgroup and the orphans gpuguard adopted become
// members, then the tree is read.
func (t *tracker) scanProcs(full bool) []procfs.Proc {
	t.enlist()
	if full {
		return t.tree.Scan()
	}
	return t.tree.ScanQuick()
}

// scanQuick is scan for the periodic look at the tree while the job runs:
// it reads only the members and the processes that are new since the last
// scan, and every tenth time all of them (procfs.Tree.ScanQuick). Stopping
// and killing always use scan.
func (t *tracker) scanQuick() []procInfo { return infosOf(t.scanProcs(false)) }

// Processes appends to dst the job's live processes as the tracker's latest
// scan found them, the main child first while it lives: the processes
// gpuguard would stop and kill, for the memory sampler. With PID it makes
// an Attempt a procfs.ProcessList. It reads nothing.
func (a *Attempt) Processes(dst []procfs.Proc) []procfs.Proc { return a.tracker.tree.Processes(dst) }

// signalProcs sends sig to every process in ps that is not a zombie and not
// excluded. Errors (the process is already gone) are ignored.
func signalProcs(ps []procInfo, sig syscall.Signal, exclude int) int {
	n := 0
	for _, p := range ps {
		if p.zombie() || p.pid == exclude {
			continue
		}
		if syscall.Kill(p.pid, sig) == nil {
			n++
		}
	}
	return n
}

// reapZombies collects the exit status of members that are gpuguard's own
// children (adopted orphans, gpuguard being a subreaper) and have died. The
// main child is excluded: its status belongs to exec.Cmd.Wait.
func (t *tracker) reapZombies(ps []procInfo, exclude int) {
	for _, p := range ps {
		if p.ppid != t.self || p.pid == exclude || !p.zombie() {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
	}
}

// alive counts the members of ps that are not zombies, leaving out exclude.
func alive(ps []procInfo, exclude int) int {
	n := 0
	for _, p := range ps {
		if !p.zombie() && p.pid != exclude {
			n++
		}
	}
	return n
}

var subreaperOnce sync.Once

// BecomeSubreaper makes gpuguard the reaper of orphaned descendants, so that
// workers whose parent died are reparented to it (and can be found and
// reaped) instead of to init. It is process-wide and idempotent.
func BecomeSubreaper() error {
	var err error
	subreaperOnce.Do(func() { err = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })
	return err
}
