package supervisor

import (
	"os"

	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// cgroupOOMHook counts the kernel's OOM kills in gpuguard's memory cgroup
// during each attempt (its oom_kill counter, before and after): a job that
// the cgroup's limit killed died of host memory, whatever signal it shows.
type cgroupOOMHook struct {
	kills  func() (uint64, bool) // the counter now; false: it cannot be read
	kills0 uint64
	ok     bool // kills0 was read
}

func newCgroupOOMHook() *cgroupOOMHook {
	return &cgroupOOMHook{kills: func() (uint64, bool) { return procfs.CgroupOOMKills("/proc", os.Getpid()) }}
}

func (h *cgroupOOMHook) attemptStarting(*attemptRun) { h.kills0, h.ok = h.kills() }

func (h *cgroupOOMHook) stopped(a *attemptRun) {
	if kills1, ok := h.kills(); ok && h.ok && kills1 > h.kills0 {
		a.exit.CgroupOOMKills = int(kills1 - h.kills0)
	}
}
