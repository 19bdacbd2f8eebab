package supervisor

import (
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Files of a run directory.
const (
	OutputLogName = record.OutputLog
	EventsName    = record.Events
	GpuguardLog   = record.GpuguardLog
)

// CreateRunDir creates the directory of a new run (rundir.Create). Failure
// returns an *Error with ExitCantCreate (73) that says which directory and
// how to choose another.
func CreateRunDir(explicit, workDir string) (*rundir.Dir, error) {
	d, err := rundir.Create(explicit, workDir)
	if err != nil {
		return nil, &Error{Code: ExitCantCreate, Msg: err.Error(), Err: err}
	}
	return d, nil
}

// OpenRunDir opens the directory of an earlier run (--resume-run) to append
// to it (rundir.Open). Failure returns an *Error with ExitCantCreate (73).
func OpenRunDir(path string) (*rundir.Dir, error) {
	d, err := rundir.Open(path)
	if err != nil {
		return nil, &Error{Code: ExitCantCreate, Msg: err.Error(), Err: err}
	}
	return d, nil
}
