package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// distTrain is a data-parallel job for real torch.distributed (gloo, on
// the CPU): each rank prints its settings, then all-reduces a tensor
// --steps times. With --batch 64 the last rank raises the out-of-memory
// error PyTorch 1.13 raises when CUDA runs out (its message's template,
// figures of our own) at step 3, while the others wait for it in the
// all_reduce, as ranks do in NCCL.
const distTrain = `import argparse, os, sys, torch, torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, required=True)
p.add_argument("--accum", type=int, required=True)
p.add_argument("--steps", type=int, default=5)
a = p.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"rank {rank} of {world} batch={a.batch} accum={a.accum}", flush=True)
for step in range(1, a.steps + 1):
    if a.batch > 32 and step == 3 and rank == world - 1:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB (GPU 0; 22.00 GiB total capacity; 18.20 GiB already allocated; 2.10 GiB free; 19.00 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
    x = torch.ones(1)
    dist.all_reduce(x)
    print(f"rank {rank} step {step}/{a.steps} sum={x.item():.0f}", flush=True)
print(f"rank {rank} done batch={a.batch} accum={a.accum}", flush=True)
dist.destroy_process_group()
`

const distPolicy = `version: 1
knobs:
  batch_size: {flag: --batch}
  grad_accum: {flag: --accum}
rules:
  - name: train-oom
    when: {kind: gpu_oom}
    steps:
      - halve: batch_size
        compensate: grad_accum
        min: 1
oom_grace: 1s
backoff: {initial: 10ms, factor: 1, max: 10ms, jitter: 0}
`

// Real torch.distributed.run (the module form of torchrun, PyTorch 1.13 on
// the CPU, gloo), one per "node" on this host, each under its own gpuguard
// of a group whose ranks and size come from torchrun's --node_rank and
// --nnodes. The last rank (node 1) runs out of memory; node 0's rank,
// waiting in its all_reduce, fails with it (or is stopped on the leader's
// word); the leader decides from node 1's OOM, and both nodes relaunch with
// batch 32, accumulation 2, and finish.
//
// --redirects 1 --tee 1: Debian's torch 1.13 under Python 3.11 cannot read
// its default of 0 (Std.from_str finds no flag of value 0 and returns
// None); stdout teed to a log and the console starts the workers.
func TestGroupRealTorchrunRelaunchesBothNodesAlike(t *testing.T) {
	if testing.Short() {
		t.Skip("real PyTorch jobs take seconds")
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed.run").CombinedOutput(); err != nil {
		t.Skipf("needs PyTorch on /usr/bin/python3 (scripts/install-test-deps.sh): %v %s", err, out)
	}
	dir := t.TempDir()
	for name, text := range map[string]string{"train_dist.py": distTrain, "gpuguard.yaml": distPolicy} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	group, master := freeAddr(t), freeAddr(t)
	_, masterPort, _ := strings.Cut(master, ":")
	var procs []*groupProc
	for k := range 2 {
		args := []string{"-gpuguard-group", group, "-", "-", "60s", filepath.Join(dir, fmt.Sprintf("run%d", k)), "gpuguard.yaml", "--",
			"/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", strconv.Itoa(k), "--nproc_per_node", "1",
			"--master_addr", "127.0.0.1", "--master_port", masterPort, "--redirects", "1", "--tee", "1",
			"--log_dir", filepath.Join(dir, fmt.Sprintf("torchlogs%d", k)),
			"train_dist.py", "--batch", "64", "--accum", "1"}
		cmd := exec.Command(testBinary(), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
		p := &groupProc{cmd: cmd, out: &supervisortest.SyncBuffer{}, errb: &supervisortest.SyncBuffer{}, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = p.out, p.errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { cmd.Wait(); p.code = cmd.ProcessState.ExitCode(); close(p.done) }()
		t.Cleanup(func() {
			select {
			case <-p.done:
			default:
				cmd.Process.Kill()
				<-p.done
			}
		})
		procs = append(procs, p)
	}
	c := &groupCase{dir: dir, procs: procs}
	for k, p := range procs {
		if code := p.exit(t); code != 0 {
			t.Fatalf("node %d: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", k, code, p.out, p.errb)
		}
	}
	for k, p := range procs {
		out := p.out.String() + p.errb.String()
		for _, want := range []string{
			fmt.Sprintf("rank %d of 2 batch=64 accum=1", k),
			fmt.Sprintf("rank %d of 2 batch=32 accum=2", k),
			fmt.Sprintf("rank %d done batch=32 accum=2", k),
			"from torchrun's --node-rank and --nnodes",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("node %d's output lacks %q:\n%s", k, want, out)
			}
		}
		gd := c.events(t, k, "group_decision")
		if len(gd) < 1 || gd[0]["from_rank"] != 1.0 || gd[0]["kind"] != "gpu_oom" || gd[0]["verb"] != "relaunch" {
			t.Errorf("node %d: group decisions %v, want attempt 1 relaunched from node 1's gpu_oom", k, gd)
		}
	}
	// Node 0's rank saw its all_reduce break (gloo notices the peer's end)
	// or was stopped on the leader's word; either way its failure is an
	// echo of node 1's, and the decision came from node 1's OOM.
	if stops := c.events(t, 0, "group_stop"); len(stops) != 1 || stops[0]["rank"] != 1.0 {
		t.Errorf("node 0: group stops %v, want the leader's word of node 1's failure", stops)
	}
	ends := c.events(t, 0, "attempt_end")
	if v, _ := ends[0]["verdict"].(map[string]any); v == nil || v["kind"] == "gpu_oom" {
		t.Errorf("node 0's attempt 1 verdict %v, want the echo of node 1's OOM, not an OOM", ends[0]["verdict"])
	}
}
