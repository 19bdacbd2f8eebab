package record

import "github.com/gpuguard/gpuguard/internal/probes/classify"

// Event is one kind of line of events.jsonl. Each line is
// {"time": RFC 3339, "type": EventType(), ...the struct's fields}; Marshal
// writes it and Read gives it back (Entry.Event).
//
// To add an event: a struct here with JSON tags, an EventType method, and
// an entry in Types.
type Event interface {
	EventType() string
}

// Types lists every event this gpuguard writes and reads; Entry.Event
// decodes the types listed here.
var Types = []Event{
	RunStart{}, RunEnd{}, Policy{}, Signal{}, Slurm{}, RequeueSignal{}, Requeue{},
	AttemptStart{}, AttemptStartFailed{}, AttemptEnd{}, Error{},
	Phase{}, Failure{}, Warning{}, Memory{}, Decision{}, Probe{}, Hang{}, Silent{},
	GroupJoin{}, GroupStop{}, GroupDecision{}, GroupLost{},
	Verify{},
}

// RunStart is the first event of a run (and of each --resume-run or Slurm
// requeue that continues it).
type RunStart struct {
	Argv        []string `json:"argv"`
	PTY         bool     `json:"pty"`
	RunDir      string   `json:"run_dir"`
	Workdir     string   `json:"workdir"`
	PID         int      `json:"pid"`          // gpuguard's own
	EnvChanges  []string `json:"env_changes"`  // allocator settings gpuguard added, KEY=VALUE
	EnvWarnings []string `json:"env_warnings"` // settings left as the user wrote them, and why
	Grace       string   `json:"grace"`        // --grace, as a Go duration

	// Policy and Version are read from journals that have them; this
	// gpuguard names the policy in the Policy event.
	Policy  string `json:"policy,omitempty"`
	Version string `json:"version,omitempty"`
}

// RunEnd is the last event of a run: gpuguard's exit status and its own
// resource use (its jobs' not included).
type RunEnd struct {
	ExitCode  int     `json:"exit_code"`
	PeakRSSKB int64   `json:"peak_rss_kb"`
	CPUUserS  float64 `json:"cpu_user_s"`
	CPUSysS   float64 `json:"cpu_sys_s"`
}

// Policy names the policy a run follows and the knobs' values it starts
// with.
type Policy struct {
	File  string           `json:"file"`
	Knobs map[string]Value `json:"knobs"`
	Rules []string         `json:"rules"`
}

// Signal actions: what gpuguard did with a signal it received.
const (
	SignalForwarded = "forwarded" // passed once to the job
	SignalKilled    = "killed"    // a second SIGINT or SIGTERM: the job's processes were sent SIGKILL
	SignalNoJob     = "no job"    // none was running (after a terminating signal, none is started)
)

// Signal is a signal gpuguard received, and what it did with it.
type Signal struct {
	Signal string `json:"signal"` // "SIGTERM"
	Action string `json:"action"` // SignalForwarded, SignalKilled or SignalNoJob
	PID    int    `json:"pid"`    // the attempt's main child; 0 when none ran
}

// Slurm is the Slurm job a run belongs to, written at the run's start under
// Slurm.
type Slurm struct {
	JobID        string   `json:"job_id"`
	StepID       string   `json:"step_id"`
	Node         string   `json:"node"`
	Nodes        string   `json:"nodes"`
	RestartCount int      `json:"restart_count"`
	RequeueOn    []string `json:"requeue_on"` // the policy's slurm.requeue_on signals
	RequeueID    string   `json:"requeue_id"` // what `scontrol requeue` is given
	ProcID       *int     `json:"proc_id,omitempty"`
	ArrayJobID   string   `json:"array_job_id,omitempty"`
	ArrayTaskID  string   `json:"array_task_id,omitempty"`
	// With requeue_on signals: the policy's stop_after and max_requeues.
	StopAfterS  *float64 `json:"stop_after_s,omitempty"`
	MaxRequeues *int     `json:"max_requeues,omitempty"`
}

// RequeueSignal is a signal of the policy's slurm.requeue_on: the run ends
// after the running attempt and the Slurm job is requeued.
type RequeueSignal struct {
	Signal         string  `json:"signal"`
	StopAfterS     float64 `json:"stop_after_s"`
	AttemptRunning bool    `json:"attempt_running"`
}

// Requeue is what became of requeueing the Slurm job at the run's end.
type Requeue struct {
	Signal       string `json:"signal"`
	Job          string `json:"job"`
	RestartCount int    `json:"restart_count"`
	// Result: requeued, already, refused, no scontrol, failed, not rank 0,
	// max_requeues; after raise_slurm_mem (Signal ""), also requeued with
	// more memory, or requeued, memory not raised.
	Result  string `json:"result"`
	Command string `json:"command,omitempty"` // when scontrol was run
	Output  string `json:"output,omitempty"`
}

