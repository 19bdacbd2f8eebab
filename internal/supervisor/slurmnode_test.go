package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The status lines docs/slurm.md quotes; the tests below check that gpuguard
// prints them, and TestSlurmDocQuotes that the doc quotes them as printed.
const (
	docExcludeLine      = "attempt 1 died of a crash that is not memory (CUDA error: uncorrectable ECC error encountered) on node n1 → rule machine step 1: relaunch unchanged; leaving node n1 out (the failure points at node n1; node 1 of at most 1 left out (slurm.exclude_failed_nodes)): requeueing Slurm job 42 with ExcNodeList=n1"
	docRequeuedLine     = "requeued Slurm job 42 without node n1 (scontrol update JobId=42 ExcNodeList=n1): it continues from .gpuguard/runs/slurm-42"
	docPreemptedLine    = "attempt 1 ended on SIGTERM from outside (a preemption, scontrol requeue, scancel or the end of the allocation): not a failure; 1 such stop so far counted apart, not against the failure budgets (relaunches used: 0 of 5)"
	docCarriedPreempted = "; 1 such stop so far from outside (preemptions, requeues), not counted against the budgets"
	docGaveUpAgainLine  = "gave up again after a retry from outside (this job gave up 1 time(s) before, with its budgets carried on): a further retry cannot help"
)

func TestSlurmDocQuotes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/slurm.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	if !strings.Contains(string(doc), "`"+strings.TrimPrefix(docCarriedPreempted, "; ")+"`") {
		t.Errorf("docs/slurm.md does not quote what a requeued run adds to its resuming line: %s", docCarriedPreempted)
	}
	for _, want := range []string{docExcludeLine, docRequeuedLine, docPreemptedLine, docGaveUpAgainLine} {
		found := false
		for _, l := range lines {
			found = found || strings.TrimSpace(l) == "gpuguard: "+want
		}
		if !found {
			t.Errorf("docs/slurm.md does not quote, on a line of its own:\ngpuguard: %s", want)
		}
	}
}

// nodePolicy retries crashes unchanged once, and leaves out one failed node.
const nodePolicy = `version: 1
rules:
  - name: machine
    when: {kind: crash}
    steps: [{retry: true}]
budget: {relaunches: 1, crash: 5}
backoff: {initial: 0s, max: 0s, jitter: 0}
slurm: {exclude_failed_nodes: 1}
`

// eccFailure is a job that dies as a GPU with an uncorrectable ECC error
// does (PyTorch's message), a failure that points at the machine.
var eccFailure = []string{"/bin/sh", "-c", `echo "RuntimeError: CUDA error: uncorrectable ECC error encountered" >&2; exit 1`}

// After a machine failure the job is requeued without the node (the nodes
// it already left out kept), when Slurm lets it; otherwise, and for a
// failure that is not the machine's, the policy's relaunch happens here.
func TestExcludeFailedNode(t *testing.T) {
	for _, tc := range []struct {
		name, scontrol string
		env            []string
		argv           []string
		calls          string
		requeue        string // the requeue event's result, "" for none
		excluded       []string
		attempts       int
		stderr         []string
	}{
		{"machine failure", "", []string{"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1", "SLURM_JOB_NUM_NODES=1"}, eccFailure,
			"show job -o 42|requeue 42|update JobId=42 ExcNodeList=n1", "requeued without node n1", []string{"n1"}, 1,
			[]string{docExcludeLine,
				docRequeuedLine,
				"machine step 1, requeued without n1"}},
		{"requeue refused", "disabled", []string{"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1"}, eccFailure,
			"show job -o 42|requeue 42", "refused", nil, 2,
			[]string{"warning: cannot read job 42's ExcNodeList (scontrol show job -o 42: exit status 1); the job's own ExcNodeList, if any, is replaced by n1",
				"cannot leave node n1 out: scontrol requeue 42: Requested operation is presently disabled for job 42; relaunching here",
				"relaunch budget exhausted (1/1)"}},
		{"not the machine", "", []string{"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1"},
			[]string{"/bin/sh", "-c", `echo "ValueError: bad label" >&2; exit 1`}, "", "", nil, 2, nil},
		{"around srun over two nodes", "", []string{"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1", "SLURM_JOB_NUM_NODES=2"}, eccFailure,
			"", "", nil, 2,
			[]string{"not leaving the node out: the job has 2 nodes and gpuguard runs around their step (srun), so it does not know which node the failure came from (run gpuguard on each node: srun gpuguard run ...); relaunching here"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startInSlurm(t, nodePolicy, tc.scontrol, tc.env, tc.argv...)
			c.wantJobEnd(t, tc.calls, tc.stderr...)
			req := c.events(t, "slurm-42", "requeue")
			if tc.requeue == "" && len(req) != 0 || tc.requeue != "" && (len(req) != 1 || req[0]["result"] != tc.requeue) {
				t.Errorf("requeue events %v, want %q", req, tc.requeue)
			}
			if n := len(c.events(t, "slurm-42", "attempt_start")); n != tc.attempts {
				t.Errorf("%d attempts, want %d; stderr:\n%s", n, tc.attempts, c.g.errb)
			}
			if st := c.state(t, "slurm-42"); !slices.Equal(st.Restarts.ExcludedNodes, tc.excluded) {
				t.Errorf("state.json's excluded nodes %v, want %v", st.Restarts.ExcludedNodes, tc.excluded)
			}
		})
	}
}

