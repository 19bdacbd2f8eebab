package multinode_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

// The cluster itself and the harness's helpers: each node has its own host
// name and address and resolves every node's name and the controller's; a
// job on all nodes runs its tasks there (jobProcs and nodeProcs find them in
// each node's namespace), and each node sees only its own processes; cutLink cuts a node off and brings it back. Not
// parallel: a cut link would break the other tests' jobs.
func TestMultiNodeClusterAndHelpers(t *testing.T) {
	cl.Need(t)
	prefix := strings.TrimSuffix(cl.nodes[0].name, "n1")
	for k, n := range cl.nodes {
		out, err := onNode(k, "", "bash", "-c", "hostname; ip -4 -o addr show dev eth0; getent hosts "+cl.nodes[0].name+" "+cl.nodes[1].name+" "+prefix+"ctl").CombinedOutput()
		if err != nil {
			t.Fatalf("on node %s: %v\n%s", n.name, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 5 || lines[0] != n.name || !strings.Contains(lines[1], " "+n.addr+"/24 ") {
			t.Errorf("node %s: host name, address and names resolved:\n%s\nwant %s, %s/24, then 3 names", n.name, out, n.name, n.addr)
		}
		for i, want := range []string{cl.nodes[0].addr + " " + cl.nodes[0].name, cl.nodes[1].addr + " " + cl.nodes[1].name} {
			if f := strings.Fields(lines[2+i]); len(f) != 2 || f[0]+" "+f[1] != want {
				t.Errorf("node %s resolves %q, want %q", n.name, lines[2+i], want)
			}
		}
	}

	// A job on both nodes: each task writes its host name, then waits.
	dir := workDir(t)
	id := cl.Submit(t, dir, "job.sh", `#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1
#SBATCH -o job.out
srun --label bash -c 'hostname > "host-$SLURM_NODEID"; exec sleep 600'
`)
	for k, n := range cl.nodes[:2] {
		slurmtest.WaitFile(t, filepath.Join(dir, fmt.Sprintf("host-%d", k)), n.name, time.Minute)
	}
	for k, n := range cl.nodes[:2] {
		var sleeps int
		for _, p := range nodeProcs(k) {
			if p.jobID == id && p.comm == "sleep" {
				sleeps++
			}
		}
		if sleeps != 1 {
			t.Errorf("node %s runs %d sleep of job %s, want 1: %v", n.name, sleeps, id, nodeProcs(k))
		}
	}
	// Each node sees its own processes only, as separate machines do (a
	// gpuguard on node 1 cannot find node 2's ranks in its /proc).
	for k, n := range cl.nodes[:2] {
		out, err := onNode(k, "", "bash", "-c", "cat /proc/[0-9]*/comm").CombinedOutput()
		if err != nil {
			t.Fatalf("on node %s: %v\n%s", n.name, err, out)
		}
		if got := strings.Count(string(out), "sleep\n"); got != 1 {
			t.Errorf("node %s sees %d sleep processes in its /proc, want its own 1:\n%s", n.name, got, out)
		}
	}
	onNodes := map[string]int{}
	for _, p := range jobProcs(id) {
		onNodes[p.node]++
	}
	if onNodes[cl.nodes[0].name] < 2 || onNodes[cl.nodes[1].name] < 1 {
		t.Errorf("job %s's processes by node %v, want the batch shell, srun and a task on the first node and a task on the second", id, onNodes)
	}
	cl.Cancel(t, id)

	// Node 2 cut off: node 1 cannot reach its slurmd any more; then back.
	reach := func() error {
		return onNode(0, "", "timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/"+cl.nodes[1].addr+"/"+cl.slurmdPort).Run()
	}
	if err := reach(); err != nil {
		t.Fatalf("node 1 cannot reach node 2's slurmd before the cut: %v", err)
	}
	restore := cutLink(t, 1)
	if err := reach(); err == nil {
		t.Errorf("node 1 reaches node 2's slurmd with node 2's link cut")
	}
	restore()
	// The link comes back at once; its bridge port may take a moment to
	// forward again: try for a while.
	var err error
	for range 50 {
		if err = reach(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("node 1 cannot reach node 2 after the link came back: %v", err)
	}
}

// A step launches on whatever cores its job was given. The test nodes
// declare more CPUs than the machine has (four on two), so a job can hold
// cores that fold onto one real CPU: with task/affinity's automatic binding,
// cores 1 and 3 on a two-CPU machine map to CPU 1 twice and two tasks per
// node failed to launch ("Unable to layout tasks on given cpus"), which
// failed whichever multi-node test drew such cores beside a parallel job.
// Here three one-task jobs hold cores 0, 1 and 2 of each node, the middle
// one ends, and a job of two tasks per node gets cores 1 and 3. Not
// parallel: the core layout holds only with the cluster to itself.
func TestMultiNodeStepOnCoresThatFoldOntoOneCPU(t *testing.T) {
	cl.Need(t)
	dir := workDir(t)
	out := cl.Run(t, dir, "squeue", "-h", "-o", "%i %T")
	if strings.TrimSpace(out) != "" {
		t.Fatalf("the cluster is not idle; jobs left by an earlier test:\n%s", out)
	}
	holder := "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1\n#SBATCH -o /dev/null\nexec sleep 600\n"
	var holders []string
	for i := range 3 {
		id := cl.Submit(t, dir, fmt.Sprintf("hold%d.sh", i), holder)
		cl.WaitJob(t, id, time.Minute, "running", func(info map[string]string) bool { return info["JobState"] == "RUNNING" })
		holders = append(holders, id)
	}
	cl.Cancel(t, holders[1])

	id := cl.Submit(t, dir, "job.sh", `#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2
#SBATCH -o job.out
srun --label bash -c 'echo "task $SLURM_PROCID on $(hostname)"'
`)
	info, jobOut := jobEnd(t, id, filepath.Join(dir, "job.out"), time.Minute)
	cores := cl.Run(t, dir, "scontrol", "show", "job", "-d", id)
	if !strings.Contains(cores, "CPU_IDs=1,3 ") {
		t.Fatalf("job %s was not given cores 1 and 3 on each node, so this test checks nothing; its allocation:\n%s", id, grepLines(cores, "CPU_IDs="))
	}
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	for r := range 4 {
		slurmtest.WantContains(t, "the job's output", jobOut, fmt.Sprintf("%d: task %d on %s", r, r, cl.nodes[r/2].name))
	}
}
