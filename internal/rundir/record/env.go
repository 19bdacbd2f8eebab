package record

// The variables gpuguard sets in every attempt's environment, so that a
// process can be traced back to its run: `gpuguard doctor` reads them from a
// GPU-holding process's /proc/PID/environ. The supervisor sets them
// (supervisor/plan.go); they are defined here, below both, so that the
// writer and the reader share one spelling.
const (
	EnvRunDir  = "GPUGUARD_RUN_DIR" // the run directory
	EnvPID     = "GPUGUARD_PID"     // the gpuguard process supervising the attempt
	EnvAttempt = "GPUGUARD_ATTEMPT" // the attempt number, from 1
)
