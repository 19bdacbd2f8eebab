package multinode_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

// eccTrainer is a fake trainer that fails as a GPU with an uncorrectable
// ECC error does (PyTorch's message) on the nodes listed in the file bad,
// and on the first node it runs on when bad is empty (that node is then
// written to bad); elsewhere it finishes. Each run says its node and the
// job's restart count first.
const eccTrainer = `#!/bin/sh
node=$(hostname)
echo "trainer on $node, restart ${SLURM_RESTART_COUNT:-0}"
[ -s bad ] || echo "$node" > bad
if grep -qx "$node" bad || grep -qx all bad; then
    echo "RuntimeError: CUDA error: uncorrectable ECC error encountered" >&2
    exit 1
fi
echo "trainer on $node: training complete"
`

// machinePolicy retries crashes unchanged (a machine failure is a crash:
// another node may run the job as it is), and leaves out at most one node.
const machinePolicy = `version: 1
rules:
  - name: machine
    when: {kind: crash}
    steps: [{retry: true}]
budget: {relaunches: 2, crash: 5}
backoff: {initial: 0s, max: 0s, jitter: 0}
slurm: {exclude_failed_nodes: 1}
`

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// A job of one node on the two-node cluster: its attempt dies of an ECC
// error on the node it got, and gpuguard requeues it without that node
// (ExcNodeList); the job's second run gets the other node and completes.
func TestMultiNodeMachineFailureRequeuesWithoutTheNode(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	writeFiles(t, dir, map[string]string{"ecc.sh": eccTrainer, "machine.yaml": machinePolicy})
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -N1
#SBATCH -o job.out
#SBATCH --open-mode=append
#SBATCH --requeue
exec %s run --policy machine.yaml -- sh ecc.sh
`, cl.GG))
	info, out := jobEnd(t, id, filepath.Join(dir, "job.out"), 3*time.Minute)
	slurmtest.WantState(t, info, "COMPLETED", "0:0")
	bad := strings.TrimSpace(slurmtest.ReadFile(t, filepath.Join(dir, "bad")))
	good := cl.nodes[0].name
	if good == bad {
		good = cl.nodes[1].name
	}
	if info["ExcNodeList"] != bad {
		t.Errorf("ExcNodeList=%s after the requeue, want %s", info["ExcNodeList"], bad)
	}
	slurmtest.WantContains(t, "the job's output", out,
		"trainer on "+bad+", restart 0",
		"attempt 1 died of a crash that is not memory (CUDA error: uncorrectable ECC error encountered) on node "+bad+
			" → rule machine step 1: relaunch unchanged; leaving node "+bad+" out (the failure points at node "+bad+
			"; node 1 of at most 1 left out (slurm.exclude_failed_nodes)): requeueing Slurm job "+id+" with ExcNodeList="+bad,
		"requeued Slurm job "+id+" without node "+bad+" (scontrol update JobId="+id+" ExcNodeList="+bad+")",
		"nodes left out after machine failures: ["+bad+"]",
		"trainer on "+good+", restart 1",
		"trainer on "+good+": training complete")
	runDir := slurmtest.RunDir(dir, id)
	req := slurmtest.Events(t, runDir, "requeue")
	if len(req) != 1 || req[0]["result"] != "requeued without node "+bad {
		t.Errorf("requeue events %v", req)
	}
	ds := slurmtest.Events(t, runDir, "decision")
	if len(ds) == 0 || !strings.Contains(fmt.Sprint(ds[0]["reason"]), "requeued without node "+bad+": the failure points at node "+bad) {
		t.Errorf("decisions %v: the first should name node %s and why", ds, bad)
	}
}

// A machine failure on every node: gpuguard leaves the first node out
// (exclude_failed_nodes: 1), then relaunches on the second until the
// relaunch budget, carried across the requeue, is spent, and gives up
// saying a retry may help (75). The batch script requeues the job on 75
// without a limit of its own; the requeued run carries the spent budget,
// fails once, and says a retry cannot help (79): Slurm and gpuguard
// together do not retry the job without end.
func TestMultiNodeMachineFailureEverywhereIsNotRetriedWithoutEnd(t *testing.T) {
	cl.Need(t)
	t.Parallel()
	dir := workDir(t)
	writeFiles(t, dir, map[string]string{"ecc.sh": eccTrainer, "machine.yaml": machinePolicy + "exit_codes: scheduler\n", "bad": "all\n"})
	id := cl.Submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -N1
#SBATCH -o job.out
#SBATCH --open-mode=append
#SBATCH --requeue
trap 'echo "batch shell: SIGTERM"' TERM
%s run --policy machine.yaml -- sh ecc.sh
status=$?
echo "gpuguard exited $status (restart ${SLURM_RESTART_COUNT:-0})"
if [ "$status" -eq 75 ]; then
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
`, cl.GG))
	info, out := jobEnd(t, id, filepath.Join(dir, "job.out"), 4*time.Minute)
	slurmtest.WantState(t, info, "FAILED", "79:0")
	if info["Restarts"] != "2" {
		t.Errorf("Restarts=%s, want 2 (gpuguard's requeue without the node, the script's on 75)", info["Restarts"])
	}
	slurmtest.WantContains(t, "the job's output", out,
		"requeueing Slurm job "+id+" with ExcNodeList=",
		"not leaving the node out: 1 node(s) left out already (",
		"relaunch budget exhausted (2/2)",
		"gpuguard exited 75 (restart 1)",
		"gave up again after a retry from outside (this job gave up 1 time(s) before, with its budgets carried on): a further retry cannot help",
		"gpuguard exited 79 (restart 2)")
	if n := len(slurmtest.Events(t, slurmtest.RunDir(dir, id), "attempt_start")); n != 4 {
		t.Errorf("%d attempts over the job's three runs, want 4 (1 before the node was left out, 2 on the other, 1 after the script's requeue)", n)
	}
}
