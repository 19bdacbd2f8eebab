package supervisor

// hostMemHook tells the policy what it measured of the job's host memory
// (policy.Outcome.Host): the ceiling that applies to the job (its
// RLIMIT_DATA or RLIMIT_AS, its memory cgroup's limit, Slurm's --mem),
// the job's use of it when each phase began and at its highest, and, from
// the memory sampler's last sample, what held the memory by role (main
// process, DataLoader workers, other processes). After a host OOM the
// policy follows what held the memory; fit sets the batch from the
// ceiling and the phase's figures instead of halving.
//
// A per-process ceiling (an rlimit) is read as the kernel counts it, from
// the job's root process (/proc/PID/status: VmData, VmSize), when a phase
// begins and at its steps, at most every readEvery; a cgroup's from the
// sampler's per-phase peaks.

import (
	"sync"
	"time"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

type hostMemHook struct {
	l *loop

	mu      sync.Mutex
	pid     int
	slurm   uint64 // Slurm's --mem in bytes (0: none)
	ceiling procfs.Ceiling
	phase   classify.Phase
	starts  map[classify.Phase]int64
	peaks   map[classify.Phase]int64
	last    int64
	read    time.Time
	sampler *memory.Sampler
}

// readEvery bounds how often a step reads the root's status file.
const readEvery = 50 * time.Millisecond

func (h *hostMemHook) attemptStarting(a *attemptRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pid, h.ceiling, h.phase, h.last, h.read = 0, procfs.Ceiling{}, classify.PhaseNone, 0, time.Time{}
	h.starts, h.peaks = map[classify.Phase]int64{}, map[classify.Phase]int64{}
	h.sampler = a.sampler
}

func (h *hostMemHook) started(a *attemptRun, p process) {
	var slurm uint64
	if m := h.l.slurmMem(); m != nil && !m.PerCPU {
		slurm = uint64(m.MiB) << 20
	}
	c, err := procfs.ReadCeiling("/proc", p.PID(), slurm)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pid, h.slurm = p.PID(), slurm
	if err == nil {
		h.ceiling = c
	}
	// No reading now: the process may still be a wrapper that has not
	// exec'd the job (its data segment is not the job's).
}

func (h *hostMemHook) event(a *attemptRun, ev classify.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Type {
	case classify.EventPhase:
		h.phase = ev.Phase
		if h.pid != 0 {
			// Again: a wrapper (sh -c 'ulimit -d ...; exec ...') sets the
			// limit after the process started.
			if c, err := procfs.ReadCeiling("/proc", h.pid, h.slurm); err == nil {
				h.ceiling = c
			}
		}
		h.sample(true)
	case classify.EventStep:
		h.sample(false)
	case classify.EventFailure:
		// The last reading: what was in use when the request failed (a
		// refused allocation adds nothing), the job still alive.
		if h.ceiling.Kind == "" && h.pid != 0 {
			if c, err := procfs.ReadCeiling("/proc", h.pid, h.slurm); err == nil {
				h.ceiling = c
			}
		}
		h.read = time.Time{}
		h.sample(false)
	}
}

// sample reads the root's use of a per-process ceiling (phaseStart: the
// phase just began, read now whatever the interval). Called with h.mu.
func (h *hostMemHook) sample(phaseStart bool) {
	if h.pid == 0 || h.ceiling.Kind != procfs.CeilingData && h.ceiling.Kind != procfs.CeilingAS {
		return
	}
	now := time.Now()
	if !phaseStart && now.Sub(h.read) < readEvery {
		return
	}
	u, ok := procfs.Usage("/proc", h.pid, h.ceiling.Kind)
	if !ok {
		return
	}
	h.read, h.last = now, int64(u)
	if _, seen := h.starts[h.phase]; !seen || phaseStart && h.starts[h.phase] == 0 {
		h.starts[h.phase] = int64(u)
	}
	h.peaks[h.phase] = max(h.peaks[h.phase], int64(u))
}

func (h *hostMemHook) asking(out *policy.Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sampler == nil {
		return
	}
	hm := &policy.HostMemory{Ceiling: int64(h.ceiling.Bytes), CeilingFrom: h.ceiling.Kind}
	switch h.ceiling.Kind {
	case procfs.CeilingData, procfs.CeilingAS:
		hm.Starts, hm.Peaks, hm.Last = h.starts, h.peaks, h.last
	default:
		// A cgroup counts the job's processes together: the sampler's
		// per-phase peaks are in its units.
		hm.Peaks = map[classify.Phase]int64{}
		for _, ps := range h.sampler.Summary().Phases {
			hm.Peaks[ps.Phase] = int64(ps.HostPeakBytes)
		}
	}
	hs := h.sampler.LastHost()
	if hs.Processes > 0 {
		hm.Main, hm.Workers, hm.Other = int64(hs.MainBytes), int64(hs.WorkerBytes), int64(hs.OtherBytes())
		hm.Limit = int64(hs.LimitBytes())
	}
	out.Host = hm
}

// revise leaves the decision as it is.
func (h *hostMemHook) revise(o *outcome, out *policy.Outcome, d policy.Decision) (policy.Decision, int, action) {
	return d, 0, goOn
}
