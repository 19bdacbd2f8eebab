package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupMemory is the memory cgroup of a process: under Slurm (with
// cgroup-based task containment) and in containers its limit, not the
// machine's RAM, is the ceiling the kernel's OOM killer enforces.
type CgroupMemory struct {
	Version int    `json:"version"` // 1 or 2
	Path    string `json:"path"`    // as /proc/PID/cgroup names it ("/slurm/uid_0/job_42/step_0")
	Dir     string `json:"dir"`     // the directory read ("/sys/fs/cgroup/memory/slurm/...")
	// LimitBytes is the effective limit: the smallest of the cgroup's own and
	// its ancestors' (v1: hierarchical_memory_limit). 0 means no limit.
	LimitBytes uint64 `json:"limit_bytes"`
	// UsageBytes is memory.current (v2) or memory.usage_in_bytes (v1): it
	// includes page cache the kernel can drop.
	UsageBytes uint64 `json:"usage_bytes"`
	// WorkingSetBytes is usage minus inactive file cache (what kubelet calls
	// the working set): the part that counts towards an OOM kill.
	WorkingSetBytes uint64 `json:"working_set_bytes"`
	// OOMKills is the cgroup's oom_kill counter (v2 memory.events, which
	// counts the cgroup and its descendants; v1 memory.oom_control, kernel
	// 4.13 or later). OOMKillsKnown is false where it cannot be read.
	OOMKills      uint64 `json:"oom_kills"`
	OOMKillsKnown bool   `json:"oom_kills_known"`
}

// cgroupUnlimited: limits at or above this are "no limit" (v1 writes
// 0x7FFFFFFFFFFFF000 for none; v2 writes "max").
const cgroupUnlimited = uint64(1) << 60

// CgroupOOMKills returns the OOM-kill counter of the memory cgroup of pid
// (procRoot is normally "/proc"), and false when it cannot be read: no memory
// cgroup (cgroup v2 root, no controller), a kernel older than 4.13 on cgroup
// v1, or the process is gone. The supervisor reads it before and after an
// attempt: a rise while the job died of SIGKILL means the kernel killed it
// for memory. The counter includes kills of every process in the cgroup, so
// on a shared cgroup another process's OOM kill counts too.
func CgroupOOMKills(procRoot string, pid int) (uint64, bool) {
	p := newProcFS(procRoot)
	cg, err := cgroupOf(p, cgroupFSRoot(procRoot), pid)
	if err != nil {
		return 0, false
	}
	if err := cg.readOOM(p); err != nil {
		return 0, false
	}
	return cg.OOMKills, cg.OOMKillsKnown
}

// ReadCgroup reads the memory cgroup of pid (procRoot is normally "/proc").
// The error says why it cannot: no memory controller mounted, the process is
// gone, the cgroup files are unreadable.
func ReadCgroup(procRoot string, pid int) (CgroupMemory, error) {
	p := newProcFS(procRoot)
	cg, err := cgroupOf(p, cgroupFSRoot(procRoot), pid)
	if err != nil {
		return CgroupMemory{}, err
	}
	if err := cg.read(p); err != nil {
		return cg, err
	}
	return cg, nil
}

// ReadOOMKills reads the OOM-kill counter of this cgroup again, through
// its directory: it works after the processes that were in it are gone (the
// supervisor reads it after an attempt ended, when the child's pid no longer
// leads anywhere). false when the counter cannot be read.
func (c CgroupMemory) ReadOOMKills() (uint64, bool) {
	if c.Dir == "" {
		return 0, false
	}
	p := newProcFS("/proc")
	if err := c.readOOM(p); err != nil {
		return 0, false
	}
	return c.OOMKills, c.OOMKillsKnown
}

// cgroupFSRoot is where the mount points named in <procRoot>/self/mountinfo
// are found: the parent of procRoot ("/" for "/proc", "/host" for
// "/host/proc", a test tree's root for "testdata/cgroup/v2/proc").
func cgroupFSRoot(procRoot string) string {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return filepath.Dir(filepath.Clean(procRoot))
}

// cgroupMount is one cgroup file system from mountinfo.
type cgroupMount struct {
	root       string // the cgroup path mounted there (field 4)
	mountPoint string
	v2         bool
	memory     bool // v1: the memory controller is mounted here
}

// cgroupOf finds the memory cgroup directory of pid. fsRoot is prepended to
// mount points.
func cgroupOf(p *procFS, fsRoot string, pid int) (CgroupMemory, error) {
	b, err := p.read(p.pidPath(pid, "cgroup"))
	if err != nil {
		return CgroupMemory{}, fmt.Errorf("memory cgroup of process %d: %w", pid, err)
	}
	var v1Path, v2Path string
	haveV1, haveV2 := false, false
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path, haveV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1Path, haveV1 = parts[2], true
			}
		}
	}
	mounts, err := cgroupMounts(p)
	if err != nil {
		return CgroupMemory{}, fmt.Errorf("memory cgroup of process %d: %w", pid, err)
	}
	if haveV1 {
		for _, m := range mounts {
			if !m.v2 && m.memory {
				return CgroupMemory{Version: 1, Path: v1Path, Dir: cgroupDir(fsRoot, m, v1Path)}, nil
			}
		}
	}
	if haveV2 {
		for _, m := range mounts {
			if m.v2 {
				return CgroupMemory{Version: 2, Path: v2Path, Dir: cgroupDir(fsRoot, m, v2Path)}, nil
			}
		}
	}
	return CgroupMemory{}, fmt.Errorf("memory cgroup of process %d: no memory cgroup is mounted (see %s/self/mountinfo)", pid, p.root)
}

