package multinode_test

// One gpuguard per node around a node launcher (torchrun's form: srun
// starts one gpuguard per node, each runs its node's ranks): the tasks of
// the step form a group (internal/group), whose leader (the task of rank 0)
// decides for every node.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

// perNodeJob is the batch script: one gpuguard task per node, each around
// mnnode.sh with the node's rank (SLURM_NODEID), two ranks per node.
func perNodeJob(extra, flags, ranksArgs string) string {
	return fmt.Sprintf(`#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1
#SBATCH -o job.out
%s
srun -N2 --ntasks-per-node=1 --label bash -c 'exec %s run --policy mn.yaml %s -- ./mnnode.sh --nnodes 2 --node-rank $SLURM_NODEID --nproc-per-node 2 mnranks.py %s'
`, extra, cl.GG, flags, ranksArgs)
}

// taskDir is the run directory of task k of job id.
func taskDir(dir, id string, k int) string {
	return slurmtest.RunDir(dir, fmt.Sprintf("%s-task%d", id, k))
}

// An OOM of rank 3, on the second node, under one gpuguard per node: the
// three other ranks hang in their collective (ignoring SIGTERM). The second
// node's gpuguard tells the leader; the leader stops the first node's job
// oom_grace later (not at NCCL's timeout), decides once from the OOM (not
// from the first node's stopped ranks), and both nodes relaunch with
// batch 32: each node's journal has the same decision, and every rank
// printed batch=32 in the relaunch.
func TestMultiNodeTorchrunOOMOnTheSecondNodeRelaunchesBothAlike(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	// --grace 2s: the hung ranks ignore SIGTERM; SIGKILL follows 2s after.
	id := cl.Submit(t, dir, "job.sh", perNodeJob("", "--grace 2s", "--batch 64"))
	info, out := jobEnd(t, id, filepath.Join(dir, "job.out"), 2*time.Minute)
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	second := cl.nodes[1].name
	for k := range 2 {
		rd := taskDir(dir, id, k)
		gd := slurmtest.Events(t, rd, "group_decision")
		if len(gd) < 1 || gd[0]["attempt"] != 1.0 || gd[0]["verb"] != "relaunch" || gd[0]["from_rank"] != 1.0 ||
			gd[0]["from_host"] != second || gd[0]["kind"] != "gpu_oom" {
			t.Errorf("task %d: group decisions %v, want attempt 1 relaunched from the gpu_oom of member 1 on %s", k, gd, second)
		}
		dec := slurmtest.Events(t, rd, "decision")
		if len(dec) < 1 {
			t.Fatalf("task %d: no decision", k)
		}
		if knobs, _ := dec[0]["knobs"].(map[string]any); knobs["batch"] != "32" {
			t.Errorf("task %d: decision knobs %v, want batch 32", k, dec[0]["knobs"])
		}
		if n := len(slurmtest.Events(t, rd, "attempt_start")); n != 2 {
			t.Errorf("task %d: %d attempts, want 2", k, n)
		}
	}
	// The first node's ranks hung in their collective: its gpuguard
	// stopped them oom_grace after the leader heard of rank 3's OOM.
	stops := slurmtest.Events(t, taskDir(dir, id, 0), "group_stop")
	if len(stops) != 1 || stops[0]["rank"] != 1.0 || stops[0]["host"] != second || stops[0]["stopped"] != true || stops[0]["grace_s"] != 1.0 {
		t.Errorf("task 0: group stops %v, want one from member 1 on %s that stopped the job after 1s", stops, second)
	}
	ends := slurmtest.Events(t, taskDir(dir, id, 0), "attempt_end")
	if reason := fmt.Sprint(ends[0]["stop_reason"]); !strings.Contains(reason, "rank 1 ("+second+") failed") || !strings.Contains(reason, "oom_grace (1s)") {
		t.Errorf("task 0: attempt 1's stop reason %q, want rank 1's failure and oom_grace", reason)
	}
	// The ranks' own words: attempt 1 with batch 64 (three ranks hung in
	// their collective, rank 3 out of memory), then every rank of both
	// nodes with batch 32.
	ls := launches(out)
	var b32 int
	for _, l := range ls {
		if l.batch == 32 {
			b32++
			if want := hostOfRank(l.rank, 2); l.host != want {
				t.Errorf("rank %d relaunched on %s, want %s", l.rank, l.host, want)
			}
		}
	}
	if b32 != 4 {
		t.Errorf("%d ranks launched with batch 32, want 4", b32)
	}
	slurmtest.WantContains(t, "the job's output", out, "rank 0 waits in all_reduce", "rank 1 waits in all_reduce", "rank 2 waits in all_reduce",
		"node 0 of 2 on "+cl.nodes[0].name+": 2 ranks: mnranks.py --batch 64", "node 1 of 2 on "+second+": 2 ranks: mnranks.py --batch 64",
		"node 0 of 2 on "+cl.nodes[0].name+": 2 ranks: mnranks.py --batch 32", "node 1 of 2 on "+second+": 2 ranks: mnranks.py --batch 32")
	for r := range 4 {
		slurmtest.WantContains(t, "the job's output", out, fmt.Sprintf("rank %d on %s done batch=32", r, hostOfRank(r, 2)))
	}
	if strings.Contains(out, "still running") {
		t.Errorf("a rank of the relaunch found a rank of attempt 1 running on its node")
	}
	slurmtest.WantContains(t, "the job's output", out,
		"group: rank 1 on "+second+" failed first: attempt 1 died of GPU OOM",
		"(rank 1 on "+second+" failed first; the group's leader decided)")
	if oom, relaunched := slurmtest.Stamp(out, "rank 3 oom at "), lastLaunch(ls, 32); oom > 0 && relaunched > 0 {
		t.Logf("from rank 3's OOM line to the last rank relaunched on both nodes: %.2f s (oom_grace 1 s, then --grace 2s: the hung ranks ignore SIGTERM)", relaunched-oom)
	}
}

