package supervisor

import (
	"os"

	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// cgroupOOMHook counts the kernel's OOM kills in gpuguard's cgroup during
// each attempt (memory.events' oom_kill, before and after): a job killed by
// the cgroup's limit died of host memory, whatever signal it shows.
type cgroupOOMHook struct {
	kills0 uint64
	ok     bool // kills0 was read
}

func (h *cgroupOOMHook) attemptStarting(*attemptRun) {
	h.kills0, h.ok = procfs.CgroupOOMKills("/proc", os.Getpid())
}

func (h *cgroupOOMHook) stopped(a *attemptRun) {
	if kills1, ok := procfs.CgroupOOMKills("/proc", os.Getpid()); ok && h.ok && kills1 > h.kills0 {
		a.exit.CgroupOOMKills = int(kills1 - h.kills0)
	}
}
