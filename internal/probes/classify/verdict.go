// Package classify is the output classifier: it reads a training job's output
// line by line and says what it shows (phases, training steps, a failure and
// its figures) and, once the job has ended, what it died of (Verdict). It is
// pure: text in, verdict out; it observes and never decides what to do.
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
	KindHang        Kind = "hang"          // no progress for longer than the job's rhythm allows: the supervisor stopped it (never from output alone)
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
	Step   *int64 `json:"step"`             // training step at the failure, or the last one seen (see StepKind)
	Epoch  *int64 `json:"epoch"`            // epoch at the failure, or the last one seen
	OOM    *OOM   `json:"oom"`

	// Where Step comes from. StepKind says what kind of counter it is: a
	// training step counted over the whole run (StepGlobal) whenever the
	// output printed one, else a position within the epoch (StepInEpoch),
	// which only means something together with Epoch. StepTotal is the M of
	// "N/M" printed beside it (nil when none). StepLine is the 1-based line
	// it was read from and StepText that line, ANSI stripped and bounded.
	StepKind  StepKind `json:"step_kind,omitempty"`
	StepTotal *int64   `json:"step_total,omitempty"`
	StepLine  int      `json:"step_line,omitempty"`
	StepText  string   `json:"step_text,omitempty"`

	// Fragmentation: memory reserved by the allocator but unallocated is large
	// against the request (the rule is documented on the classifier).
	Fragmentation bool `json:"fragmentation"`
	// OtherProcesses: the message lists other processes holding device memory.
	OtherProcesses bool `json:"other_processes"`
	// SharedMemory: the host memory that ran out is the shared memory of
	// /dev/shm (a host_oom), which DataLoader workers fill: the remedy is
	// fewer workers or a larger shm, not a smaller batch.
	SharedMemory bool `json:"shared_memory,omitempty"`
	// Stall: for a hang, what the job's processes did while silent (idle,
	// working, spinning, dataloader: record.HangActivity.Verdict).
	Stall string `json:"stall,omitempty"`
	// Build: the host memory ran out while a compiler built a C++/CUDA
	// extension at start-up (a host_oom): the remedy is fewer parallel
	// build jobs (MAX_JOBS), not a smaller batch.
	Build bool `json:"build,omitempty"`
	// Requester: what asked for the memory that ran out, where the log
	// shows it: RequesterDataLoaderWorker when the allocation failed inside
	// a DataLoader worker ("Caught RuntimeError in DataLoader worker process
	// 3", a worker killed for memory). Empty when the log does not say.
	Requester string `json:"requester,omitempty"`
	// CgroupOOMKills: how many processes the memory cgroup's OOM killer
	// killed during the attempt (Exit.CgroupOOMKills), when the verdict was
	// given knowing how the job ended; 0 otherwise. It is kept in the
	// run's journal with the verdict, so that `gpuguard explain RUN_DIR`
	// reads the same evidence the live verdict did.
	CgroupOOMKills int `json:"cgroup_oom_kills,omitempty"`
	// Site: for a memory failure, the innermost frame of the Python
	// traceback printed just before it, as `PATH:LINE in FUNC` (the
	// allocation that failed); empty when the log printed none. The
	// policy's cause check compares it across attempts.
	Site string `json:"site,omitempty"`
	// Machine: the failure points at the machine rather than the job (a
	// node failure, an NCCL timeout or network error, an ECC error, a GPU
	// fallen off the bus, an Xid): another node, or the same one later, may
	// run the job unchanged.
	Machine bool `json:"machine,omitempty"`
	// RefusedAllocOption: the job died because its PyTorch does not know
	// an option of PYTORCH_CUDA_ALLOC_CONF ("Unrecognized CachingAllocator
	// option: expandable_segments", which PyTorch before 2.1 says at its
	// first CUDA allocation): the option's name.
	RefusedAllocOption string `json:"refused_alloc_option,omitempty"`

	Phases      []PhaseMark `json:"phases"`
	Diagnosis   string      `json:"diagnosis"`
	Suggestions []string    `json:"suggestions"`
}

// RequesterDataLoaderWorker is Verdict.Requester for memory a DataLoader
// worker asked for.
const RequesterDataLoaderWorker = "dataloader_worker"

// StepKind is the kind of counter a step is. Steps of different kinds are
// not compared: a bar's batch 29 of epoch 3 says nothing about training step
// 100. The string values are a contract (verdicts in JSON).
type StepKind string

