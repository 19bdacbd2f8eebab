package supervisor

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// This file finds a job's process tree through /proc. A job's processes are
// the main child, every process whose parent chain leads to one of them, and
// every process carrying the attempt's marker variable (MarkerVar) in its
// initial environment. The marker is what finds torchrun-style workers that
// started their own session and were orphaned before a scan saw them: their
// parent chain no longer leads anywhere, but they inherited the environment.
// A process once seen in the tree stays in it (by pid and start time, so a
// reused pid is never mistaken for it) for as long as it lives.

// MarkerVar is set in every job's environment to a token unique to the
// attempt, so that gpuguard (and its watchdog, should gpuguard die) can find
// every process the job started, even after they left its process group and
// session. Programs must not rely on its value.
const MarkerVar = "GPUGUARD_ATTEMPT_TOKEN"

// procInfo is one process as /proc/<pid>/stat shows it.
type procInfo struct {
	pid, ppid, pgid, sid int
	start                uint64 // start time in clock ticks after boot
	state                byte   // R, S, D, Z, T, ...
}

func (p procInfo) zombie() bool { return p.state == 'Z' || p.state == 'X' }

type procKey struct {
	pid   int
	start uint64
}

// readStat parses /proc/<pid>/stat. ok is false when the process is gone.
func readStat(pid int, buf []byte) (procInfo, bool) {
	n, err := readSmallFile("/proc/"+strconv.Itoa(pid)+"/stat", buf)
	if err != nil {
		return procInfo{}, false
	}
	b := buf[:n]
	// The command name is in parentheses and may itself contain ") ".
	r := bytes.LastIndexByte(b, ')')
	if r < 0 || r+2 >= len(b) {
		return procInfo{}, false
	}
	fields := bytes.Fields(b[r+2:])
	// fields[0] is field 3 (state); field 22 (starttime) is fields[19].
	if len(fields) < 20 {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, state: fields[0][0]}
	p.ppid, _ = strconv.Atoi(string(fields[1]))
	p.pgid, _ = strconv.Atoi(string(fields[2]))
	p.sid, _ = strconv.Atoi(string(fields[3]))
	p.start, _ = strconv.ParseUint(string(fields[19]), 10, 64)
	return p, true
}

// readSmallFile reads up to len(buf) bytes of name without allocating.
func readSmallFile(name string, buf []byte) (int, error) {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	total := 0
	for total < len(buf) {
		n, err := syscall.Read(fd, buf[total:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return total, err
		}
		if n == 0 {
			break
		}
		total += n
	}
	return total, nil
}

// listProcs returns every process in /proc (thread-group leaders only).
func listProcs(skip func(pid int) bool, listed func(pid int)) []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	buf := make([]byte, 1024)
	out := make([]procInfo, 0, len(names))
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if listed != nil {
			listed(pid)
		}
		if skip != nil && skip(pid) {
			continue
		}
		if p, ok := readStat(pid, buf); ok {
			out = append(out, p)
		}
	}
	return out
}

// hasMarker reports whether the initial environment of pid contains marker
// ("KEY=VALUE") as a whole entry. Unreadable environments (another user's
// process without root, a zombie, a kernel thread) have no marker.
func hasMarker(pid int, marker []byte) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || len(data) == 0 {
		return false
	}
	for len(data) > 0 {
		entry := data
		if i := bytes.IndexByte(data, 0); i >= 0 {
			entry, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if bytes.Equal(entry, marker) {
			return true
		}
	}
	return false
}

// tracker identifies the process tree of one attempt. It is safe for
// concurrent use.
type tracker struct {
	self   int    // gpuguard's pid: never part of a tree
	marker []byte // MarkerVar=token

	mu      sync.Mutex
	since   uint64           // start time of the main child; older processes are not ours
	seen    map[int]uint64   // pid → start time of every member seen alive
	checked map[procKey]bool // processes whose environment was read, marker absent
	// outside: pids that the last scan found alive and not in the tree;
	// quick scans do not read them again (see scanQuick).
	outside map[int]bool
	quick   int // quick scans since the last full one
}

// fullScanEvery: one periodic scan in this many reads every process again.
const fullScanEvery = 10

func newTracker(token string) *tracker {
	return &tracker{
		self:    os.Getpid(),
		marker:  []byte(MarkerVar + "=" + token),
		seen:    make(map[int]uint64),
		checked: make(map[procKey]bool),
		outside: make(map[int]bool),
	}
}

