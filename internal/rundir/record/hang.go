package record

import "github.com/gpuguard/gpuguard/internal/probes/classify"

// Hang is the stall watchdog's evidence when it stops an attempt: the job
// printed no training step for longer than its rhythm allows.
type Hang struct {
	Attempt int            `json:"attempt"`
	Phase   classify.Phase `json:"phase"`
	// SinceS: seconds since the last progress (the last step, or the start
	// of the phase or of the attempt when none was printed since).
	SinceS float64 `json:"since_s"`
	// LimitS: the stall allowed there; UsualS: the usual interval between
	// steps it was derived from (0: none known, the policy's max applied).
	LimitS float64 `json:"limit_s"`
	UsualS float64 `json:"usual_s"`
	// The last step and its line (absent when the attempt printed none).
	Step     *int64 `json:"step,omitempty"`
	StepLine int    `json:"step_line,omitempty"`
	StepText string `json:"step_text,omitempty"`
	// Stacks: `py-spy dump --pid` of the job's main process when py-spy is
	// on PATH; StacksError says why there is none when it failed.
	Stacks      string `json:"stacks,omitempty"`
	StacksError string `json:"stacks_error,omitempty"`
	// NCCLRASReport: what NCCL's RAS client (ncclras) printed about the
	// job's communicators, when it is on PATH (the summary is in Activity).
	NCCLRASReport string `json:"nccl_ras_report,omitempty"`
	// Activity: what the job's processes did while it was silent, the
	// second signal the watchdog confirmed the hang with.
	Activity *HangActivity `json:"activity,omitempty"`
}

// HangActivity is what a silent job's process tree did over a window: the
// watchdog's second signal (internal/supervisor/hang_activity.go).
type HangActivity struct {
	// Verdict: idle (no CPU, I/O or GPU work), working (busy: silent but
	// working), spinning (busy in a wait: a process spins while another of
	// the tree is blocked, or its stacks are in a collective), dataloader
	// (the main process idle, its loader workers dead or idle).
	Verdict string  `json:"verdict"`
	Detail  string  `json:"detail"` // the verdict in words, with the figures
	WindowS float64 `json:"window_s"`
	// CPUS: CPU seconds the tree used in the window; IOBytes: bytes it read
	// and wrote (rchar + wchar).
	CPUS float64 `json:"cpu_s"`
	// CPUWaitS: seconds the tree's processes were runnable but waited for
	// a CPU (the machine busy with other work): wanted, not idle.
	CPUWaitS  float64 `json:"cpu_wait_s,omitempty"`
	IOBytes   uint64  `json:"io_bytes"`
	Processes int     `json:"processes"`
	// GPUMemDeltaBytes: how much the used memory of the job's GPUs moved
	// over the window (absent without a GPU probe).
	GPUMemDeltaBytes *uint64 `json:"gpu_mem_delta_bytes,omitempty"`
	// GPUUtilPct, GPUMemUtilPct: the highest utilisation NVML gave of the
	// job's GPUs at the window's readings (kernels running, memory read or
	// written; absent where NVML has none).
	GPUUtilPct    *uint32 `json:"gpu_util_pct,omitempty"`
	GPUMemUtilPct *uint32 `json:"gpu_mem_util_pct,omitempty"`
	// NCCLRAS: the summary of NCCL's RAS client (ncclras) on this node,
	// asked during the window; NCCLRASError: why it gave none.
	NCCLRAS      string `json:"nccl_ras,omitempty"`
	NCCLRASError string `json:"nccl_ras_error,omitempty"`
	Busy         []int  `json:"busy,omitempty"`    // pids that used or waited for a CPU
	Blocked      []int  `json:"blocked,omitempty"` // pids that did neither
	// Workers: the loader workers seen in this attempt; WorkersDead: those
	// gone or zombies now.
	Workers     int `json:"workers,omitempty"`
	WorkersDead int `json:"workers_dead,omitempty"`
}

// Silent is the watchdog's note that a job past its rhythm's limit is
// silent but working: it is left to run until the hang max.
type Silent struct {
	Attempt  int            `json:"attempt"`
	Phase    classify.Phase `json:"phase"`
	SinceS   float64        `json:"since_s"`
	LimitS   float64        `json:"limit_s"`
	MaxS     float64        `json:"max_s"`
	Activity HangActivity   `json:"activity"`
}

func (Silent) EventType() string { return "silent" }

func (Hang) EventType() string { return "hang" }
