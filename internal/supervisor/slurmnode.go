package supervisor

// slurm.exclude_failed_nodes: a job whose attempt died of a failure that
// points at the machine is requeued without that node.
//
// The policy decides on the failure as on any other (its rules, its
// budgets); when it relaunches, and the verdict says the machine is to
// blame (classify.Verdict.Machine: an ECC error, a GPU fallen off the bus,
// an NCCL hardware or network error, a node failure), the policy's
// Slurm.ExcludeNode says whether the next attempt is asked of Slurm
// elsewhere. Then the supervisor, once state.json holds the decision's
// state and the node:
//
//  1. reads the job's ExcNodeList (`scontrol show job`), to keep the nodes
//     the job was submitted without (sbatch --exclude);
//  2. requeues the job and, while it is pending, adds the node to its
//     ExcNodeList (`scontrol update JobId=JOB ExcNodeList=...`, the same
//     script as raise_slurm_mem's, slurmmem.go);
//  3. journals the decision (its reason names the node and why) and the
//     requeue, and ends the run; the requeued job finds its run directory
//     by job id, with the budgets so far.
//
// A relaunch inside the allocation cannot leave a node out: the job holds
// its nodes until it ends, and `srun --exclude` inside it only runs the
// step on fewer nodes, which a job that asks for N nodes (srun -N2,
// torchrun --nnodes) cannot run with. So gpuguard always asks Slurm for a
// new allocation. When it cannot (not rank 0, slurm.max_requeues reached,
// Slurm refuses, the failed node is not known) the attempt is relaunched
// here as the policy decided, and gpuguard says why.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// slurmNodeHook is slurm.exclude_failed_nodes. Registered inside Slurm,
// with a policy whose slurm: section turns it on.
type slurmNodeHook struct{ l *loop }

func (h slurmNodeHook) asking(*policy.Outcome) {}

// revise requeues the job without the failed node in place of the
// relaunch d, when the policy's slurm: section says so.
func (h slurmNodeHook) revise(o *outcome, _ *policy.Outcome, d policy.Decision) (policy.Decision, int, action) {
	l := h.l
	if d.Verb != policy.Relaunch || o.terminated || !o.v.Machine {
		return d, 0, goOn
	}
	if _, ok := d.SlurmMemChange(); ok {
		return d, 0, goOn // raise_slurm_mem requeues it (slurmmem.go)
	}
	sc := slurmenv.FromEnv(l.pjob.Env)
	node, unknown := failedNode(sc, o)
	spec := l.pol.Slurm()
	ok, why := spec.ExcludeNode(l.state.Restarts.ExcludedNodes, node, true)
	if !ok {
		if unknown != "" {
			why = unknown
		}
		l.job.Status.Printf("not leaving the node out: %s; relaunching here", why)
		return d, 0, goOn
	}
	ev, err := l.requeueWithout(o, d, sc, node, why)
	if err != nil {
		l.job.Status.Printf("cannot leave node %s out: %v; relaunching here", node, err)
		l.job.RunDir.Write(ev)
		return d, 0, goOn
	}
	d.Reason += "; requeued without node " + node + ": " + why
	o.row.decision = decisionLabel(d) + ", requeued without " + node
	l.rows = append(l.rows, o.row)
	l.journalDecision(o.n, d, "")
	l.job.RunDir.Write(ev)
	return d, l.end(o.res.Code), endRun
}

// failedNode is the node the failure o came from: the first failing
// member's host in a group, else the node gpuguard runs on. When it cannot
// be known (gpuguard around an srun step over several nodes, which does
// not say which node a rank ran on) it is "", with the reason.
func failedNode(sc slurmenv.Context, o *outcome) (node, unknown string) {
	switch {
	case o.from != nil && o.from.Host != "":
		return o.from.Host, ""
	case sc.NNodes > 1 && sc.StepID == "":
		return "", fmt.Sprintf("the job has %d nodes and gpuguard runs around their step (srun), so it does not know which node the failure came from (run gpuguard on each node: srun gpuguard run ...)", sc.NNodes)
	case sc.Node == "":
		return "", "the node the attempt ran on is not known (no SLURMD_NODENAME)"
	}
	return sc.Node, ""
}

// requeueWithout carries out decision d on o by requeueing the job
// without node: state.json first (with the node among those left out),
// then the requeue and the update. It returns the requeue's event, and an
// error that says why when the job was not requeued (nothing changed then).
func (l *loop) requeueWithout(o *outcome, d policy.Decision, sc slurmenv.Context, node, why string) (record.Requeue, error) {
	id := sc.RequeueID()
	ev := record.Requeue{Job: id, RestartCount: sc.Restarts()}
	if result, err := l.mayRequeue(sc, id); err != nil {
		ev.Result = result
		return ev, err
	}
	exclude := append(l.state.Restarts.ExcludedNodes[:len(l.state.Restarts.ExcludedNodes):len(l.state.Restarts.ExcludedNodes)], node)
	list := strings.Join(exclude, ",")
	if had, err := jobExcNodeList(l.pjob.Env, id); err != nil {
		l.job.Status.Printf("warning: %v; the job's own ExcNodeList, if any, is replaced by %s", err, list)
	} else if had != "" {
		list = had + "," + node
	}
	shown := d
	shown.Backoff = 0 // no wait: the job goes back to Slurm's queue
	l.job.Status.Printf("%s%s on node %s → %s; leaving node %s out (%s): requeueing Slurm job %s with ExcNodeList=%s",
		o.prefix, describeFailure(o.n, o.v), node, shown.Describe(), node, why, id, list)

	beforeP, beforeR := l.state.Policies, l.state.Restarts
	ev, cmd, updateErr, err := l.requeueUpdating(ev, id, "ExcNodeList="+list,
		func() { l.state.Policies, l.state.Restarts.ExcludedNodes = d.State, exclude },
		func() { l.state.Policies, l.state.Restarts = beforeP, beforeR })
	if err != nil {
		return ev, err
	}
	if updateErr != nil {
		ev.Result = "requeued, node not excluded"
		l.job.Status.Printf("requeued Slurm job %s, but Slurm refused to leave node %s out (%s: %v): it may run there again; leave it out by hand while the job is pending: %s",
			id, node, cmd, updateErr, cmd)
		return ev, nil
	}
	ev.Result = "requeued without node " + node
	l.job.Status.Printf("requeued Slurm job %s without node %s (%s): it continues from %s",
		id, node, cmd, displayPath(l.job.RunDir.Path(), l.wd))
	return ev, nil
}

// jobExcNodeList is the ExcNodeList Slurm holds for job id ("" for none),
// from `scontrol show job -o`.
func jobExcNodeList(env []string, id string) (string, error) {
	path, err := lookScontrol(env)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), scontrolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "show", "job", "-o", id)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("cannot read job %s's ExcNodeList (scontrol show job -o %s: %v)", id, id, err)
	}
	return parseExcNodeList(string(out)), nil
}

// parseExcNodeList reads ExcNodeList=... from `scontrol show job -o`'s
// one line; "(null)" and a missing field are "".
func parseExcNodeList(out string) string {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "ExcNodeList="); ok && v != "(null)" {
			return v
		}
	}
	return ""
}
