package torchprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/envlist"
)

// python is Debian's system Python, the one python3-torch installs into; the
// python3 on PATH may be another without torch.
const python = "/usr/bin/python3"

func needTorch(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs PyTorch: not in -short")
	}
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("no PyTorch at %s (import torch: %v: %s)", python, err, bytes.TrimSpace(out))
	}
}

// job is one run of a script in testdata.
type job struct {
	stdout, stderr string
	code           int
	records        []Record
	recDir         string
}

// runScript runs testdata/script with /usr/bin/python3, under the probe when
// probe is true, with extra KEY=VALUE settings.
func runScript(t *testing.T, script string, probe bool, extra ...string) job {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	site, rec := Dirs(dir, 1)
	env := envlist.Unset(os.Environ(), "PYTHONPATH", EnvDir, "PYTHONHOME", "PYTHONSTARTUP")
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		env = envlist.Set(env, k, v)
	}
	if probe {
		if err := Install(site); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(rec, 0o755); err != nil {
			t.Fatal(err)
		}
		env = Env(env, site, rec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, abs)
	cmd.Dir = filepath.Dir(abs)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	j := job{stdout: out.String(), stderr: errb.String(), recDir: rec}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		j.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", script, err)
	}
	if probe {
		NewFollower(rec).Poll(func(r Record) { j.records = append(j.records, r) })
	}
	return j
}

func (j job) of(kind string) []Record {
	var rs []Record
	for _, r := range j.records {
		if r.Kind == kind {
			rs = append(rs, r)
		}
	}
	return rs
}

