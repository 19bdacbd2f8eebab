package torchprobe

import "encoding/json"

// Record kinds (the "t" field).
const (
	KindStart = "start" // the process's first record
	KindPhase = "phase" // the phase changed
	KindStep  = "step"  // optimizer steps (at most one record per interval)
	KindOOM   = "oom"   // an out-of-memory error, and where it was raised
	KindError = "error" // the probe failed and switched itself off
)

// Record is one line a probed process wrote.
type Record struct {
	Kind      string  `json:"t"`
	Time      float64 `json:"time"` // Unix seconds
	PID       int     `json:"pid"`
	Rank      *int    `json:"rank"`       // RANK; nil when unset
	LocalRank *int    `json:"local_rank"` // LOCAL_RANK
	Phase     string  `json:"phase"`      // "train", "val" or ""
	Step      int64   `json:"step"`       // optimizer steps this process took
	Mem       *Memory `json:"mem,omitempty"`

	How string `json:"how,omitempty"` // phase: what showed it ("eval()", "forward without grad")

	Pass      string          `json:"pass,omitempty"`   // oom: forward, backward, optimizer.step
	Module    string          `json:"module,omitempty"` // oom: Net.encoder.0
	Shapes    json.RawMessage `json:"shapes,omitempty"` // oom: the forward's inputs
	ErrorType string          `json:"error_type,omitempty"`
	Error     string          `json:"error,omitempty"`    // oom: its first line; error: the probe's failure
	Snapshot  string          `json:"snapshot,omitempty"` // oom: the CUDA allocator snapshot
	Grad      *bool           `json:"grad,omitempty"`     // oom: the outermost forward ran with grad on (nil: not said)
	Block     *Block          `json:"block,omitempty"`    // oom: the failing block's place among the model's repeated blocks
	Where     string          `json:"where,omitempty"`    // error: where in the probe

	Torch string `json:"torch,omitempty"` // start
}

// Block is where the failing module sits among the model's repeated blocks
// (a forward's out-of-memory error inside model.layers.17 of 32): block
// Index (0-based) of Of in Container, a ModuleList or Sequential (the one
// with the most elements on the module's path), or its sibling sequences of
// the same block type counted as one ("layer1..layer4": torchvision's
// ResNet stages).
type Block struct {
	Container string `json:"container"`
	Index     int    `json:"index"`
	Of        int    `json:"of"`
}

// Memory is a process's memory as the probe read it.
type Memory struct {
	HostRSS                 int64 `json:"host_rss,omitempty"`
	CUDADevice              *int  `json:"cuda_device,omitempty"`
	CUDAAllocated           int64 `json:"cuda_allocated,omitempty"`
	CUDAReserved            int64 `json:"cuda_reserved,omitempty"`
	CUDAReservedUnallocated int64 `json:"cuda_reserved_unallocated,omitempty"`
	CUDAPeakAllocated       int64 `json:"cuda_peak_allocated,omitempty"`
	CUDAAllocRetries        int64 `json:"cuda_alloc_retries,omitempty"`
	CUDAOOMs                int64 `json:"cuda_ooms,omitempty"`
}

// MainRank reports whether r comes from the process whose phase stands for
// the job's: rank 0, or a process that names no rank.
func (r Record) MainRank() bool { return r.Rank == nil || *r.Rank == 0 }
