// Package policy is gpuguard's declarative retry policy: the schema of a
// policy file (gpuguard.yaml), strict loading with file:line:col errors, the
// knobs of a job and where each lives in its command (a flag, a key=value
// word, an environment variable, a key in a YAML config file), the actions a
// rule applies to them, and the decision taken after each attempt.
//
// The package is pure: it starts no processes, reads no clocks, reads no
// files and no environment of its own. The supervisor passes the job's
// command and environment in a Job, file contents through a FileReader, and
// random numbers in an Outcome; it writes the derived config files that
// Render returns. Everything here can therefore be tested with tables.
//
// The file format is described in docs/policy.md.
package policy

import (
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"go.yaml.in/yaml/v3"
)

// Version is the policy file format version this package reads.
const Version = 1

// Policy is a parsed, validated policy file. It is immutable: Decide takes a
// State and returns the next one, so one Policy can serve many runs.
type Policy struct {
	file        string
	description string
	knobs       []*knob
	knobByName  map[string]*knob
	rules       []*rule
	budget      budget
	backoff     backoff
	oomGrace    time.Duration
	sampling    Sampling
	phases      []classify.PhasePattern
	ckpt        CheckpointSpec
	envVars     []string // variables the actions set (action.envVars), first use first
	ckptPass    pass
	slurm       Slurm
	notify      Notify
	memo        bool
	memoIgnore  []string // memo: {ignore: [...]}: flags and keys the memo's key leaves out
	hang        *Hang    // nil: no hang: section, no stall watchdog
	exitCodes   string   // exit_codes: "", "job" or "scheduler"
	unapplied   string   // verify.unapplied: "" (give_up) or a mode (verify.go)
	prevent     *Prevent // nil: no prevent: section (prevent.go)
}

// File returns the file name the policy was parsed from, as given to Parse.
func (p *Policy) File() string { return p.file }

// Memo reports whether the policy asks gpuguard to remember the knob values
// a run ended with (key memo): a later run of the same command under the
// same policy starts with them instead of failing its way there again.
func (p *Policy) Memo() bool { return p.memo }

// Description returns the policy's description: line, or "".
func (p *Policy) Description() string { return p.description }

// Knobs returns the knob names in the order the file defines them.
func (p *Policy) Knobs() []string {
	out := make([]string, len(p.knobs))
	for i, k := range p.knobs {
		out[i] = k.name
	}
	return out
}

// Rules returns the rule names in the order the file defines them (the order
// in which they are tried).
func (p *Policy) Rules() []string {
	out := make([]string, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.name
	}
	return out
}

// OOMGrace is how long the job gets to exit by itself after an out-of-memory
// line before the supervisor stops it (policy key oom_grace, default 30s).
// Frameworks often print the error, then spend a while in cleanup or in
// other ranks' collective timeouts; the grace bounds that.
func (p *Policy) OOMGrace() time.Duration { return p.oomGrace }

// Sampling says how often the supervisor samples memory.
type Sampling struct {
	BaseHz     float64       // normal rate (sampling.base_hz, default 1)
	ValHz      float64       // rate during validation (sampling.val_hz, default 20): peaks there are short
	FastWindow time.Duration // after any phase change, sample at ValHz for this long (sampling.fast_window, default 5s)
}

// Sampling returns the memory sampling rates.
func (p *Policy) Sampling() Sampling { return p.sampling }

// PhasePatterns returns the policy's extra phase markers (key phases), in
// file order. Each Regexp has been checked to compile with package regexp.
func (p *Policy) PhasePatterns() []classify.PhasePattern {
	return append([]classify.PhasePattern(nil), p.phases...)
}

// CheckpointSpec is where the job's checkpoints are, how to tell a complete
// one, and how a relaunch is pointed at one.
//
// The embedded CheckpointFiles is what the checkpoint package reads. Its
// Globs may name knobs in braces ("{output_dir}/checkpoint-*"); call Expand
// with the current values before handing it on.
type CheckpointSpec struct {
	CheckpointFiles
	// Pass says how Render passes the checkpoint, in words ("--resume
	// PATH", "env RESUME_FROM", "ckpt_path=PATH"); "" when the policy does
	// not say, and then Render cannot resume and says so.
	Pass string
	// Required: a relaunch must resume from a checkpoint. When none is
	// complete, the supervisor must not relaunch from scratch (the job
	// would repeat all its work, or fail on an output directory that exists);
	// it gives up and says why.
	Required bool
	// EarlierRuns: checkpoints written before the run started may be
	// resumed from. By default they are passed over (the supervisor says
	// so): a finished run's checkpoints in the same directory may come from
	// other settings.
	EarlierRuns bool
}

