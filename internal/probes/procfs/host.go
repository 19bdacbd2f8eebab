package procfs

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// HostSample is one measurement of a job's host memory.
type HostSample struct {
	RootPID   int `json:"root_pid"`
	Processes int `json:"processes"` // the job's, the root included
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
	// MainBytes and WorkerBytes split the footprint (TreeBytes) by role:
	// the workers Workers counts, and every other member (roles.go).
	MainBytes, WorkerBytes uint64 `json:"-"`
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

// ReadHost measures the process tree of rootPID under procRoot (normally
// "/proc"): the root and its descendants (parentage alone: no job marker;
// see Tree), their RSS and PSS, the worker count, the machine's
// MemTotal/MemAvailable and the memory cgroup of rootPID. It is for callers
// with no supervisor (gpuguard doctor); a supervised job is measured with
// HostReader.ReadJob. It fails when rootPID is gone or /proc/meminfo is
// unreadable; processes of the tree that exit while it reads are skipped,
// and a cgroup that cannot be read leaves Cgroup nil with CgroupErr saying
// why.
func ReadHost(procRoot string, rootPID int) (HostSample, error) {
	r := NewHostReader(procRoot)
	defer r.Close()
	return r.Read(rootPID, time.Now(), true)
}

// HostReader is the stateful reader the sampler uses. It takes the job's
// members from a ProcessList (and refreshes their PSS, command lines and
// executables, and the cgroup's location) at most once per refresh period,
// since reading smaps_rollup walks the page tables of the whole process; in
// between it re-reads only the RSS of the known members (statm), through
// descriptors it keeps open, and the hot cgroup and meminfo files. A
// process that joins the job between two refreshes is counted from the next
// one on. Close releases the descriptors.
type HostReader struct {
	p       *procFS
	fsRoot  string
	refresh time.Duration

	own   *Tree  // what Read measures: rootPID's tree, by parentage
	list  []Proc // the job's process list, as ProcessList gave it
	check []Proc // the list again, between refreshes (membersChanged)

	root     int
	tree     []Proc // the members measured, root first
	procs    map[int]*hostProc
	lastFull time.Time
	tick     uint64

	cgPID int
	cg    *CgroupMemory
	cgErr string
}

// hostProc is what the reader remembers about one process.
type hostProc struct {
	start   uint64
	comm    string
	fd      int // open statm file, -1 when none
	exe     string
	cmdline string
	pss     uint64
	pssOK   bool
	// pssRSS is the RSS read with pss: between two refreshes (smaps_rollup
	// is dear to read), the process's PSS follows its RSS from there.
	pssRSS   uint64
	seenTick uint64
}

// NewHostReader returns a reader of jobs under procRoot ("/proc" when
// empty); Close releases the descriptors it keeps.
func NewHostReader(procRoot string) *HostReader {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &HostReader{
		p:       newProcFS(procRoot),
		fsRoot:  cgroupFSRoot(procRoot),
		refresh: time.Second,
		procs:   map[int]*hostProc{},
	}
}

// KeepOpen keeps the files the reader reads at each sample open between
// reads (the sampler's reader: one pread instead of open, read and close).
func (r *HostReader) KeepOpen() { r.p.hot = true }

// Close releases every descriptor the reader holds.
func (r *HostReader) Close() {
	for pid, hp := range r.procs {
		if hp.fd >= 0 {
			syscall.Close(hp.fd)
		}
		delete(r.procs, pid)
	}
	r.p.close()
}

// ReadJob measures the processes of job, as job.Processes lists them, with
// job.PID as the root (whose cgroup is measured). full forces a refresh of
// the member list. It fails when the root is gone.
func (r *HostReader) ReadJob(job ProcessList, now time.Time, full bool) (HostSample, error) {
	return r.read(job.PID(), job, now, full)
}

// Read measures the tree of rootPID: the root and its descendants, found by
// a Tree of the reader's own with no marker (a job's processes that left the
// tree are not found: a supervised job is measured with ReadJob). full
// forces a scan.
func (r *HostReader) Read(rootPID int, now time.Time, full bool) (HostSample, error) {
	if r.own == nil || r.own.PID() != rootPID {
		r.own = NewTree(r.p.root, "")
		r.own.SetRoot(rootPID)
		full = true
	}
	return r.read(rootPID, nil, now, full)
}

// read measures the members of job (of r.own when job is nil).
func (r *HostReader) read(rootPID int, job ProcessList, now time.Time, full bool) (HostSample, error) {
	hs := HostSample{RootPID: rootPID}
	if rootPID != r.root || r.lastFull.IsZero() || now.Sub(r.lastFull) >= r.refresh {
		full = true
	}
	r.tick++
	if !full && job != nil && r.membersChanged(job) {
		// The supervisor's tracker found a process join or leave the job
		// (a DataLoader worker): measure it now, not at the next refresh.
		full = true
	}
	if full {
		if job == nil {
			r.own.ScanQuick()
			job = r.own
		}
		if err := r.refreshMembers(rootPID, job); err != nil {
			return hs, err
		}
		r.lastFull = now
	} else if err := r.restat(rootPID); err != nil {
		return hs, err
	}
	hs.Processes = len(r.tree)
	hs.PSSComplete = true
	for _, st := range r.tree {
		hp := r.procs[st.PID]
		hs.RSSBytes += st.RSSBytes
		if hp != nil && hp.pssOK {
			// Memory the process gained or gave back since its PSS was
			// read is its own (a process's new pages are private until it
			// forks): every sample sees it, not only the refreshes.
			hs.PSSBytes += uint64(max(0, int64(hp.pss)+int64(st.RSSBytes)-int64(hp.pssRSS)))
		} else {
			hs.PSSBytes += st.RSSBytes
			hs.PSSComplete = false
		}
	}
	hs.Workers = r.Workers()
	hs.MainBytes, hs.WorkerBytes = r.roles()
	var err error
	hs.MemTotalBytes, hs.MemAvailableBytes, err = r.p.meminfo()
	if err != nil {
		return hs, fmt.Errorf("host memory: %w", err)
	}
	if full || r.cgPID != rootPID {
		r.locateCgroup(rootPID)
	}
	if r.cg != nil {
		cg := *r.cg
		if err := cg.read(r.p); err != nil {
			hs.CgroupErr = err.Error() // moved or removed: located again at the next refresh
		} else {
			hs.Cgroup = &cg
		}
	} else {
		hs.CgroupErr = r.cgErr
	}
	return hs, nil
}

// refreshMembers takes the members from job, reads their stat (the list may
// be a scan old: a member that is gone since, or whose pid was reused, is
// left out), and refreshes what is cached about them.
func (r *HostReader) refreshMembers(rootPID int, job ProcessList) error {
	root, err := r.p.stat(rootPID)
	if err != nil {
		return fmt.Errorf("process %d: %w", rootPID, err)
	}
	r.root = rootPID
	r.tree = append(r.tree[:0], root)
	r.list = job.Processes(r.list[:0])
	for _, m := range r.list {
		if m.PID == rootPID {
			continue
		}
		if st, err := r.p.stat(m.PID); err == nil && st.Start == m.Start {
			r.tree = append(r.tree, st)
		}
	}
	for _, st := range r.tree {
		hp := r.procs[st.PID]
		if hp != nil && hp.start != st.Start {
			r.forget(st.PID) // a reused PID
			hp = nil
		}
		if hp == nil {
			hp = &hostProc{start: st.Start, fd: -1}
			r.procs[st.PID] = hp
			if r.p.hot {
				if fd, err := syscall.Open(r.p.pidPath(st.PID, "statm"), syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
					hp.fd = fd
				}
			}
		}
		hp.seenTick = r.tick
		if hp.comm != st.Comm || hp.cmdline == "" {
			// New, or exec'd since (exec changes the command name).
			hp.comm = st.Comm
			hp.exe = r.p.exe(st.PID)
			if hp.exe == "" {
				hp.exe = st.Comm
			}
			hp.cmdline = r.p.cmdline(st.PID)
		}
		pss, _, perr := r.p.pss(st.PID)
		hp.pss, hp.pssOK, hp.pssRSS = pss, perr == nil, st.RSSBytes
	}
	for pid, hp := range r.procs {
		if hp.seenTick != r.tick {
			r.forget(pid)
		}
	}
	return nil
}

// restat re-reads the RSS of the members found by the last refresh.
// membersChanged reports whether job's processes differ from those the last
// refresh measured. It reads nothing: job's list is the tracker's last scan.
func (r *HostReader) membersChanged(job ProcessList) bool {
	r.check = job.Processes(r.check[:0])
	if len(r.check) != len(r.list) {
		return true
	}
	for i := range r.check {
		if r.check[i].PID != r.list[i].PID || r.check[i].Start != r.list[i].Start {
			return true
		}
	}
	return false
}

func (r *HostReader) restat(rootPID int) error {
	n := 0
	for _, old := range r.tree {
		hp := r.procs[old.PID]
		st := old
		var err error
		if hp != nil && hp.fd >= 0 {
			// statm through the descriptor: it names the process the refresh
			// found (a reused PID does not), and costs less than stat.
			st.RSSBytes, err = r.p.statmRSS(old.PID, hp.fd)
		} else {
			st, err = r.p.stat(old.PID)
		}
		if err != nil || st.Start != old.Start {
			if old.PID == rootPID {
				return fmt.Errorf("process %d: %w", rootPID, os.ErrNotExist)
			}
			r.forget(old.PID)
			continue
		}
		r.tree[n] = st
		n++
	}
	r.tree = r.tree[:n]
	return nil
}

func (r *HostReader) forget(pid int) {
	if hp := r.procs[pid]; hp != nil && hp.fd >= 0 {
		syscall.Close(hp.fd)
	}
	delete(r.procs, pid)
}

func (r *HostReader) locateCgroup(pid int) {
	r.cgPID = pid
	cg, err := cgroupOf(r.p, r.fsRoot, pid)
	if r.cg != nil && (err != nil || cg.Dir != r.cg.Dir) {
		r.p.closeUnder(r.cg.Dir + "/") // the old cgroup's files kept open
	}
	if err != nil {
		r.cg, r.cgErr = nil, err.Error()
		return
	}
	r.cg, r.cgErr = &cg, ""
}

// Workers applies the rule documented on HostSample.Workers to the members
// measured last.
func (r *HostReader) Workers() int {
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

// Pids returns the PIDs of the members measured last (for NVML
// attribution).
func (r *HostReader) Pids(out []int) []int {
	out = out[:0]
	for _, st := range r.tree {
		out = append(out, st.PID)
	}
	return out
}
