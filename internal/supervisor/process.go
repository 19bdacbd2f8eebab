package supervisor

import (
	"io"
	"os"
	"time"

	"github.com/gpuguard/gpuguard/internal/attempt"
)

// The process side of a run (starting the job, its output, its signals, its
// process tree, the watchdog, gpuguard as PID 1) lives in package attempt.
// These names let the run loop keep calling it as it always has.

type (
	attemptSpec   = attempt.Spec
	attemptResult = attempt.Result
	// Attempt is one running child and its process tree (attempt.Attempt).
	Attempt = attempt.Attempt
	// Status writes gpuguard's own lines to stderr (attempt.Status).
	Status = attempt.Status
)

// markerVar is the environment variable that marks every process of an
// attempt (attempt.MarkerVar).
const markerVar = attempt.MarkerVar

func startAttempt(spec attemptSpec) (*Attempt, error) { return attempt.Start(spec) }

func newStatus(stdout, stderr io.Writer) *Status { return attempt.NewStatus(stdout, stderr) }

func sameFile(a, b io.Writer) bool { return attempt.SameFile(a, b) }

func isTerminal(f *os.File) bool { return attempt.IsTerminal(f) }

func resolvePTY(mode string, stdout *os.File) (bool, error) { return attempt.ResolvePTY(mode, stdout) }

// IsWatchdogInvocation reports whether argv (the command after "--") and the
// environment say that this process is an attempt's watchdog; Run hands such
// an invocation to the watchdog before doing anything else.
func IsWatchdogInvocation(argv []string) bool { return attempt.IsWatchdogInvocation(argv) }

func watchdogMain() int { return attempt.WatchdogMain() }

func runAsInit(grace time.Duration) (int, bool) { return attempt.RunAsInit(grace) }

func lookPathIn(argv0, pathEnv, dir string) (string, error) {
	return attempt.LookPathIn(argv0, pathEnv, dir)
}

func becomeSubreaper() error { return attempt.BecomeSubreaper() }

// containmentLine says which containment the run's attempts get (one status
// line at the start of a run).
func containmentLine() string { return attempt.ContainmentLine() }