// Checkpoint returns the checkpoint spec, with its defaults filled in.
// CheckpointFiles says where the job writes its checkpoints and how to tell
// a complete one from one being written. It has exactly the fields of
// checkpoint.Spec, so that the supervisor hands it on with a conversion,
// checkpoint.Spec(c.CheckpointFiles), that the compiler checks, while the
// policy package stays free of the checkpoint watcher's file-system
// notifications and logging. See checkpoint.Spec for each field.
type CheckpointFiles struct {
	Globs  []string
	Choose string
	Marker string
	Quiet  time.Duration
	Poll   time.Duration
}

func (p *Policy) Checkpoint() CheckpointSpec {
	c := p.ckpt
	c.Globs = append([]string(nil), c.Globs...)
	return c
}

// knob is one named setting of the job and where it lives.
type knob struct {
	name      string
	node      *yaml.Node // the knob's key in the file, for messages
	where     location
	flags     []string // whereFlag: the flag and its aliases; the first is used when appending
	arg       string   // whereArg: the key of a key=value word
	addPrefix string   // whereArg: prefix when appending ("+" or "++" for Hydra)
	env       string   // whereEnv
	yamlKey   []string // whereYAML: the key path in the config file
	yamlFlags []string // whereYAML: the flag naming the config file
	yamlArg   string   // whereYAML: or the key=value key naming it
	def       *Value   // default, nil when none
	optional  bool
	nullLabel string // how null is shown ("full"); default "null"
}

type location int

const (
	whereFlag location = iota + 1
	whereArg
	whereEnv
	whereYAML
)

func (k *knob) configWhere() string {
	if k.yamlArg != "" {
		return k.yamlArg + "=FILE"
	}
	return k.yamlFlags[0]
}

// show formats a value of this knob for people: null as the knob's
// null_label.
func (k *knob) show(v Value, ok bool) string {
	if !ok {
		return "unset"
	}
	if v.Null {
		return k.nullLabel
	}
	return v.Text
}

type rule struct {
	name  string
	node  *yaml.Node
	when  match
	steps []step
}

// match is a rule's when: every condition given must hold.
type match struct {
	kinds          []classify.Kind  // nil: any failure
	phases         []classify.Phase // nil: any phase
	fragmentation  *bool
	otherProcesses *bool
	build          *bool // Verdict.Build: a compiler killed building an extension (host_oom)
	sharedMemory   *bool // the host memory that ran out is /dev/shm (Verdict.SharedMemory)
	// worker: the failure was in a DataLoader worker (the log said so:
	// Verdict.Requester), or, for a host OOM, the sampler saw the workers
	// hold most of the memory (Outcome.HostHeld).
	worker  *bool
	ranks   []int
	attempt *comparison
	peaks   []peakCond
	stalls  []string // Verdict.Stall (hang.go)
}

type comparison struct {
	op string // "==", ">=", ">", "<=", "<"
	n  int
}

func (c comparison) holds(x int) bool {
	switch c.op {
	case ">=":
		return x >= c.n
	case ">":
		return x > c.n
	case "<=":
		return x <= c.n
	case "<":
		return x < c.n
	}
	return x == c.n
}

func (c comparison) String() string {
	if c.op == "==" {
		return "attempt " + itoa(c.n)
	}
	return "attempt " + c.op + itoa(c.n)
}

type peakCond struct {
	phase classify.Phase
	over  float64 // fraction of GPU capacity
}

// step is one escalation step of a rule: one or more actions applied
// together. times > 0 limits how often the step may act.
type step struct {
	node    *yaml.Node
	actions []action
	times   int
}

type budget struct {
	relaunches int
	perKind    map[classify.Kind]int
	noProgress int
	crash      int
}

type backoff struct {
	initial time.Duration
	factor  float64
	max     time.Duration
	jitter  float64
}
