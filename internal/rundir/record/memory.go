package record

import (
	"math"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// The memory sampler's record (package memory names these types too). They
// are defined here so that report reads them without the sampler's GPU
// and /proc code.

// WarningKind names a kind of memory warning; the values are a contract
// (events.jsonl, docs/memory.md).
type WarningKind string

const (
	WarnHostMemory WarningKind = "host_memory"            // host memory over 90% of the cgroup limit or RAM
	WarnValPeak    WarningKind = "val_peak_near_capacity" // a validation peak within 5% of a GPU's capacity
	WarnLeakTrend  WarningKind = "leak_trend"             // the same phase peaks higher run after run
	WarnGrowth     WarningKind = "growth_projection"      // a fit over the runs' peaks reaches the ceiling (memory.Project)
	// WarnAllocOption: the job's PyTorch refused an allocator option
	// gpuguard added (not a memory warning; journalled as one warning).
	WarnAllocOption WarningKind = "allocator_option_refused"
)

// MemoryWarning is a memory warning raised while the job runs
// (memory.Warning): the "warning" of a Warning event.
type MemoryWarning struct {
	Kind      WarningKind    `json:"kind"`
	Attempt   int            `json:"attempt"`
	Phase     classify.Phase `json:"phase"`
	Epoch     int64          `json:"epoch"` // epoch (or, when epochs are unknown, the phase's run number); -1 when unknown
	Device    string         `json:"device"`
	UsedBytes uint64         `json:"used_bytes"`
	// LimitBytes is the capacity the use is measured against.
	LimitBytes uint64 `json:"limit_bytes"`
	// For leak trends: growth per epoch (or run), the epochs the trend spans,
	// and the first epoch at which the projected peak exceeds LimitBytes.
	GrowthPerEpochBytes uint64  `json:"growth_per_epoch_bytes,omitempty"`
	TrendEpochs         []int64 `json:"trend_epochs,omitempty"`
	FailEpoch           int64   `json:"fail_epoch,omitempty"`
	ElapsedMs           int64   `json:"elapsed_ms"`
	Message             string  `json:"message"`
}

// MemorySummary is what a sampler saw during one attempt (memory.Summary):
// peaks per phase. It is the "summary" of a Memory event, and each
// attempt's "memory" in state.json.
type MemorySummary struct {
	Attempt int       `json:"attempt"`
	Origin  time.Time `json:"origin"`
	Samples int       `json:"samples"`
	FirstMs int64     `json:"first_ms"`
	LastMs  int64     `json:"last_ms"`
	// GPUUnavailable says why there are no GPU figures ("" when sampled).
	GPUUnavailable string      `json:"gpu_unavailable,omitempty"`
	Devices        []GPUDevice `json:"devices,omitempty"`
	// Phases in the order train, val, other phases by name, then "" (before
	// any phase marker).
	Phases []PhaseSummary `json:"phases"`
}

// PhaseSummary holds the peaks of one phase (memory.PhaseSummary).
type PhaseSummary struct {
	Phase   classify.Phase `json:"phase"`
	Samples int            `json:"samples"`
	GPU     []DevicePeak   `json:"gpu,omitempty"`
	// PeakFraction is the largest peak/capacity over the GPUs (0 without).
	PeakFraction float64 `json:"peak_fraction"`
	// StartFraction is the largest fraction of a GPU in use at the phase's
	// first sample (0 without GPU figures): about the phase's fixed part.
	StartFraction float64 `json:"start_fraction,omitempty"`
	// Host: the process tree's peak (PSS) against the ceiling that applies.
	HostPeakBytes    uint64  `json:"host_peak_bytes"`
	HostLimitBytes   uint64  `json:"host_limit_bytes"`
	HostPeakMs       int64   `json:"host_peak_ms"`
	HostPeakFraction float64 `json:"host_peak_fraction"`
	// Cgroup: the working set's peak against the cgroup limit (0 when the
	// cgroup has no limit).
	CgroupPeakBytes  uint64 `json:"cgroup_peak_bytes,omitempty"`
	CgroupLimitBytes uint64 `json:"cgroup_limit_bytes,omitempty"`
	// RAM: the machine's peak use (MemTotal - MemAvailable) against MemTotal.
	RAMPeakBytes  uint64 `json:"ram_peak_bytes"`
	RAMTotalBytes uint64 `json:"ram_total_bytes"`
	MaxWorkers    int    `json:"max_workers"`
	// HostCeiling names the host ceiling that applies to the job
	// (RLIMIT_DATA, RLIMIT_AS, the memory cgroup's limit, Slurm's --mem;
	// "" when none is below the machine's RAM), HostCeilingBytes is it
	// (the RAM when none), HostCeilingPeakBytes the peak use of it in its
	// units (VmData, VmSize, the cgroup's working set, the tree's PSS).
	HostCeiling          string `json:"host_ceiling,omitempty"`
	HostCeilingBytes     uint64 `json:"host_ceiling_bytes,omitempty"`
	HostCeilingPeakBytes uint64 `json:"host_ceiling_peak_bytes,omitempty"`
}

// DevicePeak is the peak of one GPU in one phase (memory.DevicePeak).
type DevicePeak struct {
	ID            string `json:"id"`
	UUID          string `json:"uuid"`
	PeakBytes     uint64 `json:"peak_bytes"`
	CapacityBytes uint64 `json:"capacity_bytes"`
	HeadroomBytes uint64 `json:"headroom_bytes"`
	PeakMs        int64  `json:"peak_ms"`
	// PeakJobBytes is the largest per-process figure of the job (0 when NVML
	// never attributed memory to the job's processes).
	PeakJobBytes uint64 `json:"peak_job_bytes,omitempty"`
}

// PeakFraction returns, for phase p, the largest peak/capacity over the GPUs
// (0 when the phase was not sampled or no GPU was). This is the figure the
// policy compares with its thresholds.
func (s MemorySummary) PeakFraction(p classify.Phase) float64 {
	for _, ps := range s.Phases {
		if ps.Phase == p {
			return ps.PeakFraction
		}
	}
	return 0
}

// StartFraction returns, for phase p, the fraction of GPU memory in use at
// the phase's first sample (0 when unknown).
func (s MemorySummary) StartFraction(p classify.Phase) float64 {
	if ps, ok := s.Phase(p); ok {
		return ps.StartFraction
	}
	return 0
}

// Phase returns the summary of phase p, and false when it was not sampled.
func (s MemorySummary) Phase(p classify.Phase) (PhaseSummary, bool) {
	for _, ps := range s.Phases {
		if ps.Phase == p {
			return ps, true
		}
	}
	return PhaseSummary{}, false
}

// MaxPeakFraction is the largest PeakFraction over all phases.
func (s MemorySummary) MaxPeakFraction() float64 {
	m := 0.0
	for _, ps := range s.Phases {
		m = math.Max(m, ps.PeakFraction)
	}
	return m
}

// GPUDevice is one device a job uses, as a memory summary lists it. It has
// the fields of gpu.Device, so that GPUDevice(d) converts one.
type GPUDevice struct {
	ID          string `json:"id"`    // "gpu<NVML index>", or "gpu<index>.mig<n>"
	Index       int    `json:"index"` // NVML index of the physical GPU
	UUID        string `json:"uuid"`
	Name        string `json:"name,omitempty"`
	MIG         bool   `json:"mig,omitempty"`
	ParentUUID  string `json:"parent_uuid,omitempty"`
	CUDAOrdinal int    `json:"cuda_ordinal"` // the job's cuda:N
	TotalBytes  uint64 `json:"total_bytes"`
}