func (j job) dump(t *testing.T) {
	t.Helper()
	for _, r := range j.records {
		b, _ := json.Marshal(r)
		t.Logf("record %s", b)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", j.stdout, j.stderr)
}

// The phase comes from the model's train()/eval() in a job that prints no
// phase lines, the steps from its optimizer.
func TestPhasesFromTrainEval(t *testing.T) {
	needTorch(t)
	j := runScript(t, "train.py", true, "GPUGUARD_PROBE_INTERVAL=0")
	if j.code != 0 {
		j.dump(t)
		t.Fatalf("exit %d", j.code)
	}
	var got []string
	for _, r := range j.of(KindPhase) {
		got = append(got, r.Phase+"@"+itoa(r.Step)+" "+r.How)
	}
	want := []string{"train@0 train()", "val@5 eval()", "train@5 train()", "val@10 eval()"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		j.dump(t)
		t.Fatalf("phases %q, want %q", got, want)
	}
	steps := j.of(KindStep)
	if len(steps) != 10 || steps[9].Step != 10 || steps[0].Mem == nil || steps[0].Mem.HostRSS <= 0 {
		j.dump(t)
		t.Fatalf("want 10 step records, the first with host memory")
	}
	for _, r := range j.records {
		if r.PID == 0 || r.Rank != nil {
			t.Fatalf("record without pid, or with a rank the job has not: %+v", r)
		}
	}
}

// Without train()/eval(), forwards under torch.no_grad are validation (two
// in a row), and the next optimizer step is training again.
func TestPhasesFromNoGrad(t *testing.T) {
	needTorch(t)
	j := runScript(t, "train.py", true, "MODE=nograd")
	var got []string
	for _, r := range j.of(KindPhase) {
		got = append(got, r.Phase+" "+r.How)
	}
	want := "train forward with grad|val forward without grad|train forward with grad|val forward without grad"
	if strings.Join(got, "|") != want {
		j.dump(t)
		t.Fatalf("phases %q, want %q", got, want)
	}
}

// A real CPU allocator failure inside a named submodule's forward: its
// module path, the pass, phase, step and the call's input shapes.
func TestOOMSite(t *testing.T) {
	needTorch(t)
	j := runScript(t, "train.py", true, "MODE=oom")
	ooms := j.of(KindOOM)
	if j.code != 1 || len(ooms) != 1 {
		j.dump(t)
		t.Fatalf("exit %d with %d oom records, want 1 and 1", j.code, len(ooms))
	}
	o := ooms[0]
	if o.Module != "Net.encoder.0" || o.Pass != "forward" || o.Phase != "train" || o.Step != 3 ||
		string(o.Shapes) != "[[8,16]]" || !strings.Contains(o.Error, "DefaultCPUAllocator: can't allocate memory") {
		j.dump(t)
		t.Fatalf("oom record %+v", o)
	}
}

// DataLoader workers run modules (eval, no_grad) and write nothing; the
// main process's records are there.
func TestDataLoaderWorkersSilent(t *testing.T) {
	needTorch(t)
	j := runScript(t, "dataloader.py", true)
	files, _ := filepath.Glob(filepath.Join(j.recDir, "*"))
	if j.code != 0 || len(files) != 1 {
		j.dump(t)
		t.Fatalf("exit %d, files %q: want one file, the main process's", j.code, files)
	}
	for _, r := range j.records {
		if r.Phase == "val" {
			j.dump(t)
			t.Fatalf("a worker's eval() reached the records: %+v", r)
		}
	}
	if len(j.of(KindStep)) == 0 {
		j.dump(t)
		t.Fatal("no step record")
	}
}

// The user's own sitecustomize still runs, after the probe's.
func TestUserSitecustomize(t *testing.T) {
	needTorch(t)
	user, _ := filepath.Abs(filepath.Join("testdata", "usersite"))
	dir := t.TempDir()
	site, rec := Dirs(dir, 1)
	if err := Install(site); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(rec, 0o755)
	env := Env(envlist.Set(os.Environ(), "PYTHONPATH", user), site, rec)
	if got := envlist.Get(env, "PYTHONPATH"); got != site+":"+user {
		t.Fatalf("PYTHONPATH %q", got)
	}
	cmd := exec.Command(python, filepath.Join("testdata", "usersite.py"))
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "user sitecustomize ran") || !strings.Contains(string(out), "USER_SITECUSTOMIZE=ran") {
		t.Fatalf("%v: %s", err, out)
	}
	var phases []Record
	NewFollower(rec).Poll(func(r Record) {
		if r.Kind == KindPhase {
			phases = append(phases, r)
		}
	})
	if len(phases) != 1 || phases[0].Phase != "val" {
		t.Fatalf("phases %+v", phases)
	}
}

// A failure inside the probe, wherever it happens, is reported once and
// leaves the job's output and exit status exactly as without the probe,
// also when the job dies of an out-of-memory error (its traceback).
func TestProbeFailureLeavesJobAlone(t *testing.T) {
	needTorch(t)
	for _, mode := range []string{"", "oom"} {
		plain := runScript(t, "train.py", false, "MODE="+mode)
		for _, at := range []string{"", "activate", "phase", "forward", "step", "write"} {
			j := runScript(t, "train.py", true, "MODE="+mode, "GPUGUARD_PROBE_FAIL="+at)
			if j.stdout != plain.stdout || j.stderr != plain.stderr || j.code != plain.code {
				t.Errorf("MODE=%s fail at %q: exit %d, want %d; stdout/stderr differ: %v/%v\n%s", mode, at, j.code, plain.code,
					j.stdout != plain.stdout, j.stderr != plain.stderr, j.stderr)
				continue
			}
			errs := j.of(KindError)
			if at == "" {
				if len(errs) != 0 {
					t.Errorf("MODE=%s: probe errors without a failure: %+v", mode, errs)
				}
				continue
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error, "deliberate probe failure at "+at) {
				j.dump(t)
				t.Errorf("MODE=%s fail at %q: error records %+v, want one", mode, at, errs)
			}
		}
	}
}