// cgroupDir maps a cgroup path to a directory under the mount. A path outside
// the mounted subtree (a cgroup namespace shows "/.." paths) maps to the
// mount point itself, the closest directory the process can see.
func cgroupDir(fsRoot string, m cgroupMount, path string) string {
	rel := path
	if m.root != "/" {
		if path == m.root {
			rel = "/"
		} else if strings.HasPrefix(path, m.root+"/") {
			rel = path[len(m.root):]
		} else {
			rel = "/"
		}
	}
	if strings.HasPrefix(rel, "/..") {
		rel = "/"
	}
	return filepath.Join(fsRoot, m.mountPoint, rel)
}

// cgroupMounts lists cgroup file systems in <procRoot>/self/mountinfo.
func cgroupMounts(p *procFS) ([]cgroupMount, error) {
	f, err := os.Open(p.root + "/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []cgroupMount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 > len(fields) {
			continue
		}
		fstype := fields[sep+1]
		m := cgroupMount{root: UnescapeMountinfo(fields[3]), mountPoint: UnescapeMountinfo(fields[4])}
		switch fstype {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			for _, o := range strings.Split(fields[sep+3], ",") {
				if o == "memory" {
					m.memory = true
				}
			}
			if !m.memory {
				continue
			}
		default:
			continue
		}
		ms = append(ms, m)
	}
	return ms, sc.Err()
}

// UnescapeMountinfo undoes mountinfo's octal escapes (\040 for a space) in
// a root or mount point field of /proc/PID/mountinfo.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// read fills limit, usage, working set and the OOM-kill counter.
func (cg *CgroupMemory) read(p *procFS) error {
	if cg.Version == 2 {
		return cg.readV2(p)
	}
	return cg.readV1(p)
}

func (cg *CgroupMemory) readV2(p *procFS) error {
	cur, err := cgroupReadUint(p, cg.Dir+"/memory.current")
	if err != nil {
		return fmt.Errorf("cgroup v2 %s: %w (the root cgroup has no memory.current; is the memory controller enabled?)", cg.Dir, err)
	}
	cg.UsageBytes = cur
	// Effective limit: the smallest memory.max up the tree (the root has none).
	cg.LimitBytes = 0
	for dir := cg.Dir; ; dir = filepath.Dir(dir) {
		v, err := cgroupReadUint(p, dir+"/memory.max")
		if err != nil {
			break
		}
		if v < cgroupUnlimited && (cg.LimitBytes == 0 || v < cg.LimitBytes) {
			cg.LimitBytes = v
		}
		if dir == "/" || dir == "." {
			break
		}
	}
	cg.WorkingSetBytes = cg.UsageBytes
	if st, err := p.readHot(cg.Dir + "/memory.stat"); err == nil {
		if v, ok := cgroupKey(st, "inactive_file"); ok && v <= cg.UsageBytes {
			cg.WorkingSetBytes = cg.UsageBytes - v
		}
	}
	return cg.readOOM(p)
}

func (cg *CgroupMemory) readV1(p *procFS) error {
	use, err := cgroupReadUint(p, cg.Dir+"/memory.usage_in_bytes")
	if err != nil {
		return fmt.Errorf("cgroup v1 %s: %w", cg.Dir, err)
	}
	cg.UsageBytes = use
	cg.LimitBytes = 0
	if v, err := cgroupReadUint(p, cg.Dir+"/memory.limit_in_bytes"); err == nil && v < cgroupUnlimited {
		cg.LimitBytes = v
	}
	cg.WorkingSetBytes = cg.UsageBytes
	if st, err := p.readHot(cg.Dir + "/memory.stat"); err == nil {
		if v, ok := cgroupKey(st, "hierarchical_memory_limit"); ok && v < cgroupUnlimited && (cg.LimitBytes == 0 || v < cg.LimitBytes) {
			cg.LimitBytes = v
		}
		inactive, ok := cgroupKey(st, "total_inactive_file")
		if !ok {
			inactive, ok = cgroupKey(st, "inactive_file")
		}
		if ok && inactive <= cg.UsageBytes {
			cg.WorkingSetBytes = cg.UsageBytes - inactive
		}
	}
	return cg.readOOM(p)
}

// readOOM reads the oom_kill counter; a missing counter is not an error.
func (cg *CgroupMemory) readOOM(p *procFS) error {
	name := "/memory.events"
	if cg.Version == 1 {
		name = "/memory.oom_control"
	}
	cg.OOMKills, cg.OOMKillsKnown = 0, false
	b, err := p.readHot(cg.Dir + name)
	if err != nil {
		return nil
	}
	cg.OOMKills, cg.OOMKillsKnown = cgroupKey(b, "oom_kill")
	return nil
}

// cgroupReadUint reads a one-number file ("max" reads as unlimited).
func cgroupReadUint(p *procFS, path string) (uint64, error) {
	b, err := p.readHot(path)
	if err != nil {
		return 0, err
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return ^uint64(0), nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not a number: %q", path, s)
	}
	return v, nil
}

// cgroupKey finds "key value" in a flat-keyed file (memory.stat,
// memory.events, memory.oom_control).
func cgroupKey(b []byte, key string) (uint64, bool) {
	for line := range procLines(b) {
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(line[len(key)+1:])), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