// setRoot records the main child. It must be called before scan.
func (t *tracker) setRoot(pid int) {
	p, ok := readStat(pid, make([]byte, 1024))
	t.mu.Lock()
	defer t.mu.Unlock()
	if ok {
		t.since = p.start
		t.seen[pid] = p.start
	} else {
		// Already gone (exited at once): its start time is unknown, so the
		// marker search must consider every process.
		t.seen[pid] = 0
	}
}

// scan returns the members of the tree now in /proc, zombies included. It
// reads the stat file of every process on the machine.
func (t *tracker) scan() []procInfo {
	return t.scanWith(listProcs(nil, nil), nil)
}

// scanQuick is scan for the periodic look at the tree while the job runs. A
// machine may run hundreds of processes, and reading every one's stat file
// twice a second was most of an idle gpuguard's CPU (docs/performance.md):
// a quick scan reads only the members, and the processes that appeared
// since the last scan (a new process is where a member's child, or an
// escaped process carrying the marker, shows up). Every fullScanEvery-th
// scan reads them all, in case a pid that was outside the tree was reused
// by a process of the job meanwhile, or an outside process was reparented
// to a member. Stopping and killing always use scan.
func (t *tracker) scanQuick() []procInfo {
	t.mu.Lock()
	t.quick++
	full := t.quick >= fullScanEvery
	if full {
		t.quick = 0
	}
	outside := t.outside
	members := make(map[int]bool, len(t.seen))
	for pid := range t.seen {
		members[pid] = true
	}
	t.mu.Unlock()
	if full {
		return t.scan()
	}
	listed := make(map[int]bool, len(outside)+64)
	procs := listProcs(func(pid int) bool { return outside[pid] && !members[pid] },
		func(pid int) { listed[pid] = true })
	return t.scanWith(procs, func(pid int) bool { return listed[pid] && outside[pid] })
}

// scanWith finds the tree among procs. keptOutside says which pids, absent
// from procs, were left out as known to be outside the tree (nil: none).
func (t *tracker) scanWith(procs []procInfo, keptOutside func(pid int) bool) []procInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer func() {
		// Rebuilt from this scan: the processes read and not taken in,
		// and those skipped as outside that are still listed.
		outside := make(map[int]bool, len(procs))
		if keptOutside != nil {
			for pid := range t.outside {
				if keptOutside(pid) {
					outside[pid] = true
				}
			}
		}
		for _, p := range procs {
			if _, member := t.seen[p.pid]; !member && !p.zombie() {
				outside[p.pid] = true
			}
		}
		t.outside = outside
	}()

	byPid := make(map[int]int, len(procs))
	children := make(map[int][]int, len(procs))
	for i, p := range procs {
		byPid[p.pid] = i
		children[p.ppid] = append(children[p.ppid], i)
	}
	in := make(map[int]bool)
	var queue []int
	add := func(i int) {
		p := procs[i]
		if p.pid == t.self || in[p.pid] {
			return
		}
		in[p.pid] = true
		queue = append(queue, i)
	}
	for pid, start := range t.seen {
		i, ok := byPid[pid]
		if !ok || (start != 0 && procs[i].start != start) {
			delete(t.seen, pid) // gone, or the pid was reused
			continue
		}
		add(i)
	}
	live := make(map[procKey]bool, len(procs))
	for i, p := range procs {
		k := procKey{p.pid, p.start}
		live[k] = true
		if in[p.pid] || p.start < t.since || p.pid == t.self || p.pid == 2 || p.ppid == 2 || t.checked[k] {
			continue
		}
		if hasMarker(p.pid, t.marker) {
			add(i)
		} else if !p.zombie() {
			t.checked[k] = true
		}
	}
	if len(t.checked) > 2*len(procs)+64 {
		for k := range t.checked {
			if !live[k] {
				delete(t.checked, k)
			}
		}
	}
	var out []procInfo
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		p := procs[i]
		out = append(out, p)
		if !p.zombie() {
			t.seen[p.pid] = p.start
		}
		for _, c := range children[p.pid] {
			add(c)
		}
	}
	return out
}

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

// becomeSubreaper makes gpuguard the reaper of orphaned descendants, so that
// workers whose parent died are reparented to it (and can be found and
// reaped) instead of to init. It is process-wide and idempotent.
func becomeSubreaper() error {
	var err error
	subreaperOnce.Do(func() { err = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })
	return err
}
