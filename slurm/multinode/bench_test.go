package multinode_test

// BenchmarkMultiNodeRelaunch: how long a job on two nodes is down after one
// rank runs out of GPU memory, from the out-of-memory line to the relaunched
// step running on both nodes, under one gpuguard around `srun -N2`.
//
//	go test -run '^$' -bench MultiNodeRelaunch -benchtime 5x ./slurm/multinode/
//
// (as root: it starts the private cluster). See docs/performance.md,
// "Multi-node relaunch".

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

func BenchmarkMultiNodeRelaunch(b *testing.B) {
	for _, c := range []struct {
		name     string
		perNode  int
		launcher bool
		hang     string
	}{
		{"srun_N2_1_per_node", 1, false, "the others hang ignoring SIGTERM"},
		{"srun_N2_2_per_node", 2, false, "the others hang ignoring SIGTERM"},
		{"srun_N2_torchrun_like_2_per_node", 2, true, "its launcher stops its other worker and exits 1; node 1's workers hang (SIGTERM's default action) and their launcher waits"},
	} {
		perNode := c.perNode
		b.Run(c.name, func(b *testing.B) {
			cl.Need(b)
			var launch, up, stop []float64
			for i := 0; i < b.N; i++ {
				l, u, s := multiNodeRelaunchOnce(b, perNode, c.launcher)
				launch, up, stop = append(launch, l), append(up, u), append(stop, s)
			}
			b.ReportMetric(slurmtest.Median(launch), "ms-oom-to-launch")
			b.ReportMetric(slurmtest.Median(up), "ms-oom-to-both-nodes-up")
			b.ReportMetric(slices.Max(up), "ms-oom-to-both-nodes-up-max")
			b.ReportMetric(slurmtest.Median(stop), "ms-oom-to-step-ended")
			b.Logf("%s: %d ranks per node, the last rank (node 2) runs out of memory, %s; oom_grace 1s: OOM line → the step ended on both nodes (srun exited): median %.0f ms; → next srun started: median %.0f ms; → every rank of the new step up on both nodes (each found its node's old ranks gone): median %.0f ms (%s)",
				c.name, perNode, c.hang, slurmtest.Median(stop), slurmtest.Median(launch), slurmtest.Median(up), slurmtest.MsList(up))
		})
	}
}

// multiNodeRelaunchOnce runs the job once (one OOM on node 2, one relaunch
// that succeeds) and returns the milliseconds from the OOM line (the rank
// prints its time just before it) to gpuguard's attempt_start of attempt 2,
// to the last "launched at" of attempt 2's ranks, and to the attempt_end of
// attempt 1 (srun has exited: the step has ended on both nodes).
func multiNodeRelaunchOnce(b *testing.B, perNode int, launcher bool) (launch, up, stop float64) {
	b.Helper()
	dir := workDir(b)
	world := 2 * perNode
	script := fmt.Sprintf(`#!/bin/bash
#SBATCH -N2 --ntasks-per-node=%d
#SBATCH -o job.out
exec %s run --policy mn.yaml -- srun -N2 --ntasks-per-node=%d --label python3 mnranks.py --batch 64
`, perNode, cl.GG, perNode)
	if launcher {
		// one launcher per node; its workers keep SIGTERM's default action
		script = fmt.Sprintf(`#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 --cpus-per-task=%d
#SBATCH -o job.out
export MNRANKS_HANG_TERM=default
exec %s run --policy mn.yaml -- srun -N2 --ntasks-per-node=1 --label python3 mnlaunch.py --nproc-per-node %d python3 mnranks.py --batch 64
`, perNode, cl.GG, perNode)
	}
	id := cl.Submit(b, dir, "job.sh", script)
	if info := cl.WaitEnd(b, id, 2*time.Minute); info["JobState"] != "COMPLETED" {
		b.Fatalf("job %s: %s, want COMPLETED:\n%s", id, info["JobState"], slurmtest.TryRead(filepath.Join(dir, "job.out")))
	}
	out := slurmtest.TryRead(filepath.Join(dir, "job.out"))
	task := world - 1 // srun's label of the failing rank's lines
	if launcher {
		task = 1
	}
	oom := slurmtest.Stamp(out, fmt.Sprintf("%d: rank %d oom at ", task, world-1))
	order, by := stepsOf(launches(out))
	if oom == 0 || len(order) != 2 || len(by[order[1]]) != world {
		b.Fatalf("job %s: no OOM line, or not two steps of %d ranks:\n%s", id, world, out)
	}
	for r := range world {
		if want := fmt.Sprintf("rank %d on %s: earlier ranks on this node: %d gone", r, hostOfRank(r, perNode), perNode); !strings.Contains(out, want) {
			b.Fatalf("job %s: no %q:\n%s", id, want, out)
		}
	}
	up = (lastLaunch(by[order[1]], -1) - oom) * 1000
	runDir := slurmtest.RunDir(dir, id)
	evs, err := slurmtest.ReadEvents(runDir, "attempt_start", "attempt_end")
	if err != nil {
		b.Fatal(err)
	}
	for _, ev := range evs {
		at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(ev["time"]))
		sec := float64(at.UnixNano()) / 1e9
		switch {
		case ev["type"] == "attempt_end" && ev["attempt"] == float64(1):
			stop = (sec - oom) * 1000
		case ev["type"] == "attempt_start" && ev["attempt"] == float64(2):
			launch = (sec - oom) * 1000
		}
	}
	if launch == 0 {
		b.Fatalf("no attempt_start of attempt 2 in %s", runDir)
	}
	if stop == 0 {
		b.Fatalf("no attempt_end of attempt 1 in %s", runDir)
	}
	return launch, up, stop
}
