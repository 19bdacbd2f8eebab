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
	id := sc.RequeueID()
	// Signal stays "": no signal asked for this requeue, the policy did.
	ev := record.Requeue{Job: id, RestartCount: sc.Restarts()}
	if result, err := l.mayRequeue(sc, id); err != nil {
		ev.Result = result
		return ev, err.Error(), false
	}
	before := l.state.Policies
	ev, cmd, updateErr, err := l.requeueUpdating(ev, id, c.SlurmField+"="+strconv.FormatInt(c.MiB, 10),
		func() { l.state.Policies = d.State }, func() { l.state.Policies = before })
	if err != nil {
		return ev, err.Error(), false
	}
	if updateErr != nil {
		ev.Result = "requeued, memory not raised"
		l.job.Status.Printf("requeued Slurm job %s, but Slurm refused to raise its memory request (%s: %v): it comes back with %s=%s; raise it by hand while it is pending: %s",
			id, cmd, updateErr, c.Slurm, c.Old, cmd)
		return ev, "", true
	}
	ev.Result = "requeued with more memory"
	l.job.Status.Printf("requeued Slurm job %s with %s %s→%s (%s): it continues from %s",
		id, c.Slurm, c.Old, c.New, cmd, displayPath(l.job.RunDir.Path(), l.wd))
	return ev, "", true
}

// mayRequeue says why this gpuguard does not requeue job id, with the
// requeue event's result: only rank 0 of a step of several tasks requeues,
// and not past slurm.max_requeues.
func (l *loop) mayRequeue(sc slurmenv.Context, id string) (string, error) {
	switch max := l.pol.Slurm().MaxRequeues; {
	case sc.NTasks > 1 && sc.StepID != "" && sc.ProcID != nil && *sc.ProcID != 0:
		return "not rank 0", fmt.Errorf("only the gpuguard of rank 0 requeues job %s, and this is rank %d", id, *sc.ProcID)
	case sc.Restarts() >= max:
		return "max_requeues", fmt.Errorf("Slurm has restarted job %s %d times already (slurm.max_requeues: %d)", id, sc.Restarts(), max)
	}
	return "", nil
}

// requeueUpdating is what a requeue that changes the job does: state.json
// saved with apply's change first (the requeued run finds it), then the
// requeue and, while the job is pending, the update (FIELD=VALUE). When the
// requeue fails, undo restores the state, state.json is saved again, and
// err says why (nothing changed then). When the requeue stood but Slurm
// refused the update, updateErr says so; cmd is the update's command.
func (l *loop) requeueUpdating(ev record.Requeue, id, value string, apply, undo func()) (_ record.Requeue, cmd string, updateErr, err error) {
	apply()
	if err := l.saveState(); err != nil {
		undo()
		return ev, "", nil, fmt.Errorf("gpuguard could not save state.json for the requeued job (%v)", err)
	}
	res, cmd, out, updateErr := requeueAndUpdate(l.pjob.Env, id, value)
	ev.Command, ev.Result, ev.Output = res.command, res.result, res.output
	if res.result != "requeued" && res.result != "already" {
		undo()
		if err := l.saveState(); err != nil {
			l.job.Status.Printf("warning: %v", err)
		}
		why := res.output
		if why == "" && res.err != nil {
			why = res.err.Error()
		}
		return ev, cmd, nil, fmt.Errorf("%s: %s", res.command, why)
	}
	ev.Command += "; " + cmd
	if out != "" {
		ev.Output = strings.TrimSpace(ev.Output + "\n" + out)
	}
	return ev, cmd, updateErr, nil
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
