// Package runfiles names the files of a gpuguard run directory, which the
// supervisor writes and `explain`, `report` and the probes read. It holds
// names only, so that every package can import it.
package rundir

const (
	OutputLog   = "output.log"   // the job's combined output, raw bytes, every attempt
	Events      = "events.jsonl" // the journal: one JSON object per line
	GpuguardLog = "gpuguard.log" // gpuguard's own diagnostics (zap JSON)
	State       = "state.json"   // where the run stands (--resume-run, Slurm requeue)
	Timeline    = "timeline.csv" // memory samples
	Derived     = "derived"      // derived config copies, one folder per attempt
)
