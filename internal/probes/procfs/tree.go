package procfs

import (
	"sync"
)

// ProcessList is a job's set of processes as whoever runs the job knows it.
// Statistics take their process list from it and never decide membership
// themselves (as in nomad, where procstats.ProcessList comes from the
// executor), so that the processes gpuguard measures are the ones it would
// stop and kill. A *Tree is one; the supervisor's attempt is another.
type ProcessList interface {
	// PID is the job's main process, the root of its tree; 0 or less while
	// there is none.
	PID() int
	// Processes appends to dst the job's live processes as the latest look
	// at /proc found them, the root first while it lives, and returns the
	// extended slice. It reads nothing: callers may call it often.
	Processes(dst []Proc) []Proc
}

// Tree finds the processes of one job in /proc. It is gpuguard's one
// definition of a job's processes: the supervisor stops and kills what its
// Tree finds, and the memory sampler measures the same processes (a Tree is
// a ProcessList).
//
// A process belongs to the job when
//   - it is the root (SetRoot), or was named by Remember;
//   - its parent belongs to the job; or
//   - its initial environment holds the job's marker entry (NewTree), and it
//     started no earlier than the oldest process known to be the job's.
//
// A member stays one for as long as it lives, known by pid and start time so
// that a reused pid is not mistaken for it: a worker re-parented to init or
// to a subreaper after its parent died, or one that started a session of its
// own, is still the job's. The marker finds those that left before any scan
// saw them (a double-forked daemon, a torchrun worker orphaned at once):
// their parent chain leads nowhere, but they inherited the environment.
// Kernel threads and the excluded pid (Exclude) never belong. Without a
// marker the rule is parentage alone.
//
// A Tree is safe for concurrent use; scans run one at a time.
type Tree struct {
	// scanMu makes scans take turns; it guards the fields up to mu.
	scanMu  sync.Mutex
	fs      *procFS
	marker  []byte // "KEY=VALUE"; nil: no marker
	exclude int
	// since is the start time of the oldest process known to be the job's
	// (0 until one is: then the marker is looked for in every process);
	// processes older than it cannot carry the job's marker.
	since    uint64
	sinceSet bool
	seen     map[int]uint64 // pid → start time of every member seen alive (0: unknown)
	// checked holds the processes whose environment was read and lacks the
	// marker: each is read once.
	checked map[procID]bool
	// outside holds the pids that a scan found outside the job, with the
	// number of the last scan that did; quick scans do not read them again
	// (see ScanQuick).
	outside map[int]uint64
	scans   uint64
	quick   int // quick scans since the last full one
	// Scratch space of scan.
	in        map[int]bool
	undecided []int // pids whose environment read empty (see hasEnv)
	pidBuf    []int
	procs     []Proc

	mu   sync.Mutex // guards root and last
	root int
	last []Proc // what the latest scan found, root first
}

// procID identifies a process across pid reuse.
type procID struct {
	pid   int
	start uint64
}

// fullScanEvery: one ScanQuick in this many reads every process again.
const fullScanEvery = 10

// NewTree returns the tree of one job under procRoot ("/proc" when empty).
// marker is the entry ("KEY=VALUE") that the job's environment holds and no
// other process's does; "" finds the job by parentage alone.
func NewTree(procRoot, marker string) *Tree {
	t := &Tree{
		fs:      newProcFS(procRoot),
		seen:    make(map[int]uint64),
		checked: make(map[procID]bool),
		outside: make(map[int]uint64),
		in:      make(map[int]bool),
	}
	if marker != "" {
		t.marker = []byte(marker)
	}
	return t
}

// Exclude keeps pid out of the job whatever its parentage or environment:
// the supervisor's own pid, which is the parent of adopted orphans and may
// carry the marker of a job it is part of.
func (t *Tree) Exclude(pid int) {
	t.scanMu.Lock()
	t.exclude = pid
	t.scanMu.Unlock()
}

// SetRoot records the job's main process and returns its stat; call it
// before the first scan. When the process is already gone (it exited at
// once), its start time is unknown, the error says so, and the marker
// search considers every process.
func (t *Tree) SetRoot(pid int) (Proc, error) {
	t.scanMu.Lock()
	defer t.scanMu.Unlock()
	st, err := t.fs.stat(pid)
	t.seen[pid] = st.Start
	t.since, t.sinceSet = st.Start, true
	t.mu.Lock()
	t.root = pid
	t.last = t.last[:0]
	if err == nil {
		t.last = append(t.last, st)
	}
	t.mu.Unlock()
	return st, err
}

// Remember records pid, started at start (clock ticks since boot; 0 when
// unknown), as a member: what a watchdog was told about the job.
func (t *Tree) Remember(pid int, start uint64) {
	t.scanMu.Lock()
	defer t.scanMu.Unlock()
	t.seen[pid] = start
	if !t.sinceSet || start < t.since {
		t.since, t.sinceSet = start, true
	}
}

// PID returns the root (ProcessList).
func (t *Tree) PID() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.root
}

// Processes appends the live members the latest scan found (ProcessList).
func (t *Tree) Processes(dst []Proc) []Proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.last {
		if !p.Zombie() {
			dst = append(dst, p)
		}
	}
	return dst
}

