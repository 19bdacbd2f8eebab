package multinode_test

// One gpuguard around `srun -N2` in the batch script: it sees every rank's
// output on every node, decides once, and relaunches the whole step.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

// rankLine is what mnranks.py prints when a rank starts.
var rankLine = regexp.MustCompile(`(?m)^(\d+): rank (\d+) on (\S+) launched at ([0-9.]+) batch=(\d+) step=(\S+) restart=(\d+)$`)

// launched is one rank's start, as it printed it.
type launched struct {
	task, rank    int
	host          string
	at            float64
	batch         int
	step, restart string
}

func launches(out string) []launched {
	var ls []launched
	for _, m := range rankLine.FindAllStringSubmatch(out, -1) {
		var l launched
		l.task, _ = strconv.Atoi(m[1])
		l.rank, _ = strconv.Atoi(m[2])
		l.host = m[3]
		l.at, _ = strconv.ParseFloat(m[4], 64)
		l.batch, _ = strconv.Atoi(m[5])
		l.step, l.restart = m[6], m[7]
		ls = append(ls, l)
	}
	return ls
}

// stepOf groups launches by "restart/step": one group is one job step.
func stepsOf(ls []launched) (order []string, by map[string][]launched) {
	by = map[string][]launched{}
	for _, l := range ls {
		k := l.restart + "/" + l.step
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], l)
	}
	return order, by
}

// hostOfRank is the node srun's block distribution puts rank r on, with
// perNode tasks on each node.
func hostOfRank(r, perNode int) string { return cl.nodes[r/perNode].name }

// checkStep checks that the ranks of one step are world ranks 0..n-1, each
// once, on the node the block distribution puts it on, all with batch.
func checkStep(t *testing.T, what string, ls []launched, world, perNode, batch int) {
	t.Helper()
	seen := map[int]bool{}
	for _, l := range ls {
		if seen[l.rank] {
			t.Errorf("%s: rank %d launched twice", what, l.rank)
		}
		seen[l.rank] = true
		if want := hostOfRank(l.rank, perNode); l.host != want {
			t.Errorf("%s: rank %d ran on %s, want %s", what, l.rank, l.host, want)
		}
		if l.batch != batch {
			t.Errorf("%s: rank %d on %s ran with batch=%d, want %d", what, l.rank, l.host, l.batch, batch)
		}
	}
	if len(seen) != world {
		t.Errorf("%s: %d ranks launched, want %d: %+v", what, len(seen), world, ls)
	}
}

