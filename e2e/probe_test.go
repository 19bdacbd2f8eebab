package e2e

// `gpuguard run --probe torch` on real PyTorch on the CPU: the probe's
// phases and the out-of-memory site reach events.jsonl through gpuguard.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// probeRun runs internal/probes/torchprobe/testdata/train.py under
// `gpuguard run --probe torch` and reads the run's journal.
func probeRun(t *testing.T, env []string, flags ...string) (result, []record.Event, string) {
	t.Helper()
	bin := buildGpuguard(t)
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	script := filepath.Join(repoRoot, "internal", "probes", "torchprobe", "testdata", "train.py")
	argv := append([]string{bin, "run", "--run-dir", runDir, "--pty", "never"}, flags...)
	argv = append(argv, "--", python, script)
	r := run(t, dir, env, argv...)
	f, err := os.Open(filepath.Join(runDir, record.Events))
	if err != nil {
		t.Fatalf("the run's journal: %v\n%s", err, dump(r))
	}
	defer f.Close()
	entries, bad, err := record.Read(f)
	if err != nil || len(bad) > 0 {
		t.Fatalf("events.jsonl: %v %v", err, bad)
	}
	var evs []record.Event
	for _, e := range entries {
		if ev, err := e.Event(); err == nil {
			evs = append(evs, ev)
		}
	}
	return r, evs, runDir
}

// A job that prints no phase lines: its phases come from train()/eval().
// Then its out-of-memory error in Net.encoder.0's forward at step 3 is in
// the attempt's end, with its phase and the input shapes.
func TestProbeTorchThroughGpuguard(t *testing.T) {
	needTorch(t)
	r, evs, _ := probeRun(t, jobEnv(), "--probe", "torch")
	if r.code != 0 || !strings.Contains(r.stderr, "torch probe on") {
		t.Fatalf("exit %d, want 0 and the probe announced\n%s", r.code, dump(r))
	}
	var phases []string
	for _, ev := range evs {
		if p, ok := ev.(record.Probe); ok && p.Kind == record.ProbePhase {
			phases = append(phases, string(p.Phase)+" "+p.How)
		}
	}
	if want := "train train()|val eval()|train train()|val eval()"; strings.Join(phases, "|") != want {
		t.Fatalf("probe phases %q, want %q", phases, want)
	}

	// That these phases drive the memory sampler is checked without a
	// clock in internal/supervisor (TestProbePhaseDrivesTheSampler): here a
	// train phase shorter than the records' poll (200 ms) may pass unsampled.

	r, evs, _ = probeRun(t, jobEnv("MODE=oom"), "--probe", "torch")
	var end *record.AttemptEnd
	for _, ev := range evs {
		if e, ok := ev.(record.AttemptEnd); ok {
			end = &e
		}
	}
	if r.code != 1 || end == nil || end.Site == nil {
		t.Fatalf("exit %d, attempt_end %+v: want 1 and a site\n%s", r.code, end, dump(r))
	}
	s := end.Site
	if s.Module != "Net.encoder.0" || s.Pass != "forward" || s.Phase != "train" || s.Step != 3 || s.Shapes != "[[8,16]]" ||
		s.Block == nil || *s.Block != (record.ProbeBlock{Container: "encoder", Index: 0, Of: 2}) || s.Grad == nil || !*s.Grad {
		t.Fatalf("site %+v", *s)
	}
	if !strings.Contains(r.stderr, "torch probe: out of memory in the forward of Net.encoder.0 (train, step 3, inputs [[8,16]], block 1 of 2 in encoder)") {
		t.Fatalf("the site is not said\n%s", dump(r))
	}
}

// Without --probe nothing of the probe is in the job's environment.
func TestNoProbeNoEnvironment(t *testing.T) {
	bin := buildGpuguard(t)
	dir := t.TempDir()
	r := run(t, dir, jobEnv(), bin, "run", "--run-dir", filepath.Join(dir, "run"), "--pty", "never", "--", "env")
	if r.code != 0 || strings.Contains(r.stdout, "GPUGUARD_PROBE_DIR") || strings.Contains(r.stdout, "probe/site") {
		t.Fatalf("exit %d; environment:\n%s", r.code, r.stdout)
	}
	r = run(t, dir, jobEnv(), bin, "run", "--run-dir", filepath.Join(dir, "run2"), "--pty", "never", "--probe", "torch", "--", "env")
	if r.code != 0 || !strings.Contains(r.stdout, "GPUGUARD_PROBE_DIR=") || !strings.Contains(r.stdout, "PYTHONPATH="+filepath.Join(dir, "run2", "probe", "site")) {
		t.Fatalf("exit %d; environment with --probe:\n%s", r.code, r.stdout)
	}
}
