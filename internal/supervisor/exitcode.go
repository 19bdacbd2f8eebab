package supervisor

import "github.com/gpuguard/gpuguard/internal/exitcode"

// Exit codes of `gpuguard run`: the names this package has always used for
// the table in package exitcode, which is documented in README.md.
const (
	ExitUsage       = exitcode.Usage       // bad flags, no command after "--" (EX_USAGE)
	exitSoftware    = exitcode.Software    // an internal error in gpuguard (EX_SOFTWARE)
	ExitCantCreate  = exitcode.CantCreate  // the run directory cannot be created or written (EX_CANTCREAT)
	ExitConfig      = exitcode.Config      // the policy file is invalid, or a knob it needs has no value (EX_CONFIG)
	exitNotRunnable = exitcode.NotRunnable // the command exists but cannot be executed
	exitNotFound    = exitcode.NotFound    // the command was not found
)

// Error is a failure of gpuguard itself (not of the job) that maps to one of
// the exit codes above: see exitcode.Error.
type Error = exitcode.Error

// exitCodeOf returns the exit code an error maps to: see exitcode.Of.
func exitCodeOf(err error) int { return exitcode.Of(err) }
