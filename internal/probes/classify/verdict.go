// Package probes observes a training job from the outside: its output (the
// failure classifier and phase markers), its memory (GPU through NVML, host
// through /proc and the cgroup) and its checkpoints. Probes observe and
// report; they never decide what to do about what they see.
package classify

import (
	"syscall"
)

// Kind is what a job died of. The string values are a contract: they appear
// in `gpuguard explain --json`, in events.jsonl and in policy files.
type Kind string

const (
	KindNone        Kind = "none"          // nothing failed (or nothing is known yet)
	KindGPUOOM      Kind = "gpu_oom"       // device memory exhausted (CUDA, HIP, XPU, MPS, XLA, TF, NCCL)
	KindCPUAllocOOM Kind = "cpu_alloc_oom" // PyTorch's CPU allocator could not allocate
	KindHostOOM     Kind = "host_oom"      // the kernel or a cgroup killed something for host memory
	KindCrash       Kind = "crash"         // a failure that is not memory
)

// Phase is the part of training a line belongs to.
type Phase string

const (
	PhaseNone  Phase = ""
	PhaseTrain Phase = "train"
	PhaseVal   Phase = "val"
)

// OOM holds the figures an out-of-memory message printed. A nil pointer means
// the message did not say.
type OOM struct {
	Format                   string    `json:"format,omitempty"`    // message family: modern, old, cuda_error, xla_resource_exhausted, ...
	Exception                string    `json:"exception,omitempty"` // RuntimeError, torch.OutOfMemoryError, ...
	RequestedBytes           *int64    `json:"requested_bytes"`
	TotalBytes               *int64    `json:"total_bytes"`
	FreeBytes                *int64    `json:"free_bytes"`
	InUseBytes               *int64    `json:"in_use_bytes"`
	AllocatedBytes           *int64    `json:"allocated_bytes"`
	ReservedUnallocatedBytes *int64    `json:"reserved_unallocated_bytes"`
	ReservedTotalBytes       *int64    `json:"reserved_total_bytes"`
	PrivatePoolsBytes        *int64    `json:"private_pools_bytes,omitempty"`
	Device                   *string   `json:"device"` // as the message names it: "GPU 0", "device 1", "MPS", ...
	OtherProcesses           []ProcUse `json:"other_processes,omitempty"`
}

// ProcUse is one "Process N has X memory in use" clause.
type ProcUse struct {
	PID   int   `json:"pid"`
	Bytes int64 `json:"bytes"`
}

// PhaseMark is a line where a phase starts.
type PhaseMark struct {
	Line  int   `json:"line"`
	Phase Phase `json:"phase"`
}

// Verdict is what the classifier concluded from a job's output (and, live,
// from how the job ended).
type Verdict struct {
	Kind   Kind   `json:"kind"`
	Reason string `json:"reason,omitempty"` // short cause: "CUDA out of memory", "illegal memory access", ...
	Phase  Phase  `json:"phase"`            // phase in effect at the failure, or at the end
	Rank   *int   `json:"rank"`             // rank that failed first, where the output shows it
	Host   string `json:"host,omitempty"`   // host of the failing rank, where shown
	Line   int    `json:"line"`             // 1-based '\n' line of the failure; 0 when none
	Text   string `json:"text,omitempty"`   // the failure line, ANSI stripped, bounded
	Step   *int64 `json:"step"`             // last training step seen
	Epoch  *int64 `json:"epoch"`            // last epoch seen
	OOM    *OOM   `json:"oom"`

	// Fragmentation: memory reserved by the allocator but unallocated is large
	// against the request (the rule is documented on the classifier).
	Fragmentation bool `json:"fragmentation"`
	// OtherProcesses: the message lists other processes holding device memory.
	OtherProcesses bool `json:"other_processes"`

	Phases      []PhaseMark `json:"phases"`
	Diagnosis   string      `json:"diagnosis"`
	Suggestions []string    `json:"suggestions"`
}

// Exit describes how a job's process ended, as the supervisor saw it. It is
// an input of the classifier: a death by SIGKILL while the cgroup's OOM-kill
// counter rose is a host OOM even when the job printed nothing.
type Exit struct {
	Code           int            // exit code, or 128+signal
	Signal         syscall.Signal // 0 when the process exited normally
	CgroupOOMKills int            // rise of the memory cgroup's oom_kill counter during the attempt
	StoppedByUs    bool           // gpuguard itself asked the job to stop (signal forwarded, shutdown)
}

// Event is something the classifier saw in the live stream, handed to the
// supervisor as it happens (to speed up sampling in validation, to count
// steps, to start the OOM grace period).
type Event struct {
	Type  EventType
	Line  int
	Rank  int    // the rank the line names (for a failure: the failing rank), -1 when none
	Phase Phase  // for EventPhase
	Step  int64  // for EventStep
	Epoch int64  // for EventStep, when printed (-1 otherwise)
	Kind  Kind   // for EventFailure
	Text  string // for EventFailure: the line
}

type EventType uint8

const (
	EventPhase   EventType = iota + 1 // a phase started
	EventStep                         // a step (or epoch) number was printed
	EventFailure                      // a failure line was seen (OOM or crash); more lines may refine it
)

// PhasePattern is an extra phase marker from a policy file: a line matching
// Regexp starts Phase.
type PhasePattern struct {
	Phase  Phase
	Regexp string
}
