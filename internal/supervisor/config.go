package supervisor

import (
	"io"
	"os"
	"time"
)

// Config is everything `gpuguard run` was asked to do.
type Config struct {
	Argv      []string      // the command, after "--"
	PTY       string        // "auto" | "always" | "never"
	RunDir    string        // explicit run directory; "" means .gpuguard/runs/<id>
	NoEnv     bool          // do not inject allocator settings
	Policy    string        // policy file path or preset name; "" means look for gpuguard.yaml
	ResumeRun string        // continue the run kept in this directory
	DryRun    bool          // print what the first attempt would get, start nothing
	Grace     time.Duration // time between the polite signal and SIGKILL when stopping the job
	Probe     string        // --probe: "torch" puts the torch probe in the job (docs/probe.md); "" none
	Memo      string        // --memo "on", --no-memo "off", "" the policy's memo key (memo.go)
	Quiet     bool          // --quiet: no start lines (run directory, allocator settings)

	// Group: the gpuguards of one multi-node job deciding as one
	// (internal/group): "" or "auto" (a Slurm step of several tasks),
	// "off", the leader's HOST:PORT, or a rendezvous directory.
	Group        string
	GroupRank    *int          // nil: from torchrun's --node-rank, or Slurm
	GroupSize    *int          // nil: from torchrun's --nnodes, or Slurm
	GroupTimeout time.Duration // 0: group.DefaultTimeout

	Notify        string // POST the run's notifications to this URL (notify package)
	NotifyCommand string // run `sh -c` this with each notification on stdin
	MetricsFile   string // also write metrics.prom here (node_exporter's textfile collector)
	ExitCodes     string // "", "job" or "scheduler": see exitcodes.go; "" defers to the policy's exit_codes

	Stdin  *os.File
	Stdout *os.File
	Stderr io.Writer

	// groupMember: this gpuguard is a member (not the leader) of a group,
	// whose leader notifies for the whole job (set by the loop once the
	// group is resolved, before the run starts).
	groupMember bool
}
