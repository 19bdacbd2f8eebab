package memory

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// growScript grows by 20 MiB of touched memory each time it reads a line,
// and says so once the memory is in place.
const growScript = `
import sys
held = []
sys.stdout.write("ready\n")
sys.stdout.flush()
for line in sys.stdin:
    held.append(b"\x01" * (20 << 20))
    sys.stdout.write("ok\n")
    sys.stdout.flush()
`

// hostRows passes on the host rows' job bytes of a timeline as it is written.
type hostRows struct{ rows chan uint64 }

func (h hostRows) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		f := strings.Split(line, ",")
		if len(f) == 7 && f[3] == "host" {
			if v, err := strconv.ParseUint(f[4], 10, 64); err == nil {
				h.rows <- v
			}
		}
	}
	return len(p), nil
}

// Validation memory is sampled at val_hz with real values: a job that grows
// by 20 MiB at a time is seen at each step by the next samples, not once a
// second (issue 12: the host figure came from a PSS read once a second, so a
// 20 Hz timeline showed flat one-second steps). The job grows on the test's
// command, so no clock decides the outcome: after each step, once the rows
// queued so far are dropped, the second host row written must show it (the
// first may have been read before the step; the second was read after the
// first was written).
func TestSamplerSeesValidationGrowth(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is needed for the growing job")
	}
	// The interpreter itself, not a shim that execs it (pyenv's): the test
	// is about growth, not about a job whose root execs another program.
	if real, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil {
		py = strings.TrimSpace(string(real))
	}
	cmd := exec.Command(py, "-c", growScript)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	acks := bufio.NewReader(out)

	job := procfs.NewTree("/proc", "")
	job.SetRoot(cmd.Process.Pid)
	job.Scan()
	rows := hostRows{rows: make(chan uint64, 1024)}
	s := NewSampler(SamplerConfig{BaseHz: 1, FastHz: 20, Timeline: rows, Attempt: 1, Origin: time.Now()})
	s.SetPhase(classify.PhaseVal, -1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunJob(ctx, job); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	next := func() uint64 {
		select {
		case v := <-rows.rows:
			return v
		case <-time.After(time.Minute):
			t.Fatal("no timeline row within a minute")
			return 0
		}
	}
	drain := func() {
		for {
			select {
			case <-rows.rows:
			default:
				return
			}
		}
	}
	// after returns a host row read wholly after the call.
	after := func() uint64 {
		drain()
		next()
		return next()
	}
	if line, err := acks.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the job said %q, %v", line, err)
	}
	base := after()
	const step = 20 << 20
	for i := 1; i <= 10; i++ {
		io.WriteString(in, "\n")
		if line, err := acks.ReadString('\n'); err != nil || line != "ok\n" {
			t.Fatalf("step %d: the job said %q, %v", i, line, err)
		}
		drain()
		a := next()
		got := next()
		t.Logf("step %d: %d then %d MiB", i, a>>20, got>>20)
		if want := base + uint64(i)*step*9/10; got < want {
			t.Fatalf("step %d: host %d MiB, want at least %d MiB (%d MiB before the first step)", i, got>>20, want>>20, base>>20)
		}
	}
}
