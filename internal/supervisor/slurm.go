package supervisor

// gpuguard inside a Slurm job: requeue when Slurm announces the end of the
// allocation.
//
// Slurm warns a job before its time limit with the signal the job asked for
// (sbatch --signal=B:USR2@120 sends SIGUSR2 to the batch shell, which is
// gpuguard under `exec gpuguard run`; --signal=USR2@120 sends it to the job's
// steps, which is gpuguard under `srun gpuguard run`), and a preemption or
// scancel sends SIGTERM. The policy's slurm: section (policy.Slurm) names the
// signals after which gpuguard requeues the job. Then:
//
//  1. the signal is passed on to the job, as every signal is (signals.go);
//  2. no attempt is started after it, and the wait before a relaunch ends;
//  3. the running attempt gets slurm.stop_after to save a checkpoint and
//     exit; after that it is stopped (SIGTERM, --grace, SIGKILL);
//  4. once state.json is written, `scontrol requeue JOBID` (ARRAYJOB_TASK
//     for an array task) puts the job back in the queue, and gpuguard exits
//     with the job's own status. Slurm then ends this run of the job
//     (SIGTERM to gpuguard, which has nothing left to pass it to) and starts
//     the job again with SLURM_RESTART_COUNT incremented; resolveRunDir finds
//     the run directory by job id and the next attempt continues with the
//     knob values that fit and the latest checkpoint.
//
// Nothing here acts outside a Slurm job, without a policy, or when the
// policy's slurm.requeue_on is empty: then startSlurm returns nil and no
// hook is registered. Otherwise *slurmRun is the loop's hook (hooks.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// scontrolTimeout bounds `scontrol requeue`: slurmctld answers in well under
// a second unless it is down, and Slurm's own SIGKILL follows KillWait
// seconds (30 by default) after the end of the allocation.
const scontrolTimeout = 20 * time.Second

// slurmRun is gpuguard's part in a Slurm job: the job's context, the
// policy's slurm: section, and the first requeue signal received.
type slurmRun struct {
	l      *loop
	ctx    slurmenv.Context
	spec   policy.Slurm
	env    []string // gpuguard's environment, for scontrol (SLURM_CONF, PATH)
	status *Status
	rd     *rundir.Dir
	log    *zap.Logger

	// requeueID is what `scontrol requeue` is given: the job id, or
	// ARRAYJOB_TASK for an array task.
	requeueID string
	// requeuer: this gpuguard is the one that requeues. When several tasks
	// run gpuguard (srun -n4 gpuguard run ...), only rank 0 does.
	requeuer bool

	ch        chan os.Signal
	quit      chan struct{}
	done      chan struct{}
	signalled chan struct{} // closed at the first requeue signal

	mu  sync.Mutex
	sig syscall.Signal // first requeue signal; 0 while none came
	att process        // the attempt running, nil between attempts
	// launching: an attempt is being started and is not attached yet. A
	// signal that comes then is the running attempt's: attach reports it and
	// arms the stop, as handle does for an attached one.
	launching bool
	timer     *time.Timer // stops the attempt slurm.stop_after after the signal
}

