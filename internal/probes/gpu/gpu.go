package gpu

import (
	"context"
	"errors"
	"fmt"
)

// GPU probes the device memory of the GPUs a job uses. Implementations are
// safe for concurrent use.
//
// Two implementations exist: the NVML probe (FromNVML, Open on a
// machine with a driver) and the null probe (None), which Open returns
// when NVML cannot be used. The null probe reports no devices and no samples,
// so callers never need to branch on availability.
type Probe interface {
	// Available says whether the probe can measure anything, and if not why
	// ("NVML library not found: no NVIDIA driver on this machine", ...).
	Available() (ok bool, why string)
	// Devices are the devices the job uses, resolved from CUDA_VISIBLE_DEVICES
	// of the environment the probe was opened with. When that resolution was
	// uncertain (integer entries without CUDA_DEVICE_ORDER=PCI_BUS_ID), the
	// list can narrow after a Sample finds the job's processes on particular
	// devices. The slice is a copy.
	Devices() []Device
	// Sample measures the job's devices. pids is the job's process tree; it
	// is used to attribute per-process memory and may be nil. A device that
	// fails (lost GPU) is still listed with Lost set, and the error wraps the
	// NVML return code (errors.Is(err, nvml.ERROR_GPU_IS_LOST)). A call that
	// does not finish within the probe's timeout (or ctx) returns
	// ErrTimeout; while it stays stuck, later calls return ErrBusy at
	// once instead of piling up.
	Sample(ctx context.Context, pids []int) ([]Sample, error)
	// Close releases NVML (one Shutdown for the one Init the probe made). It
	// is safe to call more than once; Sample after Close returns ErrClosed.
	Close() error
}

// Device is one device (a whole GPU or a MIG instance) a job uses.
type Device struct {
	// ID names the device in the timeline and summaries: "gpu<NVML index>",
	// or "gpu<index>.mig<n>" for the n-th MIG device of a GPU.
	ID string `json:"id"`
	// Index is the NVML index of the physical GPU (nvidia-smi's index).
	Index int `json:"index"`
	// UUID is NVML's UUID of the device ("GPU-..." or "MIG-...").
	UUID string `json:"uuid"`
	// Name is the product name ("NVIDIA A100-SXM4-40GB").
	Name string `json:"name,omitempty"`
	// MIG is set for a MIG instance; ParentUUID is then its GPU's UUID.
	MIG        bool   `json:"mig,omitempty"`
	ParentUUID string `json:"parent_uuid,omitempty"`
	// CUDAOrdinal is the device number the job's CUDA sees (cuda:N): the
	// position in CUDA_VISIBLE_DEVICES, or the NVML order when it is unset.
	CUDAOrdinal int `json:"cuda_ordinal"`
	// TotalBytes is the device's memory capacity.
	TotalBytes uint64 `json:"total_bytes"`
}

// Sample is one measurement of one device.
type Sample struct {
	ID   string `json:"id"`   // Device.ID
	UUID string `json:"uuid"` // Device.UUID
	// UsedBytes is total minus free: everything that is not available to a
	// new allocation, whoever holds it (NVML's own "used" field means
	// different things in its v1 and v2 structures, so it is not used).
	UsedBytes  uint64 `json:"used_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
	// ReservedBytes is memory the driver reserves (NVML v2 only; 0 otherwise).
	ReservedBytes uint64 `json:"reserved_bytes,omitempty"`
	// JobBytes is the sum over the job's processes, as NVML lists them.
	// JobKnown is false when it could not be attributed: NVML did not list
	// per-process figures (not supported, no permission, value not
	// available), or none of the PIDs it lists is in the job's tree (a
	// container with its own PID namespace). Use UsedBytes then.
	JobBytes uint64 `json:"job_bytes,omitempty"`
	JobKnown bool   `json:"job_known"`
	// UtilKnown says whether NVML gave the device's utilisation rates
	// (nvmlDeviceGetUtilizationRates; MIG devices and some products do
	// not). GPUUtilPct is the percent of NVML's last sample period (1/6 s
	// to 1 s, by product) in which a kernel ran on the device; MemUtilPct
	// the percent in which its memory was read or written. A kernel that
	// spins (NCCL waiting for a peer) counts as running.
	UtilKnown  bool   `json:"util_known,omitempty"`
	GPUUtilPct uint32 `json:"gpu_util_pct,omitempty"`
	MemUtilPct uint32 `json:"mem_util_pct,omitempty"`
	// Lost is set when the device did not answer (ERROR_GPU_IS_LOST and the
	// like); the other fields are then zero.
	Lost bool `json:"lost,omitempty"`
}

// Errors of the GPU probe.
var (
	// ErrTimeout: an NVML call did not return in time. The probe keeps the
	// stuck call to itself; the caller goes on without a GPU sample.
	ErrTimeout = errors.New("NVML did not answer in time")
	// ErrBusy: an earlier call is still stuck in NVML.
	ErrBusy = errors.New("an earlier NVML call is still running")
	// ErrClosed: the probe was closed.
	ErrClosed = errors.New("GPU probe is closed")
)

// None returns the null probe: it measures nothing, reports why, and never
// touches NVML (calling NVML after a failed Init kills the process).
func None(why string) Probe { return nullProbe{why: why} }

type nullProbe struct{ why string }

func (n nullProbe) Available() (bool, string)                     { return false, n.why }
func (nullProbe) Devices() []Device                               { return nil }
func (nullProbe) Sample(context.Context, []int) ([]Sample, error) { return nil, nil }
func (nullProbe) Close() error                                    { return nil }
func (n nullProbe) String() string                                { return fmt.Sprintf("no GPU probe (%s)", n.why) }

var _ Probe = nullProbe{}
