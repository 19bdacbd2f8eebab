package supervisor

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