// startSlurm records the Slurm context of the run (event "slurm" and one
// status line) and, when the policy asks for requeues, starts listening for
// the requeue signals. It returns nil outside Slurm, and when nothing is to
// be requeued; the result's methods all accept a nil receiver.
func (l *loop) startSlurm() *slurmRun {
	env := l.pjob.Env
	sc := slurmenv.FromEnv(env)
	if !sc.InSlurm() {
		return nil
	}
	spec := policy.DefaultSlurm
	if l.pol != nil {
		spec = l.pol.Slurm()
	}
	s := &slurmRun{
		l: l, ctx: sc, spec: spec, env: env, status: l.job.Status, rd: l.job.RunDir, log: l.log,
		requeueID: sc.JobID, requeuer: true,
	}
	if sc.ArrayJobID != "" && sc.ArrayTaskID != "" {
		s.requeueID = sc.ArrayJobID + "_" + sc.ArrayTaskID
	}
	ntasks := slurmenv.FromEnv(env).NTasks
	if ntasks > 1 && sc.StepID != "" && sc.ProcID != nil && *sc.ProcID != 0 {
		s.requeuer = false
	}
	node := envlist.Get(env, "SLURMD_NODENAME")

	names := make([]string, len(spec.RequeueOn))
	for i, sig := range spec.RequeueOn {
		names[i] = policy.SignalName(sig)
	}
	ev := record.Slurm{
		JobID: sc.JobID, StepID: sc.StepID, Node: node, Nodes: sc.NodeList,
		RestartCount: sc.Restarts(), RequeueOn: names, RequeueID: s.requeueID,
		ProcID: sc.ProcID,
	}
	if sc.ArrayJobID != "" {
		ev.ArrayJobID, ev.ArrayTaskID = sc.ArrayJobID, sc.ArrayTaskID
	}
	if len(names) > 0 {
		stopAfter, maxRequeues := spec.StopAfter.Seconds(), spec.MaxRequeues
		ev.StopAfterS, ev.MaxRequeues = &stopAfter, &maxRequeues
	}
	s.rd.Write(ev)

	line := "Slurm " + sc.String()
	if node != "" && node != sc.NodeList {
		line += ", on node " + node
	}
	switch {
	case l.pol == nil:
		line += "; no requeue (no policy)"
		s.status.Printf("%s", line)
		return nil
	case len(names) == 0 && l.pol.RaisesSlurmMem():
		// slurmmem.go requeues, after a rule's raise_slurm_mem.
		line += "; no requeue on signals (the policy has no slurm: section); raise_slurm_mem requeues the job with more memory"
		s.status.Printf("%s", line)
		if _, err := s.lookScontrol(); err != nil {
			s.status.Printf("warning: %v", err)
		}
		return nil
	case len(names) == 0:
		line += "; no requeue (the policy has no slurm: section)"
		s.status.Printf("%s", line)
		return nil
	case !s.requeuer:
		line += fmt.Sprintf("; on %s the job stops, and the task of rank 0 requeues it", strings.Join(names, " or "))
	case sc.Restarts() >= spec.MaxRequeues:
		line += fmt.Sprintf("; restarted %d times already (slurm.max_requeues: %d): it will not be requeued again", sc.Restarts(), spec.MaxRequeues)
	default:
		line += fmt.Sprintf("; on %s the job stops and is requeued (scontrol requeue %s)", strings.Join(names, " or "), s.requeueID)
	}
	s.status.Printf("%s", line)
	if s.requeuer && sc.Restarts() < spec.MaxRequeues {
		if _, err := s.lookScontrol(); err != nil {
			s.status.Printf("warning: %v", err)
		}
	}

	s.ch = make(chan os.Signal, 8)
	s.quit, s.done, s.signalled = make(chan struct{}), make(chan struct{}), make(chan struct{})
	sigs := make([]os.Signal, len(spec.RequeueOn))
	for i, sig := range spec.RequeueOn {
		sigs[i] = sig
	}
	signal.Notify(s.ch, sigs...)
	go s.watch()
	return s
}

// close stops listening for requeue signals. The signals' other handling
// (signals.go) is not affected.
func (s *slurmRun) close() {
	signal.Stop(s.ch)
	close(s.quit)
	<-s.done
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
}

func (s *slurmRun) watch() {
	defer close(s.done)
	for {
		select {
		case <-s.quit:
			return
		case sig := <-s.ch:
			s.handle(sig.(syscall.Signal))
		}
	}
}

// handle records the first requeue signal and arms the stop of the attempt
// running. Later signals change nothing here (signals.go still passes them
// on, and a second SIGTERM kills the job).
func (s *slurmRun) handle(sig syscall.Signal) {
	s.mu.Lock()
	if s.sig != 0 {
		s.mu.Unlock()
		return
	}
	s.sig = sig
	close(s.signalled)
	att, launching := s.att, s.launching
	s.mu.Unlock()
	if att != nil {
		select {
		case <-att.Done():
			att = nil // between attempts
		default:
		}
	}

	s.rd.Write(record.RequeueSignal{Signal: policy.SignalName(sig), StopAfterS: s.spec.StopAfter.Seconds(), AttemptRunning: att != nil || launching})
	switch {
	case att != nil:
		s.stopping(att, sig)
	case launching:
		// attach, about to run, stops the attempt.
	default:
		s.status.Printf("%s: no more relaunches here; %s", policy.SignalName(sig), s.requeuerText())
	}
}

// requeuerText says who requeues the job.
func (s *slurmRun) requeuerText() string {
	if !s.requeuer {
		return "the task of rank 0 requeues the job"
	}
	return "gpuguard requeues job " + s.requeueID
}

// stopping says that the running attempt a has slurm.stop_after to exit after
// sig, and arms its stop.
func (s *slurmRun) stopping(a process, sig syscall.Signal) {
	s.status.Printf("%s: no more relaunches here; the job has %s to save a checkpoint and exit, then %s",
		policy.SignalName(sig), s.spec.StopAfter, s.requeuerText())
	s.armStop(a, sig)
}

