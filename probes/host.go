package probes

import (
	"fmt"
	"time"
)

// HostSample is one measurement of a job's host memory.
type HostSample struct {
	RootPID   int `json:"root_pid"`
	Processes int `json:"processes"` // in the tree, the root included
	// Workers counts DataLoader-like worker processes in the tree. The rule:
	// a process is a worker when (1) it runs Python (its executable's name,
	// or its command name when the executable cannot be read, starts with
	// "python", or is one of PyTorch's thread names "pt_..."), (2) its parent
	// is in the tree and runs Python too, and (3) it was forked from that
	// parent without exec (its command line equals its parent's: the fork
	// and forkserver start methods) or started by multiprocessing's spawn
	// method (its command line names multiprocessing.spawn or
	// --multiprocessing-fork). Ranks that torchrun starts are exec'd with
	// their own command line and are not counted; neither are
	// multiprocessing's resource tracker and forkserver processes themselves.
	Workers int `json:"workers"`
	// RSSBytes is the sum of the tree's resident set sizes. Forked workers
	// share pages with their parent, so it overstates the real footprint.
	RSSBytes uint64 `json:"rss_bytes"`
	// PSSBytes is the sum of the proportional set sizes (shared pages split
	// between their sharers), from /proc/PID/smaps_rollup; for a process
	// whose smaps_rollup cannot be read its RSS is counted instead, and
	// PSSComplete is false.
	PSSBytes    uint64 `json:"pss_bytes"`
	PSSComplete bool   `json:"pss_complete"`
	// MemTotalBytes and MemAvailableBytes are the machine's (/proc/meminfo).
	MemTotalBytes     uint64 `json:"mem_total_bytes"`
	MemAvailableBytes uint64 `json:"mem_available_bytes"`
	// Cgroup is the root process's memory cgroup; nil when unknown (CgroupErr
	// says why).
	Cgroup    *CgroupMemory `json:"cgroup,omitempty"`
	CgroupErr string        `json:"cgroup_error,omitempty"`
}

// TreeBytes is the job's footprint: PSS (RSS where PSS was unreadable).
func (h HostSample) TreeBytes() uint64 {
	if h.PSSBytes > 0 {
		return h.PSSBytes
	}
	return h.RSSBytes
}

// LimitBytes is the ceiling that applies to the job: the cgroup's limit when
// there is one below the machine's RAM, else the RAM.
func (h HostSample) LimitBytes() uint64 {
	if h.Cgroup != nil && h.Cgroup.LimitBytes > 0 && (h.MemTotalBytes == 0 || h.Cgroup.LimitBytes < h.MemTotalBytes) {
		return h.Cgroup.LimitBytes
	}
	return h.MemTotalBytes
}

// ReadHost measures the process tree of rootPID (pass the job's pid) under
// procRoot (normally "/proc"): RSS and PSS of every process, the worker
// count, the machine's MemTotal/MemAvailable and the memory cgroup of
// rootPID. It fails when rootPID is gone or /proc/meminfo is unreadable;
// processes of the tree that exit while it reads are skipped, and a cgroup
// that cannot be read leaves Cgroup nil with CgroupErr saying why.
func ReadHost(procRoot string, rootPID int) (HostSample, error) {
	r := newHostReader(procRoot)
	return r.read(rootPID, time.Now(), true)
}

// hostReader is the stateful reader the sampler uses: it keeps one buffer,
// caches command lines, executables and PSS per process, and refreshes them
// (and the cgroup's location) at most once per refresh period, since reading
// smaps_rollup walks the page tables of the whole process.
type hostReader struct {
	p       *procFS
	fsRoot  string
	refresh time.Duration

	tree     []procStat
	procs    map[int]*hostProc
	lastFull time.Time
	tick     uint64

	cgPID  int
	cg     *CgroupMemory
	cgErr  string
	cgSeen bool
}

