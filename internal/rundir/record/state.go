package record

import (
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// MaxStateBytes is the most of state.json that --resume-run reads (4 MiB):
// the supervisor keeps the file far smaller (20 attempts of history), so a
// larger one, or a device, is not a state file.
const MaxStateBytes = 4 << 20

// RunState is the content of state.json (State): where the run stands,
// written whole after every decision, so that `gpuguard run --resume-run
// DIR` (or a Slurm requeue) continues with the settings that fit rather
// than starting again at those that failed. P is the policy's own state
// (policy.State), which this package does not import: the supervisor names
// RunState[policy.State].
type RunState[P any] struct {
	Version    int      `json:"version"` // 1
	Argv       []string `json:"argv"`    // the user's command
	Policy     string   `json:"policy"`  // the policy file it ran with ("" for none)
	Attempt    int      `json:"attempt"`
	Checkpoint string   `json:"checkpoint,omitempty"` // last checkpoint resumed from
	// Started is when the run began (kept across --resume-run and Slurm
	// requeues): checkpoints older than that belong to earlier runs.
	Started  time.Time `json:"started,omitzero"`
	Policies P         `json:"state"`
	Done     bool      `json:"done"`      // the run ended (success or give-up)
	ExitCode int       `json:"exit_code"` // when Done
	// History is what each attempt died of and how high its memory went,
	// so that a person (or the next decision) sees the peaks.
	History []AttemptState `json:"history,omitempty"`
}

// AttemptState is one attempt in state.json.
type AttemptState struct {
	Attempt  int            `json:"attempt"`
	ExitCode int            `json:"exit_code"`
	Kind     classify.Kind  `json:"kind"`
	Phase    classify.Phase `json:"phase,omitempty"`
	LastStep *int64         `json:"last_step,omitempty"`
	Memory   MemorySummary  `json:"memory"`
}
