// Package supervisor is the act layer: `gpuguard run`. It owns the run loop
// (prepare, start, observe, end, decide, wait, relaunch: loop.go's attempts)
// and the hooks beside it that each follow one concern of a run (the
// multi-node group, Slurm requeue, the memo, the torch probe, the stall
// watchdog, notifications and metrics); the launch plan every attempt and
// the dry run share (plan.go); and one attempt's processes: starting them
// on a pty or pipes, relaying their output unchanged, forwarding signals,
// the process tree and its watchdog, gpuguard as PID 1.
//
// It is the only package that starts the job, waits for it, and writes the
// run directory's state; the probes observe and the policy decides
// (docs/architecture.md).
package supervisor
