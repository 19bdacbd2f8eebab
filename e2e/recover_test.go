package e2e

// The scenarios run under gpuguard with e2e/torchjob/gpuguard.yaml: the job
// fails for real, the policy's rule for that failure fires (journalled as a
// decision in events.jsonl with its knob change), and the relaunch resumes
// from the checkpoint with settings that fit and finishes.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// change is one knob change of a decision, as journalled.
type change struct{ Name, Old, New string }

// decision is a "decision" event of events.jsonl.
type decision struct {
	Attempt    int
	Verb       string
	Rule       string
	Changes    []change
	Checkpoint string
}

// recovery is how a gpuguard run ended.
type recovery struct {
	result
	decisions []decision
	out       string // the job's output directory
}

// recover runs the job under gpuguard and the e2e policy, behind memlimit.sh
// with wrapper's arguments, and reads the run's journal.
func recover(t *testing.T, env []string, wrapper []string, args ...string) recovery {
	t.Helper()
	bin := buildGpuguard(t)
	dir := t.TempDir()
	runDir, out := filepath.Join(dir, "run"), filepath.Join(dir, "out")
	argv := []string{bin, "run", "--policy", policyFile, "--run-dir", runDir, "--", memlimit}
	argv = append(argv, wrapper...)
	argv = append(argv, "--", python, trainPy, "--output-dir", out)
	r := recovery{result: run(t, dir, env, append(argv, args...)...), out: out}

	f, err := os.Open(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatalf("the run's journal: %v\n%s", err, dump(r.result))
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Type string
			decision
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("events.jsonl: bad line %q: %v", sc.Text(), err)
		}
		if ev.Type == "decision" {
			r.decisions = append(r.decisions, ev.decision)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading events.jsonl: %v", err)
	}
	return r
}

// expectRecovered checks that the run finished with exit 0 after exactly
// the decisions want (rule and changes; the first relaunch from step_4.pt),
// and that the job trained steps 1..6, each once, resuming from step_4.pt.
func expectRecovered(t *testing.T, r recovery, want ...decision) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("gpuguard did not bring the job to the end:\n%s", dump(r.result))
	}
	var got []string
	for _, d := range r.decisions {
		got = append(got, fmt.Sprintf("%s %s %v", d.Verb, d.Rule, d.Changes))
	}
	if len(r.decisions) != len(want) {
		t.Fatalf("decisions %q, want %d:\n%s", got, len(want), dump(r.result))
	}
	for i, w := range want {
		d := r.decisions[i]
		if d.Verb != "relaunch" || d.Rule != w.Rule || !reflect.DeepEqual(d.Changes, w.Changes) {
			t.Errorf("decision %d: %q, want relaunch %s %v", i+1, got[i], w.Rule, w.Changes)
		}
	}
	ckpt := filepath.Join(r.out, "step_4.pt")
	if r.decisions[0].Checkpoint != ckpt {
		t.Errorf("first relaunch from %q, want %s", r.decisions[0].Checkpoint, ckpt)
	}
	tr := trained(t, r.stdout)
	if !reflect.DeepEqual(tr.order, stepsRange(1, 6)) || len(tr.resumes) != len(want) || tr.resumes[0] != ckpt {
		t.Errorf("trained steps %v with resumes %v; want 1..6, each once, resumed from %s:\n%s", tr.order, tr.resumes, ckpt, dump(r.result))
	}
	if tr.starts != len(want)+1 {
		t.Errorf("%d attempts started, want %d", tr.starts, len(want)+1)
	}
	if !strings.Contains(r.stdout, "training finished at step 6") {
		t.Errorf("the last attempt did not finish:\n%s", dump(r.result))
	}
}

// TestRecoverValidationOOM: validation at full resolution fails in the
// allocator; rule val-oom sets VAL_CROP_SIZE=64 (never the training batch),
// and the relaunch resumes from step 4 and validates on center crops.
func TestRecoverValidationOOM(t *testing.T) {
	needTorch(t)
	config := filepath.Join(repoRoot, "e2e", "torchjob", "config.yaml")
	before, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	r := recover(t, jobEnv(), asWrapper(t), "--workers", "0")
	expectRecovered(t, r, decision{Rule: "val-oom", Changes: []change{{"val_crop_size", "unset", "64"}}})
	if !strings.Contains(r.stderr, "attempt 1 died of CPU allocator OOM in validation") {
		t.Errorf("gpuguard did not report the validation OOM:\n%s", dump(r.result))
	}
	if !allocRe.MatchString(r.stderr) {
		t.Errorf("the job's allocator error is not in the output:\n%s", dump(r.result))
	}
	if !strings.Contains(r.stdout, "effective batch 32 (batch_size 32 x grad_accum 1)\nworkers 0, cache 3000 samples per worker, val_crop_size 64") ||
		!strings.Contains(r.stdout, "Validating at step 6: 32 images at 64x64 center crops") {
		t.Errorf("the relaunch did not validate on 64-pixel crops with the same batch:\n%s", dump(r.result))
	}
	if after, err := os.ReadFile(config); err != nil || !bytes.Equal(before, after) {
		t.Errorf("config.yaml changed during the run (%v)", err)
	}
}

// TestRecoverTrainOOM: batch 256 fails in the allocator at step 5; rule
// train-oom halves the batch and doubles accumulation (effective batch 256
// kept), and the relaunch resumes from step 4 and fits.
func TestRecoverTrainOOM(t *testing.T) {
	needTorch(t)
	r := recover(t, jobEnv("VAL_CROP_SIZE=64"), asWrapper(t), "--workers", "0", "--batch-size", "256")
	expectRecovered(t, r, decision{Rule: "train-oom", Changes: []change{{"batch_size", "256", "128"}, {"grad_accum", "1", "2"}}})
	if !strings.Contains(r.stderr, "attempt 1 died of CPU allocator OOM in training") {
		t.Errorf("gpuguard did not report the training OOM:\n%s", dump(r.result))
	}
	if !strings.Contains(r.stdout, "effective batch 256 (batch_size 128 x grad_accum 2)") {
		t.Errorf("the relaunch did not keep the effective batch:\n%s", dump(r.result))
	}
}

// TestRecoverWorkersKilled: four caching DataLoader workers exceed the memory
// cgroup at the first step at 96 pixels and the kernel kills one; rule
// host-oom cuts the workers to two, and the relaunch (in a fresh cgroup with
// the same limit) resumes from step 4 and fits.
func TestRecoverWorkersKilled(t *testing.T) {
	needTorch(t)
	needCgroup(t)
	r := recover(t, jobEnv("VAL_CROP_SIZE=64"), cgroupWrapper(t), "--workers", "4")
	expectRecovered(t, r, decision{Rule: "host-oom", Changes: []change{{"workers", "4", "2"}}})
	if !workerRe.MatchString(r.stderr) {
		t.Errorf("the DataLoader's report of the killed worker is not in the output:\n%s", dump(r.result))
	}
	if !strings.Contains(r.stdout, "workers 2, cache 3000 samples per worker") {
		t.Errorf("the relaunch did not run with two workers:\n%s", dump(r.result))
	}
}