// hostProc is what the reader remembers about one process.
type hostProc struct {
	start    uint64
	exe      string
	cmdline  string
	pss      uint64
	pssOK    bool
	seenTick uint64
}

func newHostReader(procRoot string) *hostReader {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &hostReader{
		p:       newProcFS(procRoot),
		fsRoot:  cgroupFSRoot(procRoot),
		refresh: time.Second,
		procs:   map[int]*hostProc{},
	}
}

// read measures the tree of rootPID. full forces the refresh of PSS, command
// lines and the cgroup location.
func (r *hostReader) read(rootPID int, now time.Time, full bool) (HostSample, error) {
	hs := HostSample{RootPID: rootPID}
	var err error
	r.tree, err = r.p.tree(rootPID, r.tree)
	if err != nil {
		return hs, err
	}
	if now.Sub(r.lastFull) >= r.refresh || r.lastFull.IsZero() {
		full = true
	}
	if full {
		r.lastFull = now
	}
	r.tick++
	tick := r.tick
	hs.Processes = len(r.tree)
	hs.PSSComplete = true
	for _, st := range r.tree {
		hp := r.procs[st.PID]
		fresh := false
		if hp == nil || hp.start != st.Start {
			hp = &hostProc{start: st.Start}
			r.procs[st.PID] = hp
			fresh = true
		}
		hp.seenTick = tick
		if fresh || full {
			hp.exe = r.p.exe(st.PID)
			if hp.exe == "" {
				hp.exe = st.Comm
			}
			hp.cmdline = r.p.cmdline(st.PID)
			pss, _, perr := r.p.pss(st.PID)
			hp.pss, hp.pssOK = pss, perr == nil
		}
		hs.RSSBytes += st.RSSBytes
		if hp.pssOK {
			hs.PSSBytes += hp.pss
		} else {
			hs.PSSBytes += st.RSSBytes
			hs.PSSComplete = false
		}
	}
	// Forget processes that are gone, so the cache stays the tree's size.
	for pid, hp := range r.procs {
		if hp.seenTick != tick {
			delete(r.procs, pid)
		}
	}
	hs.Workers = r.workers()
	hs.MemTotalBytes, hs.MemAvailableBytes, err = r.p.meminfo()
	if err != nil {
		return hs, fmt.Errorf("host memory: %w", err)
	}
	if full || r.cgPID != rootPID || !r.cgSeen {
		r.locateCgroup(rootPID)
	}
	if r.cg != nil {
		cg := *r.cg
		if err := cg.read(r.p); err != nil {
			// Moved to another cgroup, or removed: look again next time.
			r.cgSeen = false
			hs.CgroupErr = err.Error()
		} else {
			hs.Cgroup = &cg
		}
	} else {
		hs.CgroupErr = r.cgErr
	}
	return hs, nil
}

func (r *hostReader) locateCgroup(pid int) {
	r.cgPID, r.cgSeen = pid, true
	cg, err := cgroupOf(r.p, r.fsRoot, pid)
	if err != nil {
		r.cg, r.cgErr = nil, err.Error()
		return
	}
	r.cg, r.cgErr = &cg, ""
}

// workers applies the rule documented on HostSample.Workers to r.tree.
func (r *hostReader) workers() int {
	n := 0
	for _, st := range r.tree[1:] {
		hp, parent := r.procs[st.PID], r.procs[st.PPID]
		if hp == nil || parent == nil {
			continue
		}
		if !isPythonName(hp.exe) || !isPythonName(parent.exe) {
			continue
		}
		if (hp.cmdline != "" && hp.cmdline == parent.cmdline) || isMultiprocessingChild(hp.cmdline) {
			n++
		}
	}
	return n
}

// pids returns the PIDs of the tree of the last read (for NVML attribution).
func (r *hostReader) pids(out []int) []int {
	out = out[:0]
	for _, st := range r.tree {
		out = append(out, st.PID)
	}
	return out
}