// armStop stops a slurm.stop_after after sig unless it has exited by then.
func (s *slurmRun) armStop(a process, sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	after := s.spec.StopAfter
	s.timer = time.AfterFunc(after, func() {
		select {
		case <-a.Done():
			return
		default:
		}
		s.status.Printf("the job did not exit within %s of %s: stopping it", after, policy.SignalName(sig))
		a.Stop(fmt.Sprintf("no exit within slurm.stop_after (%s) after %s", after, policy.SignalName(sig)))
	})
}

// started tells which attempt runs now. An attempt that starts after the
// requeue signal came (it slipped through between the check and the start)
// gets the signal too, and the same time to exit.
func (s *slurmRun) started(_ *attemptRun, a process) {
	s.mu.Lock()
	s.att = a
	s.launching = false
	sig := s.sig
	s.mu.Unlock()
	if sig != 0 {
		// The signal came while the attempt was being started.
		a.Signal(sig)
		s.stopping(a, sig)
	}
}

// attemptStarting marks an attempt as being started (see launching);
// started ends the mark, and so does startFailed.
func (s *slurmRun) attemptStarting(*attemptRun) { s.launch(true) }
func (s *slurmRun) startFailed(*attemptRun)     { s.launch(false) }

func (s *slurmRun) launch(starting bool) {
	s.mu.Lock()
	s.launching = starting
	s.mu.Unlock()
}

// failed: after a requeue signal nothing is relaunched here, whatever the
// attempt died of; the run ends, and exiting requeues the job.
func (s *slurmRun) failed(o *outcome) (int, action) {
	if sig, ok := s.requeueSignal(); ok {
		return s.l.endForRequeue(o.n, sig, o.row, o.res.Code), endRun
	}
	return 0, goOn
}

func (s *slurmRun) stopSignal() (syscall.Signal, bool) { return s.requeueSignal() }

