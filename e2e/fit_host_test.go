package e2e

// Issue 25 with real PyTorch on the CPU: fit under a host ceiling. The job
// runs behind a soft RLIMIT_DATA, so PyTorch's CPU allocator fails with the
// request ("you tried to allocate N bytes") and no total; gpuguard reads
// the ceiling (/proc/PID/limits) and the job's data segment when training
// began, and fit sets the batch from them instead of halving.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// hostJob is a CPU trainer whose step's memory is mostly its input batch
// (FEATURES float32 per sample: 256 KiB), as a wide tabular or embedding
// input is.
const hostJob = `import sys, torch
FEATURES = 1 << 16
args = sys.argv[1:]
batch = int(args[args.index("--batch-size") + 1])
torch.manual_seed(0)
model = torch.nn.Linear(FEATURES, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("Epoch 1", flush=True)
for step in range(1, 4):
    x = torch.randn(batch, FEATURES)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    del x
    print(f"step {step} loss {loss.item():.4f}", flush=True)
print(f"trained at batch {batch}", flush=True)
`

// hostPolicy halves or fits the batch after a CPU-allocator OOM.
const hostPolicy = `version: 1
knobs:
  batch_size: {flag: --batch-size}
rules:
  - name: train-oom
    when: {kind: cpu_alloc_oom}
    steps:
      - %s: batch_size
budget: {relaunches: 8, per_kind: {cpu_alloc_oom: 8}}
backoff: {initial: 0s}
`

// dataBaseline is the data segment of the system Python after importing
// torch, measured here (a fixed figure would break with another build).
func dataBaseline(t *testing.T, env []string) int64 {
	t.Helper()
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe.py")
	os.WriteFile(probe, []byte("import torch\nfor l in open('/proc/self/status'):\n    if l.startswith('VmData:'): print(int(l.split()[1]) * 1024)\n"), 0o644)
	r := run(t, dir, env, python, probe)
	n, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if r.code != 0 || err != nil {
		t.Fatalf("measuring the data segment after importing torch:\n%s", dump(r))
	}
	return n
}

// TestFitUnderRlimitData: batch 4096 (1 GiB of input) behind RLIMIT_DATA
// 480 MiB above the imports. Halving needs relaunches until 1024; fit reads
// the ceiling and the request and needs fewer, ending nearer the largest
// batch that fits. The figures are in docs/performance.md.
func TestFitUnderRlimitData(t *testing.T) {
	needTorch(t)
	env := jobEnv()
	limit := dataBaseline(t, env) + 480<<20
	t.Logf("RLIMIT_DATA %d MiB", limit>>20)
	bin := buildGpuguard(t)
	got := map[string][]journalDecision{}
	final := map[string]int{}
	for _, verb := range []string{"halve", "fit"} {
		t.Run(verb, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "train.py"), []byte(hostJob), 0o644)
			pol := filepath.Join(dir, "policy.yaml")
			os.WriteFile(pol, []byte(fmt.Sprintf(hostPolicy, verb)), 0o644)
			runDir := filepath.Join(dir, "run")
			// The limit is the job's alone: sh sets it, then execs Python.
			r := run(t, dir, env, bin, "run", "--policy", pol, "--run-dir", runDir, "--",
				"/bin/sh", "-c", fmt.Sprintf(`ulimit -S -d %d && exec "$0" "$@"`, limit>>10), python, "train.py", "--batch-size", "4096")
			if r.code != 0 || !strings.Contains(r.stdout, "trained at batch") {
				t.Fatalf("%s did not bring the job to the end:\n%s", verb, dump(r))
			}
			ds := decisionsIn(t, runDir)
			if len(ds) == 0 {
				t.Fatalf("no relaunch for batch 4096:\n%s", dump(r))
			}
			last := ds[len(ds)-1].Changes[0].New
			n, _ := strconv.Atoi(last)
			got[verb], final[verb] = ds, n
			t.Logf("%s: %d relaunches, batch 4096 → %s", verb, len(ds), last)
			if verb == "fit" && !strings.Contains(r.stderr, "of RLIMIT_DATA less 10% headroom") {
				t.Errorf("fit did not use the RLIMIT_DATA ceiling:\n%s", r.stderr)
			}
		})
	}
	if len(got["fit"]) == 0 || len(got["halve"]) == 0 {
		return
	}
	if len(got["fit"]) >= len(got["halve"]) || final["fit"] < final["halve"] {
		t.Errorf("fit needed %d relaunches ending at %d, halving %d ending at %d: want fewer, ending no lower",
			len(got["fit"]), final["fit"], len(got["halve"]), final["halve"])
	}
}

// decisionsIn reads the relaunch decisions of a run's journal.
func decisionsIn(t *testing.T, runDir string) []journalDecision {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ds []journalDecision
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev struct {
			Type string
			journalDecision
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "decision" && ev.Verb == "relaunch" {
			ds = append(ds, ev.journalDecision)
		}
	}
	return ds
}