// An OOM of a rank on the second node, under one gpuguard around `srun -N2
// --label` (two ranks per node): the other three ranks hang in their
// collective. gpuguard names the rank and its host, stops the whole step on
// both nodes oom_grace after the OOM line, and relaunches one new step on
// both nodes with half the batch; every rank of the new step finds, on its
// own node, that the ranks of the old step there are gone.
func TestMultiNodeSrunRankOOMOnTheSecondNode(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2
#SBATCH -o job.out
exec %s run --policy mn.yaml -- srun -N2 --ntasks-per-node=2 --label python3 mnranks.py --batch 64
`, cl.GG))
	info, out := jobEnd(t, id, filepath.Join(dir, "job.out"), 2*time.Minute)
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	runDir := slurmtest.RunDir(dir, id)

	// The verdict names rank 3 and the second node.
	second := cl.nodes[1].name
	vs := slurmtest.Verdicts(t, runDir)
	if len(vs) != 2 || vs[0]["kind"] != "gpu_oom" || vs[0]["rank"] != float64(3) || vs[1]["kind"] != "none" {
		t.Fatalf("verdicts %v, want a gpu_oom of rank 3, then success", vs)
	}
	if vs[0]["host"] != second {
		t.Errorf("verdict host %q, want the second node %q (srun: error: %s: task 3: ...)", vs[0]["host"], second, second)
	}
	ends := slurmtest.Events(t, runDir, "attempt_end")
	if ends[0]["stopped_by_us"] != true || ends[0]["stop_reason"] != "no exit within oom_grace (1s) after an out-of-memory error" {
		t.Errorf("attempt 1 was not stopped after oom_grace: %v", ends[0])
	}
	// explain --json reads the same from the run directory.
	ex := cl.Run(t, dir, cl.GG, "explain", "--json", runDir)
	first, _, _ := strings.Cut(ex, "\n")
	var doc map[string]any
	if err := json.Unmarshal([]byte(first), &doc); err != nil {
		t.Fatalf("explain --json %s: %v\n%s", runDir, err, ex)
	}
	if !strings.Contains(first, `"host":"`+second+`"`) || !strings.Contains(first, `"rank":3`) {
		t.Errorf("explain --json of attempt 1 does not name rank 3 on %s:\n%s", second, first)
	}
	slurmtest.WantContains(t, "the job's output", out,
		"attempt 1 died of GPU OOM in training on rank 3",
		"srun: error: "+second+": task 3: Exited with exit code 1",
		"attempt 2: srun -N2 --ntasks-per-node=2 --label python3 mnranks.py --batch 32")

	// Two steps, each on both nodes: the first with batch 64, the relaunch
	// one new step with batch 32, as the ranks themselves printed.
	order, by := stepsOf(launches(out))
	if len(order) != 2 {
		t.Fatalf("ranks launched in steps %v, want 2 steps", order)
	}
	checkStep(t, "attempt 1", by[order[0]], 4, 2, 64)
	checkStep(t, "attempt 2", by[order[1]], 4, 2, 32)
	if order[0] == order[1] {
		t.Errorf("the relaunch ran in the same step %s", order[0])
	}
	// Every rank of the relaunch saw its node's ranks of attempt 1 gone
	// (two per node), and finished.
	for r := range 4 {
		h := hostOfRank(r, 2)
		slurmtest.WantContains(t, "the job's output", out,
			fmt.Sprintf("%d: rank %d on %s: earlier ranks on this node: 2 gone", r, r, h),
			fmt.Sprintf("%d: rank %d on %s done batch=32", r, r, h))
	}
	if strings.Contains(out, "still running") {
		t.Errorf("a rank of attempt 2 found a rank of attempt 1 running on its node")
	}
	if oom, relaunched := slurmtest.Stamp(out, "3: rank 3 oom at "), lastLaunch(by[order[1]], -1); oom > 0 && relaunched > 0 {
		t.Logf("from rank 3's OOM line to the relaunched step running on both nodes: %.2f s (oom_grace 1 s, srun's teardown on both nodes, a new step)", relaunched-oom)
	}
}

// lastLaunch is when the last rank launched with batch started (any
// batch when batch < 0).
func lastLaunch(ls []launched, batch int) float64 {
	var last float64
	for _, l := range ls {
		if batch < 0 || l.batch == batch {
			last = max(last, l.at)
		}
	}
	return last
}

// A requeue after the relaunch: rank 1 (second node) runs out of memory in
// the job's first run, gpuguard relaunches the step with batch 32, and
// while that step trains on both nodes Slurm requeues the job (scontrol
// requeue, as a preemption does). The job's second run finds its run
// directory and continues with batch 32, one step on both nodes, and
// completes.
func TestMultiNodeSrunRequeueContinuesOnBothNodes(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1
#SBATCH -o job.out
#SBATCH --open-mode=append
#SBATCH --requeue
exec %s run --policy mn.yaml -- srun -N2 --label python3 mnranks.py --batch 64 --hold
`, cl.GG))
	runDir := slurmtest.RunDir(dir, id)
	out := filepath.Join(dir, "job.out")
	for r := range 2 {
		slurmtest.WaitFile(t, out, fmt.Sprintf("%d: rank %d on %s holds at batch=32", r, r, cl.nodes[r].name), 2*time.Minute)
	}
	cl.Run(t, dir, "scontrol", "requeue", id)
	cl.WaitJob(t, id, time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info, text := jobEnd(t, id, out, 2*time.Minute)
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	order, by := stepsOf(launches(text))
	if len(order) != 3 {
		t.Fatalf("ranks launched in steps %v, want 3 (two in the first run, one after the requeue)", order)
	}
	checkStep(t, "attempt 1", by[order[0]], 2, 1, 64)
	checkStep(t, "attempt 2", by[order[1]], 2, 1, 32)
	checkStep(t, "after the requeue", by[order[2]], 2, 1, 32)
	if !strings.HasPrefix(order[2], "1/") {
		t.Errorf("the last step ran in run %s, want the job's second run (restart 1)", order[2])
	}
	for r := range 2 {
		slurmtest.WantContains(t, "the job's output", text, fmt.Sprintf("%d: rank %d on %s done batch=32", r, r, cl.nodes[r].name))
	}
	if strings.Contains(text, "still running") {
		t.Errorf("a rank found a rank of an earlier step running on its node")
	}
	slurmtest.WantContains(t, "the job's output", text,
		"attempt 1 died of GPU OOM in training on rank 1",
		"restart 1",
		"attempt 3: srun -N2 --label python3 mnranks.py --batch 32 --hold")
	if got := strings.Join(slurmtest.Kinds(slurmtest.Verdicts(t, runDir)), ","); !strings.HasPrefix(got, "gpu_oom,") || !strings.HasSuffix(got, ",none") {
		t.Errorf("verdicts %s, want gpu_oom first and success last", got)
	}
	if n := len(slurmtest.Events(t, runDir, "attempt_start")); n != 3 {
		t.Errorf("%d attempts over both runs, want 3", n)
	}
	if _, err := os.Stat(runDir); err != nil {
		t.Error(err)
	}
}

