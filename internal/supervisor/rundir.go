package supervisor

import (
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Files of a run directory.
const (
	OutputLogName = record.OutputLog
	eventsName    = record.Events
	gpuguardLog   = record.GpuguardLog
)

// runState is the content of state.json (record.RunState, holding the
// policy's state).
type runState = record.RunState[policy.State]

// createRunDir creates the directory of a new run (rundir.Create). Failure
// returns an *Error with ExitCantCreate (73) that says which directory and
// how to choose another.
func createRunDir(explicit, workDir string) (*rundir.Dir, error) {
	d, err := rundir.Create(explicit, workDir)
	if err != nil {
		return nil, &Error{Code: ExitCantCreate, Msg: err.Error(), Err: err}
	}
	return d, nil
}

// openRunDir opens the directory of an earlier run (--resume-run) to append
// to it (rundir.Open). Failure returns an *Error with ExitCantCreate (73).
func openRunDir(path string) (*rundir.Dir, error) {
	d, err := rundir.Open(path)
	if err != nil {
		return nil, &Error{Code: ExitCantCreate, Msg: err.Error(), Err: err}
	}
	return d, nil
}
