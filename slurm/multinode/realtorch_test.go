package multinode_test

// Real torchrun (python3 -m torch.distributed.run of Debian's PyTorch 1.13)
// on both nodes of the cluster, one gpuguard per node around it, its ranks
// real torch.distributed processes all-reducing over gloo across the nodes'
// networks.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

// realTorchJob is the batch script: the batch shell runs on the first node,
// which hosts the c10d rendezvous on a port free there (rdzvport.py). torch 1.13's
// torchrun knows its options only with underscores (--node_rank, not
// --node-rank), and needs --redirects and --tee under Debian's Python 3.11
// (its default of 0 is read as None and no worker starts). They are 2
// (stderr), not 1 (stdout): torchrun's tee copies a rank's log file to the
// console a moment after the rank wrote it, so with --tee 1 the ranks' step
// lines reach gpuguard after the OOM traceback (which goes to stderr at
// once), and gpuguard takes them for steps the job took after its OOM (it
// "went on": no oom_grace stop). With --tee 2 the step lines come at once
// and the traceback, teed, after them, as its rank wrote them.
func realTorchJob() string {
	return fmt.Sprintf(`#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1
#SBATCH -o job.out
export OMP_NUM_THREADS=1
export RDZV=$SLURMD_NODENAME:$(/usr/bin/python3 rdzvport.py)
srun -N2 --ntasks-per-node=1 --label bash -c 'exec %s run --policy rt.yaml --grace 3s -- /usr/bin/python3 -m torch.distributed.run --nnodes 2 --node_rank $SLURM_NODEID --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint $RDZV --rdzv_id $SLURM_JOB_ID --redirects 2 --tee 2 --log_dir torchlogs-$SLURM_NODEID rtrain.py --batch 64 --accum 1'
`, cl.GG)
}

// rtStart is what rtrain.py prints when a rank starts (after srun's label).
var rtStart = regexp.MustCompile(`(?m)^(\d+): rank (\d) of (\d+) on (\S+) start batch=(\d+) accum=(\d+) at ([0-9.]+)$`)