// requeueSignal reports the first requeue signal gpuguard received, if any.
// A signal the runtime has delivered but the watcher has not taken yet is
// taken here, so that an attempt that died of the signal is never mistaken
// for an ordinary failure and relaunched.
func (s *slurmRun) requeueSignal() (syscall.Signal, bool) {
	for {
		select {
		case sig := <-s.ch:
			s.handle(sig.(syscall.Signal))
			continue
		default:
		}
		break
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig, s.sig != 0
}

// stopC is closed when the first requeue signal arrives, so that the wait
// before a relaunch ends at once.
func (s *slurmRun) stopC() <-chan struct{} { return s.signalled }

// endForRequeue ends the run after attempt n, which ended after a requeue
// signal: nothing is relaunched, whatever the attempt died of; end (and
// its exiting stage) then requeue the job.
func (l *loop) endForRequeue(n int, sig syscall.Signal, row attemptRow, code int) int {
	name := policy.SignalName(sig)
	row.decision = "requeue (" + name + ")"
	l.rows = append(l.rows, row)
	reason := fmt.Sprintf("Slurm sent %s, listed in slurm.requeue_on: the job continues after a requeue", name)
	l.job.RunDir.Write(record.Decision{
		Attempt: n, Verb: "requeue", Signal: name, Reason: reason, Knobs: rundir.Knobs(l.state.Policies.Values),
	})
	l.job.Status.Printf("attempt %d ended (exit status %d) after %s: not relaunching here, the job is requeued", n, code, name)
	l.countPreempted(n, sig) // budgets.go
	return l.end(code)
}

// stopSignal names what ended the wait before a relaunch: the first
// terminating signal, else the requeue signal.
func (l *loop) stopSignal() syscall.Signal {
	if sig, ok := l.job.Signals.Terminated(); ok {
		return sig
	}
	sig, _ := l.stopperSignal()
	return sig
}

// exiting requeues the Slurm job when a requeue signal came during the
// run, whatever the job's exit status (code). It runs last in end(), once
// state.json is written: `scontrol requeue` makes Slurm end this run of the
// job at once. Every outcome is printed and journaled (event "requeue");
// none changes gpuguard's exit status, which stays the job's own.
func (s *slurmRun) exiting(code int) {
	l := s.l
	sig, ok := s.requeueSignal()
	if !ok {
		return
	}
	name := policy.SignalName(sig)
	if code == 0 {
		// A job that saved and stopped early looks the same as one that
		// finished; requeueing the latter costs a short run that resumes
		// from its last checkpoint and ends, not requeueing the former
		// loses the rest of the training.
		s.status.Printf("the job exited 0 after %s; requeueing it anyway: gpuguard cannot tell a job that finished from one that saved and stopped early (a finished job resumes from its last checkpoint and ends)", name)
	}
	ev := record.Requeue{Signal: name, Job: s.requeueID, RestartCount: s.ctx.Restarts()}
	defer func() { s.rd.Write(ev) }()
	switch {
	case !s.requeuer:
		ev.Result = "not rank 0"
		s.status.Printf("not requeueing job %s from rank %d: the task of rank 0 does", s.requeueID, *s.ctx.ProcID)
		return
	case s.ctx.Restarts() >= s.spec.MaxRequeues:
		ev.Result = "max_requeues"
		s.status.Printf("not requeueing job %s after %s: Slurm has restarted it %d times already (slurm.max_requeues: %d); raise it in the policy to let a long run go on",
			s.requeueID, name, s.ctx.Restarts(), s.spec.MaxRequeues)
		return
	}
	res := requeueJob(s.env, s.requeueID)
	ev.Command, ev.Result, ev.Output = res.command, res.result, res.output
	switch res.result {
	case "requeued":
		with := ""
		if vals := describeValues(l.state.Policies.Values); vals != "" {
			with = " with " + vals
		}
		s.status.Printf("requeued Slurm job %s after %s (%s): it continues from %s%s",
			s.requeueID, name, res.command, displayPath(s.rd.Path(), l.wd), with)
	case "already":
		s.status.Printf("Slurm job %s was already requeued (by Slurm, or by the job itself): %s", s.requeueID, res.output)
	default:
		s.status.Printf("%v", res.err)
	}
}

// requeueResult is what `scontrol requeue` did.
type requeueResult struct {
	command string
	result  string // requeued, already, refused, no scontrol, failed
	output  string
	err     error // for refused, no scontrol, failed: the message for the user
}

// requeueJob runs `scontrol requeue id` with env (its PATH finds scontrol,
// its SLURM_CONF the cluster). A job Slurm already put back in the queue
// ("Job is pending execution") counts as requeued.
func requeueJob(env []string, id string) requeueResult {
	r := requeueResult{command: "scontrol requeue " + id}
	path, err := lookScontrol(env)
	if err != nil {
		r.result, r.err = "no scontrol", fmt.Errorf("cannot requeue Slurm job %s: %w; the job ends here and Slurm will not start it again (requeue it by hand: %s)", id, err, r.command)
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), scontrolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "requeue", id)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	r.output = strings.TrimSpace(string(out))
	return r.classify(id, err, ctx.Err() != nil)
}

// classify fills in r's result from how `scontrol requeue id` ended: err
// from running it, timedOut when it did not answer in time.
func (r requeueResult) classify(id string, err error, timedOut bool) requeueResult {
	switch {
	case err == nil:
		r.result = "requeued"
	case strings.Contains(r.output, "pending execution"):
		// ESLURM_JOB_PENDING: a requeue (Slurm's preemption with
		// PreemptMode=REQUEUE, an admin, the job's own framework) came first.
		r.result = "already"
	case strings.Contains(r.output, "presently disabled"):
		// ESLURM_DISABLED: the job may not be requeued.
		r.result, r.err = "refused", fmt.Errorf("Slurm refuses to requeue job %s (%s: %s): submit it with #SBATCH --requeue (clusters with JobRequeue=0 make --no-requeue the default); the job ends here", id, r.command, r.output)
	case timedOut:
		r.result, r.err = "failed", fmt.Errorf("%s did not answer within %s (is slurmctld reachable?); the job ends here and may not be started again", r.command, scontrolTimeout)
	default:
		var ee *exec.ExitError
		why := err.Error()
		if errors.As(err, &ee) && r.output != "" {
			why = r.output
		}
		r.result, r.err = "failed", fmt.Errorf("%s failed: %s; the job ends here and may not be started again", r.command, why)
	}
	return r
}

func (s *slurmRun) lookScontrol() (string, error) { return lookScontrol(s.env) }

// lookScontrol finds scontrol in env's PATH.
func lookScontrol(env []string) (string, error) {
	pathEnv, _ := envlist.Lookup(env, "PATH")
	p, err := lookPathIn("scontrol", pathEnv, "")
	if err != nil {
		return "", fmt.Errorf("scontrol, Slurm's client command, is not installed here (not found in PATH=%s), so gpuguard cannot requeue the job (inside a container, make Slurm's commands available to it)", pathEnv)
	}
	return p, nil
}