// `srun -N2 torchrun ...` under one gpuguard: one launcher per node
// (mnlaunch.py, torchrun-like: workers in sessions of their own, global
// ranks node*2+local, the ChildFailedError summary when a worker fails).
// Rank 3, a worker of node 2's launcher, runs out of memory; node 2's
// launcher stops its other worker and exits; node 1's workers hang in their
// collective, their launcher with them. gpuguard names rank 3 and node 2,
// stops the step on node 1 oom_grace after the OOM line, and relaunches one
// new step on both nodes with half the batch; each worker of the relaunch
// finds its node's workers of attempt 1 gone.
func TestMultiNodeSrunTorchrunRankOOMOnTheSecondNode(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	launcher := "srun -N2 --ntasks-per-node=1 --label python3 mnlaunch.py --nproc-per-node 2 python3 mnranks.py"
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 --cpus-per-task=2
#SBATCH -o job.out
export MNRANKS_HANG_TERM=default
exec %s run --policy mn.yaml -- %s --batch 64
`, cl.GG, launcher))
	info, out := jobEnd(t, id, filepath.Join(dir, "job.out"), 2*time.Minute)
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	runDir := slurmtest.RunDir(dir, id)
	second := cl.nodes[1].name
	vs := slurmtest.Verdicts(t, runDir)
	if len(vs) != 2 || vs[0]["kind"] != "gpu_oom" || vs[1]["kind"] != "none" {
		t.Fatalf("verdicts %v, want a gpu_oom, then success", vs)
	}
	if vs[0]["rank"] != float64(3) {
		t.Errorf("verdict of attempt 1: rank %v, want 3 (the worker's [rank3]: lines)", vs[0]["rank"])
	}
	t.Run("verdict names the host", func(t *testing.T) {
		// The rank's host is printed only in the launcher's root cause
		// ("host : NODE" beside "rank : 3 (local_rank: 1)"); srun's
		// "srun: error: NODE: task 1: Exited with exit code 1" names the
		// launcher's task, not the rank.
		if vs[0]["host"] != second {
			t.Errorf("verdict host %v, want %s", vs[0]["host"], second)
		}
	})
	slurmtest.WantContains(t, "the job's output", out,
		"1: [rank3]: torch.OutOfMemoryError: CUDA out of memory.",
		"1: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1",
		"1:   host      : "+second,
		"1:   rank      : 3 (local_rank: 1)",
		"srun: error: "+second+": task 1: Exited with exit code 1",
		"attempt 2: "+launcher+" --batch 32")
	order, by := stepsOf(launches(out))
	if len(order) != 2 {
		t.Fatalf("workers launched in steps %v, want 2 steps", order)
	}
	checkStep(t, "attempt 1", by[order[0]], 4, 2, 64)
	checkStep(t, "attempt 2", by[order[1]], 4, 2, 32)
	for _, l := range append(by[order[0]], by[order[1]]...) {
		if want := l.rank / 2; l.task != want {
			t.Errorf("worker of rank %d printed through srun task %d, want the launcher of node %d", l.rank, l.task, want)
		}
	}
	for r := range 4 {
		h := hostOfRank(r, 2)
		slurmtest.WantContains(t, "the job's output", out,
			fmt.Sprintf("%d: rank %d on %s: earlier ranks on this node: 2 gone", r/2, r, h),
			fmt.Sprintf("%d: rank %d on %s done batch=32", r/2, r, h))
	}
	if strings.Contains(out, "still running") {
		t.Errorf("a worker of attempt 2 found a worker of attempt 1 running on its node")
	}
}
