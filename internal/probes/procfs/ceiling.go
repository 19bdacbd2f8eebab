package procfs

import (
	"bytes"
	"fmt"
	"strconv"
)

// Ceiling kinds: what limits a job's host memory (Ceiling.Kind).
const (
	CeilingData   = "RLIMIT_DATA"               // the data segment's limit (ulimit -d): an allocation past it fails
	CeilingAS     = "RLIMIT_AS"                 // the address space's limit (ulimit -v): the same
	CeilingCgroup = "the memory cgroup's limit" // the kernel kills past it
	CeilingSlurm  = "Slurm's --mem"             // Slurm's request, enforced by its cgroup
)

// Ceiling is the host memory ceiling that applies to a process: Kind (one
// of the Ceiling constants) and Bytes; the zero Ceiling means none below
// the machine's RAM.
type Ceiling struct {
	Kind  string `json:"kind,omitempty"`
	Bytes uint64 `json:"bytes,omitempty"`
}

// ReadCeiling returns the host memory ceiling of process pid (procRoot is
// normally "/proc"): the smaller of its soft RLIMIT_DATA and RLIMIT_AS
// (/proc/PID/limits), which make an allocation fail (PyTorch's CPU
// allocator: "can't allocate memory"), when either is set below the RAM;
// else its memory cgroup's limit when below the RAM, called Slurm's --mem
// when slurmMem (the job's Slurm request in bytes, 0 outside Slurm) is
// what the cgroup enforces; else slurmMem alone; else none. An rlimit wins
// over a larger cgroup: a process under both meets its rlimit first, and
// its usage is counted per process, as Usage reads it.
func ReadCeiling(procRoot string, pid int, slurmMem uint64) (Ceiling, error) {
	p := newProcFS(procRoot)
	total, _, err := p.meminfo()
	if err != nil {
		return Ceiling{}, fmt.Errorf("reading the host memory ceiling: %w", err)
	}
	b, err := p.read(p.pidPath(pid, "limits"))
	if err != nil {
		return Ceiling{}, fmt.Errorf("reading the host memory ceiling of process %d: %w", pid, err)
	}
	var best Ceiling
	for kind, row := range map[string]string{CeilingData: "Max data size", CeilingAS: "Max address space"} {
		if v, ok := limitRow(b, row); ok && v < total && (best.Bytes == 0 || v < best.Bytes) {
			best = Ceiling{Kind: kind, Bytes: v}
		}
	}
	if best.Bytes > 0 {
		return best, nil
	}
	if cg, err := cgroupOf(p, cgroupFSRoot(procRoot), pid); err == nil && cg.read(p) == nil && cg.LimitBytes > 0 && cg.LimitBytes < total {
		kind := CeilingCgroup
		if slurmMem > 0 && cg.LimitBytes <= slurmMem+slurmMem/16 && cg.LimitBytes+cg.LimitBytes/16 >= slurmMem {
			kind = CeilingSlurm
		}
		return Ceiling{Kind: kind, Bytes: cg.LimitBytes}, nil
	}
	if slurmMem > 0 && slurmMem < total {
		return Ceiling{Kind: CeilingSlurm, Bytes: slurmMem}, nil
	}
	return Ceiling{}, nil
}

// limitRow reads the soft limit of a row of /proc/PID/limits ("Max data
// size  8589934592  unlimited  bytes"); false when unlimited or absent.
func limitRow(b []byte, name string) (uint64, bool) {
	for line := range procLines(b) {
		rest, ok := bytes.CutPrefix(line, []byte(name))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 64)
		return v, err == nil
	}
	return 0, false
}

// Usage returns what process pid uses of a per-process ceiling of kind k:
// its data segment (VmData) under RLIMIT_DATA, its address space (VmSize)
// under RLIMIT_AS, from /proc/PID/status; false for other kinds (a
// cgroup's usage is the sampler's) or when it cannot be read.
func Usage(procRoot string, pid int, k string) (uint64, bool) {
	key := ""
	switch k {
	case CeilingData:
		key = "VmData:"
	case CeilingAS:
		key = "VmSize:"
	default:
		return 0, false
	}
	p := newProcFS(procRoot)
	b, err := p.read(p.pidPath(pid, "status"))
	if err != nil {
		return 0, false
	}
	for line := range procLines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return procKB(rest), true
		}
	}
	return 0, false
}
