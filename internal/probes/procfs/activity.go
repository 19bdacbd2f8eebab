package procfs

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// This file reads what a job's processes are doing, for the hang
// watchdog's second signal: each process's CPU time (utime + stime of
// /proc/PID/stat) and I/O (rchar + wchar of /proc/PID/io: every byte
// through read and write, pipes and sockets included), and how long its
// threads waited for a CPU (schedstat's run-queue time, per thread). The
// counters are cumulative; the watchdog compares two readings a window
// apart. The wait tells a process that wants a CPU on a busy machine from
// one that sleeps: a spin beside other work may get little CPU time, but it
// is runnable the whole window.

// ClockTicks is the unit of the CPU times of /proc/PID/stat (USER_HZ). It
// is 100 on every Linux architecture gpuguard runs on.
const ClockTicks = 100

// Activity is one process's cumulative counters at one reading.
type Activity struct {
	PID, PPID int
	Start     uint64 // with PID, identifies the process
	State     byte
	Comm      string
	CPUTicks  uint64 // utime + stime, in ClockTicks
	IOBytes   uint64 // rchar + wchar
	IOKnown   bool   // /proc/PID/io could be read (same user or root)
	// RunQueueNs: nanoseconds the process's threads have waited on a run
	// queue, runnable but not running, summed (kernels without
	// CONFIG_SCHED_INFO have no schedstat: 0).
	RunQueueNs uint64
}

// Zombie reports whether the process has exited and waits to be reaped.
func (a Activity) Zombie() bool { return a.State == 'Z' || a.State == 'X' }

// ActivityReader reads Activity. Not safe for concurrent use: it reuses
// one buffer.
type ActivityReader struct{ fs *procFS }

// NewActivityReader reads under procRoot ("/proc" when empty).
func NewActivityReader(procRoot string) *ActivityReader {
	return &ActivityReader{fs: newProcFS(procRoot)}
}

// Read appends to dst the activity of each process of procs that is still
// there, and returns the extended slice. A process that is gone, or whose
// pid now names another process, is left out.
func (r *ActivityReader) Read(dst []Activity, procs []Proc) []Activity {
	for _, p := range procs {
		b, err := r.fs.read(r.fs.pidPath(p.PID, "stat"))
		if err != nil {
			continue
		}
		a, ok := parseActivityStat(p.PID, b)
		if !ok || (p.Start != 0 && a.Start != p.Start) {
			continue
		}
		if b, err := r.fs.read(r.fs.pidPath(p.PID, "io")); err == nil {
			a.IOBytes, a.IOKnown = parseIO(b), true
		}
		a.RunQueueNs = r.runQueueNs(p.PID)
		dst = append(dst, a)
	}
	return dst
}

// ZombieChildren appends to dst the children of procs that have exited
// and wait to be reaped, which a job's process list leaves out: a worker
// its parent never waited for. It reads /proc/PID/task/TID/children of
// every thread of each process (kernels built without
// CONFIG_PROC_CHILDREN have none: it finds nothing there).
func (r *ActivityReader) ZombieChildren(dst []Activity, procs []Proc) []Activity {
	live := make(map[int]bool, len(procs))
	for _, p := range procs {
		live[p.PID] = true
	}
	for _, p := range procs {
		tasks, err := os.ReadDir(r.fs.pidPath(p.PID, "task"))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := r.fs.read(r.fs.pidPath(p.PID, "task/"+t.Name()+"/children"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil || live[pid] {
					continue
				}
				sb, err := r.fs.read(r.fs.pidPath(pid, "stat"))
				if err != nil {
					continue
				}
				if a, ok := parseActivityStat(pid, sb); ok && a.Zombie() && a.PPID == p.PID {
					live[pid] = true
					dst = append(dst, a)
				}
			}
		}
	}
	return dst
}

// Cmdline is /proc/PID/cmdline with NULs as spaces ("" for zombies and
// processes that are gone).
func (r *ActivityReader) Cmdline(pid int) string { return r.fs.cmdline(pid) }

// IsLoaderWorker says whether a process looks like a data loader worker
// of its parent: PyTorch names its DataLoader workers pt_data_worker; a
// worker Python's multiprocessing forked has its parent's command line; one
// it spawned runs multiprocessing.spawn.
func IsLoaderWorker(comm, cmdline, parentComm, parentCmdline string) bool {
	switch {
	case strings.HasPrefix(comm, "pt_data_worker"):
		return true
	case isMultiprocessingChild(cmdline):
		return true
	case cmdline != "" && cmdline == parentCmdline && comm == parentComm:
		return true // forked without exec
	}
	return false
}

// parseActivityStat reads state, ppid, utime, stime and starttime from
// /proc/PID/stat, counting fields from the last ')'.
func parseActivityStat(pid int, b []byte) (Activity, bool) {
	a := Activity{PID: pid}
	comm, rest, ok := splitStat(b)
	if !ok {
		return a, false
	}
	a.Comm = comm
	// Fields after the comm, 0-based: 0 state, 1 ppid, 11 utime, 12 stime,
	// 19 starttime.
	for field, f := range statFields(rest) {
		switch field {
		case 0:
			if len(f) > 0 {
				a.State = f[0]
			}
		case 1:
			a.PPID = int(procAtoi(f))
		case 11, 12:
			a.CPUTicks += procAtoi(f)
		case 19:
			a.Start = procAtoi(f)
			return a, true
		}
	}
	return a, false
}

// parseIO sums rchar and wchar of /proc/PID/io.
func parseIO(b []byte) uint64 {
	var n uint64
	for line := range procLines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("rchar: ")); ok {
			n += procAtoi(v)
		} else if v, ok := bytes.CutPrefix(line, []byte("wchar: ")); ok {
			n += procAtoi(v)
		}
	}
	return n
}

// runQueueNs sums the run-queue wait of every thread of pid
// (/proc/PID/task/TID/schedstat): a PyTorch process's compute threads wait
// for a CPU while its main thread sleeps in a join. Where the threads cannot
// be listed, the main thread's (/proc/PID/schedstat).
func (r *ActivityReader) runQueueNs(pid int) uint64 {
	tasks, err := os.ReadDir(r.fs.pidPath(pid, "task"))
	if err != nil {
		if b, err := r.fs.read(r.fs.pidPath(pid, "schedstat")); err == nil {
			return parseSchedstat(b)
		}
		return 0
	}
	var n uint64
	for _, t := range tasks {
		if b, err := r.fs.read(r.fs.pidPath(pid, "task/"+t.Name()+"/schedstat")); err == nil {
			n += parseSchedstat(b)
		}
	}
	return n
}

// parseSchedstat reads the run-queue wait of /proc/PID/schedstat: "time on
// a CPU (ns) time waiting on a run queue (ns) time slices".
func parseSchedstat(b []byte) uint64 {
	_, rest, ok := bytes.Cut(bytes.TrimSpace(b), []byte(" "))
	if !ok {
		return 0
	}
	wait, _, _ := bytes.Cut(rest, []byte(" "))
	return procAtoi(wait)
}
