package policy

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// Slurm is the policy's slurm: section: what gpuguard does when Slurm
// announces that the job's allocation is ending (a time limit coming, with
// sbatch --signal=B:USR2@SECONDS, or a preemption). Outside a Slurm job the
// section has no effect.
//
// After a signal in RequeueOn, gpuguard passes the signal on to the job (as
// it passes on every signal), relaunches nothing more, gives the job
// StopAfter to save a checkpoint and exit (then stops it: SIGTERM, the
// --grace period, SIGKILL), and requeues the Slurm job with `scontrol
// requeue`, unless Slurm has already restarted it MaxRequeues times. The
// requeued job finds its run directory again by job id and continues with
// the knob values that fit and the latest checkpoint.
type Slurm struct {
	// RequeueOn lists the signals after which gpuguard requeues the job,
	// first given first, no repeats. Empty: gpuguard never requeues (the
	// default when the policy has no slurm: section). With a slurm: section
	// that does not name them it is [SIGUSR2]: SIGUSR1 is caught by NCCL in
	// some versions, and SIGTERM is also what `scancel` sends, so a job
	// requeued on SIGTERM comes back after a plain scancel.
	RequeueOn []syscall.Signal
	// StopAfter is how long the job may run after a requeue signal before
	// gpuguard stops it (slurm.stop_after, default 60s). It must leave room
	// for the --grace period before Slurm's own end: with
	// --signal=B:USR2@90 and Slurm's KillWait, 60s fits.
	StopAfter time.Duration
	// MaxRequeues: gpuguard does not requeue a job that Slurm has already
	// restarted this many times (SLURM_RESTART_COUNT counts every requeue,
	// whatever its cause), so a job that never gets far enough within its
	// allocation cannot loop for ever (slurm.max_requeues, default 10).
	MaxRequeues int
	// ExcludeFailedNodes: after an attempt dies of a failure that points at
	// the machine (the verdict's machine: an ECC error, a GPU fallen off the
	// bus, an NCCL hardware or network error, a node failure), the job is
	// requeued without that node (`scontrol update ExcNodeList`), up to this
	// many nodes over the job's life (slurm.exclude_failed_nodes, default
	// 0: off). See ExcludeNode.
	ExcludeFailedNodes int
}

// DefaultSlurm is the slurm: section a policy without one has: never
// requeue.
var DefaultSlurm = Slurm{StopAfter: 60 * time.Second, MaxRequeues: 10}

// Slurm returns the policy's slurm: section, with its defaults filled in.
func (p *Policy) Slurm() Slurm {
	s := p.slurm
	s.RequeueOn = append([]syscall.Signal(nil), s.RequeueOn...)
	return s
}

// requeueSignals are the signals requeue_on may name: those gpuguard
// receives and passes on to the job. SIGKILL and SIGSTOP cannot be caught;
// SIGALRM, SIGPIPE and the like are not sent by Slurm.
var requeueSignals = []struct {
	name string
	sig  syscall.Signal
}{
	{"SIGUSR2", syscall.SIGUSR2},
	{"SIGUSR1", syscall.SIGUSR1},
	{"SIGTERM", syscall.SIGTERM},
	{"SIGINT", syscall.SIGINT},
	{"SIGHUP", syscall.SIGHUP},
	{"SIGQUIT", syscall.SIGQUIT},
}

func requeueSignalNames() []string {
	out := make([]string, len(requeueSignals))
	for i, r := range requeueSignals {
		out[i] = r.name
	}
	return out
}

