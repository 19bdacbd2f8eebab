package attempt

import (
	"fmt"
	"os"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The test binary plays the programs these tests run (supervisortest.Main),
// chosen by its first argument:
//
//	MODE ...                           the fake trainer's modes (supervisortest.Trainer)
//	run -- gpuguard-internal-watchdog  an attempt's watchdog
//
// Orphans of the jobs these tests start come back to the test process (a
// subreaper), which reaps them (see supervisortest.Gone).
func TestMain(m *testing.M) { supervisortest.Main(m, helpers, supervisortest.Subreaper()) }

var helpers = supervisortest.Modes("mixed", "bigline", "flood", "exit", "kill", "ignoreterm", "tree", "stdin",
	"printenv", "istty", "winsize").With(supervisortest.Helpers{"run": runWatchdog})

// runWatchdog is `gpuguard run -- gpuguard-internal-watchdog`, as the
// attempt starts it.
func runWatchdog(args []string) int {
	if len(args) < 1 || !IsWatchdogInvocation(args[1:]) {
		fmt.Fprintf(os.Stderr, "run %q: not an attempt's watchdog (GPUGUARD_WATCHDOG unset?)\n", args)
		return 64
	}
	return WatchdogMain()
}

func testBinary() string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe
}

func fakeSelf() []string { return []string{testBinary()} }

// fake returns the argv of the fake trainer in mode.
func fake(mode ...string) []string { return append(fakeSelf(), mode...) }

// launcher is one way of connecting the job's output: the tests that hold
// for both run once under each, as nomad runs its executor tests across
// implementations.
type launcher struct {
	name string
	pty  bool
}

var launchers = []launcher{{"pipes", false}, {"pty", true}}

func waitDone(t *testing.T, a *Attempt) Result {
	t.Helper()
	supervisortest.WaitChan(t, a.Done(), "the attempt to finish")
	return a.Result()
}

// memberPids is the pids of a's Members.
func memberPids(a *Attempt) []int {
	var out []int
	for _, p := range a.Members() {
		out = append(out, p.PID)
	}
	return out
}
