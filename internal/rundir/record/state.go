package record

import (
	"encoding/json"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/redact"
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
	Argv       SafeArgv `json:"argv"`    // the user's command, written with its secrets masked
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
	// Restarts: the tallies of the restarts from outside (restarts.go).
	Restarts Restarts `json:"restarts,omitzero"`
}

// SafeArgv is the command in state.json. It is written with its secrets
// masked (internal/redact, docs/secrets.md), so it is a record for people,
// never a command to run: --resume-run and a Slurm requeue run the command
// given on their own command line.
type SafeArgv []string

// MarshalJSON writes the command with its secrets masked.
func (a SafeArgv) MarshalJSON() ([]byte, error) { return json.Marshal(redact.Argv(a)) }

// AttemptState is one attempt in state.json.
type AttemptState struct {
	Attempt  int            `json:"attempt"`
	ExitCode int            `json:"exit_code"`
	Kind     classify.Kind  `json:"kind"`
	Phase    classify.Phase `json:"phase,omitempty"`
	LastStep *int64         `json:"last_step,omitempty"`
	Memory   MemorySummary  `json:"memory"`
}
