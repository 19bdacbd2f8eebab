package supervisor

// raise_slurm_mem: a Slurm job that needs more host memory is requeued with
// a larger memory request.
//
// The policy decides the new request (policy.raiseSlurmMemAction) from the
// one the job has (slurmMem, from Slurm's environment). A running job's
// memory request cannot be changed (slurmctld answers "Job is no longer
// pending execution"), and a new one takes effect only in a new allocation,
// so the supervisor, once state.json holds the decision's state:
//
//  1. requeues the job (`scontrol requeue JOBID`, requeueJob in slurm.go):
//     the job is pending again, waiting cred_expire + 1 s before Slurm may
//     start it;
//  2. raises its request (`scontrol update JobId=JOBID MinMemoryNode=MiB`,
//     or MinMemoryCPU for a job submitted with --mem-per-cpu), with SIGTERM
//     ignored: the requeue makes Slurm end this run of the job, which must
//     not end the update;
//  3. journals the decision and the requeue, and ends the run.
//
// When the job cannot be requeued (not rank 0, slurm.max_requeues reached,
// Slurm refuses, no scontrol) nothing was changed: the policy is asked
// again with what Slurm said (policy.SlurmMem.Refused), and the rule goes
// on to its next step or gives up. When Slurm refuses the update after the
// requeue, the job comes back with its old request, and gpuguard says so.

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// slurmMemHook is raise_slurm_mem: the policy is told the Slurm job's
// memory request, and a decision that raises it requeues the job with the
// larger one. Registered inside Slurm, with a policy.
type slurmMemHook struct{ l *loop }

func (h slurmMemHook) asking(out *policy.Outcome) { out.SlurmMem = h.l.slurmMem() }

// revise carries out a relaunch that raises the memory request: the job
// is requeued with it and the run ends; when it cannot be (the reason is
// journalled and said), the policy is asked again with what Slurm said,
// and the rule goes on (at most four times).
func (h slurmMemHook) revise(o *outcome, out *policy.Outcome, d policy.Decision) (policy.Decision, int, action) {
	l := h.l
	for range 4 {
		c, ok := d.SlurmMemChange()
		if !ok || d.Verb != policy.Relaunch || o.terminated {
			break
		}
		shown := d
		shown.Backoff = 0 // no wait: the job goes back to Slurm's queue
		l.job.Status.Printf("%s → %s; requeueing the Slurm job with it", describeFailure(o.n, o.v), shown.Describe())
		ev, why, requeued := l.requeueWithMem(o.n, d, c)
		if requeued {
			o.row.decision = decisionLabel(d) + ", requeued"
			l.rows = append(l.rows, o.row)
			l.journalDecision(o.n, d, "")
			l.job.RunDir.Write(ev)
			return d, l.end(o.res.Code), endRun
		}
		l.job.Status.Printf("rule %s step %d (%s) cannot act: %s", d.Rule, d.Step, c, why)
		l.job.RunDir.Write(ev)
		mem := *out.SlurmMem
		mem.Refused = why
		out.SlurmMem = &mem
		d = l.decide(o.n, *out)
	}
	return d, 0, goOn
}

// slurmMem is the Slurm job's memory request, from the environment Slurm
// gave it; nil outside Slurm or for a job without one.
func (l *loop) slurmMem() *policy.SlurmMem {
	sc := slurmenv.FromEnv(l.pjob.Env)
	switch {
	case !sc.InSlurm():
		return nil
	case sc.MemPerCPU != nil && *sc.MemPerCPU > 0:
		return &policy.SlurmMem{MiB: *sc.MemPerCPU, PerCPU: true}
	case sc.MemPerNode != nil && *sc.MemPerNode > 0:
		return &policy.SlurmMem{MiB: *sc.MemPerNode}
	}
	return nil
}