// An OOM of rank 3, on the second node, under real torchrun on both nodes
// (c10d rendezvous on the first): the three other ranks wait in their
// all_reduce, and so does the failed rank's process (see rtrain.py). The
// second node's gpuguard tells the leader; the leader has the first node's
// job stopped oom_grace later (not at gloo's 30-minute timeout) and decides
// once, from the OOM: batch 64→32, accum 1→2 on both nodes, whose four
// ranks meet again in a new rendezvous and finish.
func TestMultiNodeRealTorchrunOOMOnTheSecondNode(t *testing.T) {
	cl.Need(t)
	if out, err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").CombinedOutput(); err != nil {
		t.Skipf("needs PyTorch on /usr/bin/python3 (scripts/install-test-deps.sh): import torch.distributed: %v %s", err, out)
	}
	t.Parallel()
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", realTorchJob())
	info, out := jobEnd(t, id, filepath.Join(dir, "job.out"), 3*time.Minute)
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	second := cl.nodes[1].name

	// The same decision in both nodes' journals, from the second node's OOM.
	for k := range 2 {
		rd := taskDir(dir, id, k)
		gd := ofAttempt(slurmtest.Events(t, rd, "group_decision"), 1)
		if len(gd) != 1 || gd[0]["verb"] != "relaunch" || gd[0]["from_rank"] != 1.0 ||
			gd[0]["from_host"] != second || gd[0]["kind"] != "gpu_oom" {
			t.Errorf("task %d: attempt 1's group decisions %v, want one: a relaunch from the gpu_oom of member 1 on %s", k, gd, second)
		}
		dec := ofAttempt(slurmtest.Events(t, rd, "decision"), 1)
		if len(dec) != 1 || dec[0]["verb"] != "relaunch" {
			t.Fatalf("task %d: attempt 1's decisions %v, want one relaunch", k, dec)
		}
		if knobs, _ := dec[0]["knobs"].(map[string]any); knobs["batch"] != "32" || knobs["accum"] != "2" {
			t.Errorf("task %d: decision knobs %v, want batch 32 accum 2", k, dec[0]["knobs"])
		}
		if n := len(slurmtest.Events(t, rd, "attempt_start")); n != 2 {
			t.Errorf("task %d: %d attempts, want 2", k, n)
		}
	}
	// The first node's ranks waited in their all_reduce: its gpuguard
	// stopped them oom_grace after the leader heard of rank 3's OOM.
	stops := slurmtest.Events(t, taskDir(dir, id, 0), "group_stop")
	if len(stops) != 1 || stops[0]["rank"] != 1.0 || stops[0]["host"] != second || stops[0]["stopped"] != true || stops[0]["grace_s"] != 1.0 {
		t.Errorf("task 0: group stops %v, want one from member 1 on %s that stopped the job after 1s", stops, second)
	}
	ends := slurmtest.Events(t, taskDir(dir, id, 0), "attempt_end")
	if len(ends) != 2 {
		t.Fatalf("task 0: attempt ends %v, want 2", ends)
	}
	if reason := fmt.Sprint(ends[0]["stop_reason"]); !strings.Contains(reason, "rank 1 ("+second+") failed") || !strings.Contains(reason, "oom_grace (1s)") {
		t.Errorf("task 0: attempt 1's stop reason %q, want rank 1's failure and oom_grace", reason)
	}
	if v, _ := ends[0]["verdict"].(map[string]any); v == nil || v["kind"] == "gpu_oom" {
		t.Errorf("task 0: attempt 1's verdict %v, want the echo of the second node's OOM, not an OOM", ends[0]["verdict"])
	}
	slurmtest.WantContains(t, "the job's output", out,
		"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB",
		"group: rank 1 on "+second+" failed first: attempt 1 died of GPU OOM",
		"(rank 1 on "+second+" failed first; the group's leader decided)")
	// The ranks' own words: attempt 1 with batch 64 accum 1, attempt 2 with
	// batch 32 accum 2 on both nodes, ranks 0-1 on the first node and 2-3
	// on the second, all four finished.
	starts := rtStart.FindAllStringSubmatch(out, -1)
	var relaunched float64
	var second32 int
	for _, m := range starts {
		task, _ := strconv.Atoi(m[1])
		r, _ := strconv.Atoi(m[2])
		if want := cl.nodes[r/2].name; m[4] != want || task != r/2 || m[3] != "4" {
			t.Errorf("%q: want rank %d of 4 on %s (task %d)", m[0], r, want, r/2)
		}
		switch m[5] + "/" + m[6] {
		case "64/1":
		case "32/2":
			second32++
			at, _ := strconv.ParseFloat(m[7], 64)
			relaunched = max(relaunched, at)
		default:
			t.Errorf("%q: want batch=64 accum=1, or batch=32 accum=2 after the decision", m[0])
		}
	}
	if len(starts) != 8 || second32 != 4 {
		t.Errorf("%d rank starts, %d of them with batch=32 accum=2; want 4 of each attempt", len(starts), second32)
	}
	for r := range 4 {
		slurmtest.WantContains(t, "the job's output", out, fmt.Sprintf("rank %d on %s done batch=32 accum=2", r, cl.nodes[r/2].name))
	}
	// The figure of docs/slurm.md: from the OOM line (the second node's
	// journal) to gpuguard's attempt 2 on both nodes, and to the last of
	// the four ranks started.
	fails := slurmtest.Events(t, taskDir(dir, id, 1), "failure")
	if len(fails) > 0 && relaunched > 0 {
		oom := unixOf(fails[0]["time"])
		var relaunch float64
		for k := range 2 {
			if st := ofAttempt(slurmtest.Events(t, taskDir(dir, id, k), "attempt_start"), 2); len(st) == 1 {
				relaunch = max(relaunch, unixOf(st[0]["time"]))
			}
		}
		t.Logf("from rank 3's OOM line to attempt 2 on both nodes: %.2f s; to the last of the four ranks started: %.2f s (oom_grace 1 s, --grace 3s: the ranks outlive SIGTERM)", relaunch-oom, relaunched-oom)
	}
}

// ofAttempt keeps the events of attempt n.
func ofAttempt(evs []slurmtest.Event, n int) []slurmtest.Event {
	var out []slurmtest.Event
	for _, e := range evs {
		if e["attempt"] == float64(n) {
			out = append(out, e)
		}
	}
	return out
}

// unixOf is a journal time in seconds since the epoch (0 when it is not one).
func unixOf(v any) float64 {
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v))
	if err != nil {
		return 0
	}
	return float64(at.UnixNano()) / 1e9
}