// A requeue after the relaunch: both nodes relaunched with batch 32 and
// train on (--hold); Slurm requeues the job. In its second run the tasks
// form the group again, each finds its run directory, and the leader's go
// starts attempt 3 with batch 32 on both nodes.
func TestMultiNodeTorchrunRequeueContinuesOnBothNodes(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", perNodeJob("#SBATCH --requeue --open-mode=append", "", "--batch 64 --hold"))
	out := filepath.Join(dir, "job.out")
	for r := range 4 {
		slurmtest.WaitFile(t, out, fmt.Sprintf("rank %d on %s holds at batch=32", r, hostOfRank(r, 2)), 2*time.Minute)
	}
	cl.Run(t, dir, "scontrol", "requeue", id)
	cl.WaitJob(t, id, time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info, text := jobEnd(t, id, out, 3*time.Minute)
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	for k := range 2 {
		rd := taskDir(dir, id, k)
		starts := slurmtest.Events(t, rd, "attempt_start")
		if len(starts) != 3 {
			t.Errorf("task %d: %d attempts over both runs, want 3", k, len(starts))
		}
		joins := slurmtest.Events(t, rd, "group_join")
		if len(joins) != 2 {
			t.Errorf("task %d: joined the group %d times, want twice (each run of the job)", k, len(joins))
		}
	}
	var after []launched
	for _, l := range launches(text) {
		if l.restart == "1" {
			after = append(after, l)
		}
	}
	if len(after) != 4 {
		t.Fatalf("%d ranks launched after the requeue, want 4", len(after))
	}
	for _, l := range after {
		if l.batch != 32 {
			t.Errorf("after the requeue rank %d on %s ran with batch=%d, want 32", l.rank, l.host, l.batch)
		}
	}
	slurmtest.WantContains(t, "the job's output", text, "resuming run", "attempt 3: ./mnnode.sh")
}

// The second node cut off from the first while both train: its gpuguard
// cannot reach the leader within --group-timeout, stops its ranks and
// gives up with exit status 76, relaunching nothing; the leader, which
// lost its member, does the same. Not parallel: while the link is cut,
// every other job's traffic between the nodes fails too (a parallel real
// torchrun's ranks on node 2 got "No route to host" from node 1's store and
// its job never ended).
func TestMultiNodeTorchrunMemberCutOffGivesUp(t *testing.T) {
	cl.Need(t)
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", perNodeJob("", "--group-timeout 3s", "--batch 32 --hold"))
	out := filepath.Join(dir, "job.out")
	for r := range 4 {
		slurmtest.WaitFile(t, out, fmt.Sprintf("rank %d on %s holds at batch=32", r, hostOfRank(r, 2)), 2*time.Minute)
	}
	restore := cutLink(t, 1)
	for k := range 2 {
		slurmtest.WaitFile(t, filepath.Join(taskDir(dir, id, k), "events.jsonl"), `"type":"group_lost"`, time.Minute)
	}
	restore()
	info, text := jobEnd(t, id, out, 2*time.Minute)
	if info["JobState"] == "COMPLETED" {
		t.Errorf("job %s COMPLETED after its nodes were cut apart", id)
	}
	for k := range 2 {
		rd := taskDir(dir, id, k)
		if n := len(slurmtest.Events(t, rd, "attempt_start")); n != 1 {
			t.Errorf("task %d: %d attempts, want 1 (nothing relaunched)", k, n)
		}
		ends := slurmtest.Events(t, rd, "run_end")
		if len(ends) != 1 || ends[0]["exit_code"] != 76.0 {
			t.Errorf("task %d: run_end %v, want exit status 76", k, ends)
		}
	}
	slurmtest.WantContains(t, "the job's output", text, "giving up without relaunching")
}