// An attempt that a SIGTERM from outside ended (a preemption, scancel, a
// requeue) is counted apart from the failures, in state.json, whether
// SIGTERM is a requeue signal or not, and consumes no relaunch.
func TestPreemptionCountedApart(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
	}{
		{"requeue signal", "version: 1\nslurm: {requeue_on: [SIGTERM]}\n"},
		{"not a requeue signal", "version: 1\nslurm: {requeue_on: [SIGUSR2]}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startInSlurm(t, tc.policy, "", []string{"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1"},
				"/bin/sh", "-c", `echo ready > signals; exec sleep 600`)
			supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "ready")
			c.g.signal(t, syscall.SIGTERM)
			if code := c.g.exitCode(t); code != 128+int(syscall.SIGTERM) {
				t.Errorf("exit status %d, want the job's %d; stderr:\n%s", code, 128+int(syscall.SIGTERM), c.g.errb)
			}
			wantContains(t, "stderr", c.g.errb.String(),
				docPreemptedLine)
			st := c.state(t, "slurm-42")
			if st.Restarts.Preempted != 1 || st.Policies.Relaunches != 0 {
				t.Errorf("state.json: preempted %d, relaunches %d; want 1 and 0", st.Restarts.Preempted, st.Policies.Relaunches)
			}
			// The requeued run carries the tally on, and says so.
			next := startInSlurmDir(t, c.dir, tc.policy, "", []string{"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1", "SLURM_RESTART_COUNT=1"}, "/bin/true")
			if code := next.g.exitCode(t); code != 0 {
				t.Errorf("requeued run: exit status %d, want 0; stderr:\n%s", code, next.g.errb)
			}
			wantContains(t, "the requeued run's stderr", next.g.errb.String(), "(budgets carried over (Slurm requeue))"+docCarriedPreempted)
			if st := next.state(t, "slurm-42"); st.Restarts.Preempted != 1 {
				t.Errorf("the requeued run's state.json: preempted %d, want 1", st.Restarts.Preempted)
			}
		})
	}
}

// The relaunch budget carries across a Slurm requeue, and a run that gives
// up again after the scheduler's retry on 75 says a retry cannot help (79):
// a batch script that requeues on 75 and gpuguard cannot loop for ever.
func TestBudgetsAcrossRequeueEndTheRetries(t *testing.T) {
	const pol = `version: 1
rules:
  - name: retry
    when: {kind: crash}
    steps: [{retry: true}]
budget: {relaunches: 1, crash: 5}
backoff: {initial: 0s, max: 0s, jitter: 0}
exit_codes: scheduler
`
	crash := []string{"/bin/sh", "-c", `echo "ValueError: bad label" >&2; exit 1`}
	dir := t.TempDir()
	first := startInSlurmDir(t, dir, pol, "", []string{"SLURM_JOB_ID=42"}, crash...)
	if code := first.g.exitCode(t); code != ExitRetryMayHelp {
		t.Fatalf("first run: exit status %d, want %d; stderr:\n%s", code, ExitRetryMayHelp, first.g.errb)
	}
	second := startInSlurmDir(t, dir, pol, "", []string{"SLURM_JOB_ID=42", "SLURM_RESTART_COUNT=1"}, crash...)
	if code := second.g.exitCode(t); code != ExitRetryCannotHelp {
		t.Errorf("requeued run: exit status %d, want %d; stderr:\n%s", code, ExitRetryCannotHelp, second.g.errb)
	}
	wantContains(t, "the requeued run's stderr", second.g.errb.String(),
		"(budgets carried over (Slurm requeue))",
		"attempt 3 died of a crash that is not memory (ValueError: bad label) → giving up: attempt 3: crash in an unknown phase; relaunch budget exhausted (1/1)",
		docGaveUpAgainLine)
	if n := len(second.events(t, "slurm-42", "attempt_start")); n != 3 {
		t.Errorf("%d attempts over both runs, want 3 (the requeued run's first gives up at once)", n)
	}
	if st := second.state(t, "slurm-42"); st.Restarts.GaveUp != 1 || st.Policies.Relaunches != 1 {
		t.Errorf("state.json: gave up %d, relaunches %d; want 1 and 1", st.Restarts.GaveUp, st.Policies.Relaunches)
	}
}