const (
	StepNone StepKind = ""
	// StepGlobal: the job's training step, counted over the whole run: a
	// global step, an iteration, an optimizer update (global_step,
	// num_updates, "step N/M", "iteration N/ M", DeepSpeed's step=, a
	// training bar whose total is the run's total optimization steps). A
	// checkpoint named by step counts the same way.
	StepGlobal StepKind = "global"
	// StepInEpoch: a position within an epoch, that starts again at each
	// epoch: a per-epoch progress bar's batch index (Lightning's "Epoch 3:
	// ... 29/50", Keras, Ultralytics), "Epoch [e][i/N]" lines. It is only
	// progress together with the epoch.
	StepInEpoch StepKind = "in_epoch"
)

// Position is a point in training as a job's output shows it. Step, Total
// and Epoch are -1 where not printed.
type Position struct {
	Kind  StepKind
	Step  int64
	Total int64 // M of the "N/M" printed with Step
	Epoch int64
}

// GlobalStep is the position of training step s (a checkpoint's step).
func GlobalStep(s int64) Position {
	return Position{Kind: StepGlobal, Step: s, Total: -1, Epoch: -1}
}

// Position is where the verdict places training: Step with its kind and
// total, and Epoch.
func (v Verdict) Position() Position {
	p := Position{Kind: v.StepKind, Step: -1, Total: -1, Epoch: -1}
	if v.Step != nil {
		p.Step = *v.Step
	} else {
		p.Kind = StepNone
	}
	if v.StepTotal != nil {
		p.Total = *v.StepTotal
	}
	if v.Epoch != nil {
		p.Epoch = *v.Epoch
	}
	return p
}

// Cmp says whether p is further in training than q (+1), at the same point
// (0) or behind it (-1). ok is false when the two cannot be compared, which
// is never to be read as "no progress":
//
//   - two global steps compare as numbers, whatever the epochs;
//   - otherwise two different known epochs decide;
//   - two positions within the same epoch (or both without an epoch)
//     compare as numbers, or as fractions of their totals when both totals
//     are printed and differ (a smaller batch makes more batches per epoch);
//   - two positions that show only the same epoch are at the same point;
//   - anything else (a global step against a position within an epoch, an
//     epoch against none) cannot be compared.
func (p Position) Cmp(q Position) (c int, ok bool) {
	if p.Kind == StepNone || p.Step < 0 {
		p.Kind, p.Step = StepNone, -1
	}
	if q.Kind == StepNone || q.Step < 0 {
		q.Kind, q.Step = StepNone, -1
	}
	if p.Kind == StepGlobal && q.Kind == StepGlobal {
		return cmpInt(p.Step, q.Step), true
	}
	if p.Epoch >= 0 && q.Epoch >= 0 && p.Epoch != q.Epoch {
		return cmpInt(p.Epoch, q.Epoch), true
	}
	if (p.Epoch >= 0) != (q.Epoch >= 0) || p.Kind != q.Kind {
		return 0, false
	}
	switch p.Kind {
	case StepNone:
		return 0, p.Epoch >= 0 // the same epoch; nothing at all is not a position
	case StepInEpoch:
		if p.Total > 0 && q.Total > 0 && p.Total != q.Total {
			// p.Step/p.Total against q.Step/q.Total, without division;
			// float64 so that large counters cannot overflow.
			return cmpFloat(float64(p.Step)*float64(q.Total), float64(q.Step)*float64(p.Total)), true
		}
		return cmpInt(p.Step, q.Step), true
	}
	return 0, false
}

func cmpInt(a, b int64) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
}

func cmpFloat(a, b float64) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
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
	Type     EventType
	Line     int
	Rank     int      // the rank the line names (for a failure: the failing rank), -1 when none
	Phase    Phase    // for EventPhase
	Step     int64    // for EventStep: the step the line printed, -1 when it printed only an epoch
	Epoch    int64    // for EventStep: the epoch in effect (-1 when none was printed yet)
	StepKind StepKind // for EventStep: the kind of counter Step is; compare steps of one kind only
	Kind     Kind     // for EventFailure
	Text     string   // for EventFailure: the line
}

type EventType uint8

const (
	EventPhase     EventType = iota + 1 // a phase started
	EventStep                           // a step (or epoch) number was printed
	EventFailure                        // a failure line was seen (OOM or crash); more lines may refine it
	EventRecovered                      // the job says it recovered from the out-of-memory error last reported (fairseq's "attempting to recover from OOM"): it goes on
)

// PhasePattern is an extra phase marker from a policy file: a line matching
// Regexp starts Phase.
type PhasePattern struct {
	Phase  Phase
	Regexp string
}
