package reliability

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/checkpoint"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
)

// Clock jumps. gpuguard measures durations with Go's monotonic clock
// (time.Now carries a monotonic reading, and Sub uses it), which a change
// of the system clock does not move; the suite never changes the machine's
// clock. What can be tested is the code that takes a clock as input: the
// memory sampler (SamplerConfig.Now) and the checkpoint scan (its now),
// given a wall clock that jumps backwards.

// rowCounter is a timeline writer that signals once it has n rows.
type rowCounter struct {
	mu   sync.Mutex
	rows []string
	n    int
	done chan struct{}
}

func (r *rowCounter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, string(p))
	if len(r.rows) == r.n {
		close(r.done)
	}
	return len(p), nil
}

// The sampler keeps sampling, at its rates, when every reading of its clock
// is an hour earlier than the last, and stops when told.
func TestSamplerClockJumpsBackwards(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(-time.Hour)
		return now
	}
	tl := &rowCounter{n: 30, done: make(chan struct{})}
	s := memory.NewSampler(memory.SamplerConfig{BaseHz: 500, FastHz: 1000, FastFor: time.Second, Timeline: tl, Attempt: 1, Now: clock})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Run(ctx, func() int { return os.Getpid() })
	}()
	s.SetPhase(classify.PhaseTrain, 0)
	s.SetPhase(classify.PhaseVal, 0) // phase changes mid-jump
	s.SetPhase(classify.PhaseTrain, 1)
	select {
	case <-tl.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the sampler stalled with a clock jumping backwards: %d rows", len(tl.rows))
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the sampler did not stop")
	}
	sum := s.Summary()
	if _, ok := sum.Phase(classify.PhaseTrain); !ok {
		t.Errorf("no train phase in the summary after the jumps: %+v", sum)
	}
	tl.mu.Lock()
	t.Logf("first rows: %q", tl.rows[:3])
	tl.mu.Unlock()
}

// A checkpoint written "in the future" (the clock jumped back after it was
// written) is not taken for complete by the quiet rule until the clock has
// passed it by the quiet period, and is never an error.
func TestCheckpointScanClockJumpsBackwards(t *testing.T) {
	dir := t.TempDir()
	ck := writeFile(t, filepath.Join(dir, "ckpt", "step_10.ckpt"), "weights")
	keepUnchanged(t, ck)
	fi, err := os.Stat(ck)
	if err != nil {
		t.Fatal(err)
	}
	spec := checkpoint.Spec{Globs: []string{"ckpt/step_*.ckpt"}, Choose: "highest_step", Quiet: 10 * time.Second}
	back := fi.ModTime().Add(-time.Hour) // the clock now reads an hour before the write
	all, err := checkpoint.Scan(dir, spec, back)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Complete || !strings.Contains(all[0].Why, "future") {
		t.Fatalf("scan with the clock an hour back: %+v", all)
	}
	if _, ok, err := checkpoint.Latest(dir, spec, back); ok || err != nil {
		t.Errorf("LatestCheckpoint took a checkpoint from the future as complete (err %v)", err)
	}
	if c, ok, err := checkpoint.Latest(dir, spec, fi.ModTime().Add(11*time.Second)); !ok || err != nil || c.Path != ck {
		t.Errorf("once the clock is past it by the quiet period: %+v %v %v", c, ok, err)
	}
}

// The example job through its recoveries: nothing in examples/ (the
// policy, the config, the script) changes, and its checkpoints go to the
// working directory.
func TestExampleDirectoryUnchanged(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("skipped: python3 is needed for the example job")
	}
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	keepUnchanged(t, examples)
	dir := t.TempDir()
	t.Setenv("EXAMPLE_STEP_MS", "1")
	g := startGpuguard(t, dir, []string{"--policy", filepath.Join(examples, "gpuguard.yaml"), "--pty", "never"},
		"python3", filepath.Join(examples, "train.py"), "--config", filepath.Join(examples, "config.yaml"))
	if code := g.exitCode(t); code != 0 {
		t.Fatalf("gpuguard exited %d; stderr %q", code, g.stderr.String())
	}
	if !strings.Contains(g.stdout.String(), "training complete") {
		t.Errorf("the example did not complete: %q", g.stdout.String())
	}
	if !strings.Contains(g.stderr.String(), "rule train-oom") {
		t.Errorf("the example did not go through its recoveries: %q", g.stderr.String())
	}
}
