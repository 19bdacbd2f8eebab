package supervisor

import "errors"

// Exit codes of `gpuguard run`. The job's own status always passes through
// unchanged: its exit code, or 128+N when it died of signal N (the shell's
// convention). gpuguard's own failures use the BSD sysexits codes, which
// training scripts rarely use, plus the shell's 126 and 127 for a command that
// cannot be run. The table is documented in README.md.
const (
	ExitUsage       = 64  // bad flags, no command after "--" (EX_USAGE)
	ExitSoftware    = 70  // an internal error in gpuguard (EX_SOFTWARE)
	ExitCantCreate  = 73  // the run directory cannot be created or written (EX_CANTCREAT)
	ExitConfig      = 78  // the policy file is invalid, or a knob it needs has no value (EX_CONFIG)
	ExitNotRunnable = 126 // the command exists but cannot be executed
	ExitNotFound    = 127 // the command was not found
)

// Error is a failure of gpuguard itself (not of the job) that maps to one of
// the exit codes above. Its message is one complete sentence for the user:
// what went wrong, where, and what to do.
type Error struct {
	Code int    // one of the Exit* constants
	Msg  string // the user-facing message, without a "gpuguard:" prefix
	Err  error  // the underlying error, if any
}

func (e *Error) Error() string { return e.Msg }

// ExitCode is the status gpuguard exits with for this error.
func (e *Error) ExitCode() int { return e.Code }

func (e *Error) Unwrap() error { return e.Err }

// ExitCodeOf returns the exit code an error maps to: the code of an *Error (or
// of anything with an ExitCode() int method) in its chain, else ExitSoftware.
// A nil error maps to 0.
func ExitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return ExitSoftware
}
