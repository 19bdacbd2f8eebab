// Package exitcode is gpuguard's one table of exit statuses, and the error
// type that carries one.
//
// The job's own status always passes through `gpuguard run` unchanged: its
// exit code, or 128+N when it died of signal N (the shell's convention).
// gpuguard's own failures use the BSD sysexits codes, which training scripts
// rarely use, plus the shell's 126 and 127 for a command that cannot be run.
// The table is documented in README.md ("Exit status of gpuguard run").
package exitcode

import (
	"errors"
	"strconv"
)

// Exit statuses of gpuguard's own making.
const (
	OK          = 0
	Busy        = 1   // doctor: a GPU the job will use is already mostly taken
	Usage       = 64  // bad flags or arguments, no command after "--" (EX_USAGE)
	DataErr     = 65  // the input is there but holds nothing usable: events.jsonl without a readable event (EX_DATAERR)
	NoInput     = 66  // a log, run directory or events.jsonl cannot be read (EX_NOINPUT)
	Software    = 70  // an internal error in gpuguard (EX_SOFTWARE)
	CantCreate  = 73  // the run directory, a plot or the output cannot be created or written (EX_CANTCREAT)
	IOErr       = 74  // the output cannot be written (EX_IOERR)
	GroupLost   = 76  // run --group: a peer (the leader, or a member) could not be reached within the bound; nothing relaunched (EX_PROTOCOL)
	Config      = 78  // the policy file is invalid, or a knob it needs has no value (EX_CONFIG)
	NotRunnable = 126 // the command exists but cannot be executed
	NotFound    = 127 // the command was not found

	// With --exit-codes scheduler (or the policy's exit_codes: scheduler),
	// a run that gave up says whether a scheduler's retry is worth it. 75 is
	// sysexits' EX_TEMPFAIL ("retry later"), which gpuguard uses for nothing
	// else; 79 is past the sysexits range.
	RetryMayHelp    = 75 // gave up, a retry may help: relaunch budget spent, hang, node trouble
	RetryCannotHelp = 79 // gave up, a retry cannot help: memory rules exhausted, a crash not retried
)

// Error is a failure of gpuguard itself (not of the job) that maps to one of
// the exit statuses above. Its message is one complete sentence for the
// user: what went wrong, where, and what to do.
//
// An Error with neither Msg nor Err carries a status only: what went wrong
// has been reported already, or the status is the job's own (see Status).
type Error struct {
	Code int    // one of the constants above
	Msg  string // the user-facing message, without a "gpuguard:" prefix
	Err  error  // the underlying error, if any
}

func (e *Error) Error() string {
	switch {
	case e.Msg != "":
		return e.Msg
	case e.Err != nil:
		return e.Err.Error()
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// ExitCode is the status gpuguard exits with for this error.
func (e *Error) ExitCode() int { return e.Code }

func (e *Error) Unwrap() error { return e.Err }

// Status returns an error that carries code and nothing to print: the
// command has said what went wrong already, or code is the job's own
// status. Status(0) is nil.
func Status(code int) error {
	if code == OK {
		return nil
	}
	return &Error{Code: code}
}

// Silent reports whether err is an *Error that carries a status only (see
// Status), so that there is nothing more to print.
func Silent(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Msg == "" && e.Err == nil
}

// Of returns the exit status err maps to: the code of an *Error (or of
// anything with an ExitCode() int method) in its chain, else Software. A nil
// error maps to OK.
func Of(err error) int {
	if err == nil {
		return OK
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return Software
}