// SignalName is the name of a signal requeue_on accepts ("SIGUSR2"), or
// "signal N" for any other.
func SignalName(sig syscall.Signal) string {
	for _, r := range requeueSignals {
		if r.sig == sig {
			return r.name
		}
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// parseSignal reads "SIGUSR2", "USR2" or "sigusr2".
func parseSignal(s string) (syscall.Signal, bool) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for _, r := range requeueSignals {
		if r.name == name {
			return r.sig, true
		}
	}
	return 0, false
}

// slurmSpec reads the slurm: section. Given at all (even as a bare
// "slurm:"), it turns requeueing on with SIGUSR2 unless requeue_on says
// otherwise.
func (w *walker) slurmSpec(n *yaml.Node, s *Slurm) {
	s.RequeueOn = []syscall.Signal{syscall.SIGUSR2}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	for _, f := range w.mapping(n, "slurm", "requeue_on", "stop_after", "max_requeues", "exclude_failed_nodes") {
		switch f.name {
		case "requeue_on":
			s.RequeueOn = w.signalList(f.val)
		case "stop_after":
			before := len(w.list)
			if s.StopAfter = w.duration(f.val, "slurm stop_after"); s.StopAfter == 0 && len(w.list) == before {
				w.at(f.val, "slurm stop_after must be above 0: the job needs time to save a checkpoint after the signal")
			}
		case "max_requeues":
			s.MaxRequeues = w.integer(f.val, "slurm max_requeues", 1)
		case "exclude_failed_nodes":
			s.ExcludeFailedNodes = w.integer(f.val, "slurm exclude_failed_nodes", 0)
		}
	}
}

// signalList reads requeue_on: a signal name or a list of them; an empty
// list or null turns requeueing off.
func (w *walker) signalList(n *yaml.Node) []syscall.Signal {
	if (n.Kind == yaml.SequenceNode && len(n.Content) == 0) || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil
	}
	var items []*yaml.Node
	if n.Kind == yaml.SequenceNode {
		for _, c := range n.Content {
			items = append(items, resolve(c))
		}
	} else {
		items = []*yaml.Node{n}
	}
	names := requeueSignalNames()
	var out []syscall.Signal
	for _, c := range items {
		s, ok := w.scalar(c, "slurm requeue_on")
		if !ok {
			continue
		}
		sig, ok := parseSignal(s)
		if u := strings.TrimPrefix(strings.ToUpper(s), "SIG"); u == "KILL" || u == "STOP" {
			w.at(c, "slurm requeue_on: SIG%s cannot be caught, so gpuguard never sees it; Slurm's KillWait SIGKILL comes too late to save anything: ask Slurm for a warning signal instead (#SBATCH --signal=B:USR2@120) and list SIGUSR2", u)
			continue
		}
		if !ok {
			hint := didYouMean(strings.ToUpper(s), names)
			if u := strings.ToUpper(s); hint == "" && !strings.HasPrefix(u, "SIG") {
				hint = didYouMean("SIG"+u, names)
			}
			w.at(c, "slurm requeue_on: %q is not a signal gpuguard can act on%s; use one of %s (SIGUSR2 is the safe choice: ask Slurm for it with #SBATCH --signal=B:USR2@120)", s, hint, strings.Join(names, ", "))
			continue
		}
		dup := false
		for _, prev := range out {
			if prev == sig {
				dup = true
			}
		}
		if dup {
			w.at(c, "slurm requeue_on: %s is listed twice", SignalName(sig))
			continue
		}
		out = append(out, sig)
	}
	return out
}

// ExcludeNode decides whether the job, whose attempt on node died of a
// failure that points at the machine (machine: the verdict's), is requeued
// without that node. excluded are the nodes the job was already asked of
// Slurm without. It returns the decision and, either way, why in words.
// The policy's decision on the failure comes first: only a failure the
// rules relaunch is requeued elsewhere, and the relaunch counts against the
// budgets as any other.
func (s Slurm) ExcludeNode(excluded []string, node string, machine bool) (bool, string) {
	switch {
	case !machine:
		return false, "the failure does not point at the machine"
	case s.ExcludeFailedNodes == 0:
		return false, "slurm.exclude_failed_nodes is 0 (off)"
	case node == "":
		return false, "the node the attempt ran on is not known (no SLURMD_NODENAME)"
	}
	for _, n := range excluded {
		if n == node {
			return false, fmt.Sprintf("node %s was left out already, yet the job ran on it", node)
		}
	}
	if len(excluded) >= s.ExcludeFailedNodes {
		return false, fmt.Sprintf("%d node(s) left out already (%s), the limit of slurm.exclude_failed_nodes: %d",
			len(excluded), strings.Join(excluded, ","), s.ExcludeFailedNodes)
	}
	return true, fmt.Sprintf("the failure points at node %s; node %d of at most %d left out (slurm.exclude_failed_nodes)",
		node, len(excluded)+1, s.ExcludeFailedNodes)
}

// RelaunchBudget is budget.relaunches: how many relaunches the whole run
// may have, across Slurm requeues.
func (p *Policy) RelaunchBudget() int { return p.budget.relaunches }