// AttemptStart is an attempt's child started.
type AttemptStart struct {
	Attempt int      `json:"attempt"`
	PID     int      `json:"pid"`
	Argv    []string `json:"argv"`
	// LogOffset is where the attempt's output begins in output.log; nil in
	// journals written before offsets were recorded.
	LogOffset *int64 `json:"log_offset,omitempty"`

	// EnvChanges, Knobs and Checkpoint are read from journals that have
	// them; this gpuguard records the knobs in the Policy and Decision
	// events and the checkpoint in AttemptEnd.
	EnvChanges []string         `json:"env_changes,omitempty"`
	Knobs      map[string]Value `json:"knobs,omitempty"`
	Checkpoint string           `json:"checkpoint,omitempty"`
}

// AttemptStartFailed is an attempt whose command could not be started.
type AttemptStartFailed struct {
	Attempt  int    `json:"attempt"`
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"` // 127: not found, 126: not executable
}

// AttemptEnd is an attempt's end: how its child ended and what the
// classifier made of its output.
type AttemptEnd struct {
	Attempt          int     `json:"attempt"`
	PID              int     `json:"pid"`
	ExitCode         int     `json:"exit_code"` // 128+N when signal N killed it
	DurationS        float64 `json:"duration_s"`
	Lines            int64   `json:"lines"`              // lines scanned
	DroppedScanBytes int64   `json:"dropped_scan_bytes"` // output the scanner could not keep up with
	StoppedByUs      bool    `json:"stopped_by_us"`
	Killed           bool    `json:"killed"`    // SIGKILL had to be sent
	Leftovers        int     `json:"leftovers"` // processes still running when the main child exited
	Signal           string  `json:"signal,omitempty"`
	StopReason       string  `json:"stop_reason,omitempty"`
	TypedInterrupt   string  `json:"typed_interrupt,omitempty"` // a ^C typed into the job's pty

	Verdict    *classify.Verdict `json:"verdict,omitempty"`
	Checkpoint string            `json:"checkpoint,omitempty"` // what the attempt resumed from
	LastStep   *int64            `json:"last_step,omitempty"`
	// Site is where the torch probe saw an out-of-memory error raised
	// (--probe torch); nil without the probe or without such an error.
	Site *ProbeSite `json:"site,omitempty"`
}

// Error is an attempt gpuguard could not prepare (its command could not be
// rendered from the policy); the run ends.
type Error struct {
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
}

// Phase is a phase marker in an attempt's output. Line counts the
// attempt's lines as output.log holds them, from its LogOffset.
type Phase struct {
	Attempt int            `json:"attempt"`
	Phase   classify.Phase `json:"phase"`
	Line    int            `json:"line"`
	Stream  string         `json:"stream"` // stdout, stderr or pty
	// Step is read from journals that have it.
	Step *int64 `json:"step,omitempty"`
}

// Failure is a failure line (an out-of-memory error, a crash) in an
// attempt's output, as the classifier saw it live.
type Failure struct {
	Attempt int           `json:"attempt"`
	Kind    classify.Kind `json:"kind"`
	Line    int           `json:"line"`
	Stream  string        `json:"stream"`
	Text    string        `json:"text"`
}

// Warning is a memory warning raised while an attempt runs.
type Warning struct {
	Attempt int           `json:"attempt"`
	Kind    WarningKind   `json:"kind"`
	Message string        `json:"message"`
	Warning MemoryWarning `json:"warning"`
}

// Memory is what the memory sampler saw during an attempt.
type Memory struct {
	Attempt int           `json:"attempt"`
	Summary MemorySummary `json:"summary"`
}

// Decision is what the policy decided after an attempt: relaunch, give_up,
// done, or requeue (a Slurm requeue signal came; Signal names it).
type Decision struct {
	Attempt    int              `json:"attempt"`
	Verb       string           `json:"verb"`
	Rule       string           `json:"rule,omitempty"` // relaunch: the rule that fired
	Step       int              `json:"step,omitempty"` // relaunch: its 1-based step
	Changes    []Change         `json:"changes,omitempty"`
	BackoffS   float64          `json:"backoff_s,omitempty"`
	Reason     string           `json:"reason"`
	Checkpoint string           `json:"checkpoint,omitempty"` // what the next attempt resumes from
	Signal     string           `json:"signal,omitempty"`     // requeue: the signal
	Knobs      map[string]Value `json:"knobs"`                // the values the next attempt gets
}

// Change is one knob (or environment variable) a decision changed, its
// values as shown to people ("unset", the null label, or the text).
type Change struct {
	Name string `json:"name"`
	Old  Value  `json:"old"`
	New  Value  `json:"new"`
}

func (RunStart) EventType() string           { return "run_start" }
func (RunEnd) EventType() string             { return "run_end" }
func (Policy) EventType() string             { return "policy" }
func (Signal) EventType() string             { return "signal" }
func (Slurm) EventType() string              { return "slurm" }
func (RequeueSignal) EventType() string      { return "requeue_signal" }
func (Requeue) EventType() string            { return "requeue" }
func (AttemptStart) EventType() string       { return "attempt_start" }
func (AttemptStartFailed) EventType() string { return "attempt_start_failed" }
func (AttemptEnd) EventType() string         { return "attempt_end" }
func (Error) EventType() string              { return "error" }
func (Phase) EventType() string              { return "phase" }
func (Failure) EventType() string            { return "failure" }
func (Warning) EventType() string            { return "warning" }
func (Memory) EventType() string             { return "memory" }
func (Decision) EventType() string           { return "decision" }