// requeueWithMem carries out decision d of attempt n, whose change c raises
// the Slurm memory request: state.json first, then the requeue and the
// update. It returns the requeue's event when the job was requeued (the run
// then ends), or, when it was not, what stopped it, for the policy.
func (l *loop) requeueWithMem(n int, d policy.Decision, c policy.Change) (record.Requeue, string, bool) {
	sc := slurmenv.FromEnv(l.pjob.Env)
	id := sc.JobID
	if sc.ArrayJobID != "" && sc.ArrayTaskID != "" {
		id = sc.ArrayJobID + "_" + sc.ArrayTaskID
	}
	spec := l.pol.Slurm()
	// Signal stays "": no signal asked for this requeue, the policy did.
	ev := record.Requeue{Job: id, RestartCount: sc.Restarts()}
	switch {
	case sc.NTasks > 1 && sc.StepID != "" && sc.ProcID != nil && *sc.ProcID != 0:
		ev.Result = "not rank 0"
		return ev, fmt.Sprintf("only the gpuguard of rank 0 requeues job %s, and this is rank %d", id, *sc.ProcID), false
	case sc.Restarts() >= spec.MaxRequeues:
		ev.Result = "max_requeues"
		return ev, fmt.Sprintf("Slurm has restarted job %s %d times already (slurm.max_requeues: %d)", id, sc.Restarts(), spec.MaxRequeues), false
	}

	before := l.state.Policies
	l.state.Policies = d.State
	if err := l.saveState(); err != nil {
		l.state.Policies = before
		return ev, fmt.Sprintf("gpuguard could not save state.json for the requeued job (%v)", err), false
	}
	res, cmd, out, err := requeueAndRaise(l.pjob.Env, id, c.SlurmField, c.MiB)
	ev.Command, ev.Result, ev.Output = res.command, res.result, res.output
	if res.result != "requeued" && res.result != "already" {
		l.state.Policies = before
		if err := l.saveState(); err != nil {
			l.job.Status.Printf("warning: %v", err)
		}
		why := res.output
		if why == "" && res.err != nil {
			why = res.err.Error()
		}
		return ev, fmt.Sprintf("%s: %s", res.command, why), false
	}
	ev.Command += "; " + cmd
	if out != "" {
		ev.Output = strings.TrimSpace(ev.Output + "\n" + out)
	}
	if err != nil {
		ev.Result = "requeued, memory not raised"
		l.job.Status.Printf("requeued Slurm job %s, but Slurm refused to raise its memory request (%s: %v): it comes back with %s=%s; raise it by hand while it is pending: %s",
			id, cmd, err, c.Slurm, c.Old, cmd)
		return ev, "", true
	}
	ev.Result = "requeued with more memory"
	l.job.Status.Printf("requeued Slurm job %s with %s %s→%s (%s): it continues from %s",
		id, c.Slurm, c.Old, c.New, cmd, displayPath(l.job.RunDir.Path(), l.wd))
	return ev, "", true
}

// requeueScript runs `scontrol requeue JOB` ($0 is scontrol, $1 the job)
// and then, at once and in the same process, `scontrol update JobId=JOB
// FIELD=VALUE` ($2): Slurm signals every process of the job it has just
// requeued, and under `gpuguard run` without exec it kills the whole batch
// step as soon as the batch shell dies, so the update must not wait for
// gpuguard. SIGTERM, SIGINT and SIGHUP are ignored, as an ignored signal
// stays across exec. A requeue that fails exits 97 with scontrol's message.
const requeueScript = `trap "" TERM INT HUP
"$0" requeue "$1" || exit 97
exec "$0" update "JobId=$1" "$2"`

// requeueAndRaise requeues job id and raises its memory request (field,
// MinMemoryNode or MinMemoryCPU, to mib MiB). It returns requeueAndUpdate's
// results.
func requeueAndRaise(env []string, id, field string, mib int64) (requeueResult, string, string, error) {
	return requeueAndUpdate(env, id, field+"="+strconv.FormatInt(mib, 10))
}

// requeueAndUpdate requeues job id and sets value (FIELD=VALUE) on it while
// it is pending. It returns the requeue's result (requeueJob's), and, when
// the job was requeued, the update's command, output, and error (Slurm
// refused, or did not answer).
func requeueAndUpdate(env []string, id, value string) (requeueResult, string, string, error) {
	update := "scontrol update JobId=" + id + " " + value
	r := requeueResult{command: "scontrol requeue " + id}
	path, err := lookScontrol(env)
	if err != nil {
		r.result, r.err = "no scontrol", err
		return r, update, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), scontrolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", requeueScript, path, id, value)
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	output := strings.TrimSpace(string(b))
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 97 {
		r.output = output
		r = r.classify(id, err, false)
		if r.result != "already" {
			return r, update, "", nil
		}
		// Already pending (a requeue came first): raise its request.
		cmd = exec.CommandContext(ctx, "/bin/sh", "-c", `trap "" TERM INT HUP; exec "$0" update "JobId=$1" "$2"`, path, id, value)
		cmd.Env = env
		b, err = cmd.CombinedOutput()
		output = strings.TrimSpace(string(b))
	} else if ctx.Err() != nil {
		// Slurm did not answer: whether the job was requeued is unknown,
		// and is said so (requeueJob's "did not answer").
		r.output = output
		return r.classify(id, err, true), update, "", nil
	} else {
		r.result = "requeued"
	}
	switch {
	case ctx.Err() != nil:
		return r, update, output, fmt.Errorf("no answer within %s", scontrolTimeout)
	case err != nil && output != "":
		return r, update, output, fmt.Errorf("%s", output)
	}
	return r, update, output, err
}
