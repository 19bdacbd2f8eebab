// Package record is what a gpuguard run directory holds, as Go types: the
// names of its files, one struct per event of events.jsonl with the code
// that writes and reads them (Marshal, Read), and the memory summaries the
// sampler records. The supervisor writes through package rundir; report and
// explain read through this package, which imports no GPU, zap or file
// watching code.
package record

// The files of a run directory.
const (
	OutputLog   = "output.log"    // the job's combined output, raw bytes, every attempt
	Events      = "events.jsonl"  // the journal: one JSON object per line (see Event)
	GpuguardLog = "gpuguard.log"  // gpuguard's own diagnostics (zap JSON)
	State       = "state.json"    // where the run stands (--resume-run, Slurm requeue): RunState
	Timeline    = "timeline.csv"  // memory samples
	Derived     = "derived"       // derived config copies, one folder per attempt
	Lock        = "gpuguard.lock" // flock'ed by the run that owns the directory; holds its pid and start
)
