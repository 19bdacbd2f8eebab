package record

import (
	"fmt"
	"strings"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Probe kinds: what the torch probe (`gpuguard run --probe torch`,
// docs/probe.md) reported from inside the job.
const (
	ProbeStart = "start" // a process of the job began to report (once it did something)
	ProbePhase = "phase" // the phase changed, as the model and grad mode show it
	ProbeOOM   = "oom"   // an out-of-memory error, and where in the model it was raised
	ProbeError = "error" // the probe failed in a process and switched itself off there
)

// Probe is one thing the torch probe reported from inside a process of the
// job. Steps are not journalled one by one: each record carries the step
// count, and the attempt's end has the last.
type Probe struct {
	Attempt int            `json:"attempt"`
	Kind    string         `json:"kind"` // ProbeStart, ProbePhase, ProbeOOM, ProbeError
	PID     int            `json:"pid"`
	Rank    *int           `json:"rank,omitempty"` // RANK in the process's environment
	Phase   classify.Phase `json:"phase,omitempty"`
	Step    int64          `json:"step"` // optimizer steps the process had taken
	How     string         `json:"how,omitempty"`
	Memory  *ProbeMemory   `json:"memory,omitempty"`
	Site    *ProbeSite     `json:"site,omitempty"`  // ProbeOOM
	Error   string         `json:"error,omitempty"` // ProbeError: the probe's own failure
}

// ProbeMemory is a process's memory as the probe read it from inside: host
// RSS always; the CUDA caching allocator's figures once the job has
// initialised CUDA.
type ProbeMemory struct {
	HostRSS                 int64 `json:"host_rss,omitempty"`
	CUDADevice              *int  `json:"cuda_device,omitempty"`
	CUDAAllocated           int64 `json:"cuda_allocated,omitempty"`
	CUDAReserved            int64 `json:"cuda_reserved,omitempty"`
	CUDAReservedUnallocated int64 `json:"cuda_reserved_unallocated,omitempty"`
	CUDAPeakAllocated       int64 `json:"cuda_peak_allocated,omitempty"`
	CUDAAllocRetries        int64 `json:"cuda_alloc_retries,omitempty"`
	CUDAOOMs                int64 `json:"cuda_ooms,omitempty"`
}

// ProbeSite is where an out-of-memory error was raised, as the probe saw it.
type ProbeSite struct {
	Module    string         `json:"module,omitempty"` // the module path whose forward was running: Net.encoder.0
	Pass      string         `json:"pass"`             // forward, backward or optimizer.step
	Phase     classify.Phase `json:"phase,omitempty"`
	Step      int64          `json:"step"`
	Shapes    string         `json:"shapes,omitempty"` // the forward's inputs, as JSON: [[8,16]]
	PID       int            `json:"pid"`
	Rank      *int           `json:"rank,omitempty"`
	ErrorType string         `json:"error_type,omitempty"`
	Error     string         `json:"error,omitempty"`    // the error's first line
	Snapshot  string         `json:"snapshot,omitempty"` // the CUDA allocator snapshot file
	// Grad: the outermost forward ran with grad on (nil: not said).
	Grad *bool `json:"grad,omitempty"`
	// Block: the failing module's place among the model's repeated blocks.
	Block *ProbeBlock `json:"block,omitempty"`
}

// ProbeBlock is block Index (0-based) of Of in Container (model.layers;
// layer1..layer4 for sibling stages counted as one sequence).
type ProbeBlock struct {
	Container string `json:"container"`
	Index     int    `json:"index"`
	Of        int    `json:"of"`
}

func (Probe) EventType() string { return "probe" }

// Describe says where the torch probe saw an out-of-memory error raised:
// "forward of Net.encoder.0 (train, step 3, inputs [[8,16]]), snapshot
// PATH"; "" for nil.
func (s *ProbeSite) Describe() string {
	if s == nil {
		return ""
	}
	what := s.Pass
	if what == "" {
		what = "the job"
	}
	if s.Module != "" {
		what += " of " + s.Module
	}
	var parts []string
	if s.Phase != "" {
		parts = append(parts, string(s.Phase))
	}
	if s.Step > 0 {
		parts = append(parts, fmt.Sprintf("step %d", s.Step))
	}
	if s.Rank != nil {
		parts = append(parts, fmt.Sprintf("rank %d", *s.Rank))
	}
	if s.Shapes != "" {
		parts = append(parts, "inputs "+s.Shapes)
	}
	if len(parts) > 0 {
		what += " (" + strings.Join(parts, ", ") + ")"
	}
	if s.Snapshot != "" {
		what += "; allocator snapshot " + s.Snapshot
	}
	return what
}
