package attempt

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// Finding 2 of issue 23: a destination that takes nothing (a terminal
// frozen with ^S, a pipe nobody reads) must not wedge gpuguard. The job
// writes more than the queue holds to a pipe that is never read: the
// attempt still ends, output.log has every byte, and what was not shown is
// counted and said.
func TestBlockedTerminalDoesNotWedgeTheAttempt(t *testing.T) {
	const size = 2 * termQueueMax
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			r, w, err := os.Pipe() // nobody reads r
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			stderr := &supervisortest.SyncBuffer{}
			status := NewStatus(w, stderr)
			logFile := filepath.Join(t.TempDir(), "output.log")
			log, err := os.Create(logFile)
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			a := start(t, Spec{
				Argv:   []string{"head", "-c", strconv.Itoa(size), "/dev/zero"},
				PTY:    l.pty,
				Stdout: status.Stdout(), Stderr: status.Stderr(), Log: log,
			})
			res := waitDone(t, a)
			if res.Code != 0 {
				t.Errorf("result %+v, want code 0", res)
			}
			st, err := os.Stat(logFile)
			if err != nil || st.Size() != size {
				t.Errorf("output.log: %v bytes (%v), want %d", st.Size(), err, size)
			}
			if res.TerminalDropped <= 0 || res.TerminalDropped > size {
				t.Errorf("TerminalDropped = %d, want some of %d", res.TerminalDropped, size)
			}
			if got := stderr.String(); !strings.Contains(got, "bytes of the job's output were not shown") {
				t.Errorf("stderr %q does not say that output was not shown", got)
			}
		})
	}
}