// CUDA figures and the snapshot, against a fake torch.cuda (no GPU here).
func TestCUDAFake(t *testing.T) {
	needTorch(t)
	j := runScript(t, "cudafake.py", true)
	if j.code != 0 || j.stdout != "history 1\ncaught\n" {
		j.dump(t)
		t.Fatalf("exit %d", j.code)
	}
	ph := j.of(KindPhase)
	if len(ph) != 1 || ph[0].Mem == nil || ph[0].Mem.CUDAReservedUnallocated != 2<<30 || ph[0].Mem.CUDAAllocRetries != 7 {
		j.dump(t)
		t.Fatal("phase record without the fake's CUDA figures")
	}
	ooms := j.of(KindOOM)
	if len(ooms) != 1 || ooms[0].Module != "Sequential.1" || ooms[0].ErrorType != "OutOfMemoryError" || ooms[0].Snapshot == "" {
		j.dump(t)
		t.Fatalf("oom records %+v", ooms)
	}
	if _, err := os.Stat(ooms[0].Snapshot); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// Every rank reports with its RANK and LOCAL_RANK; the launcher, which
// imports torch but trains nothing, writes no file.
func TestRanks(t *testing.T) {
	needTorch(t)
	j := runScript(t, "ddp.py", true, "OMP_NUM_THREADS=1")
	files, _ := filepath.Glob(filepath.Join(j.recDir, "probe-*.jsonl"))
	if j.code != 0 || len(files) != 2 {
		j.dump(t)
		t.Fatalf("exit %d, files %q: want 0 and one per rank", j.code, files)
	}
	seen := map[int]string{}
	for _, r := range j.of(KindPhase) {
		if r.Rank == nil || r.LocalRank == nil || *r.Rank != *r.LocalRank {
			t.Fatalf("phase record without its rank: %+v", r)
		}
		seen[*r.Rank] += r.Phase + "@" + itoa(r.Step) + " "
	}
	if seen[0] != "train@0 val@3 " || seen[1] != "train@0 val@3 " {
		j.dump(t)
		t.Fatalf("phases by rank %v", seen)
	}
}

// The failing block's place among the model's repeated blocks, with real
// modules and a real CPU allocator failure: a ModuleList of decoder layers
// (its own small Sequentials ignored), torchvision-style stages counted as
// one sequence, none for a model without repeated blocks; grad tells a
// validation forward; a failure in activation checkpointing's recomputation
// is the backward pass, reported once, with no block.
func TestOOMBlock(t *testing.T) {
	needTorch(t)
	for _, c := range []struct {
		shape, where, module, pass string
		grad                       bool
		block                      *Block
	}{
		{"llm", "forward", "LLM.layers.5.mlp.2", "forward", true, &Block{"layers", 5, 8}},
		{"llm", "nograd", "LLM.layers.5.mlp.2", "forward", false, &Block{"layers", 5, 8}},
		{"resnet", "forward", "ResNet.layer3.2.boom", "forward", true, &Block{"layer1..layer4", 9, 16}},
		{"flat", "forward", "Flat.boom", "forward", true, nil},
		{"llm", "recompute", "Layer.mlp.2", "backward", true, nil},
	} {
		j := runScript(t, "blocks.py", true, "SHAPE="+c.shape, "WHERE="+c.where)
		ooms := j.of(KindOOM)
		if j.code != 1 || len(ooms) != 1 {
			j.dump(t)
			t.Fatalf("%s %s: exit %d with %d oom records, want 1 and 1", c.shape, c.where, j.code, len(ooms))
		}
		o := ooms[0]
		ok := o.Module == c.module && o.Pass == c.pass && o.Grad != nil && *o.Grad == c.grad &&
			(o.Block == nil) == (c.block == nil) && (c.block == nil || *o.Block == *c.block)
		if !ok {
			j.dump(t)
			t.Fatalf("%s %s: oom record module %q pass %q grad %v block %+v; want %q %q %v %+v",
				c.shape, c.where, o.Module, o.Pass, o.Grad, o.Block, c.module, c.pass, c.grad, c.block)
		}
	}
}