// Scan returns the members now in /proc, zombies included, the root first
// while it is there. It reads the stat file of every process on the
// machine. When /proc cannot be listed it returns nil and forgets nothing.
func (t *Tree) Scan() []Proc { return t.scan(true) }

// ScanQuick is Scan for a periodic look at a running job. A machine may run
// hundreds of processes, and reading every one's stat file twice a second
// was most of an idle gpuguard's CPU (docs/performance.md): a quick scan
// reads only the members and the processes that appeared since the last
// scan (where a member's child, or an escaped process carrying the marker,
// shows up). Every fullScanEvery-th one reads them all, in case a pid that
// was outside the job was reused by a process of the job meanwhile, or an
// outside process was re-parented to a member. Stop and kill with Scan.
func (t *Tree) ScanQuick() []Proc { return t.scan(false) }

func (t *Tree) scan(full bool) []Proc {
	t.scanMu.Lock()
	defer t.scanMu.Unlock()
	if !full {
		t.quick++
		full = t.quick >= fullScanEvery
	}
	if full {
		t.quick = 0
	}
	procs, err := t.readProcs(full)
	if err != nil {
		return nil
	}
	// The members seen before, unless gone or their pid reused; then their
	// descendants; then the holders of the marker, and theirs.
	t.keepMembers(procs)
	t.addChildren(procs)
	if t.marker != nil {
		t.takeMarked(procs, full)
	}
	out := t.members(procs)
	t.mu.Lock()
	for i := range out {
		if out[i].PID == t.root {
			out[0], out[i] = out[i], out[0]
			break
		}
	}
	t.last = append(t.last[:0], out...)
	t.mu.Unlock()
	for pid, n := range t.outside {
		if n != t.scans {
			delete(t.outside, pid) // gone, or a member now
		}
	}
	return out
}

// readProcs lists /proc and reads the stat file of each process, or on a
// quick scan of the members and of the processes not known to be outside.
func (t *Tree) readProcs(full bool) ([]Proc, error) {
	var err error
	if t.pidBuf, err = t.fs.pids(t.pidBuf); err != nil {
		return nil, err
	}
	t.scans++
	procs := t.procs[:0]
	for _, pid := range t.pidBuf {
		if _, member := t.seen[pid]; !full && !member {
			if _, out := t.outside[pid]; out {
				t.outside[pid] = t.scans // still there, still outside
				continue
			}
		}
		if st, err := t.fs.stat(pid); err == nil {
			procs = append(procs, st)
		}
	}
	t.procs = procs
	return procs, nil
}

// keepMembers starts t.in from the members seen before that are still
// there with the same start time, and forgets the others.
func (t *Tree) keepMembers(procs []Proc) {
	in := t.in
	clear(in)
	for _, p := range procs {
		if start, ok := t.seen[p.PID]; ok && (start == 0 || start == p.Start) && p.PID != t.exclude {
			in[p.PID] = true
		}
	}
	for pid := range t.seen {
		if !in[pid] {
			delete(t.seen, pid)
		}
	}
}

// takeMarked takes in the processes that carry the marker in their
// environment, and their descendants. A process found without it is not
// read again; one whose environment could not be read yet is, at the next
// scan. A full scan forgets the checked processes that are gone.
func (t *Tree) takeMarked(procs []Proc, full bool) {
	in := t.in
	found := false
	for _, p := range procs {
		if in[p.PID] || p.Start < t.since || p.PID == t.exclude || p.PID == 2 || p.PPID == 2 {
			continue // a member, too old, us, or a kernel thread
		}
		id := procID{p.PID, p.Start}
		if t.checked[id] {
			continue
		}
		switch has, known := t.fs.hasEnv(p.PID, t.marker); {
		case has:
			in[p.PID], found = true, true
		case known:
			t.checked[id] = true
		default:
			t.undecided = append(t.undecided, p.PID)
		}
	}
	if found {
		t.addChildren(procs)
	}
	if full && len(t.checked) > len(procs) {
		live := make(map[procID]bool, len(procs))
		for _, p := range procs {
			live[procID{p.PID, p.Start}] = true
		}
		for id := range t.checked {
			if !live[id] {
				delete(t.checked, id)
			}
		}
	}
}

// members are the processes taken in; they are remembered as members
// (zombies aside). Those not taken in are outside, zombies included: a
// zombie cannot fork, and its parent can only change to a reaper. Those
// whose environment could not be read yet are read again at the next scan.
func (t *Tree) members(procs []Proc) []Proc {
	out := make([]Proc, 0, len(t.in))
	for _, p := range procs {
		if t.in[p.PID] {
			out = append(out, p)
			if !p.Zombie() {
				t.seen[p.PID] = p.Start
			}
		} else {
			t.outside[p.PID] = t.scans
		}
	}
	for _, pid := range t.undecided {
		delete(t.outside, pid)
	}
	t.undecided = t.undecided[:0]
	return out
}

// addChildren adds to t.in every process of procs whose parent is in it,
// until no more is added.
func (t *Tree) addChildren(procs []Proc) {
	for added := true; added; {
		added = false
		for _, p := range procs {
			if !t.in[p.PID] && t.in[p.PPID] && p.PID != t.exclude {
				t.in[p.PID], added = true, true
			}
		}
	}
}
